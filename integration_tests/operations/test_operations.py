"""`kafka-eos inspect` and `kafka-eos resolve` on real checkpoints (docs/operations.md).

One killed pipeline for the three sinks, a query each, shared by every test of the module: a
real broker, a real Spark pipeline SIGKILLed (whole process group) once each query is parked at
its point of batch 2 of the commit protocol (sinks/faults.py's rendezvous), then the operator
commands run as a user runs them (`python -m connectors ...` in a subprocess), one sink per
test: inspect says what is pending and what a restart would do; resolve's dry run changes
nothing; resolve refuses while the checkpoint is fresh; `--apply` settles the batch with the
sink's own recovery, and the output holds every record of the settled batches exactly once (the
oracles); a second run finds nothing to do. Then one restarted pipeline, the three queries
again, runs each to the end, exactly once.

The Kafka and PostgreSQL checkpoints are settled in the format of the version before handles
recorded their sink's kind (the killed batch's records rewritten without it): resolve finds
their sink from their keys. The Delta one is settled in today's format.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

from connectors.local.kafka_oracle import committed, read_partition
from integration_tests.support.delta_oracle import assert_records_once, table_records, txn_versions
from integration_tests.support.kafka_data import create_topic, produce, unique_topic
from integration_tests.support.processes import log_tail, run_pipeline, start_pipeline, wait_exit
from sinks.faults import ENV, RENDEZVOUS_ENV
from tests.test_handle_kinds import without_kinds

PIPELINE = "integration_tests.support.pipelines.eos_pipeline"
PARTITIONS, PER_PARTITION = 3, 100  # 50 offsets per trigger: 6 batches
KILLED_BATCH = 2
#: A task per input partition, as the plan of the versions before the records-sized default: a
#: batch of 50 records would be one task, and these tests inspect and resolve a batch that
#: prepared several handles, one per Spark partition.
PLAN = ("--source-option", "targetTasksPerBatch=8")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PG_URL_ENV = "EOS_PG_URL"


@dataclass
class Query:
    """One sink's query of the shared pipeline: its checkpoint folder's name scopes its fault
    (sinks/faults.py), and `flags` are what `kafka-eos resolve` needs to reach its store."""

    name: str
    point: str
    args: list[str]
    checkpoint: str
    expected: list
    flags: list[str]
    target: str = ""  # the output topic, table path or PostgreSQL table
    #: Set by whichever settles the killed batch first (its test, or the restart's test run
    #: alone): that the sink's recovery owns the batch now, and the PostgreSQL gids it held.
    resolved: bool = False
    gids: list[str] = field(default_factory=list)


def pipeline_args(queries: dict[str, Query]) -> list[str]:
    args: list[str] = []
    for i, q in enumerate(queries.values()):
        args += [*([] if i == 0 else ["--also"]), *q.args]
    return args


@pytest.fixture(scope="module")
def queries(bootstrap, postgres, tmp_path_factory) -> dict[str, Query]:
    """The three queries, killed together once each is parked at its point of batch 2: Kafka
    and Delta after the decision, PostgreSQL after every task prepared (before it)."""
    root = tmp_path_factory.mktemp("operations")
    made: dict[str, Query] = {}
    for sink, point, prefix in (("kafka", "after_decision", "opsin"),
                                ("delta", "after_decision", "opsdelta"),
                                ("pg", "after_precommit", "opspg")):
        topic = unique_topic(prefix)
        create_topic(bootstrap, topic, PARTITIONS)
        expected = produce(bootstrap, topic, PARTITIONS, PER_PARTITION)
        name = f"ck-{sink}"
        checkpoint = str(root / name)
        args = ["--bootstrap", bootstrap, "--topic", topic, "--checkpoint", checkpoint, *PLAN]
        if sink == "kafka":
            target = unique_topic("opsout")
            create_topic(bootstrap, target, PARTITIONS)
            args += ["--out-topic", target]
            flags = ["--bootstrap", bootstrap]
        elif sink == "delta":
            target = str(root / "table")
            args += ["--table", target, "--sink-option", "orphanFileRetention=0s"]
            flags = ["--table", target]
        else:
            target = f"ops_{topic.replace('-', '_')}"
            args += ["--pg-table", target]
            flags = ["--pg-url-env", PG_URL_ENV, "--pg-table", target]
        made[sink] = Query(name, point, args, checkpoint, expected, flags, target)

    meeting = root / "rendezvous"
    meeting.mkdir()
    spec = ",".join(f"{q.name}:{q.point}@{KILLED_BATCH}" for q in made.values())
    log = str(root / "killed.log")
    proc = start_pipeline(PIPELINE, *pipeline_args(made), log_path=log,
                          env={**pg_env(postgres), ENV: spec,
                               RENDEZVOUS_ENV: f"{meeting}:{len(made)}"})
    assert wait_exit(proc, log) == -signal.SIGKILL, log_tail(log)
    parked = sorted(p.read_text().strip() for p in meeting.iterdir())
    assert parked == sorted(f"{q.name} {q.point}" for q in made.values()), (
        f"{parked}\n{log_tail(log)}")
    return made


def pg_env(postgres) -> dict[str, str]:
    """The URL in the environment, not on a command line: it holds a password."""
    return {PG_URL_ENV: postgres.url()}


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "connectors", *args], capture_output=True, text=True,
        cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT, **(env or {})}, timeout=300,
    )


def inspect_json(checkpoint: str) -> dict:
    done = cli("inspect", checkpoint, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def settled_input(expected, report: dict) -> list:
    """The input records of batches 0..KILLED_BATCH: below the killed batch's end offsets."""
    (batch,) = [b for b in report["batches"] if b["batch"] == KILLED_BATCH]
    (source,) = batch["source"]
    end = {int(p): r["end"] for p, r in source["partitions"].items()}
    return [r for r in expected if r.offset < end[r.partition]]


