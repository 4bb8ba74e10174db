"""Spark's Kafka source options that `kafka-eos` took on last, through a real broker and a real
Spark session: the ending timestamps of batch reads, the consumers' group id, and no option
silently ignored (an unknown one fails at `.load()`, naming the closest known one)."""

from __future__ import annotations

import json
import re
import time

import confluent_kafka
import pytest
from confluent_kafka import Producer

from integration_tests.support.kafka_data import Record, create_topic, produce, unique_topic
from integration_tests.support.streaming import run_to_end

GAP_S = 0.15


def _produce_rounds(bootstrap: str, topic: str, counts: dict[int, int]) -> list[tuple[Record, int]]:
    """Round i writes record i of every partition that has one, each in a batch of its own (the
    local broker's ListOffsets sees batches), then pauses: (record, round) in offset order.

    Timestamps are the producer's clock: the local broker (Tansu 0.6.0) looks records up by the
    time it appended them, not by a CreateTime the producer sets (measured), so the records are
    written when they say they were."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    out: list[tuple[Record, int]] = []
    for i in range(max(counts.values())):
        def on_delivery(err, msg, i=i):
            if err is not None:
                raise RuntimeError(f"delivery failed: {err}")
            out.append((Record(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value()), i))

        for partition, n in counts.items():
            if i < n:
                producer.produce(topic, key=f"k{partition}-{i}".encode(),
                                 value=f"v{partition}-{i}".encode(), partition=partition,
                                 on_delivery=on_delivery)
                assert producer.flush(30) == 0
        time.sleep(GAP_S)
    return sorted(out)


def _records(df) -> list[Record]:
    rows = df.select("topic", "partition", "offset", "key", "value").collect()
    return sorted(Record(r.topic, r.partition, r.offset, r.key, r.value) for r in rows)


class Rounds:
    """Ten rounds in partition 0, five in partition 1, and the time each round began."""

    def __init__(self, bootstrap: str) -> None:
        self.topic = unique_topic("endts")
        create_topic(bootstrap, self.topic, 2)
        self.written = _produce_rounds(bootstrap, self.topic, {0: 10, 1: 5})
        consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "oracle"})
        stamps: dict[int, int] = {}
        try:  # the records' timestamps, as the broker holds them
            for partition in (0, 1):
                n = sum(1 for r, _ in self.written if r.partition == partition)
                consumer.assign([confluent_kafka.TopicPartition(self.topic, partition, 0)])
                got, deadline = [], time.monotonic() + 60
                while len(got) < n and time.monotonic() < deadline:
                    got += [m for m in consumer.consume(n, timeout=5) if m.error() is None]
                assert len(got) == n, f"read {len(got)} of {n} records of partition {partition}"
                for m in got:
                    rnd = next(i for r, i in self.written if (r.partition, r.offset) == (partition, m.offset()))
                    stamps[rnd] = min(stamps.get(rnd, m.timestamp()[1]), m.timestamp()[1])
        finally:
            consumer.close()
        #: round -> a time after every record of the rounds before it, before any of its own
        #: (a round begins after the previous one was acknowledged and GAP_S went by)
        self.cut = {i: ts - 1 for i, ts in stamps.items()}

    def up_to(self, rounds: dict[int, int]) -> list[Record]:
        """The records of rounds before rounds[partition] in each partition."""
        return sorted(r for r, i in self.written if i < rounds[r.partition])

    def between(self, first: dict[int, int], until: dict[int, int]) -> list[Record]:
        return sorted(r for r, i in self.written if first[r.partition] <= i < until[r.partition])


@pytest.fixture(scope="module")
def rounds(bootstrap) -> Rounds:
    return Rounds(bootstrap)


def _read(spark, bootstrap, topic, **options):
    reader = (spark.read.format("kafka-eos").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic))
    for k, v in options.items():
        reader = reader.option(k, v)
    return _records(reader.load())


def test_ending_timestamp(spark, bootstrap, rounds):
    """Each partition ends before its first record at or after the time."""
    got = _read(spark, bootstrap, rounds.topic, endingTimestamp=str(rounds.cut[3]))
    assert got == rounds.up_to({0: 3, 1: 3})
    assert [r.offset for r in got if r.partition == 0] == [0, 1, 2]


def test_ending_timestamp_takes_precedence(spark, bootstrap, rounds):
    topic = rounds.topic
    got = _read(spark, bootstrap, topic, endingTimestamp=str(rounds.cut[2]),
                endingOffsetsByTimestamp=json.dumps({topic: {"0": rounds.cut[8], "1": rounds.cut[1]}}),
                endingOffsets=json.dumps({topic: {"0": 1, "1": 1}}))
    assert got == rounds.up_to({0: 2, 1: 2})


def test_ending_offsets_by_timestamp_with_starting_ones(spark, bootstrap, rounds):
    topic = rounds.topic
    first, until = {0: 2, 1: 1}, {0: 7, 1: 4}
    got = _read(
        spark, bootstrap, topic,
        startingOffsetsByTimestamp=json.dumps({topic: {str(p): rounds.cut[i] for p, i in first.items()}}),
        endingOffsetsByTimestamp=json.dumps({topic: {str(p): rounds.cut[i] for p, i in until.items()}}),
        endingOffsets="latest",  # lower precedence: not used
    )
    assert got == rounds.between(first, until)
    assert [r.offset for r in got if r.partition == 0] == [2, 3, 4, 5, 6]
    assert [r.offset for r in got if r.partition == 1] == [1, 2, 3]


def test_starting_timestamp_takes_precedence_over_starting_offsets_by_timestamp(spark, bootstrap, rounds):
    topic = rounds.topic
    got = _read(spark, bootstrap, topic, startingTimestamp=str(rounds.cut[4]),
                startingOffsetsByTimestamp=json.dumps({topic: {"0": rounds.cut[0], "1": rounds.cut[0]}}))
    assert got == rounds.between({0: 4, 1: 4}, {0: 10, 1: 10})


def _answers_no_match(bootstrap: str, topic: str) -> bool:
    """Whether the broker answers -1 to a look-up by a time after every record (Kafka does;
    Tansu 0.6.0 answers offset 0, measured)."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        future = int(time.time() * 1000) + 3_600_000
        [tp] = consumer.offsets_for_times([confluent_kafka.TopicPartition(topic, 0, future)], timeout=10)
        return tp.offset == -1
    finally:
        consumer.close()


