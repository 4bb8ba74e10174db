"""delta-eos upsert mode on real Delta tables (deltalake writes and reads them in tmp dirs),
driven through the template as Spark drives it: the writer pickled for the tasks (which runs
recovery), tasks writing under a stand-in TaskContext, the driver's commit. A crash is the
protocol stopping at one of its points; the restart is a new writer on the same checkpoint
replaying the same batch, as Spark does. Every table is judged against `fold()`, the fold of
the input changes computed here in plain Python, independently of the sink."""

from __future__ import annotations

import json
import os
import uuid
import pickle
import random
import time

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql.types import LongType, StringType, StructField, StructType

from connectors.inspection import describe_handle
from connectors.core.options import OptionError
from integration_tests.support.task_context import task  # noqa: F401  (a fixture)
from integration_tests.support import crash_matrix
from sinks.delta import DeltaEosDataSource
from sinks.delta.errors import NullKeyOrSequence

SPARK_SCHEMA = StructType([StructField("id", LongType()), StructField("seq", LongType()),
                           StructField("op", StringType()), StructField("v", StringType())])
ARROW_SCHEMA = pa.schema([("id", pa.int64()), ("seq", pa.int64()), ("op", pa.string()),
                          ("v", pa.string())])
Change = tuple[int, int, str, str | None]  # (id, seq, op, v); op 'd' is a delete


#: The table the changes should leave: per id, the change with the highest seq (a delete
#: winning a tie) decides; a delete leaves no row. The crash matrix judges upsert mode by the
#: same fold, computed independently of the sink.
fold = crash_matrix.fold


class Query:
    """A streaming query's sink side on one checkpoint: each run_batch is one micro-batch,
    with a fresh writer as a restarted query builds (its pickling recovers)."""

    def __init__(self, tmp_path, task, **options: str) -> None:
        self.table = str(tmp_path / "t")
        self.checkpoint = str(tmp_path / "ck")
        self.task = task
        self.options = {"path": self.table, "checkpointlocation": self.checkpoint,
                        "appid": "up", "mergekeys": "id", "sequenceby": "seq",
                        "applyasdeletes": "op = 'd'", "exceptcolumns": "op",
                        "orphanfileretention": "0s", **{k.lower(): v for k, v in options.items()}}
        self.schema = SPARK_SCHEMA
        os.makedirs(os.path.join(self.checkpoint, "commits"), exist_ok=True)
        metadata = os.path.join(self.checkpoint, "metadata")
        if not os.path.exists(metadata):  # Spark's, written on the driver as a query starts
            with open(metadata, "w") as f:
                f.write('{"id":"%s"}' % uuid.uuid4())

    def writer(self):
        return DeltaEosDataSource(self.options).streamWriter(self.schema, False)

    def run_batch(self, batch_id: int, partitions: list[list[Change]], stop_at: str | None = None,
                  arrow_schema: pa.Schema = ARROW_SCHEMA) -> list:
        writer = self.writer()
        shipped = pickle.loads(pickle.dumps(writer))  # Spark ships it to the tasks: recovery
        messages = []
        for p, rows in enumerate(partitions):
            self.task(batch_id, p)
            data = [dict(zip(arrow_schema.names, r)) for r in rows]
            batches = [pa.RecordBatch.from_pylist(data, schema=arrow_schema)] if rows else []
            messages.append(shipped.write(iter(batches)))
        handles = {m.partition: m.handle for m in messages if m.handle is not None}
        txlog = writer._log()
        if stop_at == "after_precommit":
            return messages
        if stop_at == "after_decision":
            txlog.record_decision(batch_id, handles)
            return messages
        if stop_at == "after_store_commit":
            txlog.record_decision(batch_id, handles)
            writer.sink.commit(batch_id, handles)
            return messages
        writer.commit(messages, batch_id)
        if stop_at == "after_commit":
            return messages
        open(os.path.join(self.checkpoint, "commits", str(batch_id)), "w").close()  # Spark's
        return messages

    def rows(self) -> dict[int, tuple[int, str | None]]:
        t = DeltaTable(self.table).to_pyarrow_table()
        ids = t.column("id").to_pylist()
        assert len(ids) == len(set(ids)), f"a key twice in the table: {sorted(ids)}"
        return {r["id"]: (r["seq"], r["v"]) for r in t.to_pylist()}

    def staged_files(self) -> list[str]:
        return [os.path.join(d, n) for d, _, names in os.walk(os.path.join(self.table, "_eos_staging"))
                for n in names]

    def txn_commits(self) -> dict[int, int]:
        """batch id -> how many commits of the table carry its txn action (must be 1 each)."""
        found: dict[int, int] = {}
        log_dir = os.path.join(self.table, "_delta_log")
        for name in sorted(os.listdir(log_dir)):
            if name.endswith(".json"):
                with open(os.path.join(log_dir, name)) as f:
                    for action in map(json.loads, f):
                        if "txn" in action:
                            found[action["txn"]["version"]] = found.get(action["txn"]["version"], 0) + 1
        return found