def assert_inspect_shows_pending(report: dict, *, decided: bool) -> dict:
    """The killed batch is pending in the sink's log, Spark did not commit it, and the
    restart plan says what recovery does with it."""
    assert report["sink_log"]["pending"] == [KILLED_BATCH], report["sink_log"]
    assert report["spark"]["last_committed_batch"] == KILLED_BATCH - 1
    (batch,) = [b for b in report["batches"] if b["batch"] == KILLED_BATCH]
    assert batch["spark"] == {**batch["spark"], "offsets_logged": True, "committed": False}
    sink = batch["sink_log"]
    assert sink["decided"] is decided and not sink["done"]
    assert sorted(p["partition"] for p in sink["prepared"]) == list(range(PARTITIONS))
    (source,) = batch["source"]
    assert source["total"] == sum(r["count"] for r in source["partitions"].values()) > 0
    first = "commit decided partition(s) 0, 1, 2" if decided else "abort 3 undecided handle(s)"
    assert batch["restart"][0].startswith(first), batch["restart"]
    assert any(f"batch {KILLED_BATCH}: {first}" in s for s in report["restart"])
    return batch


def resolve_and_check_refusal_then_apply(checkpoint: str, store_flags: list[str],
                                         env: dict[str, str] | None = None) -> None:
    """Dry run (plan printed, nothing written), the refusal of a fresh checkpoint, --apply
    --force, and a second --apply that finds nothing to do."""
    log_dir = os.path.join(checkpoint, "eos-sink", str(KILLED_BATCH))
    before = sorted(os.listdir(log_dir))
    dry = cli("resolve", checkpoint, *store_flags, env=env)
    assert dry.returncode == 0, dry.stderr
    assert f"batch {KILLED_BATCH}" in dry.stdout and "dry run" in dry.stdout, dry.stdout
    assert sorted(os.listdir(log_dir)) == before, "the dry run wrote to the log"

    refused = cli("resolve", checkpoint, "--apply", *store_flags, env=env)
    assert refused.returncode == 4, refused.stdout + refused.stderr
    assert "--force" in refused.stderr and "may be running" in refused.stderr
    assert sorted(os.listdir(log_dir)) == before, "a refused resolve wrote to the log"

    applied = cli("resolve", checkpoint, "--apply", "--force", *store_flags, env=env)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert f"batch {KILLED_BATCH}" in applied.stdout and "resolved" in applied.stdout

    again = cli("resolve", checkpoint, "--apply", "--force", *store_flags, env=env)
    assert again.returncode == 0, again.stderr
    assert "nothing to do" in again.stdout, again.stdout


