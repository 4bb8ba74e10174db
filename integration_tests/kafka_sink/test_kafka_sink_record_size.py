"""An oversized record fails the query with what to change first, through real Spark and real
Kafka: the record (its size, its key, the source row it came from when the rows carry Kafka
coordinates) and the setting that refused it, the producer's `kafka.message.max.bytes` or the
topic's `max.message.bytes`. Before, both failed as librdkafka's bare
`KafkaError{code=MSG_SIZE_TOO_LARGE,...,str="Broker: Message size too large"}`."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from connectors.local.kafka_oracle import committed
from integration_tests.support.kafka_data import unique_topic


def _topic(bootstrap: str, name: str, max_message_bytes: int) -> str:
    topic = unique_topic(name)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, 1, 1, config={"max.message.bytes": str(max_message_bytes)})
    for future in admin.create_topics([new]).values():
        future.result(timeout=30)
    return topic


def _write(spark, bootstrap: str, source: str, out: str, ck: str, **options: str):
    df = (spark.readStream.format("kafka-eos").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", source).option("startingOffsets", "earliest").load())
    writer = (df.selectExpr("CAST(key AS STRING) AS key", "value", "topic", "offset")
              .writeStream.format("kafka-eos").option("kafka.bootstrap.servers", bootstrap)
              .option("topic", out).option("checkpointLocation", ck))
    for k, v in options.items():
        writer = writer.option(k, v)
    return writer.trigger(availableNow=True).start()


def test_a_record_over_the_producers_limit_names_the_record_its_source_row_and_the_option(
        spark, bootstrap, tmp_path):
    source = _topic(bootstrap, "big-in", 4_000_000)
    out = _topic(bootstrap, "big-out", 4_000_000)
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 4_000_000})
    producer.produce(source, b"small", b"user-1")
    producer.produce(source, b"x" * 2_000_000, b"user-7")
    producer.flush(30)

    query = _write(spark, bootstrap, source, out, str(tmp_path / "ck"))
    with pytest.raises(Exception) as failed:
        query.awaitTermination(300)
    message = str(failed.value)
    assert "record too large for the producer" in message, message[-3000:]
    assert "2,000,006 bytes (key 'user-7', source row topic " f"{source} offset 1)" in message
    assert 'Raise .option("kafka.message.max.bytes", ...)' in message
    assert "kafka.message.max.bytes = 1,000,000 (librdkafka's default)" in message
    assert committed(bootstrap, out) == []


def test_a_record_batch_the_broker_refuses_names_the_topic_and_its_max_message_bytes(
        spark, bootstrap, tmp_path):
    source = _topic(bootstrap, "mid-in", 1_000_000)
    out = _topic(bootstrap, "small-out", 2_000)
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(source, b"y" * 5_000, b"user-9")
    producer.flush(30)

    query = _write(spark, bootstrap, source, out, str(tmp_path / "ck"))
    with pytest.raises(Exception) as failed:
        query.awaitTermination(300)
    message = str(failed.value)
    assert "record batch too large for the broker" in message, message[-3000:]
    assert f"5,006 bytes (key 'user-9') for topic {out} partition 0" in message
    assert f"--entity-name {out} --add-config max.message.bytes=N" in message
    assert committed(bootstrap, out) == []
