"""The shape of the driver's offset look-ups (connectors/core/kafka/client.py, KafkaMetadata): every
partition's earliest, latest or by-time offset in one ListOffsets call of the admin client
(one request per partition leader, sent by librdkafka), under the query's isolation level,
retried as a whole under kafkaRetryTimeout. No broker: a recording admin client. The answers
of a real broker, compared with the per-partition path, are in
integration_tests/source/test_offset_lookups.py."""

from __future__ import annotations

import concurrent.futures

import pytest
from confluent_kafka import IsolationLevel, KafkaError, KafkaException

import connectors.core.kafka.client as kc
from connectors.core.kafka.client import KafkaMetadata
from sources.kafka_options import parse_source_options
from sources.offset_lookup import OffsetLookup

TPS = [("t", p) for p in range(1000)]


class _Result:
    def __init__(self, offset: int) -> None:
        self.offset = offset


class RecordingAdmin:
    """list_offsets() records each call (specs by partition, isolation level) and answers
    with futures: offset = the partition number (earliest), + 1,000 (latest), + 100 times the
    timestamp (by time); or an error, or a scripted offset."""

    made = 0

    def __init__(self, conf) -> None:
        RecordingAdmin.made += 1
        self.conf = conf
        self.calls: list[tuple[dict, IsolationLevel]] = []
        self.pending: list[concurrent.futures.Future] = []
        self.errors: list[KafkaError] = []  # per call, in turn: fail one partition with it
        self.invalid: list[int] = []  # per call, in turn: answer this offset for one partition

    def list_offsets(self, specs, *, isolation_level, request_timeout):
        self.calls.append(({(tp.topic, tp.partition): spec for tp, spec in specs.items()},
                           isolation_level))
        error = self.errors.pop(0) if self.errors else None
        invalid = self.invalid.pop(0) if self.invalid else None
        out = {}
        for i, (tp, spec) in enumerate(specs.items()):
            f: concurrent.futures.Future = concurrent.futures.Future()
            if error is not None and i == 0:
                f.set_exception(KafkaException(error))
            elif invalid is not None and i == 0:
                f.set_result(_Result(invalid))
            else:
                f.set_result(_Result(tp.partition + {-2: 0, -1: 1000}.get(spec._value,
                                                                          100 * spec._value)))
            out[tp] = f
            self.pending.append(f)
        return out


@pytest.fixture
def admin(monkeypatch):
    made: list[RecordingAdmin] = []

    def factory(conf):
        a = RecordingAdmin(conf)
        made.append(a)
        return a

    monkeypatch.setattr(kc, "AdminClient", factory)
    return made


def _spec_kind(spec) -> str:
    return type(spec).__name__


def test_latest_of_a_thousand_partitions_is_one_list_offsets_call(admin):
    meta = KafkaMetadata({"bootstrap.servers": "b:1", "group.id": "g",
                          "fetch.wait.max.ms": "10"})
    latest = meta.latest(TPS)
    assert latest == {tp: tp[1] + 1000 for tp in TPS}
    (client,) = admin
    (specs, isolation), = client.calls
    assert set(specs) == set(TPS) and {_spec_kind(s) for s in specs.values()} == {"LatestSpec"}
    assert isolation == IsolationLevel.READ_COMMITTED  # the last stable offset
    assert "group.id" not in client.conf and "fetch.wait.max.ms" not in client.conf


def test_earliest_and_by_time_are_one_call_each_and_watermarks_two_in_flight(admin):
    meta = KafkaMetadata({"bootstrap.servers": "b:1"})
    assert meta.earliest(TPS[:3]) == {("t", 0): 0, ("t", 1): 1, ("t", 2): 2}
    by_time = meta.offsets_for_times({tp: 7 for tp in TPS})
    assert by_time[("t", 5)] == 705
    marks = meta.watermarks(TPS)
    assert marks[("t", 9)] == (9, 1009)
    (client,) = admin
    kinds = [{_spec_kind(s) for s in specs.values()} for specs, _ in client.calls]
    assert kinds == [{"EarliestSpec"}, {"TimestampSpec"}, {"EarliestSpec"}, {"LatestSpec"}]
    assert meta.latest([]) == {} and len(client.calls) == 4  # nothing asked for nothing