def assert_inspect_shows_settled(checkpoint: str, *, forgotten: bool) -> None:
    """After resolve: nothing pending; Spark still replays the batch on restart."""
    report = inspect_json(checkpoint)
    assert report["sink_log"]["pending"] == []
    (batch,) = [b for b in report["batches"] if b["batch"] == KILLED_BATCH]
    if forgotten:
        assert batch["sink_log"] is None
        assert batch["restart"] == ["Spark replays it from the same offsets"]
    else:
        assert batch["sink_log"]["done"] is True
        assert batch["restart"] == ["Spark replays it (committed partitions write nothing)"]


def pg_gids(report: dict) -> list[str]:
    """The gids of the killed batch's prepared transactions, as the sink's log names them."""
    (batch,) = [b for b in report["batches"] if b["batch"] == KILLED_BATCH]
    return sorted(e["gid"] for es in batch["sink_log"]["handles"].values() for e in es)


# -- Kafka -------------------------------------------------------------------------------------


def test_kafka_inspect_then_resolve_a_decided_batch(queries, bootstrap):
    """Killed after the decision of batch 2: its three transactions are open on the broker
    (holding read_committed readers); resolve commits them through the sink's own EndTxn."""
    q = queries["kafka"]
    checkpoint, out = q.checkpoint, q.target
    report = inspect_json(checkpoint)
    batch = assert_inspect_shows_pending(report, decided=True)
    handles = [e for es in batch["sink_log"]["handles"].values() for e in es]
    assert {e["kind"] for e in handles} == {e["handle"]["kind"] for e in handles} == {"kafka-eos"}
    assert all(e["decided"] and e["transactional_id"].endswith(f"-{i}-0")
               for i, e in enumerate(handles))
    assert all(isinstance(e["producer_id"], int) and isinstance(e["producer_epoch"], int)
               for e in handles)
    assert all(0 <= e["age_s"] < e["timeout_ms"] / 1000 and not e["timed_out"] for e in handles)
    text = cli("inspect", checkpoint)
    assert text.returncode == 0 and "timeout" in text.stdout and "a restart would" in text.stdout
    assert any(read_partition(bootstrap, out, p).open for p in range(PARTITIONS)), \
        "the kill should leave batch 2's transactions open"

    assert without_kinds(checkpoint, KILLED_BATCH) == 2 * PARTITIONS  # prepared and decided
    legacy = assert_inspect_shows_pending(inspect_json(checkpoint), decided=True)
    assert [e["transactional_id"] for es in legacy["sink_log"]["handles"].values() for e in es] \
        == [e["transactional_id"] for e in handles]
    resolve_and_check_refusal_then_apply(checkpoint, q.flags)
    q.resolved = True
    for p in range(PARTITIONS):
        assert read_partition(bootstrap, out, p).open == [], f"open transaction left in {out}-{p}"
    got = collections.Counter((r.key, r.value) for r in committed(bootstrap, out))
    want = collections.Counter((r.key, r.value) for r in settled_input(q.expected, report))
    assert got == want, "batches 0-2 should be committed exactly once, nothing else"
    assert_inspect_shows_settled(checkpoint, forgotten=False)


# -- Delta -------------------------------------------------------------------------------------


def test_delta_inspect_then_resolve_a_decided_batch(queries):
    """Killed after the decision of batch 2: its files are in the table directory, unreferenced;
    resolve commits them in one Delta commit carrying the query's txn (app id from the log)."""
    q = queries["delta"]
    checkpoint, table = q.checkpoint, q.target
    report = inspect_json(checkpoint)
    batch = assert_inspect_shows_pending(report, decided=True)
    handles = [e for es in batch["sink_log"]["handles"].values() for e in es]
    assert {e["kind"] for e in handles} == {e["handle"]["kind"] for e in handles} == {"delta-eos"}
    files = [f for e in handles for f in e["files"]]
    assert files and all(os.path.exists(os.path.join(table, f)) for f in files)
    assert sum(e["rows"] for e in handles) == batch["source"][0]["total"]
    settled = settled_input(q.expected, report)
    assert len(table_records(table)) < len(settled), "batch 2 should not be in the table yet"

    missing = cli("resolve", checkpoint, "--apply", "--force")
    assert missing.returncode == 3 and "--table" in missing.stderr, missing.stderr
    resolve_and_check_refusal_then_apply(checkpoint, q.flags)
    q.resolved = True
    assert_records_once(table_records(table), settled)
    (version,) = txn_versions(table).values()
    assert version == KILLED_BATCH
    assert_inspect_shows_settled(checkpoint, forgotten=False)


