"""Unit tests for sources/kafka_options.py: the kafka-eos source's option validation."""

from __future__ import annotations

import re

import pytest

from connectors.core.options import OptionError
from sources.kafka_options import KafkaSourceOptions, StartSpec, Subscription, parse_source_options

BASE = {"kafka.bootstrap.servers": "broker1:9092,broker2:9092", "subscribe": "events"}


def _lower(raw: dict) -> dict:
    """Spark hands a Python data source its options with lower-cased keys."""
    return {k.lower(): v for k, v in raw.items()}


SPELLINGS = [pytest.param(lambda d: dict(d), id="as-documented"), pytest.param(_lower, id="lower-cased")]


@pytest.fixture(params=SPELLINGS)
def spell(request):
    return request.param


def parse(spell, extra=None, *, batch, drop=()):
    raw = {k: v for k, v in {**BASE, **(extra or {})}.items() if k not in drop}
    return parse_source_options(spell(raw), batch=batch)


def fails(spell, extra=None, *, batch, drop=()) -> OptionError:
    with pytest.raises(OptionError) as ei:
        parse(spell, extra, batch=batch, drop=drop)
    return ei.value


# --------------------------------------------------------------------------- basics and defaults


@pytest.mark.parametrize("batch", [True, False, None])
def test_minimal_options(spell, batch):
    o = parse(spell, batch=batch)
    assert isinstance(o, KafkaSourceOptions)
    assert o.bootstrap_servers == "broker1:9092,broker2:9092"
    assert o.subscription == Subscription("subscribe", topics=("events",))
    assert o.fail_on_data_loss is True
    assert o.include_headers is False
    assert o.max_offsets_per_trigger is None
    assert o.min_offsets_per_trigger is None
    assert o.min_partitions is None
    assert o.max_records_per_partition is None
    assert o.timestamp_strategy == "error"
    assert o.max_trigger_delay_ms == 15 * 60_000
    assert o.ending == StartSpec("latest")


def test_default_start_streaming_is_latest(spell):
    assert parse(spell, batch=False).starting == StartSpec("latest")


def test_default_start_batch_is_earliest(spell):
    assert parse(spell, batch=True).starting == StartSpec("earliest")


def test_other_defaults(spell):
    o = parse(spell, batch=False)
    assert o.poll_timeout_ms == 120_000
    assert o.fetch_attempts == 4  # fetchOffset.numRetries=3, plus the first attempt
    assert o.fetch_retries == 3
    assert o.fetch_retry_interval_ms == 10  # fetchOffset.retryIntervalMs, as in Spark
    assert o.arrow_batch_rows == 20_000


def test_explicit_values(spell):
    o = parse(
        spell,
        {
            "failOnDataLoss": "false",
            "includeHeaders": "TRUE",
            "maxOffsetsPerTrigger": "1000",
            "minOffsetsPerTrigger": "10",
            "maxTriggerDelay": "30s",
            "minPartitions": "8",
            "maxRecordsPerPartition": "500",
            "startingOffsetsByTimestampStrategy": "Latest",
            "kafkaConsumer.pollTimeoutMs": "5000",
            "fetchOffset.numRetries": "0",
            "fetchOffset.retryIntervalMs": "250",
            "arrowBatchRows": "128",
        },
        batch=False,
    )
    assert o.fail_on_data_loss is False
    assert o.include_headers is True
    assert o.max_offsets_per_trigger == 1000
    assert o.min_offsets_per_trigger == 10
    assert o.max_trigger_delay_ms == 30_000
    assert o.min_partitions == 8
    assert o.max_records_per_partition == 500
    assert o.timestamp_strategy == "latest"
    assert o.poll_timeout_ms == 5000
    assert o.fetch_attempts == 1
    assert o.fetch_retry_interval_ms == 250
    assert o.arrow_batch_rows == 128


# --------------------------------------------------------------------------- kafka.* pass-through


