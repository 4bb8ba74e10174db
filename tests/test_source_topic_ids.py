"""A recreated topic is never skipped: the source records each topic's id (KIP-516) with its
offsets and compares it at every batch. Pure logic and the stream reader over a scripted broker
(no Kafka, no Spark session)."""

from __future__ import annotations

import types

import json
import logging

import pytest
from confluent_kafka import KafkaError, KafkaException
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from sources import offsets as off
from sources.offsets import OffsetRange
from sources.range_reader import DataLossError
from connectors.core.kafka.client import KafkaRetriesExhausted
from sources.offset_lookup import OffsetLookup
from tests.test_source_stream_reader import P0, NoBroker, ScriptedLookup, _options, _reader

P1 = ("lat", 1)
OLD, NEW = "eV8o8el9Q922lRakACxvhA", "AaIT00MmdyO05xyoO1s0pA"


# --------------------------------------------------------------------------- offsets JSON


def test_ids_travel_with_the_offsets_and_are_not_offsets():
    doc = off.to_json({P0: 10, P1: 3, ("b", 0): 7}, {"lat": OLD, "gone": NEW})
    assert doc == {"b": {"0": 7}, "lat": {"0": 10, "1": 3}, off.TOPIC_IDS_KEY: {"lat": OLD}}
    assert list(doc)[-1] == off.TOPIC_IDS_KEY  # after the topics, for whoever reads the log
    doc = json.loads(json.dumps(doc))  # as Spark logs it and hands it back
    assert off.from_json(doc) == {P0: 10, P1: 3, ("b", 0): 7}
    assert off.ids_from_json(doc) == {"lat": OLD}
    assert off.to_json({P0: 1}, {}) == {"lat": {"0": 1}}  # no ids known: Spark's own shape


def test_offsets_json_written_before_ids_were_recorded_reads_as_before():
    old_format = json.loads('{"lat": {"0": 338, "1": 5}}')
    assert off.from_json(old_format) == {P0: 338, P1: 5}
    assert off.ids_from_json(old_format) == {}
    assert off.recreated_topics(off.ids_from_json(old_format), {"lat": NEW}, ["lat"]) == []


def test_recreated_topics_need_both_ids_known_and_different():
    assert off.recreated_topics({"a": OLD, "b": OLD, "c": OLD}, {"a": NEW, "b": OLD, "d": NEW},
                                ["a", "b", "c", "d"]) == [("a", OLD, NEW)]
    assert off.recreated_topics({"a": OLD}, {"a": NEW}) == [("a", OLD, NEW)]
    assert off.recreated_topics({"a": OLD}, {"a": NEW}, ["b"]) == []


def test_ids_carried_over_a_failed_look_up():
    assert off.carried_ids({"a": OLD, "b": OLD}, {"b": NEW, "c": NEW}, ["a", "b", "c", "d"]) == {
        "a": OLD, "b": NEW, "c": NEW}
    assert off.carried_ids({"a": OLD}, {}, ["b"]) == {}  # a topic no longer read is dropped


def test_replay_start_reads_a_recreated_topic_from_zero():
    begin, back = off.replay_start({P0: 10, P1: 10, ("b", 0): 4}, {P0: 25, P1: 25, ("b", 0): 9},
                                   ["lat"])
    assert begin == {P0: 0, P1: 0, ("b", 0): 4} and back == []


# --------------------------------------------------------------------------- each batch


#: What this version logs in each batch's end offsets besides the offsets and the ids.
PLAN = {off.PLAN_KEY: off.RECORDS_SIZED_PLAN}


def _with_ids(start: dict, ids: dict) -> dict:
    return json.loads(json.dumps(off.to_json(off.from_json(start), ids)))


def test_old_format_start_gets_ids_recorded_from_the_next_batch_on():
    lookup = ScriptedLookup(_options(), [{P0: 20}])
    lookup.ids = {"lat": OLD}
    end = _reader(lookup.options, lookup).latestOffset({"lat": {"0": 10}}, ReadAllAvailable())
    assert end == {"lat": {"0": 20}, off.TOPIC_IDS_KEY: {"lat": OLD}, **PLAN}


def test_no_new_records_leaves_an_old_format_start_as_it_is():
    """Spark runs a batch when the end differs from the start: ids appearing in the JSON must
    not make one of nothing."""
    lookup = ScriptedLookup(_options(), [{P0: 10}])
    lookup.ids = {"lat": OLD}
    start = {"lat": {"0": 10}}
    assert _reader(lookup.options, lookup).latestOffset(start, ReadAllAvailable()) == start


