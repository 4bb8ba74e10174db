"""`kafka-eos` as a drop-in for Spark's Kafka sink: a keyed row lands on the partition Spark's
sink (the Java producer's default partitioner) would put it on, and the `topic` option wins
over a `topic` column, as in Spark.

The oracle is the Java client's formula, written out here from
org.apache.kafka.common.utils.Utils.murmur2 / toPositive and BuiltInPartitioner
(`toPositive(murmur2(keyBytes)) % numPartitions`), not taken from the product's code.
"""

from __future__ import annotations

import json
import random

import pytest

from connectors.local.kafka_oracle import committed
from integration_tests.support.kafka_data import create_topic, unique_topic
from integration_tests.support.streaming import run_to_end


def java_murmur2(data: bytes) -> int:
    """org.apache.kafka.common.utils.Utils.murmur2: 32-bit signed Java int arithmetic."""

    def i32(x: int) -> int:
        x &= 0xFFFFFFFF
        return x - (1 << 32) if x & 0x80000000 else x

    def ushr(x: int, n: int) -> int:  # Java's >>> on an int
        return (x & 0xFFFFFFFF) >> n

    length = len(data)
    seed = i32(0x9747B28C)
    m = 0x5BD1E995
    r = 24
    h = i32(seed ^ length)
    for i in range(length // 4):
        i4 = i * 4
        k = i32(data[i4] + (data[i4 + 1] << 8) + (data[i4 + 2] << 16) + (data[i4 + 3] << 24))
        k = i32(k * m)
        k = i32(k ^ ushr(k, r))
        k = i32(k * m)
        h = i32(h * m)
        h = i32(h ^ k)
    tail = length & ~3
    rest = length % 4
    if rest == 3:
        h = i32(h ^ (data[tail + 2] << 16))
    if rest >= 2:
        h = i32(h ^ (data[tail + 1] << 8))
    if rest >= 1:
        h = i32(h ^ data[tail])
        h = i32(h * m)
    h = i32(h ^ ushr(h, 13))
    h = i32(h * m)
    h = i32(h ^ ushr(h, 15))
    return h


def java_partition(key: bytes, partitions: int) -> int:
    """BuiltInPartitioner.partitionForKey: toPositive(murmur2(key)) % numPartitions."""
    return (java_murmur2(key) & 0x7FFFFFFF) % partitions


def test_the_oracle_matches_kafkas_own_test_vectors():
    # org.apache.kafka.common.utils.UtilsTest#testMurmur2
    vectors = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    assert {k: java_murmur2(k) for k in vectors} == vectors


PARTITIONS = 7


def _keys() -> list[bytes]:
    """Keys of every length 1..40 (each tail length of the hash), bytes >= 0x80 included (Java
    reads them as negative bytes and masks them), plus readable ones."""
    rng = random.Random(12)
    keys = [bytes(rng.randrange(256) for _ in range(n)) for n in range(1, 41) for _ in range(4)]
    keys += [f"user-{i}".encode() for i in range(60)]
    keys += ["clé-ü-日本".encode(), b"\xff\xff\xff\xff", b"\x80"]
    return keys


@pytest.mark.parametrize("key_type", ["binary", "string"])
def test_keyed_rows_land_on_the_java_partitioners_partition(spark, bootstrap, tmp_path, key_type):
    keys = _keys()
    if key_type == "string":
        keys = [k for k in keys if _is_utf8(k)]
    src = tmp_path / "in"
    src.mkdir()
    # Three files: several write tasks, each with its own producer.
    for f in range(3):
        with open(src / f"part-{f}.json", "w") as out:
            for i, k in enumerate(keys):
                if i % 3 == f:
                    out.write(json.dumps({"k": k.hex(), "v": f"v{i}"}) + "\n")
    out_topic = unique_topic("kpart")
    create_topic(bootstrap, out_topic, PARTITIONS)
    key_expr = "unhex(k) AS key" if key_type == "binary" else "CAST(unhex(k) AS STRING) AS key"
    frame = (
        spark.readStream.format("json").schema("k STRING, v STRING").load(str(src))
        .selectExpr(key_expr, "v AS value")
    )
    _write_all(frame, bootstrap, out_topic, tmp_path)

    got = committed(bootstrap, out_topic)
    assert sorted(r.key for r in got) == sorted(keys)  # every row, once
    wrong = [(r.key, r.partition, java_partition(r.key, PARTITIONS))
             for r in got if r.partition != java_partition(r.key, PARTITIONS)]
    assert not wrong, f"{len(wrong)} of {len(got)} rows not where Java puts them, e.g. {wrong[:3]}"
    # The keys spread over every partition: the check above is not vacuous.
    assert {r.partition for r in got} == set(range(PARTITIONS))


def _write_all(frame, bootstrap: str, topic: str, tmp_path) -> None:
    """Everything in `frame` through a kafka-eos query with the `topic` option, to the end."""
    query = (
        frame.writeStream.format("kafka-eos")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    run_to_end(query, 300)


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_the_topic_option_overrides_the_topic_column(spark, bootstrap, tmp_path):
    """Spark's Kafka sink: "the topic option, if set, overrides any topic column"."""
    src = tmp_path / "in"
    src.mkdir()
    column_topic, option_topic = unique_topic("kcol"), unique_topic("kopt")
    create_topic(bootstrap, column_topic, 1)
    create_topic(bootstrap, option_topic, 2)
    with open(src / "rows.json", "w") as out:
        for i in range(20):
            out.write(json.dumps({"t": column_topic, "v": f"v{i}"}) + "\n")
    frame = (
        spark.readStream.format("json").schema("t STRING, v STRING").load(str(src))
        .selectExpr("t AS topic", "CAST(NULL AS STRING) AS key", "v AS value")
    )
    _write_all(frame, bootstrap, option_topic, tmp_path)
    assert sorted(r.value for r in committed(bootstrap, option_topic)) == sorted(
        f"v{i}".encode() for i in range(20))
    assert committed(bootstrap, column_topic) == []
