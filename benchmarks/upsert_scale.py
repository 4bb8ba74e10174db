"""`delta-eos` upsert mode at scale: one micro-batch of 1,000,000 changes on 100,000 keys into
a table of 10,000,000 rows, against an append of the same rows.

    python -m benchmarks --only upsert-scale [--upsert-table-rows 10000000]
        [--upsert-changes 1000000] [--upsert-keys 100000]

Not part of the default run (it writes a 10-million-row table: a few minutes on 2 cores); its
section of DIR/results.json is merged into an existing one, the others kept.

What is measured, each step in a fresh process of its own (so each peak RSS is that step's):

* **upsert**: the sink's tasks (2, as Spark's `local[2]`) stage the batch's changes
  (`write()` of the template under a stand-in TaskContext); then, in another process, the
  driver's `commit(messages, batchId)`: decision record, the fold of the staged changes (per
  key the winner), tombstones, ONE delta-rs MERGE into the table carrying the batch's txn
  action. Time of each, rows/s (changes per second of tasks + commit), and the commit's peak
  RSS (VmHWM, reset with /proc/self/clear_refs just before the call) and its growth over the
  RSS before it;
* **append**: the same rows (without the `op` column the upsert's `exceptColumns` drops) by
  the append mode's tasks and commit, into a copy of the same table;
* **write_deltalake append** of the same rows (the raw client, as the other Delta figures);
* **delta-rs MERGE alone**: the same MERGE statement the sink runs (streamed_exec=False, as the
  sink; and with delta-rs's default streamed_exec=True), on the fold's winners
  (folded with pyarrow beforehand, not timed), into a copy of the same table: what the sink
  adds to the MERGE itself;
* the upsert again with its keys among the table's most recent tenth of ids (recent rows
  change most): the MERGE then reads only the files whose key range can hold them;
* the upsert commit again on a table a tenth of the size, with a batch of the same size:
  whether the commit's memory follows the table (not bounded) or the batch (bounded).

The sink is driven through its template directly, with no Spark, as benchmarks/delta_long_run.py
does: the tasks' and the driver's code are the ones Spark runs.

The changes: `keys` keys, nine in ten of them rows of the table (picked at random over the
whole table, so every file of the table holds some: the worst case for a copy-on-write MERGE),
the rest new; `changes / keys` changes per key with distinct sequences above the table's, in
random order; one change in twenty a delete (`op = 'd'`).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import import_module

import pyarrow as pa

#: Rows per Arrow batch the table and the tasks' input are generated in.
CHUNK_ROWS = 1_000_000
TASKS = 2
DELETE_EVERY = 20
#: The stream's columns, as Spark hands them to the sink (the append drops `op`).
COLUMNS = [("id", "long"), ("seq", "long"), ("name", "string"), ("amount", "double"),
           ("op", "string")]
UPSERT_OPTIONS = {"mergeKeys": "id", "sequenceBy": "seq", "applyAsDeletes": "op = 'd'",
                  "exceptColumns": "op"}


# -- data ---------------------------------------------------------------------------------------


def table_chunks(rows: int, chunk: int = CHUNK_ROWS):
    """The table's rows, `chunk` at a time: id 0..rows-1, sequence 0."""
    import numpy as np
    import pyarrow.compute as pc

    schema = pa.schema([("id", pa.int64()), ("seq", pa.int64()), ("name", pa.string()),
                        ("amount", pa.float64())])
    for start in range(0, rows, chunk):
        ids = pa.array(np.arange(start, min(rows, start + chunk), dtype=np.int64))
        names = pc.binary_join_element_wise("user-", pc.cast(ids, pa.string()), "")
        yield pa.record_batch([ids, pa.array(np.zeros(len(ids), np.int64)), names,
                               pc.divide(pc.cast(ids, pa.float64()), 100.0)], schema=schema)


def write_table(path: str, rows: int) -> None:
    """The table as a table loaded over time in key order has it: one append (one file) per
    million rows, each file holding one range of ids."""
    from deltalake import write_deltalake

    for chunk in table_chunks(rows):
        write_deltalake(path, chunk, mode="append")


