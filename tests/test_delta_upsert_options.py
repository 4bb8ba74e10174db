"""delta-eos upsert mode (mergeKeys): its options fail at query start, naming the option and
what it accepts, never a batch later. No Spark, no table: the DataSource as Spark calls it."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from connectors.core.options import OptionError
from sinks.delta import DeltaEosDataSource
from sinks.delta.delete_predicate import parse
from sinks.delta.upsert import DeltaUpsertSink

SCHEMA = StructType([
    StructField("id", LongType()), StructField("seq", LongType()), StructField("op", StringType()),
    StructField("v", StringType()), StructField("ts", TimestampType()),
    StructField("tags", ArrayType(StringType())), StructField("score", DoubleType()),
    StructField("flag", BooleanType()),
])
UPSERT = {"mergekeys": "id", "sequenceby": "seq"}


def _writer(tmp_path, schema: StructType = SCHEMA, **extra: str):
    raw = {"path": str(tmp_path / "t"), "checkpointlocation": str(tmp_path / "ck"),
           "appid": "app", **extra}
    return DeltaEosDataSource(raw).streamWriter(schema, False)


def test_merge_keys_turns_on_upsert_mode_with_its_options_parsed(tmp_path):
    writer = _writer(tmp_path, mergekeys=" id ", sequenceby="seq", applyasdeletes="op = 'd'",
                     exceptcolumns="op, tags", tombstoneretention="2h")
    sink = writer.sink
    assert isinstance(sink, DeltaUpsertSink)
    upsert = sink.options.upsert
    assert (upsert.keys, upsert.sequence, upsert.deletes) == (("id",), "seq", "op = 'd'")
    assert upsert.except_columns == ("op", "tags")
    assert upsert.tombstone_retention_ms == 2 * 3_600_000
    # the table gets the stream's columns but exceptColumns; the staged files a delete flag
    assert sink.schema.names == ["id", "seq", "v", "ts", "score", "flag"]
    assert sink.staged_schema.names[-1] == "__eos_delete"


def test_without_merge_keys_the_sink_appends_and_tombstones_last_a_day(tmp_path):
    assert type(_writer(tmp_path).sink).__name__ == "DeltaSink"
    assert _writer(tmp_path, **UPSERT).sink.options.upsert.tombstone_retention_ms == 86_400_000


@pytest.mark.parametrize("option", ["sequenceBy", "applyAsDeletes", "exceptColumns",
                                    "tombstoneRetention"])
def test_an_upsert_option_without_merge_keys_is_refused_naming_it(tmp_path, option):
    with pytest.raises(OptionError, match=rf"Option '{option}': belongs to upsert mode, which "
                                          "mergeKeys turns on"):
        _writer(tmp_path, **{option.lower(): "seq"})


@pytest.mark.parametrize("extra,option,words", [
    ({"mergekeys": "id"}, "sequenceBy", "is required with mergeKeys"),
    ({"mergekeys": " , "}, "mergeKeys", "is empty"),
    ({**UPSERT, "deliveryguarantee": "at-least-once"}, "deliveryGuarantee",
     "exactly-once only; 'at-least-once' is refused"),
    ({**UPSERT, "maxrecordsperfile": "10"}, "maxRecordsPerFile", "applies to appends only"),
    ({**UPSERT, "delta.appendonly": "true"}, "mergeKeys", "delta.appendOnly=true"),
    ({**UPSERT, "tombstoneretention": "soon"}, "tombstoneRetention", ""),
    ({**UPSERT, "applyasdeletes": "op = "}, "applyAsDeletes", "does not parse"),
    ({**UPSERT, "applyasdeletes": "op ~ 'd'"}, "applyAsDeletes", "does not parse at"),
    ({**UPSERT, "applyasdeletes": "kind = 'd'"}, "applyAsDeletes",
     "names the column 'kind', which the stream does not have"),
    ({**UPSERT, "applyasdeletes": "op = 3"}, "applyAsDeletes", "cannot be evaluated"),
    ({**UPSERT, "applyasdeletes": "seq"}, "applyAsDeletes", "not a boolean"),
    ({"mergekeys": "id,tenant", "sequenceby": "seq"}, "mergeKeys",
     r"column\(s\) tenant are not in the stream's columns \(id, seq, op"),
    ({"mergekeys": "tags", "sequenceby": "seq"}, "mergeKeys", "is of type list"),
    ({"mergekeys": "score", "sequenceby": "seq"}, "mergeKeys", "is of type double"),
    ({"mergekeys": "id", "sequenceby": "sequence"}, "sequenceBy", "not in the stream's columns"),
    ({"mergekeys": "id", "sequenceby": "op"}, "sequenceBy",
     "is of type string: the sequence must be a number or a timestamp"),
    ({"mergekeys": "id", "sequenceby": "id"}, "sequenceBy", "is also a mergeKeys column"),
    ({**UPSERT, "exceptcolumns": "op,nope"}, "exceptColumns", "nope are not in the stream"),
    ({**UPSERT, "exceptcolumns": "op,seq"}, "exceptColumns", "seq must be written"),
    ({**UPSERT, "exceptcolumns": "id"}, "exceptColumns", "id must be written"),
])
def test_an_invalid_upsert_setting_fails_at_query_start_naming_the_option(tmp_path, extra,
                                                                         option, words):
    with pytest.raises(OptionError, match=rf"^Option '{option}': .*{words}"):
        _writer(tmp_path, **extra)
    assert not (tmp_path / "t").exists(), "nothing is written by a refused query"


def test_a_timestamp_sequence_is_accepted(tmp_path):
    assert _writer(tmp_path, mergekeys="id", sequenceby="ts").sink.upsert.sequence == "ts"


def test_a_batch_write_refuses_upsert_mode(tmp_path):
    raw = {"path": str(tmp_path / "t"), **UPSERT}
    with pytest.raises(OptionError, match="^Option 'mergeKeys': upsert mode .* is for streaming"):
        DeltaEosDataSource(raw).writer(SCHEMA, False)


@pytest.mark.parametrize("text,expected", [
    ("op = 'd'", [False, True, False, False, False]),
    ("op IN ('d', 'r')", [False, True, False, False, True]),
    ("op NOT IN ('c')", [False, True, False, True, True]),  # null op: not a delete
    ("NOT op = 'c' AND seq > 2", [False, False, False, True, True]),
    ("op IS NULL OR `Flag`", [True, False, True, True, False]),
    ("flag", [True, False, False, True, False]),  # columns resolve case-insensitively
    ("seq >= 4.5", [False, False, False, False, True]),
    ("OP = 'd' or (seq = 1 and flag)", [True, True, False, False, False]),
    ("op = 'it''s'", [False, False, False, False, False]),
])
def test_the_delete_predicate_marks_rows_as_sql_would(text, expected):
    batch = pa.record_batch({"op": ["c", "d", None, "u", "r"], "seq": [1, 2, 3, 4, 5],
                             "Flag": [True, False, None, True, False]})
    predicate = parse(text)
    predicate.check(batch.schema)
    assert predicate.mask(batch).to_pylist() == expected
