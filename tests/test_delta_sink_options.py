"""delta-eos refuses options it does not know at query start, naming the closest one, and
never refuses what Spark itself passes to a sink. No Spark, no table."""

from __future__ import annotations

import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from connectors.options import OptionError
from sinks.delta import DeltaEosDataSource

SCHEMA = StructType([StructField("id", LongType()), StructField("v", StringType())])


def _stream_writer(tmp_path, **extra: str):
    raw = {"path": str(tmp_path / "t"), "checkpointlocation": str(tmp_path / "ck"), **extra}
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
    assert "'delta.*'" in str(e.value)


def test_what_spark_passes_to_the_sink_is_never_refused(tmp_path):
    # seen with PySpark 4.3: queryName(), start(path), option("checkpointLocation")
    writer = _stream_writer(tmp_path, queryname="q", mergeschema="true", appid="app",
                            **{"delta.aws_region": "eu-west-1"})
    assert writer.sink.options.merge_schema is True
    assert writer.sink.options.storage_options == {"aws_region": "eu-west-1"}