def changes(table_rows: int, n_changes: int, keys: int, seed: int = 23, *,
            recent: bool = False) -> pa.Table:
    """`n_changes` changes on `keys` keys (see the module docstring), in random order.
    `recent`: the existing keys are drawn from the table's last tenth of ids (recent rows
    change most), not from all of it."""
    import numpy as np

    rng = np.random.default_rng(seed)
    existing = keys - keys // 10
    low = table_rows - table_rows // 10 if recent else 0
    key_ids = np.concatenate([low + rng.choice(table_rows - low, existing, replace=False),
                              np.arange(table_rows, table_rows + keys - existing)])
    per_key = -(-n_changes // keys)
    ids = np.repeat(key_ids, per_key)[:n_changes]
    seqs = (np.tile(np.arange(1, per_key + 1, dtype=np.int64), keys)[:n_changes]
            + rng.integers(0, 3, n_changes) * per_key)  # distinct per key, above the table's 0
    order = rng.permutation(n_changes)
    ids, seqs = ids[order], seqs[order]
    ops = np.where(rng.integers(0, DELETE_EVERY, n_changes) == 0, "d", "u")
    import pyarrow.compute as pc

    id_arr = pa.array(ids, pa.int64())
    return pa.table({
        "id": id_arr,
        "seq": pa.array(seqs, pa.int64()),
        "name": pc.binary_join_element_wise("changed-", pc.cast(id_arr, pa.string()), ""),
        "amount": pa.array(rng.random(n_changes) * 500),
        "op": pa.array(ops, pa.string()),
    })


# -- the steps, each in a fresh process ---------------------------------------------------------


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


class _Peak:
    """Peak RSS over a block: VmHWM reset just before it (Linux's clear_refs, 5)."""

    def __enter__(self) -> _Peak:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.reset = True
        except OSError:  # then VmHWM is the process's whole life: said in the result
            self.reset = False
        self.before_kb = _status_kb("VmRSS")
        self.started = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self.started
        self.peak_kb = _status_kb("VmHWM")

    def result(self) -> dict:
        return {"seconds": round(self.seconds, 3),
                "rss_before_mb": round(self.before_kb / 1024, 1),
                "peak_rss_mb": round(self.peak_kb / 1024, 1),
                "peak_growth_mb": round((self.peak_kb - self.before_kb) / 1024, 1),
                "peak_reset": self.reset}


def _writer(table: str, checkpoint: str, options: dict):
    from pyspark.sql.types import StructType

    from sinks.delta import DeltaEosDataSource

    columns = COLUMNS if "mergeKeys" in options else COLUMNS[:-1]
    schema = StructType.fromJson({"type": "struct", "fields": [
        {"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in columns]})
    raw = {"path": table, "checkpointLocation": checkpoint, **options}
    return DeltaEosDataSource(raw).streamWriter(schema, False)


def _step_tasks(spec: dict) -> dict:
    """The batch's tasks: planning (open, recovery, as Spark pickles the writer), then each
    task's write() of its share of the rows; the commit messages go to spec['messages']."""
    import pyarrow.parquet as pq
    import pyspark

    from benchmarks.delta_long_run import StandInTaskContext

    rows = pq.read_table(spec["input"])
    if "mergeKeys" not in spec["options"]:
        rows = rows.drop_columns(["op"])
    writer = _writer(spec["table"], spec["checkpoint"], spec["options"])
    t0 = time.perf_counter()
    task_writer = pickle.loads(pickle.dumps(writer))
    t1 = time.perf_counter()
    size = -(-rows.num_rows // TASKS)
    messages = []
    saved_get = pyspark.TaskContext.__dict__["get"]
    with _Peak() as peak:
        try:
            for p in range(TASKS):
                ctx = StandInTaskContext(spec["batch"], p)
                pyspark.TaskContext.get = classmethod(lambda cls, ctx=ctx: ctx)
                messages.append(task_writer.write(iter(
                    rows.slice(p * size, size).to_batches(max_chunksize=spec["task_batch_rows"]))))
        finally:
            pyspark.TaskContext.get = saved_get
    with open(spec["messages"], "wb") as f:
        pickle.dump(messages, f)
    return {"planning_s": round(t1 - t0, 2), "tasks": peak.result()}


class _Phases:
    """Where the commit's time and memory go: the sink's own steps (the fold of the staged
    changes, the MERGE, ...) timed by wrapping them on the sink object, and the RSS sampled
    every 20 ms by a thread; per phase its seconds and the highest RSS sampled in it."""

    def __init__(self, sink, names: list[str]) -> None:
        import threading

        self.spans: list[tuple[str, float, float]] = []
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        for name in names:
            if hasattr(sink, name):
                setattr(sink, name, self._wrap(name, getattr(sink, name)))

    def _wrap(self, name: str, fn):
        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spans.append((name, t, time.perf_counter()))
        return timed

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.samples.append((time.perf_counter(), _status_kb("VmRSS")))

    def __enter__(self) -> _Phases:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def result(self) -> dict:
        out = {}
        for name, t0, t1 in self.spans:
            inside = [kb for t, kb in self.samples if t0 <= t <= t1]
            out[name] = {"seconds": round(t1 - t0, 3),
                         "max_sampled_rss_mb": round(max(inside) / 1024, 1) if inside else None}
        return out


def _step_commit(spec: dict) -> dict:
    """The driver's commit of the batch the tasks step prepared."""
    with open(spec["messages"], "rb") as f:
        messages = pickle.load(f)
    writer = _writer(spec["table"], spec["checkpoint"], spec["options"])
    import_module("deltalake")  # loaded before the clock starts, as in a running query

    phases = _Phases(writer.sink, ["commit", "_fold_staged", "_merge"])
    with _Peak() as peak, phases:
        writer.commit(messages, spec["batch"])
    return {"commit": peak.result() | {"phases": phases.result()}}


def _step_write_deltalake(spec: dict) -> dict:
    import pyarrow.parquet as pq
    from deltalake import write_deltalake

    rows = pq.read_table(spec["input"]).drop_columns(["op"])
    with _Peak() as peak:
        write_deltalake(spec["table"], rows, mode="append")
    return {"append": peak.result()}


def _step_merge(spec: dict) -> dict:
    """The sink's MERGE statement alone, on the fold's winners (folded before the clock)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    from sinks.delta.fold import DELETE_COLUMN, latest_per_key
    from sinks.delta.tombstones import quote as q

    rows = pq.read_table(spec["input"])
    staged = rows.drop_columns(["op"]).append_column(
        DELETE_COLUMN, pc.equal(rows.column("op"), "d"))
    winners = latest_per_key(staged, ["id"], "seq")
    del rows, staged
    table = DeltaTable(spec["table"])
    columns = {q(c): f"source.{q(c)}" for c in ("id", "seq", "name", "amount")}
    newer = f"source.{q('seq')} >= target.{q('seq')}"
    delete = f"source.{q(DELETE_COLUMN)}"
    with _Peak() as peak:
        metrics = (
            table.merge(winners, f"target.{q('id')} = source.{q('id')}", source_alias="source",
                        target_alias="target", streamed_exec=spec["streamed"])
            .when_matched_delete(f"{delete} AND {newer}")
            .when_matched_update(columns, f"NOT {delete} AND {newer}")
            .when_not_matched_insert(columns, f"NOT {delete}")
            .execute()
        )
    return {"merge": peak.result(), "winners": winners.num_rows, "streamed_exec": spec["streamed"],
            "metrics": {k: v for k, v in metrics.items() if k.startswith("num_")}}


STEPS = {"tasks": _step_tasks, "commit": _step_commit, "write_deltalake": _step_write_deltalake,
         "merge": _step_merge}


def run_step(step: str, **spec) -> dict:
    """One step in a fresh Python process (its peak RSS is its own); its JSON result."""
    proc = subprocess.run([sys.executable, "-m", "benchmarks.upsert_scale", step,
                           json.dumps(spec)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"upsert-scale step {step} failed (exit status {proc.returncode}): "
                           f"{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- the measurement ----------------------------------------------------------------------------


def _table_facts(path: str) -> dict:
    from deltalake import DeltaTable

    t = DeltaTable(path)
    files = t.get_add_actions(flatten=True)
    size = sum(files.column("size_bytes").to_pylist())
    return {"version": t.version(), "rows": t.to_pyarrow_dataset().count_rows(),
            "files": files.num_rows, "mb": round(size / 2**20, 1)}


def _copy(base: str, work: str, name: str) -> str:
    target = os.path.join(work, name)
    shutil.copytree(base, target)
    return target


def _sink_run(kind: str, base: str, work: str, inp: str, options: dict,
              task_batch_rows: int) -> dict:
    """Tasks then commit of one batch (batch 0 of a new checkpoint) into a copy of `base`."""
    table = _copy(base, work, f"{kind}-table")
    checkpoint = tempfile.mkdtemp(prefix=f"{kind}-ckpt-", dir=work)
    with open(os.path.join(checkpoint, "metadata"), "w") as f:
        json.dump({"id": f"upsert-scale-{kind}"}, f)  # what Spark writes at a first start
    os.makedirs(os.path.join(checkpoint, "commits"))
    spec = {"table": table, "checkpoint": checkpoint, "options": options, "input": inp,
            "batch": 0, "messages": os.path.join(work, f"{kind}-messages.pickle"),
            "task_batch_rows": task_batch_rows}
    out = run_step("tasks", **spec)
    out.update(run_step("commit", **spec))
    out["table_after"] = _table_facts(table)
    shutil.rmtree(table, ignore_errors=True)
    shutil.rmtree(checkpoint, ignore_errors=True)
    os.remove(spec["messages"])
    return out


def _rows_per_s(rows: int, *seconds: float) -> int:
    total = sum(seconds)
    return round(rows / total) if total else 0


def measure(work: str, *, table_rows: int = 10_000_000, n_changes: int = 1_000_000,
            keys: int = 100_000, task_batch_rows: int = 10_000, small_table: bool = True,
            log=print) -> dict:
    from benchmarks.common import metrics_file

    metrics_file()  # the sink's batch lines go to a file, not to this run's output
    started = time.time()
    out: dict = {
        "mode": "direct: the sink's template driven without Spark, each step in a fresh process",
        "table_rows": table_rows, "changes": n_changes, "keys": keys, "tasks": TASKS,
        "task_arrow_batch_rows": task_batch_rows,
    }
    sizes = [table_rows] + ([table_rows // 10] if small_table else [])
    for rows in sizes:
        label = "table" if rows == table_rows else "tenth_table"
        out[label] = _measure_table(work, rows, n_changes, keys, task_batch_rows,
                                    full=label == "table", log=log)
    out["summary"] = _summary(out)
    out["duration_s"] = round(time.time() - started)
    return out


def _changes_file(work: str, rows: int, n_changes: int, keys: int, recent: bool = False
                  ) -> tuple[str, dict]:
    import pyarrow.parquet as pq

    data = changes(rows, n_changes, keys, recent=recent)
    inp = os.path.join(work, f"changes-{rows}{'-recent' if recent else ''}.parquet")
    pq.write_table(data, inp)
    return inp, _independent_fold_counts(data, rows)


def _measure_table(work: str, rows: int, n_changes: int, keys: int, task_batch_rows: int, *,
                   full: bool, log) -> dict:
    """One table size: the upsert (and, `full`, the append, the raw clients, and the upsert
    of changes on recent keys)."""
    inp, expected = _changes_file(work, rows, n_changes, keys)
    base = os.path.join(work, f"base-{rows}")
    log(f"upsert-scale: writing a table of {rows:,} rows")
    t = time.perf_counter()
    write_table(base, rows)
    section: dict = {"rows": rows, "write_s": round(time.perf_counter() - t, 1),
                     "base": _table_facts(base), "expected": expected}
    log(f"  {section['base']} in {section['write_s']} s")
    log(f"upsert-scale: upsert of {n_changes:,} changes on {keys:,} keys")
    up = _sink_run("upsert", base, work, inp, UPSERT_OPTIONS, task_batch_rows)
    up["rows_per_s"] = _rows_per_s(n_changes, up["tasks"]["seconds"], up["commit"]["seconds"])
    section["upsert"] = up
    log(f"  {json.dumps(up)}")
    # The sink's result against the fold counted independently: a fast wrong MERGE is no figure.
    assert up["table_after"]["rows"] == expected["rows_after"], (
        f"the upserted table holds {up['table_after']['rows']} rows; the fold of the changes "
        f"gives {expected['rows_after']}")
    if full:
        log(f"upsert-scale: append of the same {n_changes:,} rows")
        ap = _sink_run("append", base, work, inp, {}, task_batch_rows)
        ap["rows_per_s"] = _rows_per_s(n_changes, ap["tasks"]["seconds"], ap["commit"]["seconds"])
        assert ap["table_after"]["rows"] == rows + n_changes
        section["append"] = ap
        log(f"  {json.dumps(ap)}")
        raw = _copy(base, work, "raw-table")
        section["write_deltalake_append"] = run_step("write_deltalake", table=raw, input=inp)
        shutil.rmtree(raw, ignore_errors=True)
        log(f"  write_deltalake: {json.dumps(section['write_deltalake_append'])}")
        for streamed, name in ((False, "delta_rs_merge_alone"),
                               (True, "delta_rs_merge_alone_streamed_exec")):
            raw = _copy(base, work, "merge-table")
            section[name] = run_step("merge", table=raw, input=inp, streamed=streamed)
            section[name]["table_after"] = _table_facts(raw)
            shutil.rmtree(raw, ignore_errors=True)
            log(f"  {name}: {json.dumps(section[name])}")
        recent_inp, recent_expected = _changes_file(work, rows, n_changes, keys, recent=True)
        log(f"upsert-scale: upsert of {n_changes:,} changes on {keys:,} recent keys (the "
            "table's last tenth, and new ones)")
        rec = _sink_run("upsert", base, work, recent_inp, UPSERT_OPTIONS, task_batch_rows)
        rec["rows_per_s"] = _rows_per_s(n_changes, rec["tasks"]["seconds"],
                                        rec["commit"]["seconds"])
        rec["expected"] = recent_expected
        assert rec["table_after"]["rows"] == recent_expected["rows_after"]
        section["upsert_recent_keys"] = rec
        log(f"  {json.dumps(rec)}")
        for streamed, name in ((False, "delta_rs_merge_alone_recent_keys"),
                               (True, "delta_rs_merge_alone_recent_keys_streamed_exec")):
            raw = _copy(base, work, "merge-table")
            section[name] = run_step("merge", table=raw, input=recent_inp, streamed=streamed)
            section[name]["table_after"] = _table_facts(raw)
            assert section[name]["table_after"]["rows"] == recent_expected["rows_after"]
            shutil.rmtree(raw, ignore_errors=True)
            log(f"  {name}: {json.dumps(section[name])}")
        os.remove(recent_inp)
    shutil.rmtree(base, ignore_errors=True)
    os.remove(inp)
    return section


def _independent_fold_counts(data: pa.Table, table_rows: int) -> dict:
    """What the table must hold after the batch, counted here with plain Python over the
    changes (not with the sink's fold): the benchmark checks the sink got it right."""
    best: dict[int, tuple[int, bool]] = {}
    for k, s, op in zip(data.column("id").to_pylist(), data.column("seq").to_pylist(),
                        data.column("op").to_pylist()):
        cur = best.get(k)
        cand = (s, op == "d")
        if cur is None or cand > cur:
            best[k] = cand
    deleted_existing = sum(1 for k, (_, d) in best.items() if d and k < table_rows)
    inserted = sum(1 for k, (_, d) in best.items() if not d and k >= table_rows)
    updated = sum(1 for k, (_, d) in best.items() if not d and k < table_rows)
    return {"keys": len(best), "updated": updated, "deleted": deleted_existing,
            "inserted": inserted, "rows_after": table_rows - deleted_existing + inserted}


def _summary(out: dict) -> dict:
    t = out["table"]
    up, ap = t["upsert"], t["append"]
    s = {
        "upsert_rows_per_s": up["rows_per_s"],
        "upsert_tasks_s": up["tasks"]["seconds"],
        "upsert_commit_s": up["commit"]["seconds"],
        "upsert_commit_peak_rss_mb": up["commit"]["peak_rss_mb"],
        "upsert_commit_peak_growth_mb": up["commit"]["peak_growth_mb"],
        "append_rows_per_s": ap["rows_per_s"],
        "append_tasks_s": ap["tasks"]["seconds"],
        "append_commit_s": ap["commit"]["seconds"],
        "append_commit_peak_rss_mb": ap["commit"]["peak_rss_mb"],
        "write_deltalake_append_s": t["write_deltalake_append"]["append"]["seconds"],
        "delta_rs_merge_alone_s": t["delta_rs_merge_alone"]["merge"]["seconds"],
        "delta_rs_merge_alone_peak_growth_mb": t["delta_rs_merge_alone"]["merge"]["peak_growth_mb"],
        "delta_rs_merge_alone_streamed_exec_s":
            t["delta_rs_merge_alone_streamed_exec"]["merge"]["seconds"],
        "delta_rs_merge_alone_streamed_exec_peak_growth_mb":
            t["delta_rs_merge_alone_streamed_exec"]["merge"]["peak_growth_mb"],
        "upsert_recent_keys_commit_s": t["upsert_recent_keys"]["commit"]["seconds"],
        "delta_rs_merge_alone_recent_keys_s":
            t["delta_rs_merge_alone_recent_keys"]["merge"]["seconds"],
        "delta_rs_merge_alone_recent_keys_streamed_exec_s":
            t["delta_rs_merge_alone_recent_keys_streamed_exec"]["merge"]["seconds"],
        "upsert_recent_keys_commit_peak_growth_mb":
            t["upsert_recent_keys"]["commit"]["peak_growth_mb"],
        "ratio_upsert_vs_append_rows_per_s": round(up["rows_per_s"] / ap["rows_per_s"], 3)
        if ap["rows_per_s"] else None,
    }
    small = out.get("tenth_table")
    if small:
        s["tenth_table_upsert_commit_s"] = small["upsert"]["commit"]["seconds"]
        s["tenth_table_upsert_commit_peak_growth_mb"] = small["upsert"]["commit"]["peak_growth_mb"]
        g = small["upsert"]["commit"]["peak_growth_mb"]
        s["commit_peak_growth_table_vs_tenth"] = round(
            up["commit"]["peak_growth_mb"] / g, 2) if g else None
    return s


def table(out: dict) -> str:
    """The figures as a small text table."""
    s = out["summary"]
    lines = [
        f"upsert-scale: {out['changes']:,} changes on {out['keys']:,} keys into "
        f"{out['table_rows']:,} rows ({out['tasks']} tasks)",
        f"  {'':34}{'seconds':>10}{'peak RSS MB':>14}{'growth MB':>12}",
    ]

    def row(label: str, r: dict) -> None:
        lines.append(f"  {label:<34}{r['seconds']:>10.2f}{r['peak_rss_mb']:>14.1f}"
                     f"{r['peak_growth_mb']:>12.1f}")

    t = out["table"]
    row("upsert: tasks (stage)", t["upsert"]["tasks"])
    row("upsert: driver commit (MERGE)", t["upsert"]["commit"])
    row("append: tasks (write)", t["append"]["tasks"])
    row("append: driver commit", t["append"]["commit"])
    row("write_deltalake append", t["write_deltalake_append"]["append"])
    row("delta-rs MERGE alone", t["delta_rs_merge_alone"]["merge"])
    row("  the same, streamed_exec=True", t["delta_rs_merge_alone_streamed_exec"]["merge"])
    row("upsert commit, recent keys", t["upsert_recent_keys"]["commit"])
    row("  delta-rs MERGE alone, recent keys", t["delta_rs_merge_alone_recent_keys"]["merge"])
    row("    the same, streamed_exec=True",
        t["delta_rs_merge_alone_recent_keys_streamed_exec"]["merge"])
    if "tenth_table" in out:
        row(f"upsert commit, {out['tenth_table']['rows']:,}-row table",
            out["tenth_table"]["upsert"]["commit"])
    lines.append(f"  rows/s (tasks + commit): upsert {s['upsert_rows_per_s']:,}, append "
                 f"{s['append_rows_per_s']:,} (ratio {s['ratio_upsert_vs_append_rows_per_s']})")
    return "\n".join(lines)


def tables(sizes: list[int], *, n_changes: int = 1_000_000, keys: int = 100_000,
           repeats: int = 2, log=print) -> dict:
    """The upsert commit alone (same batch size) into tables of each size, `repeats` times
    each, alternating: does its peak memory follow the table? (`python -m
    benchmarks.upsert_scale tables 1000000,10000000,20000000`)"""
    from benchmarks.common import load_average, metrics_file

    metrics_file()
    out: dict = {"changes": n_changes, "keys": keys, "load_average": {"start": load_average()},
                 "tables": {}}
    work = tempfile.mkdtemp(prefix="upsert-scale-tables-")
    try:
        for r in range(repeats):
            for rows in sizes:
                section = _measure_table(work, rows, n_changes, keys, 10_000, full=False, log=log)
                c = section["upsert"]["commit"]
                out["tables"].setdefault(str(rows), []).append(
                    {"commit_s": c["seconds"], "peak_growth_mb": c["peak_growth_mb"],
                     "peak_rss_mb": c["peak_rss_mb"], "phases": c["phases"]})
                log(f"  run {r + 1}, {rows:,} rows: {out['tables'][str(rows)][-1]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out["load_average"]["end"] = load_average()
    return out


if __name__ == "__main__":
    if sys.argv[1] == "tables":
        print(json.dumps(tables([int(x) for x in sys.argv[2].split(",")],
                                log=lambda m: print(m, file=sys.stderr, flush=True)), indent=1))
        sys.exit(0)
    step, spec_json = sys.argv[1:3]
    print(json.dumps(STEPS[step](json.loads(spec_json))))