def test_kafka_options_pass_through_without_prefix(spell):
    o = parse(
        spell,
        {
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanisms": "PLAIN",
            "kafka.sasl.username": "alice",
            "kafka.sasl.password": "pw",
            "kafkaConsumer.pollTimeoutMs": "10",  # not a kafka.* option
            "startingOffsets": "earliest",
        },
        batch=True,
    )
    assert o.kafka_conf.pop("group.id").startswith("spark-kafka-relation-")
    assert o.kafka_conf == {
        "bootstrap.servers": "broker1:9092,broker2:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": "pw",
    }


def test_kafka_option_values_keep_their_case():
    o = parse_source_options(
        {"KAFKA.BOOTSTRAP.SERVERS": "Broker:9092", "kafka.client.id": "MyClient", "SUBSCRIBE": "T"},
        batch=True,
    )
    assert o.kafka_conf.pop("group.id").startswith("spark-kafka-relation-")
    assert o.kafka_conf == {"bootstrap.servers": "Broker:9092", "client.id": "MyClient"}
    assert o.subscription.topics == ("T",)


# --------------------------------------------------------------------------- bootstrap servers


@pytest.mark.parametrize("batch", [True, False, None])
def test_missing_bootstrap_servers(spell, batch):
    e = fails(spell, batch=batch, drop=("kafka.bootstrap.servers",))
    assert e.option == "kafka.bootstrap.servers"
    assert "kafka.bootstrap.servers" in str(e)


@pytest.mark.parametrize("value", ["", "   "])
def test_blank_bootstrap_servers(spell, value):
    e = fails(spell, {"kafka.bootstrap.servers": value}, batch=True)
    assert "kafka.bootstrap.servers" in str(e)


# --------------------------------------------------------------------------- subscription


def test_subscribe_list(spell):
    o = parse(spell, {"subscribe": " a, b ,,c "}, batch=False)
    assert o.subscription.kind == "subscribe"
    assert o.subscription.topics == ("a", "b", "c")
    assert "a" in o.subscription.describe()


@pytest.mark.parametrize("value", ["", "  ", ",", " , ,"])
def test_subscribe_without_topics(spell, value):
    e = fails(spell, {"subscribe": value}, batch=False)
    assert "subscribe" in str(e)


def test_subscribe_pattern(spell):
    o = parse(spell, {"subscribePattern": r"events\..*"}, batch=False, drop=("subscribe",))
    assert o.subscription == Subscription("subscribePattern", pattern=r"events\..*")


@pytest.mark.parametrize("pattern", ["(", "[a-", "*abc", "a{2,1}"])
def test_subscribe_pattern_invalid_regex(spell, pattern):
    e = fails(spell, {"subscribePattern": pattern}, batch=False, drop=("subscribe",))
    assert e.option == "subscribePattern"
    assert "subscribePattern" in str(e)


def test_assign(spell):
    o = parse(spell, {"assign": '{"b": [2, 0], "a": [1, 1]}'}, batch=True, drop=("subscribe",))
    assert o.subscription.kind == "assign"
    assert o.subscription.assignment == (("a", 1), ("b", 0), ("b", 2))


@pytest.mark.parametrize(
    "value",
    [
        "not json",
        "{",
        "[]",
        '["a", 0]',
        "{}",
        '{"a": 0}',
        '{"a": "0"}',
        '{"a": ["0"]}',
        '{"a": [-1]}',
        '{"a": [1.5]}',
        '{"a": [true]}',
        '{"a": {"0": 1}}',
    ],
)
def test_assign_invalid(spell, value):
    e = fails(spell, {"assign": value}, batch=True, drop=("subscribe",))
    assert e.option == "assign"
    assert "assign" in str(e)


def _mentions_all_subscription_options(e: OptionError) -> None:
    msg = str(e)
    for name in ("subscribe", "subscribePattern", "assign"):
        assert name in msg, (name, msg)


@pytest.mark.parametrize(
    "extra",
    [
        {"subscribePattern": "e.*"},
        {"assign": '{"events": [0]}'},
        {"subscribePattern": "e.*", "assign": '{"events": [0]}'},
    ],
)
@pytest.mark.parametrize("batch", [True, False])
def test_more_than_one_subscription(spell, extra, batch):
    _mentions_all_subscription_options(fails(spell, extra, batch=batch))


def test_pattern_and_assign_without_subscribe(spell):
    e = fails(spell, {"subscribePattern": "e.*", "assign": '{"t":[0]}'}, batch=True, drop=("subscribe",))
    _mentions_all_subscription_options(e)


