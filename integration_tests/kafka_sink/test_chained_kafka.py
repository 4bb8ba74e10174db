"""A chained pipeline on real Apache Kafka, exactly once end to end: topic A -> `kafka-eos` ->
topic B -> `kafka-eos` -> topic C, with kills in both hops and the second hop reading B while
the first hop's decided transactions are still open there.

What it proves on a broker whose read_committed hides aborted records and stops at the last
stable offset: the second hop never reads past an open transaction of the first (its batches end
at B's LSO), never reads an aborted record (the first hop's killed attempts), and the kills of
both hops leave every record of A in C exactly once.
"""

from __future__ import annotations

import collections
import signal

from connectors.local.kafka_oracle import committed, read_partition
from integration_tests.support.kafka_data import create_topic, produce, unique_topic
from integration_tests.support.processes import log_tail, run_pipeline, start_pipeline, wait_exit
from sinks.faults import ENV

PIPELINE = "integration_tests.support.pipelines.eos_pipeline"
PARTITIONS = 3


def _hop(bootstrap: str, source: str, out: str, checkpoint: str) -> list[str]:
    # a task per partition, in every run of the checkpoint: after_some_commits needs a batch of
    # several transactions, and the default plans a batch of 40 records as one task
    return ["--bootstrap", bootstrap, "--topic", source, "--out-topic", out,
            "--checkpoint", checkpoint, "--max-per-trigger", "40",
            "--source-option", "targetTasksPerBatch=8"]


def _killed(args: list[str], log: str, point: str) -> None:
    proc = start_pipeline(PIPELINE, *args, log_path=log, env={ENV: point})
    assert wait_exit(proc, log) == -signal.SIGKILL, log_tail(log)


def test_kafka_to_kafka_to_kafka_with_kills_in_both_hops(bootstrap, tmp_path):
    a, b, c = unique_topic("ccA"), unique_topic("ccB"), unique_topic("ccC")
    for topic in (a, b, c):
        create_topic(bootstrap, topic, PARTITIONS)
    expected = produce(bootstrap, a, PARTITIONS, 60)
    hop1 = _hop(bootstrap, a, b, str(tmp_path / "ckpt1"))
    hop2 = _hop(bootstrap, b, c, str(tmp_path / "ckpt2"))
    log1, log2 = str(tmp_path / "hop1.log"), str(tmp_path / "hop2.log")

    # Hop 1 dies after deciding batch 2: B holds its prepared transactions, open.
    _killed(hop1, log1, "after_decision@2")
    open_in_b = sum(len(read_partition(bootstrap, b, p).open) for p in range(PARTITIONS))
    assert open_in_b > 0, "hop 1's decided batch should still be open in B"
    # Hop 2 reads B now: up to B's last stable offset only; it dies mid-commit of its batch 1.
    _killed(hop2, log2, "after_some_commits@1")
    run_pipeline(PIPELINE, *hop2, log_path=log2)
    got = collections.Counter((r.key, r.value) for r in committed(bootstrap, c))
    visible_in_b = collections.Counter((r.key, r.value) for r in committed(bootstrap, b))
    assert got == visible_in_b, "hop 2 read past B's last stable offset, or missed records"

    # Hop 1 restarts: recovery commits its decided batch, the rest follows; hop 2 drains it.
    run_pipeline(PIPELINE, *hop1, log_path=log1)
    run_pipeline(PIPELINE, *hop2, log_path=log2)

    got = collections.Counter((r.key, r.value) for r in committed(bootstrap, c))
    want = collections.Counter((r.key, r.value) for r in expected)
    assert not [k for k, n in got.items() if n > 1], "a record twice in C"
    assert got == want
    for topic in (b, c):
        for p in range(PARTITIONS):
            assert read_partition(bootstrap, topic, p).open == [], f"open transaction in {topic}"
