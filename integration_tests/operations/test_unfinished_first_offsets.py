"""A query killed while Spark wrote its first offsets cannot restart on Spark 4 until the
unfinished write is removed, which `kafka-eos resolve --apply` (and the demo's chaos restart)
does. Seen in the demo's chaos test on a loaded machine; here on real Spark, with the
checkpoint as the kill left it."""

from __future__ import annotations

import pytest

from connectors.cli import main
from connectors.checkpoint_reader import SparkCheckpoint

META = '{"batchWatermarkMs":0,"batchTimestampMs":1700000000000,"conf":{}}'


def _killed_at_first_offsets(path) -> None:
    (path / "offsets").mkdir(parents=True)
    (path / "commits").mkdir()
    (path / "metadata").write_text('{"id":"2a1c6a3e-1d2b-4c4e-9a51-0e6f0d1f4c11"}')
    (path / "offsets" / ".0.7c4c1ae3-1634-485a-a554-f4557bce61e6.tmp").write_text(
        f"v1\n{META}\n0")


def _run(spark, checkpoint: str) -> None:
    query = (spark.readStream.format("rate").option("rowsPerSecond", "10").load()
             .writeStream.format("noop").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination(120)


def test_resolve_lets_a_query_killed_at_its_first_offsets_start(spark, tmp_path):
    checkpoint = tmp_path / "ckpt"
    _killed_at_first_offsets(checkpoint)
    with pytest.raises(Exception, match="STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY"):
        _run(spark, str(checkpoint))
    assert main(["resolve", str(checkpoint), "--apply", "--force"]) == 0
    _run(spark, str(checkpoint))
    assert SparkCheckpoint(str(checkpoint)).offset_batches() == [0]
