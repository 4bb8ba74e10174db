"""`kafka-eos` as a sink: bad input at query start, columns as Spark's Kafka sink takes them,
and the delivery guarantees."""

from __future__ import annotations

import collections

import pytest

from integration_tests.support.kafka_data import create_topic, produce, unique_topic
from connectors.local.kafka_oracle import committed


@pytest.fixture
def source(spark, bootstrap):
    topic = unique_topic("ksrc")
    create_topic(bootstrap, topic, 2)
    expected = produce(bootstrap, topic, 2, 30, headers=True)
    frame = (
        spark.readStream.format("kafka-eos")
        .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
        .option("startingOffsets", "earliest").option("includeHeaders", "true").load()
    )
    return frame, expected


def _run(df, bootstrap, tmp_path, **options):
    writer = (
        df.writeStream.format("kafka-eos")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
    )
    for k, v in options.items():
        writer = writer.option(k, v)
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination(300)
    return query


@pytest.mark.parametrize(
    "columns,options,match",
    [
        (["key"], {"topic": "t"}, r"Option 'value'.*needs a 'value' column"),
        (["key", "CAST(1 AS INT) AS value"], {"topic": "t"}, r"Option 'value'.*string or binary, not int"),
        (["value", "CAST(partition AS STRING) AS partition"], {"topic": "t"}, r"Option 'partition'.*must be int"),
        (["value"], {}, r"Option 'topic'.*no topic"),
    ],
    ids=["no value", "value not bytes", "partition not int", "no topic"],
)
def test_bad_input_fails_at_query_start(source, bootstrap, tmp_path, columns, options, match):
    frame, _ = source
    with pytest.raises(Exception, match=match):
        _run(frame.selectExpr(*columns), bootstrap, tmp_path, **options)


@pytest.mark.quick  # the quick lane's end-to-end smoke of this format
def test_columns_topic_partition_headers_as_spark_takes_them(source, bootstrap, tmp_path):
    frame, expected = source
    out = unique_topic("kcols")
    create_topic(bootstrap, out, 3)
    df = frame.selectExpr(
        f"'{out}' AS topic", "key", "value", "CAST(2 AS INT) AS partition", "headers"
    )
    q = _run(df, bootstrap, tmp_path)
    assert q.exception() is None
    got = committed(bootstrap, out)
    assert {r.partition for r in got} == {2}
    assert sorted((r.key, r.value) for r in got) == sorted((r.key, r.value) for r in expected)


@pytest.mark.parametrize("guarantee", ["at-least-once", "none"])
def test_other_guarantees_deliver_without_transactions(source, bootstrap, tmp_path, guarantee):
    frame, expected = source
    out = unique_topic("kalo")
    create_topic(bootstrap, out, 2)
    q = _run(frame.select("key", "value"), bootstrap, tmp_path, topic=out, deliveryGuarantee=guarantee)
    assert q.exception() is None
    got = collections.Counter((r.key, r.value) for r in committed(bootstrap, out))
    assert got == collections.Counter((r.key, r.value) for r in expected)
    assert not (tmp_path / "ckpt" / "eos-sink").exists()
