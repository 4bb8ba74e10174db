"""Handles record their sink's kind (sinks/kinds.py), and checkpoints written before they did
keep working: `inspect` describes their handles and `resolve` builds the query's own sink for
them, the kind inferred from their keys.

The old checkpoints are real ones, captured byte for byte from the previous version's pipeline
(tests/data/checkpoints_before_handle_kinds/README.md); the stores they name are gone, so
resolve is checked here up to the sink it would settle them with (the ids, gids and app id it
would use are those the handles hold), and settling legacy handles against real stores is proven
in-process on Delta below and on Kafka and PostgreSQL in integration_tests/operations/test_operations.py.
"""

from __future__ import annotations

import json
import os
import shutil
import time

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from connectors.cli import main
from connectors.inspection import describe_handle, inspect_checkpoint, render_text, sink_log
from connectors.resolution import ResolveError, StoreOptions, build_sink, resolve_checkpoint
from connectors.checkpoint_reader import SparkCheckpoint
from integration_tests.support.task_context import task  # noqa: F401  (a fixture)
from sinks.delta.handles import append_handle, upsert_handle
from sinks.kafka.handles import kafka_handle
from sinks.kafka.ids import transactional_id
from sinks.kinds import KIND_KEY, UNKNOWN, kind_of, registered
from sinks.postgres.ids import make_gid
from sinks.postgres.handles import postgres_handle
from sinks.recovery_plan import plan_recovery
from tests.test_delta_upsert import Query

DATA = os.path.join(os.path.dirname(__file__), "data", "checkpoints_before_handle_kinds")
#: captured checkpoint -> the sink kind that wrote it
CAPTURED = {"kafka": "kafka-eos", "delta": "delta-eos", "delta-upsert": "delta-eos",
            "postgres": "postgres-eos"}
BATCH = 2  # the batch the captured pipelines were killed in, after its decision


def without_kinds(checkpoint: str, batch: int) -> int:
    """Rewrite one batch's records of the sink's log as the version before handles recorded
    their kind wrote them (the same JSON, without the kind); how many handles lost it."""
    directory = os.path.join(checkpoint, "eos-sink", str(batch))
    stripped = 0

    def strip(handle: dict) -> dict:
        nonlocal stripped
        stripped += KIND_KEY in handle
        return {k: v for k, v in handle.items() if k != KIND_KEY}

    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name.startswith("prepared-"):
            doc = strip(json.load(open(path)))
        elif name.startswith("decision-"):
            doc = json.load(open(path))
            doc["handles"] = {p: strip(h) for p, h in doc["handles"].items()}
        else:
            continue
        with open(path, "w") as f:
            json.dump(doc, f)
    return stripped


def captured(tmp_path, name: str) -> str:
    """A copy of a captured checkpoint, last written an hour ago (the query is not running)."""
    path = str(tmp_path / name)
    shutil.copytree(os.path.join(DATA, name), path)
    old = time.time() - 3600
    for root, _, files in os.walk(path):
        for f in files:
            os.utime(os.path.join(root, f), (old, old))
    return path


def logged(checkpoint: str) -> tuple[dict[int, dict], dict[int, dict]]:
    """(partition -> prepared handle, partition -> decided handle) of BATCH, read as raw JSON."""
    directory = os.path.join(checkpoint, "eos-sink", str(BATCH))
    prepared, decided = {}, {}
    for name in os.listdir(directory):
        with open(os.path.join(directory, name)) as f:
            if name.startswith("prepared-"):
                prepared[int(name.split("-")[1])] = json.load(f)
            elif name.startswith("decision-"):
                decided.update({int(p): h for p, h in json.load(f)["handles"].items()})
    return prepared, decided


def plan_of(checkpoint: str):
    txlog = sink_log(SparkCheckpoint(checkpoint))
    return txlog, plan_recovery(txlog.state(BATCH))


# -- the format ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CAPTURED))
def test_todays_handles_are_the_captured_ones_plus_their_kind(name):
    """The previous version's handles, rebuilt by today's builders from their own fields, come
    out the same with one key more: so legacy handles are told by the same keys."""
    prepared, decided = logged(os.path.join(DATA, name))
    assert len(prepared) == 3 and decided == prepared
    for h in prepared.values():
        assert KIND_KEY not in h
        if name == "kafka":
            rebuilt = kafka_handle(h["transactional_id"], h["producer_id"], h["producer_epoch"],
                                   partitions=h["partitions"], began_ms=h["began_ms"],
                                   timeout_ms=h["timeout_ms"], scan_from=h["scan_from"])
        elif name == "postgres":
            rebuilt = postgres_handle(h["gid"], h["xid"])
        elif name == "delta":
            rebuilt = append_handle(h["adds"])
        else:
            rebuilt = upsert_handle(h["upsert"]["keys"], h["upsert"]["sequence"], h["staged"])
        assert rebuilt == {**h, KIND_KEY: CAPTURED[name]}
        assert kind_of(h) == kind_of(rebuilt) == CAPTURED[name]