def test_changes_fold_per_key_within_and_across_batches(tmp_path, task):
    q = Query(tmp_path, task)
    batches: list[list[list[Change]]] = [
        # two partitions; key 1 changed in both, the higher seq wins whatever the order
        [[(1, 2, "u", "a2"), (2, 1, "c", "b1")], [(1, 1, "c", "a1"), (3, 1, "c", "c1")]],
        # a late update of 1 (seq 1 < 2) is ignored; 2 is deleted; 4 created and updated
        [[(1, 1, "u", "late"), (2, 3, "d", None)], [(4, 1, "c", "d1"), (4, 2, "u", "d2")]],
        # an update of 2 older than its delete must not bring it back; delete of an absent key
        [[(2, 2, "u", "late-after-delete")], [(9, 5, "d", None)]],
        # a delete and an update with the same seq: the delete wins
        [[(3, 7, "u", "c7")], [(3, 7, "d", None)]],
        # 2 re-created with a higher seq than its delete; 3's late update (seq 6) stays out
        [[(2, 4, "c", "b4"), (3, 6, "u", "c6")], []],
    ]
    seen: list[Change] = []
    for b, parts in enumerate(batches):
        before = DeltaTable(q.table).version() if b else None
        q.run_batch(b, parts)
        seen += [c for p in parts for c in p]
        assert q.rows() == fold(seen), f"after batch {b}"
        if before is not None:  # the batch is ONE commit of the table (its MERGE, with the txn)
            assert DeltaTable(q.table).version() == before + 1
    assert q.rows() == {1: (2, "a2"), 2: (4, "b4"), 4: (2, "d2")}
    table = DeltaTable(q.table)
    assert table.transaction_version("up") == len(batches) - 1
    assert [f.name for f in table.schema().fields] == ["id", "seq", "v"]  # no op, no flag
    assert q.txn_commits() == {b: 1 for b in range(len(batches))}
    assert q.staged_files() == [], "committed batches' staged files are deleted"


@pytest.mark.parametrize("fold_every", [262_144, 7])
def test_a_random_change_stream_with_late_changes_matches_the_fold(tmp_path, task, monkeypatch,
                                                                  fold_every):
    """fold_every=7: the driver folds the staged changes in many small steps (as it does a
    large batch's, to hold one row per key): the result must not depend on it."""
    from sinks.delta import upsert

    monkeypatch.setattr(upsert, "FOLD_EVERY_ROWS", fold_every)
    rng = random.Random(23)
    q = Query(tmp_path, task)
    seen: list[Change] = []
    next_seq = {k: 0 for k in range(40)}
    for b in range(8):
        parts: list[list[Change]] = [[], [], []]
        for _ in range(60):
            k = rng.randrange(40)
            next_seq[k] += rng.randint(1, 3)
            # one change in four arrives late: a sequence below the key's latest
            seq = next_seq[k] - rng.randint(1, 4) if rng.random() < 0.25 else next_seq[k]
            op = "d" if rng.random() < 0.2 else "u"
            parts[rng.randrange(3)].append((k, seq, op, None if op == "d" else f"{k}@{seq}"))
        q.run_batch(b, parts)
        seen += [c for p in parts for c in p]
        assert q.rows() == fold(seen), f"after batch {b}"
    assert 0 < len(q.rows()) < 40


@pytest.mark.parametrize("point", ["after_precommit", "after_decision", "after_store_commit",
                                   "after_commit"])
