"""`delta-eos` over a long run: do the commit time and a full read stay flat after 1,000 batches?

Drives N micro-batches into one table and reports, for each configuration:

* the driver's commit time per batch (from the sink's own batch lines, like delta_sink.py:
  decision record, one Delta commit carrying the txn action, done marker, log garbage
  collection), p50 of the first 10 batches against the last 10, and the ratio; the batch's
  planning time beside it (what Spark runs when it pickles the writer for a batch's tasks: the
  table's open() and schema check, `compactEvery`'s compaction when it is due, recovery, the
  throttled orphan sweep);
* after batch 10 and after the last: the time to load the table (`DeltaTable(path)`) and to
  read it whole (`to_pyarrow_table()`), `transaction_version(appId)`, what the orphan sweep
  reads to know the referenced files, and the number of data files (in the snapshot, and on
  disk), of files in `_delta_log` and of batches in the sink's own transaction log;
* the raw client in the same run (docs/design.md#performance-method): deltalake's own
  `write_deltalake` append of the same rows per batch (and `optimize.compact()` every N batches, and the same
  table properties, where the sink's configuration has them), first 10 against last 10: the
  two growth ratios side by side show whether the sink adds growth of its own;
* the same comparisons at the same time: the last 10 batches alternate with the first 10 of a
  fresh table (sink and raw client alike), and the fresh table is read when the long one is,
  since the load of a shared machine drifts over the minutes between batch 10 and batch 1,000.

The first and last 10 batches sit at different points of the log-replay cycle: a snapshot is
loaded from the last Delta checkpoint plus the JSON commits after it, and at the default
interval (100) batches 991-1000 replay 91-99 commits where batches 1-10 replay 1-10. So the
p50 of batches 901-910 (as far after a checkpoint as 1-10 are after the table's creation) and
the p50 of each 100-batch window (one whole cycle each) are reported beside them.

Configurations: compaction off; `compactEvery=100`; `delta.checkpointInterval=10` (table
property set when the sink creates the table); both; both with
`delta.enableExpiredLogCleanup=false`. An option the sink does not know (yet) is
reported as unavailable, not failed; a table property that did not reach the table is reported
with `"applied": false`.

The sink is driven through its template directly, in this process, with no Spark: the same code
path as Spark's (`DeltaEosDataSource(options).streamWriter(schema, False)` per batch, pickled as
Spark pickles it for the tasks, which runs open() and recovery; `write()` per task under a
stand-in TaskContext; `commit(messages, batchId)` on the driver; Spark's `commits/<batchId>`
file written after it, as Spark does). A Spark query costs a few hundred ms of scheduling per
micro-batch on 2 cores (docs/design.md#production-conditions: rate -> delta-eos 272 ms per 1 s
trigger; on a loaded machine here, 1 to 3 s), so 1,000 batches in each configuration would take
5 to 50 minutes each, while what grows with the table is the sink's driver work, which runs
here unchanged.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import shutil
import statistics
import tempfile
import time
import uuid

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake import DeltaTable, write_deltalake
from pyspark.sql.types import BinaryType, LongType, StructField, StructType

from benchmarks.common import batch_lines, make_records, metrics_file, ratio

SPARK_SCHEMA = StructType([
    StructField("key", BinaryType()), StructField("value", BinaryType()),
    StructField("offset", LongType()),
])
#: Spark's default spark.sql.streaming.minBatchesToRetain: how many commits/<n> files it keeps.
SPARK_COMMITS_RETAINED = 100
#: The configurations measured: name -> the sink's extra options.
CONFIGS = {
    "compaction_off": {},
    "compact_every_100": {"compactEvery": "100"},
    "checkpoint_interval_10": {"delta.checkpointInterval": "10"},
    "compact_every_100_checkpoint_interval_10": {
        "compactEvery": "100", "delta.checkpointInterval": "10"},
    # delta-rs' post-commit hook lists (and checks) every file in _delta_log to delete those
    # past delta.logRetentionDuration (30 days): a cost per commit that grows with the log.
    "compact_every_100_checkpoint_interval_10_no_log_cleanup": {
        "compactEvery": "100", "delta.checkpointInterval": "10",
        "delta.enableExpiredLogCleanup": "false"},
}
PROBE_REPEATS = 3


class StandInTaskContext:
    """What the template's write() asks of pyspark.TaskContext."""

    def __init__(self, batch: int, partition: int) -> None:
        self.batch, self.partition = batch, partition

    def getLocalProperty(self, key: str) -> str | None:
        return str(self.batch) if key == "streaming.sql.batchId" else None

    def partitionId(self) -> int:
        return self.partition

    def attemptNumber(self) -> int:
        return 0