def test_each_kind_is_its_sinks_format_name():
    from sinks.delta.data_source import DeltaEosDataSource
    from sinks.delta.handles import KIND as DELTA
    from sinks.kafka.data_source import KafkaSinkDataSource
    from sinks.kafka.handles import KIND as KAFKA
    from sinks.postgres.data_source import PostgresEosDataSource
    from sinks.postgres.handles import KIND as POSTGRES

    assert [DeltaEosDataSource.name(), KafkaSinkDataSource.name(),
            PostgresEosDataSource.name()] == [DELTA, KAFKA, POSTGRES]


def test_a_kind_nobody_registered_is_shown_by_its_keys_and_not_resolved(tmp_path):
    assert set(CAPTURED.values()) <= set(registered())
    assert kind_of({"files": ["x"]}) == UNKNOWN
    handle = {KIND_KEY: "my-store", "ticket": 7}
    shown = describe_handle(handle, now_ms=0, open_txn=True)
    assert shown["kind"] == "my-store" and shown["keys"] == ["kind", "ticket"]
    checkpoint = str(tmp_path / "ck")
    txlog = sink_log_at(checkpoint)
    txlog.record_prepared(0, 0, 0, handle)
    txlog.record_decision(0, {0: handle})
    with pytest.raises(ResolveError, match="unknown or mixed kind.*my-store"):
        build_sink(txlog, plan_recovery(txlog.state(0)), StoreOptions())


def sink_log_at(checkpoint: str):
    os.makedirs(checkpoint)
    with open(os.path.join(checkpoint, "metadata"), "w") as f:
        f.write('{"id":"q"}')
    return sink_log(SparkCheckpoint(checkpoint))


# -- inspect ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CAPTURED))
def test_inspect_describes_the_handles_of_a_checkpoint_written_before_kinds(tmp_path, name):
    checkpoint = captured(tmp_path, name)
    prepared, _ = logged(checkpoint)
    began = min(h.get("began_ms", 0) for h in prepared.values())
    report = inspect_checkpoint(checkpoint, now=began / 1000 + 60)  # a minute into the batch
    assert report["sink_log"]["pending"] == [BATCH]
    (batch,) = report["batches"]
    sink = batch["sink_log"]
    assert sink["sink"] == CAPTURED[name] and sink["decided"] and not sink["done"]
    assert batch["restart"] == ["commit decided partition(s) 0, 1, 2", "mark the batch done"]
    text = render_text(report)
    for p, raw in prepared.items():
        (entry,) = sink["handles"][str(p)]
        assert entry["decided"] and entry["kind"] == CAPTURED[name] and entry["handle"] == raw
        if name == "kafka":
            assert entry["transactional_id"] == raw["transactional_id"]
            assert (entry["producer_id"], entry["producer_epoch"]) == (raw["producer_id"],
                                                                       raw["producer_epoch"])
            assert entry["output_partitions"] == [f"{t}-{q}" for t, q in raw["partitions"]]
            age_s = (began / 1000 + 60) - raw["began_ms"] / 1000
            assert entry["age_s"] == pytest.approx(age_s, abs=0.1) and not entry["timed_out"]
            assert f"kafka txn {raw['transactional_id']}" in text
        elif name == "postgres":
            assert (entry["gid"], entry["xid"]) == (raw["gid"], raw["xid"])
            assert f"postgres prepared transaction {raw['gid']} (xid {raw['xid']})" in text
        elif name == "delta":
            assert entry["files"] == [a["file"] for a in raw["adds"]]
            assert entry["rows"] == sum(a["rows"] for a in raw["adds"]) > 0
            assert f"delta 1 file(s), {entry['rows']} rows: {raw['adds'][0]['file']}" in text
        else:
            assert entry["mode"] == "upsert" and entry["merge_keys"] == raw["upsert"]["keys"]
            assert entry["files"] == [s["file"] for s in raw["staged"]]
            assert (entry["rows"], entry["deletes"]) == (raw["staged"][0]["rows"],
                                                         raw["staged"][0]["deletes"])
            assert f"delta upsert: {entry['rows']} change(s)" in text


# -- resolve ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CAPTURED))
def test_resolve_plans_a_checkpoint_written_before_kinds(tmp_path, capsys, name):
    checkpoint = captured(tmp_path, name)
    assert main(["resolve", checkpoint]) == 0
    out = capsys.readouterr().out
    assert (f"batch {BATCH} ({CAPTURED[name]}): commit decided partition(s) 0, 1, 2; mark the "
            "batch done") in out, out