def test_a_batch_stopped_at_a_protocol_point_is_applied_exactly_once(tmp_path, task, point):
    q = Query(tmp_path, task)
    first = [[(1, 1, "c", "a"), (2, 1, "c", "b")], [(3, 1, "c", "c")]]
    q.run_batch(0, first)
    second = [[(1, 2, "u", "a2"), (2, 2, "d", None)], [(3, 0, "u", "late"), (4, 1, "c", "d")]]
    q.run_batch(1, second, stop_at=point)  # the crash
    q.run_batch(1, second)  # the restart: recovery, then Spark replays batch 1
    q.run_batch(2, [[(2, 1, "u", "older than the delete")], [(5, 1, "c", "e")]])
    assert q.rows() == fold([c for b in (first, second) for p in b for c in p]
                            + [(2, 1, "u", "older than the delete"), (5, 1, "c", "e")])
    assert q.txn_commits() == {0: 1, 1: 1, 2: 1}, "a batch applied twice, or not recorded"
    assert q.staged_files() == []


def test_a_commit_retried_after_it_landed_is_not_applied_again(tmp_path, task, monkeypatch):
    """An ambiguous failure: the MERGE committed, then the commit raised (here: deleting the
    staged files). The template retries the commit; the table's txn version says the batch
    is in, so the retry only cleans up."""
    from sinks.delta.upsert import DeltaUpsertSink

    q = Query(tmp_path, task)
    q.run_batch(0, [[(1, 1, "c", "a")]])
    real_abort = DeltaUpsertSink.abort
    failures = []

    def abort_failing_once(self, handles):
        if not failures:
            failures.append(1)
            raise OSError("connection reset while deleting staged files")
        real_abort(self, handles)

    monkeypatch.setattr(DeltaUpsertSink, "abort", abort_failing_once)
    q.run_batch(1, [[(1, 2, "u", "b"), (2, 1, "c", "c")]])
    assert failures == [1]
    assert q.rows() == {1: (2, "b"), 2: (1, "c")}
    assert q.txn_commits() == {0: 1, 1: 1}, "the retry applied the batch a second time"
    assert q.staged_files() == []


def test_staged_files_of_a_batch_the_table_holds_go_at_the_next_start(tmp_path, task,
                                                                     monkeypatch):
    """Killed after its MERGE, before deleting its staged files: recovery finds the batch in
    the table (nothing to commit), and the files go at the next start however young (the
    default orphanFileRetention of an hour is for files whose batch may still be committed)."""
    from sinks.delta import upsert

    q = Query(tmp_path, task, orphanFileRetention="1h")
    q.run_batch(0, [[(1, 1, "c", "a")]])
    with monkeypatch.context() as m:  # the kill comes between the MERGE and the deletion
        m.setattr(upsert.DeltaUpsertSink, "abort", lambda self, handles: None)
        q.run_batch(1, [[(1, 2, "u", "b")]], stop_at="after_store_commit")
    assert len(q.staged_files()) == 1
    upsert._LAST_STAGING_SWEEP.clear()  # a new driver process
    q.run_batch(2, [[(1, 3, "u", "c")]], stop_at="after_precommit")  # young, undecided
    staged = q.staged_files()
    assert len(staged) == 1 and "/b2-" in staged[0], staged
    upsert._LAST_STAGING_SWEEP.clear()
    q.run_batch(2, [[(1, 3, "u", "c")]])  # recovery aborts batch 2's undecided files
    assert q.staged_files() == []
    assert q.rows() == {1: (3, "c")} and q.txn_commits() == {0: 1, 1: 1, 2: 1}


def test_superseded_and_failed_attempts_leave_no_staged_files(tmp_path, task):
    q = Query(tmp_path, task)
    writer = q.writer()
    shipped = pickle.loads(pickle.dumps(writer))
    rows = pa.RecordBatch.from_pylist([{"id": 1, "seq": 1, "op": "c", "v": "a"}],
                                      schema=ARROW_SCHEMA)
    task(0, 0, 0)
    shipped.write(iter([rows]))  # an attempt Spark gave up on (a straggler, say)
    task(0, 0, 1)
    kept = shipped.write(iter([rows]))
    assert len(q.staged_files()) == 2
    writer.commit([kept], 0)
    assert q.staged_files() == []
    assert q.rows() == {1: (1, "a")}
    # a batch that fails (Spark's abort): what its tasks staged goes
    task(1, 0, 0)
    failed = shipped.write(iter([rows]))
    writer.abort([failed], 1)
    assert q.staged_files() == []
    assert DeltaTable(q.table).transaction_version("up") == 0


@pytest.mark.parametrize("row,column", [({"id": None, "seq": 1}, "id"),
                                        ({"id": 1, "seq": None}, "seq")])
