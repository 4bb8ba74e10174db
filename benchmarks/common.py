"""Helpers shared by the measurements: the machine's description, test data, the raw clients'
worker processes, timing a streaming query from its own progress, and the sinks' batch lines.
"""

from __future__ import annotations

import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import Consumer, Producer, TopicPartition

from connectors.core.kafka.client import consumer_conf
from sinks.two_phase_commit import METRICS_ENV

# -- the machine --------------------------------------------------------------------------------


def machine() -> dict:
    """What the figures were measured on: they mean nothing without it."""
    import confluent_kafka
    import deltalake
    import pyspark

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gb = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return {
        "cpu": cpu,
        "arch": platform.machine(),
        "cores": os.cpu_count(),
        "memory_gb": mem_gb,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "pyspark": pyspark.__version__,
        "pyarrow": pa.__version__,
        "deltalake": deltalake.__version__,
        "confluent_kafka": confluent_kafka.__version__,
        "librdkafka": confluent_kafka.libversion()[0],
    }


def command_line(argv: list[str] | None) -> str:
    """The section's command as its user typed it (argv: main()'s, or the process's)."""
    return "python -m benchmarks " + " ".join(sys.argv[1:] if argv is None else argv)


def section_header(argv: list[str] | None, **fields) -> dict:
    """What every section's results open with, so that a figure is never read without them:
    the command, the machine, the commit measured and the load when the section started (the
    section adds the load at its end)."""
    return {"command": command_line(argv), "machine": machine(), "code": code_version(),
            "load_average": {"start": load_average()}, **fields}


def load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


# -- statistics ---------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    """The q-quantile by the nearest-rank method (no interpolation)."""
    values = sorted(values)
    if not values:
        return float("nan")
    return values[min(len(values) - 1, max(0, int(round(q * (len(values) - 1)))))]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else float("nan")


# -- data ---------------------------------------------------------------------------------------