@pytest.mark.parametrize("batch", [True, False, None])
def test_no_subscription(spell, batch):
    _mentions_all_subscription_options(fails(spell, batch=batch, drop=("subscribe",)))


# --------------------------------------------------------------------------- startingOffsets


@pytest.mark.parametrize("value", ["earliest", "EARLIEST", " Earliest "])
@pytest.mark.parametrize("batch", [True, False, None])
def test_starting_earliest(spell, value, batch):
    assert parse(spell, {"startingOffsets": value}, batch=batch).starting == StartSpec("earliest")


@pytest.mark.parametrize("value", ["latest", "LATEST", " Latest"])
@pytest.mark.parametrize("batch", [False, None])
def test_starting_latest_streaming(spell, value, batch):
    assert parse(spell, {"startingOffsets": value}, batch=batch).starting == StartSpec("latest")


@pytest.mark.parametrize("value", ["latest", "LATEST", " Latest"])
def test_starting_latest_rejected_for_batch(spell, value):
    e = fails(spell, {"startingOffsets": value}, batch=True)
    assert e.option == "startingOffsets"
    assert "startingOffsets" in str(e)


def test_starting_offsets_json(spell):
    o = parse(spell, {"startingOffsets": '{"events": {"0": 23, "1": -2, "2": -1}}'}, batch=False)
    assert o.starting == StartSpec("offsets", offsets={("events", 0): 23, ("events", 1): -2, ("events", 2): -1})


def test_starting_offsets_json_latest_sentinel_rejected_for_batch(spell):
    value = '{"events": {"0": 23, "1": -1}}'
    e = fails(spell, {"startingOffsets": value}, batch=True)
    assert "startingOffsets" in str(e)
    # ... but fine when the mode is not known yet
    assert parse(spell, {"startingOffsets": value}, batch=None).starting.kind == "offsets"
    # and earliest is fine for batch
    o = parse(spell, {"startingOffsets": '{"events": {"0": -2}}'}, batch=True)
    assert o.starting.offsets == {("events", 0): -2}


@pytest.mark.parametrize(
    "value",
    [
        "{",
        '{"events": {"0": 23}',
        "{'events': {'0': 23}}",
        '{"events": [0, 1]}',
        '{"events": {"x": 1}}',
        '{"events": {"0": "1"}}',
        '{"events": {"0": -3}}',
        '{"events": {"0": 1.5}}',
        "{}",
        "[1, 2]",
        "beginning",
        "",
        "23",
    ],
)
@pytest.mark.parametrize("batch", [True, False, None])
def test_malformed_starting_offsets(spell, value, batch):
    e = fails(spell, {"startingOffsets": value}, batch=batch)
    assert e.option == "startingOffsets"
    assert "startingOffsets" in str(e)


def test_starting_timestamp(spell):
    o = parse(spell, {"startingTimestamp": "1700000000000", "startingOffsets": "earliest"}, batch=True)
    assert o.starting == StartSpec("timestamp", timestamp_ms=1_700_000_000_000)


@pytest.mark.parametrize("value", ["-1", "yesterday", "1.5"])
def test_starting_timestamp_invalid(spell, value):
    e = fails(spell, {"startingTimestamp": value}, batch=True)
    assert "startingTimestamp" in str(e)


def test_starting_offsets_by_timestamp(spell):
    o = parse(
        spell,
        {"startingOffsetsByTimestamp": '{"events": {"0": 1700000000000}}', "startingOffsets": "earliest"},
        batch=False,
    )
    assert o.starting == StartSpec("timestamps", timestamps={("events", 0): 1_700_000_000_000})
    assert o.starting_option == "startingOffsetsByTimestamp"


@pytest.mark.parametrize("value", ['{"events": {"0": -1}}', '{"events": {"0": -2}}', "{", "{}"])
def test_starting_offsets_by_timestamp_invalid(spell, value):
    e = fails(spell, {"startingOffsetsByTimestamp": value}, batch=False)
    assert "startingOffsetsByTimestamp" in str(e)