def test_a_null_key_or_sequence_fails_the_task_naming_batch_and_column(tmp_path, task, row,
                                                                       column):
    q = Query(tmp_path, task)
    q.run_batch(0, [[(7, 1, "c", "x")]])
    writer = q.writer()
    shipped = pickle.loads(pickle.dumps(writer))
    task(1, 0)
    bad = pa.RecordBatch.from_pylist([{"id": 1, "seq": 1, "op": "c", "v": "ok"},
                                      {**row, "op": "u", "v": "bad"}], schema=ARROW_SCHEMA)
    option = "mergeKeys" if column == "id" else "sequenceBy"
    with pytest.raises(NullKeyOrSequence,
                       match=rf"micro-batch 1 \(Spark partition 0\) holds 1 change\(s\) whose "
                             rf"{option} column '{column}' is null"):
        shipped.write(iter([bad]))
    assert q.rows() == {7: (1, "x")} and DeltaTable(q.table).version() == 1
    assert q.staged_files() == [], "the failed task's staged file is deleted"


def test_tombstones_expire_after_their_retention_and_then_no_longer_hold_back(tmp_path, task):
    """As the reference behaves: a change later than tombstoneRetention after the delete is
    applied as if the key had never been deleted."""
    # 5 s: with 300 ms, batch 2 came after the tombstones had expired on a loaded host (a full
    # run of 2026-11-29), and its "late, within retention" change was applied.
    q = Query(tmp_path, task, tombstoneRetention="5s")
    q.run_batch(0, [[(1, 1, "c", "a"), (2, 1, "c", "b")]])
    q.run_batch(1, [[(1, 5, "d", None), (2, 5, "d", None)]])
    deleted = time.monotonic()
    q.run_batch(2, [[(1, 3, "u", "late, within retention")]])
    assert q.rows() == {}
    tombs = os.path.join(q.table, "_eos_tombstones", q.writer().sink.options.file_tag)
    assert sorted(DeltaTable(tombs).to_pyarrow_table().column("id").to_pylist()) == [1, 2]
    time.sleep(max(0.0, deleted + 5.5 - time.monotonic()))
    q.run_batch(3, [[(2, 3, "u", "late, after retention")]])  # its open() expires both
    assert DeltaTable(tombs).to_pyarrow_table().num_rows == 0
    assert q.rows() == {2: (3, "late, after retention")}


def test_without_apply_as_deletes_every_change_is_an_upsert_and_every_column_written(tmp_path,
                                                                                     task):
    q = Query(tmp_path, task)
    del q.options["applyasdeletes"], q.options["exceptcolumns"]
    q.run_batch(0, [[(1, 1, "c", "a"), (2, 1, "c", "b")]])
    q.run_batch(1, [[(1, 2, "d", None), (2, 0, "u", "late")]])
    rows = {r["id"]: r for r in DeltaTable(q.table).to_pyarrow_table().to_pylist()}
    assert rows == {1: {"id": 1, "seq": 2, "op": "d", "v": None},
                    2: {"id": 2, "seq": 1, "op": "c", "v": "b"}}


def test_new_columns_need_merge_schema_and_then_reach_the_table(tmp_path, task):
    q = Query(tmp_path, task)
    q.run_batch(0, [[(1, 1, "c", "a"), (2, 1, "c", "b")]])
    wider = StructType([*SPARK_SCHEMA.fields, StructField("w", StringType())])
    arrow = ARROW_SCHEMA.append(pa.field("w", pa.string()))
    q.schema = wider
    with pytest.raises(Exception, match="mergeSchema"):
        q.run_batch(1, [[(1, 2, "u", "a2", "new")]], arrow_schema=arrow)
    q.options["mergeschema"] = "true"
    q.run_batch(1, [[(1, 2, "u", "a2", "new")]], arrow_schema=arrow)
    rows = {r["id"]: r for r in DeltaTable(q.table).to_pyarrow_table().to_pylist()}
    assert rows[1]["w"] == "new" and rows[2]["w"] is None and rows[1]["v"] == "a2"


def test_an_append_only_table_is_refused_at_start(tmp_path, task):
    from deltalake import write_deltalake

    write_deltalake(str(tmp_path / "t"), pa.table({"id": [1], "seq": [1], "v": ["a"]}),
                    configuration={"delta.appendOnly": "true"})
    q = Query(tmp_path, task)
    with pytest.raises(Exception, match="mergeKeys.*append-only"):
        q.run_batch(0, [[(1, 2, "u", "b")]])