def test_ending_timestamp_after_a_partitions_last_record_reads_it_to_latest(spark, bootstrap, rounds):
    """Partition 1 has no record at or after round 7's time: Spark reads it to its latest
    offset, and so does this source."""
    if not _answers_no_match(bootstrap, rounds.topic):
        pytest.skip("this broker answers a look-up by a time after every record with offset 0, "
                    "not -1 (Tansu 0.6.0), so 'no record at or after it' cannot be seen; "
                    "covered with scripted answers in tests/test_source_stream_reader.py")
    got = _read(spark, bootstrap, rounds.topic, endingTimestamp=str(rounds.cut[7]))
    assert got == rounds.up_to({0: 7, 1: 5})
    assert len([r for r in got if r.partition == 1]) == 5


def test_ending_timestamp_in_a_stream_fails_at_start(spark, bootstrap, rounds, tmp_path):
    df = (spark.readStream.format("kafka-eos").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", rounds.topic).option("endingTimestamp", str(rounds.cut[1])).load())
    with pytest.raises(Exception, match=r"Option 'endingTimestamp'.*batch reads only"):
        query = (df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck"))
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))


def test_batch_read_with_nothing_to_read(spark, bootstrap, rounds):
    """An end equal to the start plans no task: PySpark then runs one with InputPartition(None),
    which reads nothing."""
    same = json.dumps({rounds.topic: {"0": 3, "1": 2}})
    assert _read(spark, bootstrap, rounds.topic, startingOffsets=same, endingOffsets=same) == []
    assert _read(spark, bootstrap, rounds.topic, startingTimestamp=str(rounds.cut[2]),
                 endingTimestamp=str(rounds.cut[2])) == []


# --------------------------------------------------------------------------- unknown options