# -- statistics ---------------------------------------------------------------------------------


def _p50(values: list[float]) -> float:
    return round(statistics.median(values), 2) if values else float("nan")


def _window(batches: int) -> int:
    """Batches per window: 100 for 1,000 batches (the default checkpoint interval, so each
    window holds one whole cycle of the log replay since the last checkpoint)."""
    return max(1, min(100, batches // 10))


def _first_last(per_batch: list[float], n: int = 10) -> dict:
    """p50 of the first n batches against the last n; beside them, the first n of the last
    window (batches 901-910 of 1,000: as many commits after a checkpoint as batches 1-10 are
    after the table's creation) and the p50 of each window (each holds a whole checkpoint cycle,
    so the first and the last window compare like with like)."""
    first, last = per_batch[:n], per_batch[-n:]
    w = _window(len(per_batch))
    start = len(per_batch) - w
    same_phase = per_batch[start:start + n]
    return {
        "first_10_p50": _p50(first),
        "last_10_p50": _p50(last),
        "ratio_last_vs_first": ratio(_p50(last), _p50(first)),
        "last_10_max": round(max(last), 2) if last else float("nan"),
        "same_phase_batches": [start + 1, start + len(same_phase)],
        "same_phase_p50": _p50(same_phase),
        "ratio_same_phase_vs_first": ratio(_p50(same_phase), _p50(first)),
        "window_batches": w,
        "window_p50": [_p50(per_batch[i:i + w]) for i in range(0, len(per_batch), w)],
        "all_p50": _p50(per_batch),
    }


def _timed_min(fn, repeats: int = PROBE_REPEATS) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        best = min(best, (time.perf_counter() - t) * 1000)
    return round(best, 2), out


# -- what a table looks like --------------------------------------------------------------------


def probe(path: str, *, app_id: str | None = None, sink=None, checkpoint: str | None = None) -> dict:
    """Load and full-read times (best of 3) and file counts of the table at `path`."""
    load_ms, table = _timed_min(lambda: DeltaTable(path))
    read_ms, data = _timed_min(lambda: DeltaTable(path).to_pyarrow_table())
    fs = pafs.LocalFileSystem()
    on_disk = [i for i in fs.get_file_info(pafs.FileSelector(path, recursive=True))
               if i.type == pafs.FileType.File and "/_delta_log/" not in i.path
               and i.base_name.endswith(".parquet")]
    log_files = [i for i in fs.get_file_info(pafs.FileSelector(f"{path}/_delta_log", recursive=True))
                 if i.type == pafs.FileType.File]
    out = {
        "version": table.version(),
        "rows": data.num_rows,
        "table_load_ms": load_ms,
        "full_read_ms": read_ms,
        "data_files_in_snapshot": len(table.file_uris()),
        "data_files_on_disk": len(on_disk),
        "delta_log_files": len(log_files),
        "delta_log_json_files": sum(i.base_name.endswith(".json") for i in log_files),
        "delta_log_checkpoints": sum(".checkpoint." in i.base_name for i in log_files),
        "delta_log_bytes": sum(i.size for i in log_files),
    }
    if app_id is not None:
        out["transaction_version_ms"], _ = _timed_min(lambda: DeltaTable(path).transaction_version(app_id))
    if sink is not None:
        # What the orphan sweep reads to know which files a readable version references (it
        # runs once per half orphanFileRetention per process, when there are candidates).
        sink_fs, root = sink._fs()
        try:
            from sinks.delta.referenced_files import referenced_files

            def sweep():
                return referenced_files(DeltaTable(path), sink_fs, root)
        except ImportError:  # before sinks/delta/referenced_files.py: every JSON commit since the orphans
            def sweep():
                return sink._referenced_files(sink_fs, root, 0)
        out["orphan_sweep_referenced_files_ms"], refs = _timed_min(sweep)
        out["orphan_sweep_referenced_paths"] = len(refs)
    if checkpoint is not None:  # the sink's own transaction log and Spark's commit log: bounded
        out["eos_sink_log_batches"] = sum(
            n.isdigit() for n in os.listdir(os.path.join(checkpoint, "eos-sink")))
        out["spark_commit_files"] = len(os.listdir(os.path.join(checkpoint, "commits")))
    return out


# -- the sink, driven through its template ------------------------------------------------------


def _spark_checkpoint(work: str) -> str:
    ckpt = tempfile.mkdtemp(prefix="ckpt-", dir=work)
    os.makedirs(os.path.join(ckpt, "commits"))
    with open(os.path.join(ckpt, "metadata"), "w") as f:
        json.dump({"id": str(uuid.uuid4())}, f)  # what Spark writes at a query's first start
    return ckpt


def _spark_commit(ckpt: str, batch_id: int) -> None:
    """What Spark does after the sink's commit returned: log the batch, drop old entries."""
    with open(os.path.join(ckpt, "commits", str(batch_id)), "w") as f:
        f.write('v1\n{"nextBatchWatermarkMs":0}\n')
    old = batch_id - SPARK_COMMITS_RETAINED
    if old >= 0:
        try:
            os.remove(os.path.join(ckpt, "commits", str(old)))
        except FileNotFoundError:
            pass


class SinkDriver:
    """One streaming query's driver and tasks, batch after batch, as Spark runs them."""

    def __init__(self, work: str, *, partitions: int, options: dict) -> None:
        from sinks.delta import DeltaEosDataSource

        self.source = DeltaEosDataSource
        self.path = tempfile.mkdtemp(prefix="table-", dir=work)
        self.ckpt = _spark_checkpoint(work)
        self.raw = {"path": self.path, "checkpointLocation": self.ckpt, **options}
        self.partitions = partitions
        self.batch_id = 0
        self.plan_ms: list[float] = []
        self.task_ms: list[float] = []
        self.commit_wall_ms: list[float] = []
        self.sink = self.source(dict(self.raw)).streamWriter(SPARK_SCHEMA, False).sink

    def step(self, rows: pa.Table) -> None:
        import pyspark

        batch_id = self.batch_id
        writer = self.source(dict(self.raw)).streamWriter(SPARK_SCHEMA, False)
        self.sink = writer.sink
        t0 = time.perf_counter()
        # What Spark runs at the batch's planning when it pickles the writer for the tasks:
        # open() (schema check, compactEvery's compaction when due), recovery, orphan sweep.
        task_writer = pickle.loads(pickle.dumps(writer))
        t1 = time.perf_counter()
        messages = []
        size = -(-rows.num_rows // self.partitions)
        saved_get = pyspark.TaskContext.__dict__["get"]
        try:
            for p in range(self.partitions):
                ctx = StandInTaskContext(batch_id, p)
                pyspark.TaskContext.get = classmethod(lambda cls, ctx=ctx: ctx)
                messages.append(task_writer.write(iter(rows.slice(p * size, size).to_batches())))
        finally:
            pyspark.TaskContext.get = saved_get
        t2 = time.perf_counter()
        writer.commit(messages, batch_id)  # the driver: decision, Delta commit, done, GC
        t3 = time.perf_counter()
        _spark_commit(self.ckpt, batch_id)
        self.plan_ms.append((t1 - t0) * 1000)
        self.task_ms.append((t2 - t1) * 1000)
        self.commit_wall_ms.append((t3 - t2) * 1000)
        self.batch_id += 1

    def probe(self) -> dict:
        return probe(self.path, app_id=self.sink.options.app_id, sink=self.sink,
                     checkpoint=self.ckpt)

    def commit_ms(self) -> tuple[list[float], int]:
        """The commit time of each batch, from the sink's batch lines; and the rows."""
        lines = {line["batch"]: line for line in batch_lines(self.sink.describe())}
        return [lines[b]["commit_ms"] for b in sorted(lines)], sum(
            line["rows"] for line in lines.values())

    def table_properties(self, options: dict) -> dict:
        config = DeltaTable(self.path).metadata().configuration
        return {
            k: {"wanted": v, "in_table": config.get(k), "applied": config.get(k) == v}
            for k, v in options.items() if k.startswith("delta.")
        }

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        shutil.rmtree(self.ckpt, ignore_errors=True)


class RawDriver:
    """deltalake's own append of the same rows per batch; the same compaction cadence and
    table properties as the sink's configuration."""

    def __init__(self, work: str, *, options: dict) -> None:
        self.path = tempfile.mkdtemp(prefix="raw-", dir=work)
        self.every = int(options.get("compactEvery", 0) or 0)
        self.configuration = {k: v for k, v in options.items() if k.startswith("delta.")} or None
        self.batch_id = 0
        self.append_ms: list[float] = []

    def step(self, rows: pa.Table) -> None:
        t = time.perf_counter()
        write_deltalake(self.path, rows, mode="append",
                        configuration=self.configuration if self.batch_id == 0 else None)
        if self.every and (self.batch_id + 1) % self.every == 0:
            DeltaTable(self.path).optimize.compact()
        self.append_ms.append((time.perf_counter() - t) * 1000)
        self.batch_id += 1

    def probe(self) -> dict:
        return probe(self.path)

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _long_and_fresh(long, fresh, data: list[pa.Table], probe_after: int) -> dict:
    """All but the last `probe_after` batches into `long`; then its last ones alternating
    with the first ones of a `fresh` table, and both probed, so that the first and the last
    batches are also compared at the same time (the machine's load drifts over minutes)."""
    n = len(data)
    probes = {}
    for b in range(n - probe_after):
        long.step(data[b])
        if b + 1 == probe_after:
            probes[f"after_batch_{probe_after}"] = long.probe()
    for i in range(probe_after):
        long.step(data[n - probe_after + i])
        fresh.step(data[i])
    probes["fresh_table_after_batch_10"] = fresh.probe()
    probes[f"after_batch_{n}"] = long.probe()
    return probes


def run_sink(work: str, data: list[pa.Table], *, partitions: int, options: dict,
             probe_after: int = 10) -> dict:
    try:
        long = SinkDriver(work, partitions=partitions, options=options)
    except Exception as e:  # an option the sink does not know (yet)
        return {"available": False, "options": options, "error": f"{type(e).__name__}: {e}"}
    fresh = SinkDriver(work, partitions=partitions, options=options)
    try:
        probes = _long_and_fresh(long, fresh, data, probe_after)
        commit_ms, rows = long.commit_ms()
        fresh_commit_ms, _ = fresh.commit_ms()
        properties = long.table_properties(options)
    finally:
        long.close()
        fresh.close()
    k = probe_after
    return {
        "available": True,
        "options": options,
        "table_properties": properties,
        "batches": len(commit_ms),
        "rows": rows,
        "commit_ms": _first_last(commit_ms),
        "commit_ms_per_batch": commit_ms,
        "commit_wall_ms": _first_last(long.commit_wall_ms),
        "planning_ms": _first_last(long.plan_ms),
        "planning_ms_per_batch": [round(x, 2) for x in long.plan_ms],
        "tasks_ms": _first_last(long.task_ms),
        "interleaved": _interleaved(commit_ms[-k:], fresh_commit_ms, long.plan_ms[-k:], fresh.plan_ms),
        **probes,
    }


def _interleaved(last: list[float], fresh: list[float], last_plan=None, fresh_plan=None) -> dict:
    out = {
        "fresh_table_first_10_p50": _p50(fresh),
        "long_table_last_10_p50": _p50(last),
        "ratio_last_vs_first": ratio(_p50(last), _p50(fresh)),
        "fresh_table_per_batch": [round(x, 2) for x in fresh],
    }
    if last_plan is not None:
        out["planning_fresh_table_first_10_p50"] = _p50(fresh_plan)
        out["planning_long_table_last_10_p50"] = _p50(last_plan)
        out["planning_ratio_last_vs_first"] = ratio(_p50(last_plan), _p50(fresh_plan))
    return out


def run_raw(work: str, data: list[pa.Table], *, options: dict, probe_after: int = 10) -> dict:
    long, fresh = RawDriver(work, options=options), RawDriver(work, options=options)
    try:
        probes = _long_and_fresh(long, fresh, data, probe_after)
    finally:
        long.close()
        fresh.close()
    return {
        "batches": len(long.append_ms),
        "append_ms": _first_last(long.append_ms),
        "append_ms_per_batch": [round(x, 2) for x in long.append_ms],
        "interleaved": _interleaved(long.append_ms[-probe_after:], fresh.append_ms),
        **probes,
    }


# -- the measurement ----------------------------------------------------------------------------


def quiet_sink_log():
    """1,000 batch log lines per configuration on stderr help nobody: warnings still show."""
    log = logging.getLogger("kafka_eos.sink")
    saved = (list(log.handlers), log.level, log.propagate)
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        log.addHandler(handler)
    log.setLevel(logging.WARNING)
    log.propagate = False
    return log, saved


def measure(work: str, *, batches: int = 1000, rows_per_batch: int = 1000, value_bytes: int = 100,
            partitions: int = 2, configs: dict | None = None, log=print) -> dict:
    probe_after = 10
    if batches < 2 * probe_after:
        raise ValueError(f"the long run needs at least {2 * probe_after} batches, not {batches}")
    metrics_file()
    data = [make_records(rows_per_batch, value_bytes, offset=b * rows_per_batch) for b in range(batches)]
    configs = CONFIGS if configs is None else configs
    sink_log, saved = quiet_sink_log()
    out: dict = {
        "mode": "direct: the sink's template driven in one process, no Spark",
        "batches": batches,
        "rows_per_batch": rows_per_batch,
        "value_bytes": value_bytes,
        "partitions": partitions,
        "configs": {},
    }
    try:
        for name, options in configs.items():
            started = time.time()
            sink = run_sink(work, data, partitions=partitions, options=options, probe_after=probe_after)
            if not sink["available"]:
                log(f"  {name}: not available ({sink['error']})")
                out["configs"][name] = {"sink": sink}
                continue
            raw = run_raw(work, data, options=options, probe_after=probe_after)
            last = f"after_batch_{batches}"
            first = f"after_batch_{probe_after}"
            fresh = "fresh_table_after_batch_10"
            res = {
                "sink": sink,
                "write_deltalake": raw,
                "growth": {
                    "sink_commit_last_vs_first": sink["commit_ms"]["ratio_last_vs_first"],
                    "write_deltalake_append_last_vs_first": raw["append_ms"]["ratio_last_vs_first"],
                    "sink_vs_write_deltalake": ratio(sink["commit_ms"]["ratio_last_vs_first"],
                                                     raw["append_ms"]["ratio_last_vs_first"]),
                    "sink_full_read_last_vs_first": ratio(sink[last]["full_read_ms"], sink[first]["full_read_ms"]),
                    "sink_table_load_last_vs_first": ratio(sink[last]["table_load_ms"], sink[first]["table_load_ms"]),
                    "write_deltalake_full_read_last_vs_first": ratio(raw[last]["full_read_ms"], raw[first]["full_read_ms"]),
                    "write_deltalake_table_load_last_vs_first": ratio(raw[last]["table_load_ms"], raw[first]["table_load_ms"]),
                    # the last batches alternating with a fresh table's first ones
                    "sink_commit_interleaved_last_vs_first": sink["interleaved"]["ratio_last_vs_first"],
                    "write_deltalake_append_interleaved_last_vs_first": raw["interleaved"]["ratio_last_vs_first"],
                    "sink_full_read_vs_fresh_table": ratio(sink[last]["full_read_ms"], sink[fresh]["full_read_ms"]),
                    "write_deltalake_full_read_vs_fresh_table": ratio(raw[last]["full_read_ms"], raw[fresh]["full_read_ms"]),
                },
                "duration_s": round(time.time() - started, 1),
            }
            out["configs"][name] = res
            log(f"  {name}: commit p50 {sink['commit_ms']['first_10_p50']} -> "
                f"{sink['commit_ms']['last_10_p50']} ms, write_deltalake "
                f"{raw['append_ms']['first_10_p50']} -> {raw['append_ms']['last_10_p50']} ms, "
                f"read {sink[first]['full_read_ms']} -> {sink[last]['full_read_ms']} ms "
                f"({res['duration_s']} s)")
    finally:
        sink_log.handlers[:], level, sink_log.propagate = saved
        sink_log.setLevel(level)
    return out
