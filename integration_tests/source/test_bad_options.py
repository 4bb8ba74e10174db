"""Bad input fails at query start, with a message naming the option; secrets never shown."""

from __future__ import annotations

import json

import pytest

from integration_tests.support.kafka_data import create_topic, unique_topic


@pytest.fixture(scope="module")
def topic(bootstrap):
    name = unique_topic("opts")
    create_topic(bootstrap, name, 2)
    return name


def _stream(spark, options: dict, tmp_path):
    df = spark.readStream.format("kafka-eos").options(**options).load()
    query = (
        df.writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)


BAD_AT_LOAD = [
    ("no bootstrap servers", {"subscribe": "x"}, "kafka.bootstrap.servers"),
    ("two subscriptions", {"subscribe": "x", "subscribePattern": "x.*"}, "subscribe"),
    ("no subscription", {}, "subscribe"),
    ("malformed startingOffsets", {"subscribe": "x", "startingOffsets": '{"x":{"0":'}, "startingOffsets"),
    ("startingOffsets not JSON", {"subscribe": "x", "startingOffsets": "oldest"}, "startingOffsets"),
    ("negative maxOffsetsPerTrigger", {"subscribe": "x", "maxOffsetsPerTrigger": "-5"}, "maxOffsetsPerTrigger"),
    ("non-numeric maxOffsetsPerTrigger", {"subscribe": "x", "maxOffsetsPerTrigger": "lots"}, "maxOffsetsPerTrigger"),
    ("malformed assign", {"assign": '{"x": "0"}'}, "assign"),
    ("bad pattern", {"subscribePattern": "(unclosed"}, "subscribePattern"),
    ("bad failOnDataLoss", {"subscribe": "x", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
]


@pytest.mark.parametrize("what,options,option_name", BAD_AT_LOAD, ids=[b[0] for b in BAD_AT_LOAD])
def test_bad_option_fails_at_load(spark, bootstrap, what, options, option_name):
    opts = dict(options)
    if what != "no bootstrap servers":
        opts["kafka.bootstrap.servers"] = bootstrap
    with pytest.raises(Exception, match=f"Option '{option_name}'"):
        spark.readStream.format("kafka-eos").options(**opts).load()
    with pytest.raises(Exception, match=f"Option '{option_name}'"):
        spark.read.format("kafka-eos").options(**opts).load().collect()


def test_unknown_topic_in_assign_fails_at_query_start(spark, bootstrap, topic, tmp_path):
    missing = unique_topic("missing")
    opts = {"kafka.bootstrap.servers": bootstrap, "assign": json.dumps({missing: [0]})}
    with pytest.raises(Exception, match=rf"Option 'assign'.*{missing}.*does not exist"):
        _stream(spark, opts, tmp_path)
    with pytest.raises(Exception, match=rf"Option 'assign'.*{missing}.*does not exist"):
        spark.read.format("kafka-eos").options(**opts).load().collect()


def test_unknown_partition_in_assign_fails(spark, bootstrap, topic, tmp_path):
    opts = {"kafka.bootstrap.servers": bootstrap, "assign": json.dumps({topic: [0, 7]})}
    with pytest.raises(Exception, match=r"Option 'assign'.*partition 7 does not exist"):
        _stream(spark, opts, tmp_path)


def test_missing_subscribed_topic_fails_with_its_own_message(spark, bootstrap, tmp_path):
    missing = unique_topic("nosuch")
    opts = {"kafka.bootstrap.servers": bootstrap, "subscribe": missing}
    with pytest.raises(Exception, match=rf"Option 'subscribe'.*{missing} do not exist"):
        _stream(spark, opts, tmp_path)


def test_starting_offsets_must_cover_every_partition(spark, bootstrap, topic, tmp_path):
    opts = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "startingOffsets": json.dumps({topic: {"0": 0}}),
    }
    with pytest.raises(Exception, match=rf"Option 'startingOffsets'.*missing {topic}-1"):
        _stream(spark, opts, tmp_path)


def test_latest_not_allowed_as_batch_start(spark, bootstrap, topic):
    opts = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "latest"}
    with pytest.raises(Exception, match="Option 'startingOffsets'.*batch"):
        spark.read.format("kafka-eos").options(**opts).load().collect()


def test_password_never_appears_in_errors(spark, bootstrap):
    secret = "s3cr3t-Pa55word-do-not-print"
    opts = {
        "kafka.bootstrap.servers": bootstrap,
        "kafka.sasl.password": secret,
        "kafka.sasl.username": "user",
        "subscribe": "x",
        "maxOffsetsPerTrigger": "-1",
    }
    with pytest.raises(Exception) as info:
        spark.readStream.format("kafka-eos").options(**opts).load()
    assert "maxOffsetsPerTrigger" in str(info.value)
    assert secret not in str(info.value)
