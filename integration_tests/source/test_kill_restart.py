"""A streaming query with `kafka-eos`, SIGKILLed mid-stream and restarted from its checkpoint,
reads every record exactly once."""

from __future__ import annotations

import collections

from integration_tests.support.kafka_data import create_topic, produce, unique_topic
from integration_tests.support.processes import kill_group, run_pipeline, start_pipeline
from integration_tests.support.streaming import all_records, read_batches, wait_for

PIPELINE = "integration_tests.support.pipelines.source_to_parquet"


def test_sigkill_mid_stream_then_restart_reads_each_record_once(bootstrap, tmp_path):
    """The source alone (its offsets in Spark's log). The kill-and-restart pipeline on the
    second cluster generation is the Kafka crash matrix's 3.9 run."""
    topic = unique_topic("kill")
    create_topic(bootstrap, topic, 3)
    expected = produce(bootstrap, topic, 3, 150)
    checkpoint, out, log = str(tmp_path / "ckpt"), str(tmp_path / "out"), str(tmp_path / "log")
    args = (bootstrap, topic, checkpoint, out)

    # One kill mid-stream, after two batches (kills at each protocol point are the crash
    # matrices'); the restart drains the rest.
    proc = start_pipeline(PIPELINE, *args, "continuous", log_path=log)
    try:
        wait_for(lambda: len(read_batches(out)) >= 2, 180, "2 batches")
    finally:
        kill_group(proc)
    assert len(all_records(out)) < len(expected), "the input should outlast the kills"

    run_pipeline(PIPELINE, *args, "drain", log_path=log)

    got = all_records(out)
    dupes = [r for r, n in collections.Counter(got).items() if n > 1]
    assert not dupes, f"duplicates: {dupes[:3]}"
    assert got == expected
    batches = read_batches(out)
    assert sorted(batches) == list(range(len(batches)))
    assert all(len(recs) <= 50 for recs in batches.values())
