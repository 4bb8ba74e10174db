"""Streaming reads with `kafka-eos`: admission control, stop/restart on one checkpoint, new
partitions and topics, and failOnDataLoss both ways."""

from __future__ import annotations

import collections

import pytest

from integration_tests.support.kafka_data import create_topic, delete_topic, produce, unique_topic
from integration_tests.support.streaming import (
    all_records,
    parquet_batch_writer,
    read_batches,
    run_to_end,
    stream_options,
    wait_for,
)


def _start(spark, options: dict, checkpoint: str, out: str, **trigger):
    df = spark.readStream.format("kafka-eos").options(**options).load()
    return (
        df.writeStream.foreachBatch(parquet_batch_writer(out))
        .option("checkpointLocation", checkpoint)
        .trigger(**(trigger or {"availableNow": True}))
        .start()
    )


def _assert_exactly_once(got, expected):
    dupes = [r for r, n in collections.Counter(got).items() if n > 1]
    assert not dupes, f"{len(dupes)} records read more than once, e.g. {dupes[:3]}"
    missing = sorted(set(expected) - set(got))
    assert not missing, f"{len(missing)} records never read, e.g. {missing[:3]}"
    assert sorted(got) == sorted(expected)


def test_max_offsets_per_trigger_stop_and_restart(spark, bootstrap, tmp_path):
    topic = unique_topic("stream")
    create_topic(bootstrap, topic, 3)
    expected = produce(bootstrap, topic, 3, 100)
    opts = stream_options(
        bootstrap, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="40"
    )
    checkpoint, out = str(tmp_path / "ckpt"), str(tmp_path / "out")

    query = _start(spark, opts, checkpoint, out, processingTime="100 milliseconds")
    try:
        wait_for(lambda: len(read_batches(out)) >= 2, 120, "two micro-batches")
    finally:
        query.stop()
    first_run = read_batches(out)
    assert 2 <= len(first_run) and len(all_records(out)) < len(expected)

    more = produce(bootstrap, topic, 3, 20, start_index=100)
    query = _start(spark, opts, checkpoint, out)  # availableNow: to the end, same checkpoint
    run_to_end(query, 300)

    batches = read_batches(out)
    assert all(len(recs) <= 40 for recs in batches.values()), {
        b: len(r) for b, r in batches.items()
    }
    assert sorted(batches) == list(range(len(batches)))  # batch ids continue, none redone
    _assert_exactly_once(all_records(out), expected + more)


def test_starts_at_latest_by_default(spark, bootstrap, tmp_path):
    topic = unique_topic("latest")
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, 2, 10)  # before the query: not read
    checkpoint, out = str(tmp_path / "ckpt"), str(tmp_path / "out")
    opts = stream_options(bootstrap, subscribe=topic)
    query = _start(spark, opts, checkpoint, out, processingTime="100 milliseconds")
    try:
        wait_for(lambda: query.lastProgress is not None, 60, "the first trigger")
        later = produce(bootstrap, topic, 2, 10, start_index=10)
        wait_for(lambda: len(all_records(out)) >= len(later), 60, "the new records")
    finally:
        query.stop()
    _assert_exactly_once(all_records(out), later)


def test_new_topic_matching_pattern_is_picked_up(spark, bootstrap, tmp_path):
    prefix = unique_topic("pat")
    first, second = f"{prefix}-a", f"{prefix}-b"
    create_topic(bootstrap, first, 2)
    expected = produce(bootstrap, first, 2, 30)
    opts = stream_options(bootstrap, subscribePattern=f"{prefix}-.*", startingOffsets="earliest")
    checkpoint, out = str(tmp_path / "ckpt"), str(tmp_path / "out")
    query = _start(spark, opts, checkpoint, out, processingTime="100 milliseconds")
    try:
        wait_for(lambda: len(all_records(out)) >= len(expected), 120, "the first topic")
        create_topic(bootstrap, second, 2)
        expected += produce(bootstrap, second, 2, 25)
        wait_for(lambda: len(all_records(out)) >= len(expected), 120, "the new topic")
    finally:
        query.stop()
    _assert_exactly_once(all_records(out), expected)


def test_partition_added_mid_stream(spark, bootstrap, tmp_path):
    from confluent_kafka.admin import AdminClient, NewPartitions

    topic = unique_topic("grow")
    create_topic(bootstrap, topic, 1)
    expected = produce(bootstrap, topic, 1, 30)
    opts = stream_options(bootstrap, subscribe=topic, startingOffsets="earliest")
    checkpoint, out = str(tmp_path / "ckpt"), str(tmp_path / "out")
    query = _start(spark, opts, checkpoint, out, processingTime="100 milliseconds")
    try:
        wait_for(lambda: len(all_records(out)) >= len(expected), 120, "the first partition")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.create_partitions([NewPartitions(topic, 3)]).values():
            f.result(30)
        expected += [r for r in produce(bootstrap, topic, 3, 10, start_index=30)]
        wait_for(lambda: len(all_records(out)) >= len(expected), 120, "the new partitions")
    finally:
        query.stop()
    _assert_exactly_once(all_records(out), expected)