def test_timestamp_strategy_invalid(spell):
    e = fails(spell, {"startingOffsetsByTimestampStrategy": "oldest"}, batch=False)
    assert "startingOffsetsByTimestampStrategy" in str(e)


# --------------------------------------------------------------------------- endingOffsets


def test_ending_offsets_batch(spell):
    assert parse(spell, {"endingOffsets": "LATEST"}, batch=True).ending == StartSpec("latest")
    o = parse(spell, {"endingOffsets": '{"events": {"0": 50, "1": -1}}'}, batch=True)
    assert o.ending == StartSpec("offsets", offsets={("events", 0): 50, ("events", 1): -1})


@pytest.mark.parametrize("value", ["latest", '{"events": {"0": 50}}'])
def test_ending_offsets_rejected_for_streaming(spell, value):
    e = fails(spell, {"endingOffsets": value}, batch=False)
    assert e.option == "endingOffsets"
    assert "endingOffsets" in str(e)


def test_ending_offsets_accepted_when_mode_unknown(spell):
    assert parse(spell, {"endingOffsets": '{"events": {"0": 50}}'}, batch=None).ending.kind == "offsets"


@pytest.mark.parametrize(
    "value", ["earliest", '{"events": {"0": -2}}', "{", "forever", '{"events": {"0": "x"}}']
)
def test_ending_offsets_invalid(spell, value):
    e = fails(spell, {"endingOffsets": value}, batch=True)
    assert e.option == "endingOffsets"
    assert "endingOffsets" in str(e)


# --------------------------------------------------------------------------- per-trigger limits


@pytest.mark.parametrize("value", ["-1", "-100", "0", "abc", "1.5", "", "10k"])
@pytest.mark.parametrize("batch", [True, False, None])
def test_bad_max_offsets_per_trigger(spell, value, batch):
    e = fails(spell, {"maxOffsetsPerTrigger": value}, batch=batch)
    assert e.option == "maxOffsetsPerTrigger"
    assert "maxOffsetsPerTrigger" in str(e)


@pytest.mark.parametrize("value", ["-1", "0", "many"])
def test_bad_min_offsets_per_trigger(spell, value):
    e = fails(spell, {"minOffsetsPerTrigger": value}, batch=False)
    assert "minOffsetsPerTrigger" in str(e)


def test_min_offsets_above_max_offsets(spell):
    e = fails(spell, {"maxOffsetsPerTrigger": "100", "minOffsetsPerTrigger": "101"}, batch=False)
    assert "minOffsetsPerTrigger" in str(e)
    assert "maxOffsetsPerTrigger" in str(e)


def test_min_offsets_equal_to_max_offsets_is_fine(spell):
    o = parse(spell, {"maxOffsetsPerTrigger": "100", "minOffsetsPerTrigger": "100"}, batch=False)
    assert (o.min_offsets_per_trigger, o.max_offsets_per_trigger) == (100, 100)


@pytest.mark.parametrize(
    "extra,name",
    [
        ({"minPartitions": "0"}, "minPartitions"),
        ({"maxRecordsPerPartition": "-5"}, "maxRecordsPerPartition"),
        ({"failOnDataLoss": "perhaps"}, "failOnDataLoss"),
        ({"includeHeaders": "2"}, "includeHeaders"),
        ({"maxTriggerDelay": "soon"}, "maxTriggerDelay"),
        ({"kafkaConsumer.pollTimeoutMs": "0"}, "kafkaConsumer.pollTimeoutMs"),
        ({"fetchOffset.numRetries": "-1"}, "fetchOffset.numRetries"),
        ({"fetchOffset.retryIntervalMs": "-1"}, "fetchOffset.retryIntervalMs"),
        ({"fetchOffset.retryIntervalMs": "10ms"}, "fetchOffset.retryIntervalMs"),
        ({"arrowBatchRows": "0"}, "arrowBatchRows"),
    ],
)
def test_other_invalid_options_name_the_option(spell, extra, name):
    e = fails(spell, extra, batch=False)
    assert e.option == name
    assert name in str(e)


# --------------------------------------------------------------------------- secrets in errors


SECRET = "Sup3r-S3cret-Passw0rd!"