def make_records(rows: int, value_bytes: int, offset: int = 0) -> pa.Table:
    """Kafka-like rows: a short key, a fixed-size value, an offset."""
    import numpy as np

    idx = np.arange(offset, offset + rows)
    keys = pa.array([b"k%d" % i for i in idx.tolist()], pa.binary())
    blob = (b"0123456789abcdef" * (value_bytes // 16 + 1))[:value_bytes]
    values = pa.array([blob] * rows, pa.binary())
    return pa.table({"key": keys, "value": values, "offset": pa.array(idx, pa.int64())})


@dataclass
class ParquetInput:
    """The same rows as Parquet files for Spark's file source (cheap, in the JVM), and as one
    Arrow table for the raw clients."""

    directory: str
    files: list[str]
    rows_per_file: int
    table: pa.Table
    schema_ddl: str = "key binary, value binary, offset long"

    @property
    def rows(self) -> int:
        return self.table.num_rows


def write_parquet_input(work: str, rows: int, value_bytes: int, rows_per_file: int) -> ParquetInput:
    files_n = max(1, rows // rows_per_file)
    table = make_records(files_n * rows_per_file, value_bytes)
    directory = os.path.join(work, f"input-{value_bytes}")
    os.makedirs(directory, exist_ok=True)
    files = []
    for i in range(files_n):
        path = os.path.join(directory, f"part-{i:05d}.parquet")
        # Names sort in write order; the file source takes them oldest first.
        pq.write_table(table.slice(i * rows_per_file, rows_per_file), path)
        os.utime(path, (1_000_000 + i, 1_000_000 + i))
        files.append(path)
    return ParquetInput(directory, files, rows_per_file, table)


# -- Kafka --------------------------------------------------------------------------------------


def produce_fixed(bootstrap: str, topic: str, partitions: int, per_partition: int, size: int) -> None:
    """Fill each partition with `size`-byte values (docs/design.md#brokers)."""
    payload = (b"0123456789abcdef" * (size // 16 + 1))[:size]

    def records(p: int) -> Iterator[tuple[bytes | None, bytes]]:
        yield from ((b"k%d" % i, payload) for i in range(per_partition - 1))
        yield None, payload

    produce_sealed(bootstrap, topic, partitions, records)


def produce_sealed(bootstrap: str, topic: str, partitions: int,
                   records: Callable[[int], Iterable[tuple[bytes | None, bytes]]]) -> None:
    """Partition p gets `records(p)` (key, value pairs, at least one), its last record in a
    single-record batch of its own (docs/design.md#brokers): all but the last ones, a flush,
    then the last ones."""
    producer = Producer({
        "bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
        "compression.type": "none", "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
    })
    lasts = []
    for p in range(partitions):
        pending = iter(records(p))
        previous = next(pending)
        for record in pending:
            while True:
                try:
                    producer.produce(topic, key=previous[0], value=previous[1], partition=p)
                    break
                except BufferError:
                    producer.poll(0.05)
            previous = record
        lasts.append(previous)
    if producer.flush(300) != 0:
        raise RuntimeError("records not delivered")
    for p, (key, value) in enumerate(lasts):
        producer.produce(topic, key=key, value=value, partition=p)
    if producer.flush(120) != 0:
        raise RuntimeError("records not delivered")


def raw_consume(bootstrap: str, topic: str, partition: int, end: int,
                each: Callable[[bytes], object] | None = None) -> tuple[int, float]:
    """One raw consumer on one partition, doing nothing but count what consume() hands over
    (and pass each value to `each`, when given), until the partition's end offset. Same
    consumer configuration as the source's."""
    consumer = Consumer(consumer_conf({"bootstrap.servers": bootstrap}))
    consumer.assign([TopicPartition(topic, partition, 0)])
    n = 0
    start = time.perf_counter()
    while True:
        msgs = consumer.consume(10_000, timeout=1.0)
        if msgs:
            if each is not None:
                for m in msgs:
                    each(m.value())
            n += len(msgs)
            if msgs[-1].offset() >= end - 1:
                break
    elapsed = time.perf_counter() - start
    consumer.close()
    return n, elapsed


def raw_produce(bootstrap: str, topic: str, parquet_files: list[str]) -> tuple[int, float]:
    """One raw idempotent producer writing the records of these files (read before the clock
    starts), keyed like the sink's: the same partitioner picks the partition."""
    keys, values = [], []
    for path in parquet_files:
        t = pq.read_table(path, columns=["key", "value"])
        keys.extend(t.column("key").to_pylist())
        values.extend(t.column("value").to_pylist())
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    # Before the clock starts: connection, metadata and the producer id (a fresh idempotent
    # producer waits up to ~0.5 s for it), as the sink's long-lived producers have them.
    producer.produce(topic, b"warm-up")
    producer.flush(30)
    start = time.perf_counter()
    produce = producer.produce
    for k, v in zip(keys, values):
        while True:
            try:
                produce(topic, v, k)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300) != 0:
        raise RuntimeError("records not delivered")
    return len(values), time.perf_counter() - start


def _call(args):
    fn, rest = args
    return fn(*rest)


def in_processes(fn, arg_lists: list[tuple]) -> list:
    """Run fn(*args) for each args in its own fresh process, all at once; return the results."""
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(len(arg_lists)) as pool:
        return pool.map(_call, [(fn, a) for a in arg_lists])


# -- streaming queries --------------------------------------------------------------------------


@dataclass
class QueryRun:
    rows: int
    trigger_s: float  # summed trigger execution time of the batches that moved rows
    wall_s: float
    batches: int
    progress: list[dict] = field(default_factory=list)  # those batches' progress, in order

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.trigger_s if self.trigger_s else float("nan")


def run_query(query, expected_rows: int, *, timeout_s: float = 600) -> QueryRun:
    """Wait for an availableNow query to end, or a processing-time query to have moved every
    row (then stop it); time it from its own progress."""
    wall = time.perf_counter()
    deadline = time.monotonic() + timeout_s
    seen: dict[int, dict] = {}
    while True:
        for p in query.recentProgress:
            seen[p["batchId"]] = p
        done = sum(p["numInputRows"] for p in seen.values()) >= expected_rows
        if not query.isActive or done:
            break
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        if time.monotonic() > deadline:
            query.stop()
            raise TimeoutError(f"query moved {sum(p['numInputRows'] for p in seen.values())} "
                               f"of {expected_rows} rows in {timeout_s}s")
        time.sleep(0.2)
    wall = time.perf_counter() - wall
    if query.isActive:
        query.stop()
    else:
        query.awaitTermination()
    for p in query.recentProgress:
        seen[p["batchId"]] = p
    progress = sorted((p for p in seen.values() if p["numInputRows"] > 0),
                      key=lambda p: p["batchId"])
    rows = sum(p["numInputRows"] for p in progress)
    if rows != expected_rows:
        raise RuntimeError(f"query moved {rows} rows, expected {expected_rows}")
    trigger_s = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000
    return QueryRun(rows, trigger_s, wall, len(progress), progress)


def read_into_noop(spark, fmt: str, bootstrap: str, topic: str, rows: int) -> QueryRun:
    """A Kafka source (`fmt`: kafka-eos, or Spark's own kafka) read from the earliest offsets
    into `noop`, once through: the source's cost alone."""
    with tempfile.TemporaryDirectory() as ckpt:
        query = (
            spark.readStream.format(fmt)
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", ckpt)
            .trigger(availableNow=True)
            .start()
        )
        return run_query(query, rows)


def file_stream(spark, inp: ParquetInput, files_per_trigger: int):
    return (
        spark.readStream.schema(inp.schema_ddl)
        .option("maxFilesPerTrigger", files_per_trigger)
        .parquet(inp.directory)
    )


def start(writer, *, trigger_s: float | None):
    """availableNow when trigger_s is None, else a processing-time trigger."""
    if trigger_s is None:
        return writer.trigger(availableNow=True).start()
    return writer.trigger(processingTime=f"{trigger_s:g} seconds").start()


# -- the sinks' batch lines ---------------------------------------------------------------------


def metrics_file() -> str:
    """The sinks' per-batch JSON lines (two_phase_commit.METRICS_ENV). Must be set before Spark
    starts: its Python workers inherit the environment."""
    path = os.environ.get(METRICS_ENV)
    if not path:
        path = os.path.join(tempfile.mkdtemp(prefix="bench-metrics-"), "batches.jsonl")
        os.environ[METRICS_ENV] = path
    return path


def batch_lines(sink: str) -> list[dict]:
    path = metrics_file()
    if not os.path.exists(path):
        return []
    with open(path) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    return [line for line in lines if line["sink"] == sink]


def eo_vs_alo(eo_1s: list[dict], alo_1s: list[dict], rows_per_batch: int) -> dict:
    """The 1-second-trigger comparison and the commit phase's latency, for either sink."""
    eo1 = max(r["rows_per_s"] for r in eo_1s)
    alo1 = max(r["rows_per_s"] for r in alo_1s)
    commit_ms = [ms for r in eo_1s for ms in r["commit_ms"]]
    return {
        "trigger_1s": {
            "rows_per_batch": rows_per_batch,
            "batches": eo_1s[0]["batches"],
            "exactly_once_rows_per_s": round(eo1),
            "at_least_once_rows_per_s": round(alo1),
            "exactly_once_runs": [round(r["rows_per_s"]) for r in eo_1s],
            "at_least_once_runs": [round(r["rows_per_s"]) for r in alo_1s],
            "ratio_exactly_once_vs_at_least_once": ratio(eo1, alo1),
        },
        "commit_phase_ms": {
            "batches": len(commit_ms),
            "median": round(median(commit_ms), 1),
            "p95": round(pct(commit_ms, 0.95), 1),
        },
    }


# -- results files ---------------------------------------------------------------------------

_LONG_NUMBER_LIST = re.compile(r"\[\s*(-?[\d.eE+-]+(?:,\s*-?[\d.eE+-]+){20,})\s*\]")


def write_json(results: dict, path: str) -> None:
    """Indented, but a list of more than 20 numbers (per-batch series) on one line."""
    text = json.dumps(results, indent=2)
    text = _LONG_NUMBER_LIST.sub(
        lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)
    with open(path, "w") as f:
        f.write(text)


def existing_results(output_dir: str) -> tuple[str, dict]:
    """The results.json a section-only run merges into (its other sections are kept)."""
    os.makedirs(output_dir, exist_ok=True)
    json_path = os.path.join(output_dir, "results.json")
    if not os.path.exists(json_path):
        return json_path, {}
    with open(json_path) as f:
        return json_path, json.load(f)


def code_version() -> dict:
    """The commit measured, and whether sinks/ differed from it (a shared checkout)."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def git(*cmd: str) -> str:
        try:
            return subprocess.run(["git", *cmd], cwd=root, capture_output=True, text=True,
                                  timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {"commit": git("rev-parse", "HEAD"),
            "sinks_modified": bool(git("status", "--porcelain", "--", "sinks"))}
