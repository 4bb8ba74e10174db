"""A table `delta-eos` creates with a NOT NULL column and a timestamp_ntz column lists the
`invariants` writer feature: delta-spark counts NOT NULL as a column invariant and refuses
(DELTA_FEATURES_PROTOCOL_METADATA_MISMATCH) a writer-version-7 table that does not list it, and
deltalake 1.6.6 leaves it out when timestamp_ntz alone makes the table version 7. delta-spark's
side is shown in integration_tests/peers/test_peers_delta.py; here, the protocol the sink commits.
No Spark: the DataSource's writer as Spark calls it, on real tables."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql.types import (
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from sinks.delta import DeltaEosDataSource
from sinks.delta.protocol_checks import has_not_null, needs_listed_invariants

NTZ_NOT_NULL = StructType([StructField("id", LongType(), False),
                           StructField("at", TimestampNTZType())])


def _sink(tmp_path, schema: StructType, **extra: str):
    raw = {"path": str(tmp_path / "t"), "checkpointlocation": str(tmp_path / "ck"),
           "appid": "app", **extra}
    return DeltaEosDataSource(raw).streamWriter(schema, False).sink


def _protocol(tmp_path):
    return DeltaTable(str(tmp_path / "t")).protocol()


def test_a_created_table_with_ntz_and_not_null_lists_invariants(tmp_path):
    sink = _sink(tmp_path, NTZ_NOT_NULL)
    sink.open()
    sink.commit(0, {})
    table = DeltaTable(str(tmp_path / "t"))
    protocol = table.protocol()
    assert protocol.min_writer_version == 7
    assert {"timestampNtz", "invariants"} <= set(protocol.writer_features)
    # in the one commit that creates it, with the batch: every version is readable
    assert (table.version(), table.transaction_version("app")) == (0, 0)
    assert not table.schema().fields[0].nullable
    sink.open()  # the sink still accepts the table it made, and warns of no property
    sink.commit(1, {})
    assert DeltaTable(str(tmp_path / "t")).transaction_version("app") == 1


def test_upsert_mode_creates_such_a_table_listing_invariants(tmp_path):
    sink = _sink(tmp_path, StructType([*NTZ_NOT_NULL.fields, StructField("seq", LongType())]),
                 mergekeys="id", sequenceby="seq")
    sink.open()
    sink.commit(0, {})
    assert "invariants" in _protocol(tmp_path).writer_features


def test_a_batch_job_into_a_new_ntz_table_lists_invariants(tmp_path):
    writer = DeltaEosDataSource({"path": str(tmp_path / "t")}).writer(NTZ_NOT_NULL, False)
    writer.sink.open()
    writer.sink.commit(0, {})
    assert "invariants" in _protocol(tmp_path).writer_features


def test_a_table_with_ntz_and_every_column_nullable_is_created_in_one_commit(tmp_path):
    schema = StructType([StructField("id", LongType()), StructField("at", TimestampNTZType())])
    sink = _sink(tmp_path, schema)
    sink.open()
    sink.commit(0, {})
    table = DeltaTable(str(tmp_path / "t"))
    assert table.version() == 0
    assert "invariants" not in table.protocol().writer_features


def test_a_not_null_table_without_ntz_keeps_its_legacy_protocol_and_one_commit(tmp_path):
    schema = StructType([StructField("id", LongType(), False),
                         StructField("at", TimestampType()), StructField("s", StringType())])
    sink = _sink(tmp_path, schema)
    sink.open()
    sink.commit(0, {})
    table = DeltaTable(str(tmp_path / "t"))
    assert (table.version(), table.protocol().min_writer_version) == (0, 2)


@pytest.mark.parametrize("fields,expected", [
    ([pa.field("id", pa.int64(), False), pa.field("t", pa.timestamp("us"))], True),
    ([pa.field("id", pa.int64()), pa.field("t", pa.timestamp("us"))], False),
    ([pa.field("id", pa.int64(), False), pa.field("t", pa.timestamp("us", tz="UTC"))], False),
    ([pa.field("s", pa.struct([pa.field("n", pa.int32(), False)])),
      pa.field("l", pa.list_(pa.field("t", pa.timestamp("us"))))], True),
    # every list kind Arrow has, not only list and large_list
    ([pa.field("id", pa.int64(), False), pa.field("f", pa.list_(pa.timestamp("us"), 2))], True),
    ([pa.field("id", pa.int64(), False), pa.field("v", pa.list_view(pa.timestamp("us")))], True),
    ([pa.field("id", pa.int64(), False),
      pa.field("v", pa.large_list_view(pa.timestamp("us")))], True),
])
def test_which_schemas_need_invariants_listed(fields, expected):
    schema = pa.schema(fields)
    assert needs_listed_invariants(schema) is expected


def test_a_nested_not_null_field_counts():
    assert has_not_null(pa.schema([pa.field("s", pa.struct([pa.field("n", pa.int32(), False)]))]))
    assert not has_not_null(pa.schema([pa.field("s", pa.struct([pa.field("n", pa.int32())]))]))
    assert has_not_null(pa.schema([pa.field("f", pa.list_(pa.field("n", pa.int32(), False), 2))]))