def _recreate_with_fewer_records(bootstrap, topic):
    delete_topic(bootstrap, topic)
    wait_for(lambda: _topic_gone(bootstrap, topic), 30, "the topic to be deleted")
    create_topic(bootstrap, topic, 1)
    return produce(bootstrap, topic, 1, 5, start_index=1000)


def _topic_gone(bootstrap, topic) -> bool:
    from confluent_kafka.admin import AdminClient

    return topic not in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=5).topics


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_fail_on_data_loss_when_offsets_go_back(spark, bootstrap, tmp_path, fail_on_data_loss):
    topic = unique_topic("loss")
    create_topic(bootstrap, topic, 1)
    before = produce(bootstrap, topic, 1, 20)
    opts = stream_options(
        bootstrap, subscribe=topic, startingOffsets="earliest",
        failOnDataLoss=str(fail_on_data_loss).lower(),
    )
    checkpoint, out = str(tmp_path / "ckpt"), str(tmp_path / "out")
    q = _start(spark, opts, checkpoint, out)
    run_to_end(q, 120)
    assert all_records(out) == before

    after = _recreate_with_fewer_records(bootstrap, topic)  # offsets 0..4 again, < 20
    q = _start(spark, opts, checkpoint, out)
    if fail_on_data_loss:
        with pytest.raises(Exception, match="failOnDataLoss"):
            q.awaitTermination(120)
        assert all_records(out) == before
    else:
        run_to_end(q, 120)
        got = all_records(out)
        assert sorted(set(got) - set(before)) == after  # new records read from the earliest


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_fail_on_data_loss_after_delete_records(spark, bootstrap, tmp_path, fail_on_data_loss):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = unique_topic("retention")
    create_topic(bootstrap, topic, 1)
    first = produce(bootstrap, topic, 1, 10)
    opts = stream_options(
        bootstrap, subscribe=topic, startingOffsets="earliest",
        failOnDataLoss=str(fail_on_data_loss).lower(),
    )
    checkpoint, out = str(tmp_path / "ckpt"), str(tmp_path / "out")
    q = _start(spark, opts, checkpoint, out)
    run_to_end(q, 120)
    assert all_records(out) == first
    second = produce(bootstrap, topic, 1, 10, start_index=10)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    cut = second[5].offset  # remove the first half of the unread records
    for f in admin.delete_records([TopicPartition(topic, 0, cut)]).values():
        f.result(30)
    q = _start(spark, opts, checkpoint, out)
    if fail_on_data_loss:
        with pytest.raises(Exception, match="failOnDataLoss"):
            q.awaitTermination(120)
    else:
        run_to_end(q, 120)
        assert all_records(out) == first + [r for r in second if r.offset >= cut]


def test_min_offsets_per_trigger_waits_at_most_max_trigger_delay(spark, bootstrap, tmp_path):
    import time

    topic = unique_topic("minrows")
    create_topic(bootstrap, topic, 1)
    expected = produce(bootstrap, topic, 1, 10)  # far fewer than minOffsetsPerTrigger
    opts = stream_options(
        bootstrap, subscribe=topic, startingOffsets="earliest",
        minOffsetsPerTrigger="1000", maxTriggerDelay="12s",
    )
    checkpoint, out = str(tmp_path / "ckpt"), str(tmp_path / "out")
    t0 = time.monotonic()
    query = _start(spark, opts, checkpoint, out, processingTime="100 milliseconds")
    try:
        wait_for(lambda: len(all_records(out)) >= len(expected), 90, "the delayed batch")
        waited = time.monotonic() - t0
    finally:
        query.stop()
    # The reader's delay clock starts after t0, so the batch cannot have come before 12 s
    # had passed; a generous margin below that keeps the check free of timing noise.
    assert waited >= 10, f"a batch of 10 records ran after {waited:.1f}s, before maxTriggerDelay"
    _assert_exactly_once(all_records(out), expected)


def test_broker_frozen_then_resumed(spark, freezable_broker, bootstrap, tmp_path):
    """A broker that stops answering (frozen) mid-stream, then resumes: no loss, no repeat."""
    import time

    topic = unique_topic("freeze")
    create_topic(bootstrap, topic, 2)
    expected = produce(bootstrap, topic, 2, 200)
    opts = stream_options(
        bootstrap, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="50",
    )
    checkpoint, out = str(tmp_path / "ckpt"), str(tmp_path / "out")
    query = _start(spark, opts, checkpoint, out, processingTime="100 milliseconds")
    try:
        wait_for(lambda: len(read_batches(out)) >= 1, 120, "the first batch")
        freezable_broker.freeze()
        try:
            time.sleep(8)  # longer than librdkafka's socket and metadata timeouts' first tries
        finally:
            freezable_broker.resume()
        wait_for(lambda: len(all_records(out)) >= len(expected), 240, "the rest of the input")
        assert query.exception() is None
    finally:
        query.stop()
    _assert_exactly_once(all_records(out), expected)