def test_same_id_reads_on():
    lookup = ScriptedLookup(_options(), [{P0: 30}])
    lookup.ids = {"lat": OLD}
    reader = _reader(lookup.options, lookup)
    start = _with_ids({"lat": {"0": 10}}, {"lat": OLD})
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {"lat": {"0": 30}, off.TOPIC_IDS_KEY: {"lat": OLD}, **PLAN}
    assert [r for p in reader.partitions(start, end) for r in p.ranges] == [OffsetRange("lat", 0, 10, 30)]
    assert lookup.id_lookups == 1  # one look-up per batch, none to plan it


def test_failed_id_look_up_keeps_the_recorded_id_and_the_json_stable():
    lookup = ScriptedLookup(_options(), [{P0: 10}])  # no ids given
    reader = _reader(lookup.options, lookup)
    start = _with_ids({"lat": {"0": 10}}, {"lat": OLD})
    assert reader.latestOffset(start, ReadAllAvailable()) == start
    lookup.highs = [{P0: 12}]
    assert reader.latestOffset(start, ReadAllAvailable()) == {
        **_with_ids({"lat": {"0": 12}}, {"lat": OLD}), **PLAN}


def test_recreated_topic_past_the_old_offsets_fails_naming_topic_and_ids():
    """The new topic holds more records than were read of the old one: nothing went back,
    only the id tells."""
    lookup = ScriptedLookup(_options(), [{P0: 25, P1: 25}])
    lookup.ids = {"lat": NEW}
    start = _with_ids({"lat": {"0": 10, "1": 10}}, {"lat": OLD})
    with pytest.raises(DataLossError) as failed:
        _reader(lookup.options, lookup).latestOffset(start, ReadAllAvailable())
    message = str(failed.value)
    assert "topic lat was deleted and created again" in message
    assert OLD in message and NEW in message and "failOnDataLoss=false" in message
    assert lookup.latest_calls == 0  # failed before looking up its offsets


@pytest.mark.parametrize("limit", [ReadAllAvailable(), ReadMaxRows(100)])
def test_recreated_topic_without_fail_on_data_loss_is_read_from_its_start(caplog, limit):
    opts = _options(failOnDataLoss="false")
    lookup = ScriptedLookup(opts, [{P0: 25, P1: 25}], low=0)
    lookup.ids = {"lat": NEW}
    reader = _reader(opts, lookup)
    start = _with_ids({"lat": {"0": 10, "1": 10}}, {"lat": OLD})
    with caplog.at_level(logging.WARNING):
        end = reader.latestOffset(start, limit)
    assert end == {"lat": {"0": 25, "1": 25}, off.TOPIC_IDS_KEY: {"lat": NEW}, **PLAN}
    assert lookup.latest_calls == 1  # no "went back" look-ups: the topic is known to be new
    assert "lat-0: 10, lat-1: 10" in caplog.text and OLD in caplog.text and NEW in caplog.text
    plan = [r for p in reader.partitions(start, end) for r in p.ranges]
    assert plan == [OffsetRange("lat", 0, 0, 25), OffsetRange("lat", 1, 0, 25)]


def test_recreated_topic_with_fewer_records_is_reported_once_as_recreated():
    opts = _options(failOnDataLoss="false")
    lookup = ScriptedLookup(opts, [{P0: 3}], low=0)
    lookup.ids = {"lat": NEW}
    end = _reader(opts, lookup).latestOffset(_with_ids({"lat": {"0": 10}}, {"lat": OLD}),
                                               ReadAllAvailable())
    assert end == {"lat": {"0": 3}, off.TOPIC_IDS_KEY: {"lat": NEW}, **PLAN}
    assert lookup.latest_calls == 1


def test_recreated_topic_with_no_records_yet_still_records_the_new_id():
    opts = _options(failOnDataLoss="false")
    lookup = ScriptedLookup(opts, [{P0: 0}], low=0)
    lookup.ids = {"lat": NEW}
    start = _with_ids({"lat": {"0": 0}}, {"lat": OLD})
    end = _reader(opts, lookup).latestOffset(start, ReadAllAvailable())
    assert end == {"lat": {"0": 0}, off.TOPIC_IDS_KEY: {"lat": NEW}, **PLAN}  # not warned again next time


