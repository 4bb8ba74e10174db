"""`delta-eos` throughput as ratios in one run (DESIGN.md section 9):

* exactly-once `delta-eos` against one `write_deltalake` call on the same Arrow data;
* exactly-once against at-least-once.

    python -m benchmarks.delta_sink [--rows 400000] [--value-bytes 100] [--files 8]

The stream reads the same rows from Parquet files with Spark's file source (cheap, in the
JVM), so the figures are about the sink; a run into Spark's no-op sink gives the baseline
cost of the rest of the pipeline, reported beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake

from connectors.testing import local_spark


def make_data(rows: int, value_bytes: int) -> pa.Table:
    import numpy as np

    rng = np.random.default_rng(7)
    return pa.table({
        "key": pa.array([f"k{i % 1000}" for i in range(rows)]),
        "value": pa.array([b"x" * value_bytes] * rows, pa.binary()),
        "partition": pa.array(rng.integers(0, 4, rows), pa.int32()),
        "offset": pa.array(range(rows), pa.int64()),
    })


def stream(spark, src: str, out: str, fmt: str, files_per_trigger: int, **options) -> tuple[int, float]:
    """Rows and seconds of trigger time, from the query's progress."""
    schema = spark.read.parquet(src).schema
    ckpt = tempfile.mkdtemp()
    writer = (
        spark.readStream.schema(schema).option("maxFilesPerTrigger", files_per_trigger)
        .parquet(src).writeStream.format(fmt).option("checkpointLocation", ckpt)
    )
    if fmt == "delta-eos":
        writer = writer.option("path", out)
    for k, v in options.items():
        writer = writer.option(k, v)
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    rows = sum(p["numInputRows"] for p in progress)
    seconds = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000
    return rows, seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=400_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--files", type=int, default=8, help="input files = micro-batches")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bench-delta-")
    data = make_data(args.rows, args.value_bytes)
    src = os.path.join(work, "src")
    os.makedirs(src)
    per = args.rows // args.files
    for i in range(args.files):
        pq.write_table(data.slice(i * per, per), os.path.join(src, f"part-{i:03d}.parquet"))
    rows_total = per * args.files
    same = data.slice(0, rows_total)

    t = time.perf_counter()
    write_deltalake(os.path.join(work, "raw"), same)
    raw_s = time.perf_counter() - t

    spark = local_spark("bench-delta")
    stream(spark, src, os.path.join(work, "warm"), "delta-eos", args.files)  # warm-up
    results = {}
    for name, fmt, opts in [
        ("noop", "noop", {}),
        ("exactly_once", "delta-eos", {}),
        ("at_least_once", "delta-eos", {"deliveryGuarantee": "at-least-once"}),
    ]:
        rows, seconds = stream(spark, src, os.path.join(work, name), fmt, 1, **opts)
        assert rows == rows_total, (name, rows)
        if fmt == "delta-eos":
            assert DeltaTable(os.path.join(work, name)).to_pyarrow_table().num_rows == rows_total
        results[name] = rows / seconds
    spark.stop()

    print(json.dumps({
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "rows": rows_total,
        "batches": args.files,
        "value_bytes": args.value_bytes,
        "write_deltalake_rows_per_s": round(rows_total / raw_s),
        "delta_eos_exactly_once_rows_per_s": round(results["exactly_once"]),
        "delta_eos_at_least_once_rows_per_s": round(results["at_least_once"]),
        "spark_noop_sink_rows_per_s": round(results["noop"]),
        "ratio_exactly_once_vs_write_deltalake": round(results["exactly_once"] / (rows_total / raw_s), 3),
        "ratio_exactly_once_vs_at_least_once": round(results["exactly_once"] / results["at_least_once"], 3),
    }, indent=2))


if __name__ == "__main__":
    main()