# -- PostgreSQL --------------------------------------------------------------------------------


def test_postgres_inspect_then_resolve_an_undecided_batch(queries, postgres):
    """Killed after every task prepared, before the decision: three prepared transactions hold
    their slots and locks on the server; resolve rolls them back (recoverAndAbort) and forgets
    the batch, which the restart replays afresh. The URL comes from the environment, and its
    password appears in no output."""
    from integration_tests.support.postgres import prepared_transactions, query

    q = queries["pg"]
    checkpoint, table, env = q.checkpoint, q.target, pg_env(postgres)
    assert without_kinds(checkpoint, KILLED_BATCH) == PARTITIONS  # prepared, not decided

    report = inspect_json(checkpoint)
    batch = assert_inspect_shows_pending(report, decided=False)
    q.gids = gids = pg_gids(report)
    assert {e["kind"] for es in batch["sink_log"]["handles"].values() for e in es} == {
        "postgres-eos"}
    held = sorted(g for g, _ in prepared_transactions(postgres))
    assert gids and set(gids) <= set(held), (gids, held)

    resolve_and_check_refusal_then_apply(checkpoint, q.flags, env)
    q.resolved = True
    assert not set(gids) & {g for g, _ in prepared_transactions(postgres)}, \
        "resolve should roll back batch 2's prepared transactions"
    rows = sorted(query(postgres, f'SELECT partition, "offset", key, value FROM {table}'))
    below = settled_input(q.expected, report)
    batch2_start = {int(p): r["start"] for p, r in batch["source"][0]["partitions"].items()}
    assert_records_once(rows, [r for r in below if r.offset < batch2_start[r.partition]])
    assert_inspect_shows_settled(checkpoint, forgotten=True)
    assert postgres.password
    for args_ in (["inspect", checkpoint], ["resolve", checkpoint, *q.flags]):
        done = cli(*args_, env=env)
        assert done.returncode == 0 and postgres.password not in done.stdout + done.stderr


# -- The restart -------------------------------------------------------------------------------


def settle(q: Query, env: dict[str, str]) -> None:
    """What a resolve test did, for a restart run without it (`-k restart`): settle the killed
    batch with `--apply --force`, keeping the PostgreSQL gids it held."""
    if q.resolved:
        return
    if q.name == "ck-pg":
        q.gids = pg_gids(inspect_json(q.checkpoint))
    done = cli("resolve", q.checkpoint, "--apply", "--force", *q.flags, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    q.resolved = True


def test_the_resolved_checkpoints_restart_and_run_to_the_end_exactly_once(queries, bootstrap,
                                                                          postgres):
    """One restarted pipeline, the three queries on their settled checkpoints: each runs to the
    end of its input, every record once, nothing left pending, open or prepared."""
    from integration_tests.support.postgres import prepared_transactions, query

    env = pg_env(postgres)
    for q in queries.values():
        settle(q, env)
    log = os.path.join(os.path.dirname(queries["kafka"].checkpoint), "restarted.log")
    run_pipeline(PIPELINE, *pipeline_args(queries), log_path=log, env=env)

    kafka, delta, pg = queries["kafka"], queries["delta"], queries["pg"]
    got = collections.Counter((r.key, r.value) for r in committed(bootstrap, kafka.target))
    assert got == collections.Counter((r.key, r.value) for r in kafka.expected)
    for p in range(PARTITIONS):
        assert read_partition(bootstrap, kafka.target, p).open == []

    assert_records_once(table_records(delta.target), delta.expected)
    assert list(txn_versions(delta.target).values()) == [max(
        int(n) for n in os.listdir(os.path.join(delta.checkpoint, "commits")) if n.isdigit())]

    rows = sorted(query(postgres, f'SELECT partition, "offset", key, value FROM {pg.target}'))
    assert_records_once(rows, pg.expected)
    assert pg.gids and not [g for g, _ in prepared_transactions(postgres) if g in pg.gids]

    for q in queries.values():
        assert inspect_json(q.checkpoint)["sink_log"]["pending"] == [], q.name