@pytest.mark.parametrize(
    "extra,drop",
    [
        ({}, ("kafka.bootstrap.servers",)),
        ({}, ("subscribe",)),
        ({"assign": '{"events": [0]}'}, ()),
        ({"assign": "not json"}, ("subscribe",)),
        ({"subscribePattern": "("}, ("subscribe",)),
        ({"startingOffsets": "{bad"}, ()),
        ({"startingOffsets": "latest"}, ()),
        ({"startingOffsets": "nope"}, ()),
        ({"endingOffsets": "earliest"}, ()),
        ({"maxOffsetsPerTrigger": "-1"}, ()),
        ({"maxOffsetsPerTrigger": "5", "minOffsetsPerTrigger": "6"}, ()),
        ({"failOnDataLoss": "x"}, ()),
    ],
)
def test_option_errors_never_show_the_password(spell, extra, drop):
    secrets = {
        "kafka.sasl.password": SECRET,
        "kafka.ssl.key.password": SECRET + "-key",
        "kafka.sasl.jaas.config": f'PlainLoginModule required username="u" password="{SECRET}-jaas";',
        "kafka.security.protocol": "SASL_SSL",
    }
    e = fails(spell, {**secrets, **extra}, batch=True, drop=drop)
    for text in (str(e), repr(e), repr(e.args)):
        assert SECRET not in text


def test_parsed_options_repr_never_shows_a_secret():
    secret = "hunter2-do-not-print"
    parsed = parse_source_options(
        {"kafka.bootstrap.servers": "b:9092", "kafka.sasl.password": secret, "subscribe": "t"},
        batch=False,
    )
    assert parsed.kafka_conf["sasl.password"] == secret  # still handed to librdkafka
    assert secret not in repr(parsed)


def test_negative_partition_in_offsets_json_is_rejected():
    with pytest.raises(OptionError, match=r"Option 'startingOffsets'.*partition '-1'"):
        parse_source_options(
            {"kafka.bootstrap.servers": "b:9092", "subscribe": "t",
             "startingOffsets": '{"t":{"-1":5}}'},
            batch=False,
        )


# --------------------------------------------------------------------------- precedence (Spark's)


def test_starting_timestamp_takes_precedence_over_the_other_starting_options(spell, caplog):
    o = parse(
        spell,
        {
            "startingTimestamp": "1700000000000",
            "startingOffsetsByTimestamp": '{"events": {"0": 5}}',
            "startingOffsets": "latest",  # not allowed in batch, but not read at all (as Spark)
        },
        batch=True,
    )
    assert o.starting == StartSpec("timestamp", timestamp_ms=1_700_000_000_000)
    assert o.starting_option == "startingTimestamp"
    assert "startingTimestamp takes precedence over startingOffsetsByTimestamp and startingOffsets" in caplog.text


def test_starting_offsets_by_timestamp_takes_precedence_over_starting_offsets(spell):
    o = parse(
        spell,
        {"startingOffsetsByTimestamp": '{"events": {"0": 5}}', "startingOffsets": "nonsense"},
        batch=True,
    )
    assert o.starting == StartSpec("timestamps", timestamps={("events", 0): 5})


@pytest.mark.parametrize("batch", [True, None])
def test_ending_timestamp(spell, batch):
    o = parse(spell, {"endingTimestamp": "1700000000000"}, batch=batch)
    assert o.ending == StartSpec("timestamp", timestamp_ms=1_700_000_000_000)
    assert o.ending_option == "endingTimestamp"


@pytest.mark.parametrize("batch", [True, None])
def test_ending_offsets_by_timestamp(spell, batch):
    o = parse(spell, {"endingOffsetsByTimestamp": '{"events": {"0": 7, "1": 9}}'}, batch=batch)
    assert o.ending == StartSpec("timestamps", timestamps={("events", 0): 7, ("events", 1): 9})
    assert o.ending_option == "endingOffsetsByTimestamp"


def test_ending_timestamp_takes_precedence_over_the_other_ending_options(spell, caplog):
    o = parse(
        spell,
        {
            "endingTimestamp": "1700000000000",
            "endingOffsetsByTimestamp": '{"events": {"0": 7}}',
            "endingOffsets": "earliest",  # invalid, but not read at all (as Spark)
        },
        batch=True,
    )
    assert o.ending == StartSpec("timestamp", timestamp_ms=1_700_000_000_000)
    assert "endingTimestamp takes precedence over endingOffsetsByTimestamp and endingOffsets" in caplog.text