# --------------------------------------------------------------------------- planning


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_logged_batch_across_a_recreation_is_planned_from_zero_without_the_broker(
        fail_on_data_loss):
    """A batch logged by failOnDataLoss=false across a recreation (start under the old id, end
    under the new one) reads the new topic from offset 0, wherever it is replayed."""
    reader = _reader(_options(failOnDataLoss=fail_on_data_loss), NoBroker())
    reader._latest = {P0: 25}  # planned in this run: no look-up
    start = _with_ids({"lat": {"0": 10}}, {"lat": OLD})
    end = _with_ids({"lat": {"0": 25}}, {"lat": NEW})
    if fail_on_data_loss == "true":
        with pytest.raises(DataLossError, match=f"{OLD}.*{NEW}"):
            reader.partitions(start, end)
    else:
        assert [r for p in reader.partitions(start, end) for r in p.ranges] == [OffsetRange("lat", 0, 0, 25)]


def test_replayed_batch_checks_the_topic_is_still_the_logged_one():
    lookup = ScriptedLookup(_options(), [{P0: 30}])
    lookup.ids = {"lat": OLD}
    reader = _reader(lookup.options, lookup)
    start = _with_ids({"lat": {"0": 10}}, {"lat": OLD})
    end = _with_ids({"lat": {"0": 25}}, {"lat": OLD})
    assert [r for p in reader.partitions(start, end) for r in p.ranges] == [OffsetRange("lat", 0, 10, 25)]
    assert lookup.id_lookups == 1 and lookup.latest_calls == 0


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_replayed_batch_of_a_topic_recreated_since_reads_nothing_of_it(fail_on_data_loss, caplog):
    """Logged under the old id, replayed after a restart when the topic is another: its logged
    offsets name records that are gone. Fail, or read nothing of it (the next batch reads the
    new topic from its start)."""
    opts = _options(failOnDataLoss=fail_on_data_loss, subscribe="lat,b")
    lookup = ScriptedLookup(opts, [{P0: 30, ("b", 0): 9}])
    lookup.ids = {"lat": NEW, "b": OLD}
    reader = _reader(opts, lookup)
    start = _with_ids({"lat": {"0": 10}, "b": {"0": 4}}, {"lat": OLD, "b": OLD})
    end = _with_ids({"lat": {"0": 25}, "b": {"0": 9}}, {"lat": OLD, "b": OLD})
    if fail_on_data_loss == "true":
        with pytest.raises(DataLossError, match=f"topic lat was deleted.*{OLD}.*{NEW}"):
            reader.partitions(start, end)
        return
    with caplog.at_level(logging.WARNING):
        plan = [r for p in reader.partitions(start, end) for r in p.ranges]
    assert plan == [OffsetRange("b", 0, 4, 9)]
    assert "topic lat was deleted" in caplog.text
    from sources.kafka_source import _key

    assert _key(off.from_json(end)) in reader._planned  # its metrics line when it completes
    nxt = reader.latestOffset(end, ReadAllAvailable())
    assert nxt == {"b": {"0": 9}, "lat": {"0": 30}, off.TOPIC_IDS_KEY: {"b": OLD, "lat": NEW}, **PLAN}
    assert [r for p in reader.partitions(end, nxt) for r in p.ranges] == [OffsetRange("lat", 0, 0, 30)]


def test_initial_offset_records_the_ids():
    lookup = ScriptedLookup(_options(startingOffsets="earliest"), [{P0: 30}])
    lookup.ids = {"lat": OLD}

    class Earliest(type(lookup)):
        def offsets_for(self, spec, tps, option):
            return {tp: 0 for tp in tps}

    lookup.__class__ = Earliest
    assert _reader(lookup.options, lookup).initialOffset() == {
        "lat": {"0": 0}, off.TOPIC_IDS_KEY: {"lat": OLD}}


# --------------------------------------------------------------------------- the look-up


class _Uuid:
    def __init__(self, msb: int, lsb: int, text: str) -> None:
        self.msb, self.lsb, self.text = msb, lsb, text

    def get_most_significant_bits(self) -> int:
        return self.msb

    def get_least_significant_bits(self) -> int:
        return self.lsb

    def __str__(self) -> str:
        return self.text


class _Done:
    def __init__(self, value=None, error: KafkaError | None = None) -> None:
        self.value, self.error = value, error

    def result(self, timeout=None):
        if self.error is not None:
            raise KafkaException(self.error)
        return self.value


class _Described:
    def __init__(self, uid) -> None:
        self.topic_id = uid