def test_read_uncommitted_asks_for_the_high_watermark(admin):
    KafkaMetadata({"bootstrap.servers": "b:1", "isolation.level": "read_uncommitted"}).latest(TPS)
    assert admin[0].calls[0][1] == IsolationLevel.READ_UNCOMMITTED


def test_a_failed_partition_fails_the_look_up_which_is_retried_whole_with_a_new_client(admin):
    """A leader moving answers NOT_LEADER for its partitions: the lookup retries the whole
    look-up under kafkaRetryTimeout (RetryPolicy), dropping the client in doubt."""
    opts = parse_source_options({"kafka.bootstrap.servers": "b:1", "subscribe": "t",
                                 "fetchOffset.retryIntervalMs": "0"}, batch=False)
    lookup = OffsetLookup(opts, sleep=lambda s: None)
    first = lookup.metadata.admin()
    first.errors = [KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION)]
    assert lookup.latest(TPS[:10]) == {tp: tp[1] + 1000 for tp in TPS[:10]}
    assert len(admin) == 2 and len(first.calls) == 1 and len(admin[1].calls) == 1


def test_a_refused_look_up_is_not_retried(admin):
    opts = parse_source_options({"kafka.bootstrap.servers": "b:1", "subscribe": "t"},
                                batch=False)
    lookup = OffsetLookup(opts, sleep=lambda s: None)
    lookup.metadata.admin().errors = [KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)]
    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
        lookup.earliest(TPS[:2])
    assert len(admin) == 1


def test_a_partition_without_a_known_leader_is_a_transient_error(admin):
    """ListOffsets says _NOENT ("No leaders found") for a partition whose leader the client
    does not know (measured: a topic just created, one being elected); the consumer's look-up
    said _UNKNOWN_PARTITION, retried. So is this: retried whole, then answered."""
    from connectors.core.kafka.client import is_transient

    opts = parse_source_options({"kafka.bootstrap.servers": "b:1", "subscribe": "t",
                                 "fetchOffset.retryIntervalMs": "0"}, batch=False)
    lookup = OffsetLookup(opts, sleep=lambda s: None)
    noent = KafkaError(KafkaError._NOENT, "Failed to query partition leaders: No leaders found")
    lookup.metadata.admin().errors = [noent]
    with pytest.raises(KafkaException) as raised:
        lookup.metadata.latest(TPS[:2])
    assert is_transient(raised.value) and "t-0" in raised.value.args[0].str()
    lookup.metadata.reset()
    lookup.metadata.admin().errors = [noent]
    assert lookup.latest(TPS[:2]) == {("t", 0): 1000, ("t", 1): 1001}


def test_a_negative_offset_without_an_error_is_no_answer_and_is_retried(admin):
    """Seen on Apache Kafka 3.9 while a lost quorum came back: a latest offset of -1001 with no
    error, which the source took for an offset that went back from 400 (data loss, the query
    failed). Retried as transient instead; by timestamp, -1 stays the answer 'no record'."""
    from connectors.core.kafka.client import is_transient

    opts = parse_source_options({"kafka.bootstrap.servers": "b:1", "subscribe": "t",
                                 "fetchOffset.retryIntervalMs": "0"}, batch=False)
    lookup = OffsetLookup(opts, sleep=lambda s: None)
    lookup.metadata.admin().invalid = [-1001]
    with pytest.raises(KafkaException) as raised:
        lookup.metadata.latest(TPS[:2])
    assert is_transient(raised.value) and "(-1001) for t-0" in raised.value.args[0].str()
    lookup.metadata.admin().invalid = [-1]  # as no answer for a latest offset
    with pytest.raises(KafkaException, match=r"\(-1\) for t-0"):
        lookup.metadata.latest(TPS[:2])
    lookup.metadata.reset()
    lookup.metadata.admin().invalid = [-1001]
    assert lookup.latest(TPS[:2]) == {("t", 0): 1000, ("t", 1): 1001}  # retried, answered
    assert len(admin) == 3  # the retry on a new client
    admin[-1].invalid = [-1]
    assert lookup.metadata.offsets_for_times({("t", 0): 5, ("t", 1): 5}) == {
        ("t", 0): -1, ("t", 1): 501}
