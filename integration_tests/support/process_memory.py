"""Resident memory of Spark's processes while a query runs, read from /proc (Linux).

A thread samples the driver JVM and every Python process under it (PySpark's daemon and the
task workers it forks, the data-source planners, the streaming source runner that holds the
driver's stream reader) and keeps each process's highest RSS. Sampling every 50 ms misses
only peaks shorter than that; a task that held a backlog in memory holds it for seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import dataclass

#: What a Spark Python worker of this package imports before it reads anything.
_WORKER_IMPORTS = ("import pyspark.worker, pyarrow, confluent_kafka, sources.kafka_source, "
                   "sources.packed_reader")


@dataclass
class ProcessPeak:
    pid: int
    command: str
    role: str
    first_kb: int  # RSS when first seen
    peak_kb: int


def _role(command: str) -> str:
    """'task worker', 'stream reader' (the driver's source), 'planner' or 'other'."""
    if "python_streaming_source_runner" in command:
        return "stream reader"
    if "pyspark.daemon pyspark.worker" in command:
        return "task worker"  # the daemon itself too: it forks them and reads nothing
    if "pyspark.sql.worker" in command:
        return "planner"
    return "other"


def _rss_kb(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None  # a zombie has no VmRSS


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(name))
    return kids


def descendants(root: int) -> list[int]:
    kids, found, todo = _children(), [], [root]
    while todo:
        for child in kids.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


class MemorySampler:
    """`with MemorySampler(jvm_pid) as s:` ... `s.peaks` by pid. The JVM's own forks before
    an exec (a copy of the JVM for an instant, named `java`) are left out: only the JVM itself
    and Python processes are followed."""

    def __init__(self, jvm_pid: int, interval_s: float = 0.05) -> None:
        self.jvm_pid = jvm_pid
        self.interval_s = interval_s
        self.peaks: dict[int, ProcessPeak] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-sampler", daemon=True)

    def _sample(self) -> None:
        for pid in [self.jvm_pid, *descendants(self.jvm_pid)]:
            known = self.peaks.get(pid)
            command = known.command if known else _command(pid)
            if pid != self.jvm_pid and "python" not in command.split(" ", 1)[0]:
                continue
            rss = _rss_kb(pid)
            if rss is None:
                continue
            if known is None:
                role = "jvm" if pid == self.jvm_pid else _role(command)
                self.peaks[pid] = ProcessPeak(pid, command, role, rss, rss)
            elif rss > known.peak_kb:
                known.peak_kb = rss

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def __enter__(self) -> MemorySampler:
        self._sample()  # the processes already there, with their RSS before the query
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def by_role(self, role: str) -> list[ProcessPeak]:
        return [p for p in self.peaks.values() if p.role == role]


def import_baseline_kb() -> int:
    """RSS of a fresh Python that imported what a worker of this package imports (the floor a
    worker's growth is measured from), with this process's environment (PYTHONPATH)."""
    code = (f"{_WORKER_IMPORTS}\n"
            "print(next(l.split()[1] for l in open('/proc/self/status') "
            "if l.startswith('VmRSS:')))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, timeout=120)
    return int(out.stdout.strip().splitlines()[-1])