def test_ending_offsets_by_timestamp_takes_precedence_over_ending_offsets(spell):
    o = parse(
        spell,
        {"endingOffsetsByTimestamp": '{"events": {"0": 7}}', "endingOffsets": '{"events": {"0": 1}}'},
        batch=True,
    )
    assert o.ending == StartSpec("timestamps", timestamps={("events", 0): 7})
    assert o.ending_option == "endingOffsetsByTimestamp"


@pytest.mark.parametrize(
    "name,value", [("endingTimestamp", "1700000000000"), ("endingOffsetsByTimestamp", '{"events": {"0": 7}}')]
)
def test_ending_timestamps_rejected_for_streaming(spell, name, value):
    e = fails(spell, {name: value}, batch=False)
    assert e.option == name
    assert "batch reads only" in str(e)


@pytest.mark.parametrize(
    "name,value",
    [
        ("endingTimestamp", "-1"),
        ("endingTimestamp", "tomorrow"),
        ("endingOffsetsByTimestamp", '{"events": {"0": -1}}'),
        ("endingOffsetsByTimestamp", "{"),
        ("endingOffsetsByTimestamp", "{}"),
    ],
)
@pytest.mark.parametrize("batch", [True, None])
def test_ending_timestamps_invalid(spell, name, value, batch):
    e = fails(spell, {name: value}, batch=batch)
    assert e.option == name


# --------------------------------------------------------------------------- consumer group id


def test_group_id_default_prefixes_are_sparks(spell):
    stream = parse(spell, batch=False).kafka_conf["group.id"]
    batch = parse(spell, batch=True).kafka_conf["group.id"]
    assert re.fullmatch(r"spark-kafka-source-[0-9a-f-]{36}", stream)
    assert re.fullmatch(r"spark-kafka-relation-[0-9a-f-]{36}", batch)
    assert parse(spell, batch=True).kafka_conf["group.id"] != batch  # one per reader


@pytest.mark.parametrize("batch", [True, False])
def test_group_id_prefix(spell, batch):
    conf = parse(spell, {"groupIdPrefix": "team-etl"}, batch=batch).kafka_conf
    assert re.fullmatch(r"team-etl-[0-9a-f-]{36}", conf["group.id"])


@pytest.mark.parametrize("batch", [True, False])
def test_kafka_group_id_is_used_as_is_and_the_prefix_ignored(spell, batch, caplog):
    conf = parse(
        spell, {"kafka.group.id": "Authorized-Group", "groupIdPrefix": "team-etl"}, batch=batch
    ).kafka_conf
    assert conf["group.id"] == "Authorized-Group"
    assert "kafka.group.id is set" in caplog.text
    assert "groupIdPrefix is ignored" in caplog.text


@pytest.mark.parametrize("name", ["groupIdPrefix", "kafka.group.id"])
def test_blank_group_ids_are_refused(spell, name):
    e = fails(spell, {name: " "}, batch=True)
    assert e.option == name


# --------------------------------------------------------------------------- unknown and refused


#: Every option of Spark's Kafka source (Structured Streaming + Kafka Integration Guide, 4.x)
#: with a valid value, plus ours; none may be refused as unknown.
SPARK_SOURCE_OPTIONS = {
    "startingTimestamp": "1000",
    "startingOffsetsByTimestamp": '{"events": {"0": 1000}}',
    "startingOffsets": "earliest",
    "endingTimestamp": "2000",
    "endingOffsetsByTimestamp": '{"events": {"0": 2000}}',
    "endingOffsets": "latest",
    "failOnDataLoss": "false",
    "kafkaConsumer.pollTimeoutMs": "1000",
    "fetchOffset.numRetries": "2",
    "fetchOffset.retryIntervalMs": "20",
    "maxOffsetsPerTrigger": "10",
    "minOffsetsPerTrigger": "5",
    "maxTriggerDelay": "1m",
    "minPartitions": "2",
    "maxRecordsPerPartition": "100",
    "groupIdPrefix": "p",
    "kafka.group.id": "g",
    "includeHeaders": "true",
    "startingOffsetsByTimestampStrategy": "latest",
    "arrowBatchRows": "100",
    "kafka.client.id": "any-kafka-setting",
    "path": "/given/by/load(path)",  # Spark passes load()'s argument as an option
}