@pytest.mark.parametrize("stream", [False, True], ids=["read", "readStream"])
def test_misspelt_option_fails_at_load_naming_the_closest(spark, bootstrap, rounds, stream):
    topic = rounds.topic
    reader = spark.readStream if stream else spark.read
    with pytest.raises(Exception, match=r"Option 'startingoffset'.*not an option of kafka-eos.*"
                                        r"did you mean 'startingOffsets'"):
        (reader.format("kafka-eos").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", topic).option("startingOffset", "earliest").load())


def test_spark_refused_kafka_setting_fails_with_the_reason(spark, bootstrap, rounds):
    topic = rounds.topic
    with pytest.raises(Exception, match=r"Option 'kafka.auto.offset.reset'.*startingOffsets"):
        (spark.read.format("kafka-eos").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", topic).option("kafka.auto.offset.reset", "earliest").load())


def test_what_spark_passes_itself_is_not_refused(spark, bootstrap, rounds, tmp_path):
    """`.load(path)` hands the data source a `path` option (seen in PySpark 4.3, batch and
    streaming); Spark's Kafka source ignores it, and so does this one."""
    topic, written = rounds.topic, [r for r, _ in rounds.written]
    got = _records(spark.read.format("kafka-eos").option("kafka.bootstrap.servers", bootstrap)
                   .option("subscribe", topic).load("/not/used"))
    assert got == sorted(written)
    out = str(tmp_path / "out")
    query = (spark.readStream.format("kafka-eos").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest").load("/not/used")
             .writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    run_to_end(query, 180)
    assert spark.read.parquet(out).count() == len(written)


# --------------------------------------------------------------------------- consumer group id
#
# The source's consumers use assign() and never commit, so they never join a group: the broker
# has nothing to show for their group id (measured on Tansu 0.6.0: ListGroups lists none of them
# and DescribeGroups answers EMPTY for any id, used or not). So the group id is checked on every
# consumer the source creates, in this process against the real broker, and Spark is checked to
# read through the options.


@pytest.fixture
def consumer_confs(monkeypatch):
    """The configuration of every librdkafka consumer the source creates from here on."""
    import connectors.core.kafka.client
    import sources.consumer_pool
    import sources.range_reader

    seen: list[dict] = []

    class Recording(confluent_kafka.Consumer):
        def __init__(self, conf, *args, **kwargs):
            seen.append(dict(conf))
            super().__init__(conf, *args, **kwargs)

    monkeypatch.setattr(connectors.core.kafka.client, "Consumer", Recording)
    monkeypatch.setattr(sources.range_reader, "Consumer", Recording)
    monkeypatch.setattr(sources.consumer_pool, "Consumer", Recording)  # the tasks' consumers
    return seen


def _in_process_batch_read(options: dict) -> int:
    """A batch read by the real DataSource, planned and read here: how many rows."""
    from sources.data_source import KafkaEosDataSource

    source = KafkaEosDataSource({k.lower(): v for k, v in options.items()})
    source.schema()
    reader = source.reader(None)
    return sum(b.num_rows for p in reader.partitions() for b in reader.read(p))


def test_group_id_prefix_names_every_consumer(bootstrap, rounds, consumer_confs):
    topic, written = rounds.topic, [r for r, _ in rounds.written]
    rows = _in_process_batch_read({"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
                                   "groupIdPrefix": "team-etl"})
    assert rows == len(written)
    ids = {c["group.id"] for c in consumer_confs}
    # offset look-ups, and the readers: one for both partitions' ranges, pooled (the read
    # gets its own group id, so its own pooled consumer)
    assert len(consumer_confs) >= 2
    assert len(ids) == 1, ids  # one id for the whole read
    assert re.fullmatch(r"team-etl-[0-9a-f-]{36}", ids.pop())


def test_default_group_id_is_sparks(bootstrap, rounds, consumer_confs):
    topic, written = rounds.topic, [r for r, _ in rounds.written]
    assert _in_process_batch_read({"kafka.bootstrap.servers": bootstrap, "subscribe": topic}) == len(written)
    ids = {c["group.id"] for c in consumer_confs}
    assert len(ids) == 1 and re.fullmatch(r"spark-kafka-relation-[0-9a-f-]{36}", ids.pop())


def test_kafka_group_id_is_used_as_is(bootstrap, rounds, consumer_confs, caplog):
    topic, written = rounds.topic, [r for r, _ in rounds.written]
    rows = _in_process_batch_read({"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
                                   "kafka.group.id": "authorized-readers", "groupIdPrefix": "x"})
    assert rows == len(written)
    assert {c["group.id"] for c in consumer_confs} == {"authorized-readers"}
    assert "kafka.group.id is set" in caplog.text and "groupIdPrefix is ignored" in caplog.text


@pytest.mark.parametrize("option,value", [("groupIdPrefix", "team-etl"),
                                          ("kafka.group.id", "authorized-readers")])
def test_spark_reads_with_group_options(spark, bootstrap, option, value, tmp_path):
    topic = unique_topic("grp")
    create_topic(bootstrap, topic, 2)
    expected = produce(bootstrap, topic, 2, 20)
    assert _read(spark, bootstrap, topic, **{option: value}) == expected
    query = (spark.readStream.format("kafka-eos").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest").option(option, value)
             .load().writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    run_to_end(query, 180)
    assert spark.read.parquet(str(tmp_path / "out")).count() == len(expected)