def test_a_table_without_the_sequence_column_is_refused_at_start(tmp_path, task):
    from deltalake import write_deltalake

    write_deltalake(str(tmp_path / "t"), pa.table({"id": [1], "v": ["a"]}))
    q = Query(tmp_path, task, mergeSchema="true")
    with pytest.raises(Exception, match="sequenceBy.*has no column.*seq"):
        q.run_batch(0, [[(1, 2, "u", "b")]])


def test_vacuum_leaves_staged_changes_and_tombstones_alone(tmp_path, task):
    """They live in `_` directories of the table, which VACUUM (delta-rs's here, delta-spark's
    likewise) never lists: a VACUUM while a decided batch waits does not lose it."""
    q = Query(tmp_path, task)
    q.run_batch(0, [[(1, 1, "c", "a"), (2, 1, "c", "b")]])
    q.run_batch(1, [[(1, 2, "d", None)]])
    q.run_batch(2, [[(2, 2, "u", "b2")]], stop_at="after_decision")
    assert q.staged_files() and os.path.isdir(os.path.join(q.table, "_eos_tombstones"))
    removed = DeltaTable(q.table).vacuum(retention_hours=0, enforce_retention_duration=False,
                                         dry_run=False, full=True)
    assert not [f for f in removed if f.startswith("_eos")], removed
    q.run_batch(2, [[(2, 2, "u", "b2")]])  # recovery merges the decided batch
    q.run_batch(3, [[(1, 1, "u", "older than the delete")]])
    assert q.rows() == {2: (2, "b2")}


def test_inspect_reads_an_upsert_handle(tmp_path, task):
    q = Query(tmp_path, task)
    messages = q.run_batch(0, [[(1, 1, "c", "a"), (2, 2, "d", None)]], stop_at="after_precommit")
    handle = messages[0].handle
    assert handle["kind"] == "delta-eos"
    shown = describe_handle(handle, now_ms=0, open_txn=True)
    assert shown["rows"] == 2 and shown["deletes"] == 1 and shown["mode"] == "upsert"
    assert shown["files"] == [s["file"] for s in handle["staged"]]
    assert all(os.path.exists(os.path.join(q.table, f)) for f in shown["files"])
    from connectors.inspection import inspect_checkpoint, render_text

    text = render_text(inspect_checkpoint(q.checkpoint))
    assert ("undecided delta upsert: 2 change(s) (1 delete(s)) staged in 1 file(s) for one "
            "MERGE on id") in text, text


@pytest.mark.parametrize("point", ["after_precommit", "after_decision"])
def test_resolve_settles_an_upsert_batch_without_the_query(tmp_path, task, point):
    """`kafka-eos resolve --apply`: a decided upsert batch is merged (the handles carry the
    keys and the sequence), an undecided one's staged files are deleted; the restarted query
    then replays the batch and the table is the fold, each batch in once."""
    from connectors.resolution import StoreOptions, resolve_checkpoint

    q = Query(tmp_path, task)
    q.run_batch(0, [[(1, 1, "c", "a"), (2, 1, "c", "b")]])
    second = [[(1, 2, "u", "a2"), (2, 2, "d", None)]]
    q.run_batch(1, second, stop_at=point)
    store = StoreOptions(delta_table=q.table, app_id="up")
    report = resolve_checkpoint(q.checkpoint, store, apply=True, force=True)
    assert [b["result"] for b in report["batches"]] == [
        "done" if point == "after_decision" else "forgotten"]
    assert q.staged_files() == []
    decided = point == "after_decision"
    assert q.rows() == ({1: (2, "a2")} if decided else {1: (1, "a"), 2: (1, "b")})
    assert resolve_checkpoint(q.checkpoint, store, apply=True, force=True)["nothing_to_do"]
    q.run_batch(1, second)  # the restarted query replays batch 1
    assert q.rows() == {1: (2, "a2")}
    assert q.txn_commits() == {0: 1, 1: 1}


def test_an_invalid_option_refuses_the_query_before_any_table_exists(tmp_path, task):
    q = Query(tmp_path, task, applyAsDeletes="op = ")
    with pytest.raises(OptionError, match="applyAsDeletes"):
        q.writer()
    assert not os.path.exists(q.table)