@pytest.mark.parametrize("name", sorted(SPARK_SOURCE_OPTIONS))
@pytest.mark.parametrize("batch", [True, None])
def test_every_spark_option_is_known(spell, name, batch):
    parse(spell, {name: SPARK_SOURCE_OPTIONS[name]}, batch=batch)


def test_all_spark_options_together_in_batch(spell):
    parse(spell, SPARK_SOURCE_OPTIONS, batch=True)


@pytest.mark.parametrize(
    "name,suggested",
    [
        ("startingOffset", "startingOffsets"),
        ("maxOffsetPerTrigger", "maxOffsetsPerTrigger"),
        ("endingTimestamps", "endingTimestamp"),
        ("groupIdPrefx", "groupIdPrefix"),
        ("fetchOffset.retryInterval", "fetchOffset.retryIntervalMs"),
        ("includeHeader", "includeHeaders"),
    ],
)
@pytest.mark.parametrize("batch", [True, False, None])
def test_unknown_option_fails_suggesting_the_closest(spell, name, suggested, batch):
    e = fails(spell, {name: "1"}, batch=batch)
    assert e.option == name.lower()
    assert f"did you mean '{suggested}'" in str(e)
    assert "kafka-eos" in str(e)


def test_unknown_option_far_from_any_is_still_refused(spell):
    e = fails(spell, {"checkpointLocation": "/tmp/ck"}, batch=False)
    assert "is not an option of kafka-eos" in str(e)


@pytest.mark.parametrize(
    "name,reason",
    [
        ("kafka.auto.offset.reset", "startingOffsets"),
        ("kafka.enable.auto.commit", "never commits"),
        ("kafka.key.deserializer", "CAST(key AS STRING)"),
        ("kafka.value.deserializer", "CAST(value AS STRING)"),
        ("kafka.interceptor.classes", "interceptors"),
    ],
)
@pytest.mark.parametrize("batch", [True, False, None])
def test_kafka_settings_spark_refuses_are_refused_with_the_reason(spell, name, reason, batch):
    e = fails(spell, {name: "x"}, batch=batch)
    assert e.option == name
    assert "is not supported" in str(e) and reason in str(e)
    assert "did you mean" not in str(e)


@pytest.mark.parametrize("name", ["maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"])
def test_streaming_only_options_warn_in_batch(spell, name, caplog):
    parse(spell, {name: {"maxTriggerDelay": "1m"}.get(name, "10")}, batch=True)
    assert f"{name} applies to streaming queries only" in caplog.text


# --------------------------------------------------------------------------- readMode


def test_read_mode_defaults_to_tasks_and_leaves_the_trigger_limit_alone(spell):
    o = parse(spell, batch=False)
    assert o.read_mode == "tasks" and o.max_offsets_per_trigger is None


def test_read_mode_driver_bounds_each_batch_unless_told(spell):
    from sources.kafka_options import DRIVER_MODE_MAX_OFFSETS_PER_TRIGGER

    o = parse(spell, {"readMode": "Driver"}, batch=False)
    assert o.read_mode == "driver"
    assert o.max_offsets_per_trigger == DRIVER_MODE_MAX_OFFSETS_PER_TRIGGER
    assert parse(spell, {"readMode": "driver", "maxOffsetsPerTrigger": "500"},
                 batch=False).max_offsets_per_trigger == 500


def test_read_mode_invalid_names_the_accepted_values(spell):
    e = fails(spell, {"readMode": "fast"}, batch=False)
    assert e.option == "readMode" and "tasks, driver" in str(e) and "'fast'" in str(e)


def test_read_mode_is_ignored_by_batch_reads(spell, caplog):
    o = parse(spell, {"readMode": "driver"}, batch=True)
    assert o.max_offsets_per_trigger is None
    assert "readMode applies to streaming queries only" in caplog.text
