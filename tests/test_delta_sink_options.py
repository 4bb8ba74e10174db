"""delta-eos refuses options it does not know at query start, naming the closest one, and
never refuses what Spark itself passes to a sink. No Spark, no table."""

from __future__ import annotations

import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from connectors.core.options import OptionError
from sinks.delta import DeltaEosDataSource

SCHEMA = StructType([StructField("id", LongType()), StructField("v", StringType())])


def _stream_writer(tmp_path, **extra: str):
    # an appId of its own: no Spark here to write the checkpoint's query id
    raw = {"path": str(tmp_path / "t"), "checkpointlocation": str(tmp_path / "ck"),
           "appid": "app", **extra}
    return DeltaEosDataSource(raw).streamWriter(SCHEMA, False)


@pytest.mark.parametrize(
    "option,hint",
    [
        ("mergSchema", "did you mean 'mergeSchema'"),
        ("partitionby_", "did you mean 'partitionBy'"),
        ("orphanFileRetension", "did you mean 'orphanFileRetention'"),
        ("checkpointLocaton", "did you mean 'checkpointLocation'"),
        ("overwriteSchema", "is not an option of the delta-eos sink"),  # delta-spark's, unsupported
        ("txnAppId", "is not an option of the delta-eos sink"),
    ],
)
def test_an_unknown_option_fails_at_query_start_naming_the_closest(tmp_path, option, hint):
    with pytest.raises(OptionError, match=hint) as e:
        _stream_writer(tmp_path, **{option.lower(): "x"})
    assert "'storage.*'" in str(e.value) and "'delta.*'" in str(e.value)


def test_what_spark_passes_to_the_sink_is_never_refused(tmp_path):
    # seen with PySpark 4.3: queryName(), start(path), option("checkpointLocation")
    writer = _stream_writer(tmp_path, queryname="q", mergeschema="true", appid="app",
                            **{"storage.aws_region": "eu-west-1"})
    assert writer.sink.options.merge_schema is True
    assert writer.sink.options.storage_options == {"aws_region": "eu-west-1"}


def test_delta_options_are_table_properties_in_deltas_own_spelling(tmp_path):
    # Spark hands option names over in any case; delta-rs reads properties case-sensitively.
    writer = _stream_writer(tmp_path, **{"delta.appendonly": "true",
                                         "delta.CHECKPOINTINTERVAL": "10",
                                         "delta.logRetentionDuration": "interval 7 days"})
    assert writer.sink.options.table_properties == {
        "delta.appendOnly": "true",
        "delta.checkpointInterval": "10",
        "delta.logRetentionDuration": "interval 7 days",
    }
    assert writer.sink.options.storage_options == {}


def test_a_storage_option_under_the_old_delta_prefix_is_refused_naming_the_new_one(tmp_path):
    with pytest.raises(OptionError, match=r"delta\.aws_region.*use storage\.aws_region"):
        _stream_writer(tmp_path, **{"delta.AWS_REGION": "eu-west-1"})


def test_an_unknown_table_property_is_refused_listing_the_known_ones(tmp_path):
    with pytest.raises(OptionError, match=r"delta\.appendonli.*not a Delta table property.*delta\.appendOnly"):
        _stream_writer(tmp_path, **{"delta.appendOnli": "true"})


@pytest.mark.parametrize("prop,why", [
    ("delta.columnMapping.mode", "column mapping"),
    ("delta.enableRowTracking", "row ids"),
    ("delta.setTransactionRetentionDuration", "expired txn"),
    ("delta.autoOptimize.autoCompact", "compactEvery"),
])
def test_a_table_property_the_sink_cannot_honour_is_refused_saying_why(tmp_path, prop, why):
    with pytest.raises(OptionError, match=why) as e:
        _stream_writer(tmp_path, **{prop: "true"})
    assert prop in str(e.value)


def test_file_size_compaction_and_commit_metadata_options(tmp_path):
    o = _stream_writer(tmp_path, maxrecordsperfile="1000", maxbytesperfile="64m",
                       compactevery="50", usermetadata="backfill 2026-11").sink.options
    assert (o.max_records_per_file, o.max_bytes_per_file, o.compact_every) == (1000, 64 << 20, 50)
    assert o.user_metadata == "backfill 2026-11"
    d = _stream_writer(tmp_path).sink.options
    assert (d.max_records_per_file, d.max_bytes_per_file, d.compact_every, d.user_metadata) == (0, 0, 0, None)


@pytest.mark.parametrize("option,value,message", [
    ("maxRecordsPerFile", "-1", "at least 0"),
    ("maxRecordsPerFile", "many", "whole number"),
    ("maxBytesPerFile", "big", "size such as"),
    ("compactEvery", "1.5", "whole number"),
])
def test_bad_sizes_fail_at_query_start_naming_the_option(tmp_path, option, value, message):
    with pytest.raises(OptionError, match=message) as e:
        _stream_writer(tmp_path, **{option.lower(): value})
    assert option.lower() in str(e.value).lower()