def test_resolve_settles_legacy_kafka_handles_with_the_querys_transactional_ids(tmp_path):
    checkpoint = captured(tmp_path, "kafka")
    txlog, plan = plan_of(checkpoint)
    with pytest.raises(ResolveError, match="--bootstrap"):
        build_sink(txlog, plan, StoreOptions())
    sink = build_sink(txlog, plan, StoreOptions(kafka_conf={"bootstrap.servers": "127.0.0.1:9"}))
    assert type(sink).__name__ == "KafkaSink"
    for p, h in plan.commit.items():  # the ids EndTxn and the fences would use
        assert transactional_id(sink.options.prefix, p, 0) == h["transactional_id"]


def test_resolve_settles_legacy_postgres_handles_with_the_querys_gids(tmp_path):
    checkpoint = captured(tmp_path, "postgres")
    txlog, plan = plan_of(checkpoint)
    with pytest.raises(ResolveError, match="--pg-url-env"):
        build_sink(txlog, plan, StoreOptions())
    sink = build_sink(txlog, plan, StoreOptions(pg_url="postgresql://u:pw@127.0.0.1:9/db"))
    assert type(sink).__name__ == "PostgresSink"
    for p, h in plan.commit.items():  # the gids COMMIT PREPARED and recoverAndAbort would use
        assert make_gid(sink.options.gid_prefix, BATCH, p, 0) == h["gid"]


@pytest.mark.parametrize("name", ["delta", "delta-upsert"])
def test_resolve_settles_legacy_delta_handles_with_the_querys_app_id(tmp_path, name):
    """The app id comes from the checkpoint's recorded writer identity: the data files the
    query wrote carry its tag, so the resolved sink would key the txn action as the query did."""
    checkpoint = captured(tmp_path, name)
    txlog, plan = plan_of(checkpoint)
    table = str(tmp_path / "table")
    with pytest.raises(ResolveError, match="--table"):
        build_sink(txlog, plan, StoreOptions())
    with pytest.raises(ResolveError, match="no Delta table"):
        build_sink(txlog, plan, StoreOptions(delta_table=table))
    write_deltalake(table, pa.table({"id": pa.array([], pa.int64()), "seq": pa.array([], pa.int64()),
                                     "v": pa.array([], pa.string())}))
    sink = build_sink(txlog, plan, StoreOptions(delta_table=table))
    assert not sink.options.app_id_explicit
    if name == "delta":
        assert type(sink).__name__ == "DeltaSink"
        files = [a["file"] for h in plan.commit.values() for a in h["adds"]]
        assert files and all(f.startswith(f"part-eos-{sink.options.file_tag}-b{BATCH}-")
                             for f in files)
    else:
        assert type(sink).__name__ == "DeltaUpsertSink"
        spec = next(iter(plan.commit.values()))["upsert"]
        assert (list(sink.options.upsert.keys), sink.options.upsert.sequence) == (
            spec["keys"], spec["sequence"])
        files = [s["file"] for h in plan.commit.values() for s in h["staged"]]
        assert files and all(f.startswith(f"_eos_staging/{sink.options.file_tag}/b{BATCH}-")
                             for f in files)
    assert build_sink(txlog, plan, StoreOptions(delta_table=table, app_id="given")).options.app_id \
        == "given"


# -- settled for real: Delta in-process ---------------------------------------------------------


@pytest.mark.parametrize("point", ["after_precommit", "after_decision"])
def test_legacy_upsert_handles_are_settled_by_resolve_and_by_a_restart(tmp_path, task, point):
    """A batch stopped with its handles in the previous format: `resolve --apply` settles it on
    one checkpoint, a restarted query's recovery on another, and each table ends as the fold."""
    second = [[(1, 2, "u", "a2"), (2, 2, "d", None)]]
    queries = {how: Query(tmp_path / how, task) for how in ("resolve", "restart")}
    for how, q in queries.items():
        q.run_batch(0, [[(1, 1, "c", "a"), (2, 1, "c", "b")]])
        q.run_batch(1, second, stop_at=point)
        assert without_kinds(q.checkpoint, 1) > 0
        assert {kind_of(h) for h in logged_handles(q.checkpoint, 1)} == {"delta-eos"}
    q = queries["resolve"]
    report = resolve_checkpoint(q.checkpoint, StoreOptions(delta_table=q.table, app_id="up"),
                                apply=True, force=True)
    assert [(b["sink"], b["result"]) for b in report["batches"]] == [
        (["delta-eos"], "done" if point == "after_decision" else "forgotten")]
    assert q.staged_files() == []
    for q in queries.values():
        q.run_batch(1, second)  # the restarted query: recovery, then Spark's replay
        assert q.rows() == {1: (2, "a2")}
        assert q.txn_commits() == {0: 1, 1: 1}
        assert q.staged_files() == []


def logged_handles(checkpoint: str, batch: int) -> list[dict]:
    directory = os.path.join(checkpoint, "eos-sink", str(batch))
    return [json.load(open(os.path.join(directory, n))) for n in os.listdir(directory)
            if n.startswith("prepared-")]
