"""A source task freezes its worker's long-lived objects once per process, so that PySpark's full
collection after each task in a reused worker (pyspark/daemon.py) walks only what was allocated
since (connectors/core/worker_gc.py). Each case runs in a fresh interpreter: a freeze is for the
life of a process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Two source tasks in one process, as a reused worker runs them: a task of no ranges reads
#: nothing (no broker needed) but goes through the same entry point as every task.
TWO_TASKS = """
import gc, json, os
from sources.kafka_options import parse_source_options
from sources.kafka_source import KafkaInputPartition, read_partition
opts = parse_source_options({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t"},
                            batch=False)
before = gc.get_freeze_count()
list(read_partition(opts, KafkaInputPartition(())))
first = gc.get_freeze_count()
junk = [[i] for i in range(1000)]  # allocated after the first task: not frozen later
list(read_partition(opts, KafkaInputPartition(())))
second = gc.get_freeze_count()
pid = os.fork()
if pid == 0:  # a worker forked from a process that had frozen: it freezes its own
    from connectors.core.worker_gc import freeze_long_lived
    os._exit(0 if freeze_long_lived() else 3)
_, status = os.waitpid(pid, 0)
print(json.dumps([before, first, second, os.waitstatus_to_exitcode(status)]))
"""


def test_the_first_task_of_a_worker_freezes_its_objects_and_later_tasks_do_not():
    out = subprocess.run([sys.executable, "-c", TWO_TASKS], capture_output=True, text=True,
                         cwd=str(ROOT), timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    before, first, second, child = json.loads(out.stdout.strip().splitlines()[-1])
    assert before == 0
    assert first > 10_000  # the imports: pyarrow, the Kafka client, the source's modules
    assert second == first  # not frozen again: the second task's garbage stays collectable
    assert child == 0


def test_a_collection_after_the_freeze_walks_only_what_came_later():
    code = ("import gc, json; import sources.kafka_source; "
            "from connectors.core.worker_gc import freeze_long_lived; "
            "n = len(gc.get_objects()); freeze_long_lived(); "
            "print(json.dumps([n, len(gc.get_objects())]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=str(ROOT), timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    tracked_before, tracked_after = json.loads(out.stdout.strip().splitlines()[-1])
    assert tracked_before > 10_000 and tracked_after < tracked_before // 100
