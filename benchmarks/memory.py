"""Peak memory of a Python worker reading one offset range (1 million 1-KB records by default).

Each reading runs in a fresh process that imports what a Spark Python worker imports, then runs
the source's own read path (`sources.range_reader.read_range`, as `KafkaStreamReader.read`
does) over one partition's range and drops each Arrow batch once it has it, as the worker does
after sending it to the JVM. Peak resident memory is the kernel's high-water mark (VmHWM); the
growth is that minus the resident memory after the imports. Reading the whole range and a
quarter of it, and with two Arrow batch sizes, shows what the memory follows.

    python -m benchmarks.memory BOOTSTRAP TOPIC UNTIL_OFFSET BATCH_ROWS   (prints JSON)
"""

from __future__ import annotations

import json
import subprocess
import sys


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def _worker(bootstrap: str, topic: str, until: int, batch_rows: int) -> dict:
    import pyarrow as pa
    import pyspark.sql.worker  # noqa: F401  what a worker has loaded
    from sources.offsets import OffsetRange
    from sources.range_reader import read_range

    base_kb = _status_kb("VmRSS")
    rows = batches = 0
    largest = 0
    for batch in read_range(OffsetRange(topic, 0, 0, until), {"bootstrap.servers": bootstrap},
                            batch_rows=batch_rows):
        rows += batch.num_rows
        batches += 1
        largest = max(largest, batch.nbytes)
        del batch
    return {
        "rows": rows,
        "batches": batches,
        "largest_batch_mb": round(largest / 2**20, 1),
        "baseline_rss_mb": round(base_kb / 1024, 1),
        "peak_rss_mb": round(_status_kb("VmHWM") / 1024, 1),
        "growth_mb": round((_status_kb("VmHWM") - base_kb) / 1024, 1),
        "arrow_pool_peak_mb": round(pa.default_memory_pool().max_memory() / 2**20, 1),
    }


def read_in_fresh_process(bootstrap: str, topic: str, until: int, batch_rows: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.memory", bootstrap, topic, str(until), str(batch_rows)],
        check=True, capture_output=True, text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(bootstrap: str, *, records: int, value_bytes: int, batch_rows: int) -> dict:
    from benchmarks.common import produce_fixed
    from integration_tests.support.kafka_data import create_topic, delete_topic, unique_topic

    topic = unique_topic("bench-mem")
    create_topic(bootstrap, topic, 1)
    produce_fixed(bootstrap, topic, 1, records, value_bytes)
    read_in_fresh_process(bootstrap, topic, records, batch_rows)  # warm-up: the broker's first read
    full = read_in_fresh_process(bootstrap, topic, records, batch_rows)
    quarter = read_in_fresh_process(bootstrap, topic, records // 4, batch_rows)
    small_batches = read_in_fresh_process(bootstrap, topic, records, max(1, batch_rows // 4))
    delete_topic(bootstrap, topic)
    assert full["rows"] == records and quarter["rows"] == records // 4
    return {
        "records": records,
        "value_bytes": value_bytes,
        "range_mb": round(records * value_bytes / 2**20, 1),
        "batch_rows": batch_rows,
        "full_range": full,
        "quarter_range": quarter,
        "quarter_batch_rows": small_batches | {"batch_rows": max(1, batch_rows // 4)},
        "peak_rss_mb": full["peak_rss_mb"],
        "growth_mb": full["growth_mb"],
        # ~1 when memory follows the batch size, ~4 if it followed the range size
        "growth_full_vs_quarter_range": round(full["growth_mb"] / max(quarter["growth_mb"], 0.1), 2),
    }


if __name__ == "__main__":
    bs, tp, until_, br = sys.argv[1:5]
    print(json.dumps(_worker(bs, tp, int(until_), int(br))))