class FakeAdmin:
    def __init__(self, answers: list) -> None:
        self.answers = list(answers)  # per call: {topic: _Done} or an exception to raise
        self.calls: list[list[str]] = []

    def describe_topics(self, topics, **kwargs):
        self.calls.append(sorted(topics.topic_names))
        answer = self.answers[min(len(self.calls), len(self.answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer


def _id_lookup(admin: FakeAdmin, **extra: str) -> OffsetLookup:
    lookup = OffsetLookup.__new__(OffsetLookup)
    lookup.options = _options(**extra)
    lookup._sleep = lambda s: None
    lookup._admin = admin
    if admin is not None:  # after a failure the lookup builds a new one
        lookup._new_admin = lambda conf: admin
    lookup.metadata = types.SimpleNamespace(reset=lambda: None)
    return lookup


def test_topic_ids_one_round_trip_for_every_topic():
    admin = FakeAdmin([{
        "a": _Done(_Described(_Uuid(1, 2, OLD))),
        "zero": _Done(_Described(_Uuid(0, 0, "AAAAAAAAAAAAAAAAAAAAAA"))),  # no id from broker
        "gone": _Done(error=KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)),
    }])
    assert _id_lookup(admin).topic_ids(["gone", "a", "zero", "a"]) == {"a": OLD}
    assert admin.calls == [["a", "gone", "zero"]]


def test_topic_ids_retry_transient_errors_and_give_up_quietly_on_refusals(caplog):
    transient = KafkaException(KafkaError(KafkaError._TRANSPORT))
    admin = FakeAdmin([transient, {"a": _Done(_Described(_Uuid(1, 2, OLD)))}])
    assert _id_lookup(admin).topic_ids(["a"]) == {"a": OLD}
    assert len(admin.calls) == 2

    refused = {"a": _Done(error=KafkaError(KafkaError.UNSUPPORTED_VERSION))}
    admin = FakeAdmin([refused])
    lookup = _id_lookup(admin)
    with caplog.at_level(logging.WARNING):
        assert lookup.topic_ids(["a"]) == {}
        assert lookup.topic_ids(["a"]) == {}
    assert len(admin.calls) == 1  # not asked again
    assert "offsets that went back" in caplog.text

    admin = FakeAdmin([transient] * 1000)
    with pytest.raises(KafkaRetriesExhausted, match="describing topics"):
        _id_lookup(admin, kafkaRetryTimeout="1s").topic_ids(["a"])
    assert len(admin.calls) > 2  # retried under the deadline, then failed: not taken as a refusal


def test_admin_client_gets_no_consumer_only_settings(monkeypatch):
    """One admin client serves the topic ids and the offset look-ups (KafkaMetadata's)."""
    import connectors.core.kafka.client as kc

    seen: list[dict] = []

    class Recording(FakeAdmin):
        def __init__(self, conf):
            seen.append(conf)
            super().__init__([{"lat": _Done(_Described(_Uuid(1, 2, OLD)))}])

    monkeypatch.setattr(kc, "AdminClient", Recording)
    lookup = _id_lookup(None, **{"kafka.isolation.level": "read_committed",
                                     "kafka.fetch.wait.max.ms": "20",
                                     "kafka.security.protocol": "PLAINTEXT"})
    lookup.metadata = kc.KafkaMetadata(lookup.options.kafka_conf)
    lookup._admin = None
    assert lookup.topic_ids(["lat"]) == {"lat": OLD}
    (conf,) = seen
    assert conf["bootstrap.servers"] == "nowhere:9092" and conf["security.protocol"] == "PLAINTEXT"
    assert not {"group.id", "isolation.level", "fetch.wait.max.ms"} & set(conf)
    assert lookup.metadata.admin() is lookup._admin


def test_checkpoint_inspection_reads_offsets_with_ids():
    """`inspect` and `resolve` read the offsets lines without Spark: the ids are not offsets."""
    from connectors.checkpoint_reader import parse_offsets_file

    line = json.dumps(off.to_json({P0: 5, P1: 7}, {"lat": OLD}))
    (source,) = parse_offsets_file(3, f'v1\n{{"batchTimestampMs":1}}\n{line}\n').sources
    assert source.partitions == {P0: 5, P1: 7} and source.raw == line
    # a batch's end offsets also name its task plan, which is not a topic either
    line = json.dumps(off.to_json({P0: 5, P1: 7}, {"lat": OLD}, plan=off.RECORDS_SIZED_PLAN))
    (source,) = parse_offsets_file(3, f'v1\n{{"batchTimestampMs":1}}\n{line}\n').sources
    assert source.partitions == {P0: 5, P1: 7} and source.raw == line
