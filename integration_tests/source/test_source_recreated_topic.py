"""A topic deleted and created again under the same name is never skipped silently.

Its offsets restart at 0; once the new topic holds more records than the query had read of the
old one, its offsets no longer "go back", and only its topic id (KIP-516), recorded with the
offsets in the checkpoint's offset log, tells the two apart. With failOnDataLoss=true the query
fails naming the topic and both ids; with false it reads the new topic from its start.
"""

from __future__ import annotations

import collections
import time

import pytest
from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from integration_tests.support.kafka_data import create_topic, delete_topic, produce, unique_topic
from integration_tests.support.streaming import all_records, parquet_batch_writer, run_to_end, wait_for


def _start(spark, bootstrap: str, topic: str, checkpoint: str, out: str, fail_on_data_loss: bool):
    return (
        spark.readStream.format("kafka-eos")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", str(fail_on_data_loss).lower())
        .load()
        .writeStream.foreachBatch(parquet_batch_writer(out))
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )


def _topic_id(admin: AdminClient, topic: str) -> str:
    return str(admin.describe_topics(TopicCollection([topic]))[topic].result(10).topic_id)


def _recreate(bootstrap: str, admin: AdminClient, topic: str, partitions: int) -> None:
    delete_topic(bootstrap, topic)
    wait_for(lambda: topic not in admin.list_topics(timeout=5).topics, 30, "the deletion")
    deadline = time.monotonic() + 30
    while True:  # the controller may still be removing the old topic's partitions
        try:
            create_topic(bootstrap, topic, partitions)
            return
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_recreated_topic_with_more_records_is_not_skipped(spark, bootstrap, tmp_path):
    topic = unique_topic("recreated")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    create_topic(bootstrap, topic, 2)
    before = produce(bootstrap, topic, 2, 10)
    old_id = _topic_id(admin, topic)
    runs = {flag: (str(tmp_path / f"ckpt-{flag}"), str(tmp_path / f"out-{flag}"))
            for flag in (True, False)}
    for flag, (checkpoint, out) in runs.items():
        run_to_end(_start(spark, bootstrap, topic, checkpoint, out, flag), 120)
        assert all_records(out) == before

    # Same name, offsets from 0 again, and past the old ones: nothing "went back".
    _recreate(bootstrap, admin, topic, 2)
    after = produce(bootstrap, topic, 2, 25, start_index=1000)
    new_id = _topic_id(admin, topic)
    assert new_id != old_id

    checkpoint, out = runs[True]
    query = _start(spark, bootstrap, topic, checkpoint, out, True)
    with pytest.raises(Exception) as failed:
        query.awaitTermination(120)
    message = str(failed.value)
    assert "failOnDataLoss" in message and topic in message, message
    assert old_id in message and new_id in message, message
    assert all_records(out) == before  # nothing of the new topic was read

    checkpoint, out = runs[False]
    run_to_end(_start(spark, bootstrap, topic, checkpoint, out, False), 120)
    got = all_records(out)
    dupes = [r for r, n in collections.Counter(got).items() if n > 1]
    assert not dupes, f"read more than once: {dupes[:3]}"
    assert sorted(got) == sorted(before + after), (
        f"{len(set(after) - set(got))} of the new topic's {len(after)} records never read")
