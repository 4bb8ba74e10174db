"""`kafka-eos resolve CHECKPOINT`: a restart's recovery, without the query.

For an operator who must settle what a stopped query left open: release a Kafka partition held
at its last stable offset by an open transaction, free PostgreSQL prepared transactions (locks,
VACUUM's horizon, max_prepared_transactions slots), or commit a decided batch before Kafka's
transaction timeout aborts it during a long outage. Each pending batch of the sink's log gets
the plan of sinks/recovery_plan.py (the one `inspect` prints), carried out by the template's own
`TwoPhaseCommitWriter.recover_batch` around the store's own sink (recoverAndCommit /
recoverAndAbort): decided handles are committed, undecided ones aborted. A second run finds
nothing to do; a restarted query finds the batches settled and runs on.

The log does not record the sink's options, so the store is named by flags (secrets never on
the command line: environment variables or a properties file). The query must be stopped:
see `check_not_running`.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

from connectors.inspection import handle_kind, sink_log
from connectors.core.options import OptionError, is_secret
from connectors.core.redaction import redact
from connectors.spark_checkpoint import SparkCheckpoint, idle_seconds
from sinks.recovery_plan import RecoveryPlan, plan_recovery
from sinks.txn_log import Handle

#: A checkpoint written to less than this long ago may belong to a running query.
DEFAULT_MIN_IDLE_S = 600
DEFAULT_COMMIT_TIMEOUT_MS = 60_000


class ResolveError(RuntimeError):
    """resolve cannot act: a missing store option, a table that does not match the log..."""


class QueryMayBeRunning(ResolveError):
    """The checkpoint was written to recently: its query may still be running."""


@dataclass
class StoreOptions:
    """What resolve needs to reach the stores (none of it recorded in the checkpoint)."""

    kafka_conf: dict[str, str] = field(default_factory=dict, repr=False)  # may hold secrets
    pg_url: str | None = field(default=None, repr=False)
    pg_table: str | None = None
    delta_table: str | None = None
    storage_options: dict[str, str] = field(default_factory=dict, repr=False)
    app_id: str | None = None
    commit_timeout_ms: int = DEFAULT_COMMIT_TIMEOUT_MS


def parse_key_values(items: list[str], flag: str) -> dict[str, str]:
    """KEY=VALUE flags; a key naming a secret is refused (argv is visible to every user of
    the machine and lands in shell histories)."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise OptionError(flag, f"expected KEY=VALUE, got {item!r}")
        key = key.strip()
        if is_secret(key):
            raise OptionError(flag, f"{key} is a secret: never on the command line (give it in "
                                    "the properties file of --kafka-config, or the environment)")
        out[key] = value
    return out


# -- is the query running? --------------------------------------------------------------------


def check_not_running(cp: SparkCheckpoint, min_idle_s: float, now: float | None = None) -> None:
    """Structured Streaming holds no lock on its checkpoint, so a running query is told by its
    writes: a query writes offsets/<n> as each batch starts, its tasks' prepared records, its
    decision and commit markers, then commits/<n>. A file of these younger than `min_idle_s`
    means the query may be running, and settling its batch under it would undo its work."""
    idle = idle_seconds(cp, now)
    if idle is not None and idle[0] < min_idle_s:
        seconds, path = idle
        raise QueryMayBeRunning(
            f"the checkpoint was written {seconds:.0f} s ago ({path[len(cp.root):].lstrip('/')}), "
            f"less than --min-idle {min_idle_s:.0f} s: its query may be running. Stop the query "
            "first; if it is stopped (killed, crashed), run again with --force"
        )


# -- the stores -------------------------------------------------------------------------------


def _settings(cp: SparkCheckpoint, name: str, store: StoreOptions):
    from sinks.two_phase_commit import EXACTLY_ONCE, SinkSettings

    return SinkSettings(name=name, guarantee=EXACTLY_ONCE, checkpoint_location=cp.location,
                        commit_timeout_ms=store.commit_timeout_ms, commit_attempts=9,
                        retain_batches=10)


def _kafka_sink(cp: SparkCheckpoint, handles: list[Handle], store: StoreOptions):
    from sinks.kafka import KafkaSink, KafkaSinkOptions

    if not store.kafka_conf.get("bootstrap.servers"):
        raise ResolveError("the log holds kafka-eos transactions: name the cluster with "
                           "--bootstrap HOST:PORT (or bootstrap.servers in --kafka-config)")
    prefix = handles[0]["transactional_id"].rsplit("-", 2)[0]
    return KafkaSink(_settings(cp, "kafka-eos", store),
                     KafkaSinkOptions(dict(store.kafka_conf), None, prefix, 60.0))


def _postgres_sink(cp: SparkCheckpoint, handles: list[Handle], store: StoreOptions):
    import pyarrow as pa

    from connectors.core import extras

    extras.require("postgres")  # MissingExtra: the pip install to run
    from sinks.postgres import PostgresOptions, PostgresSink, TableName, parse_url, redacted_url

    if not store.pg_url:
        raise ResolveError("the log holds postgres-eos prepared transactions: name the "
                           "environment variable holding the libpq URL with --pg-url-env VAR")
    params = parse_url(store.pg_url)
    # The gids' prefix, from the gids themselves (`<prefix>-<batch>-<partition>-<attempt>`):
    # the one the query derived from its checkpoint location, however it was spelt.
    prefix = handles[0]["gid"].rsplit("-", 3)[0]
    options = PostgresOptions(
        url=store.pg_url, target=redacted_url(params), password=params.get("password"),
        table=TableName.parse(store.pg_table) if store.pg_table else TableName(None, "?"),
        create_table=False,
        gid_prefix=prefix,
    )
    return PostgresSink(_settings(cp, "postgres-eos", store), options, pa.schema([]))


def _delta_app_id(cp: SparkCheckpoint, store: StoreOptions) -> str:
    """The app id the query's sink keys its Delta txn actions on: the writer identity its
    first start recorded in the log (sinks/checkpoint.py), else the path-derived one."""
    if store.app_id:
        return store.app_id
    from sinks.checkpoint import IDENTITY_FILE

    try:
        with cp.fs.open_input_stream(f"{cp.root}/eos-sink/{IDENTITY_FILE}") as f:
            return "delta-eos-" + json.loads(f.read().decode("utf-8"))["writer"]
    except FileNotFoundError:
        return "delta-eos-" + hashlib.sha256(cp.location.encode()).hexdigest()[:16]


def _delta_sink(cp: SparkCheckpoint, handles: list[Handle], store: StoreOptions, plan: RecoveryPlan):
    import pyarrow as pa
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from connectors.core.paths import normalise
    from sinks.delta import DeltaSink
    from sinks.delta.options import DEFAULT_ORPHAN_RETENTION_MS, DeltaOptions, UpsertOptions

    if not store.delta_table:
        raise ResolveError("the log holds delta-eos files: name the table with --table PATH "
                           "(the sink's path option)")
    path = normalise("--table", store.delta_table)
    try:
        table: Any = DeltaTable(path, storage_options=store.storage_options or None)
    except TableNotFoundError:
        table = None
    app_id = _delta_app_id(cp, store)
    if table is None and plan.commit:
        raise ResolveError(
            f"no Delta table at {path}, and batch {plan.batch_id} is decided: resolve does not "
            "create tables (the query does, with its table properties); restart the query, or "
            "check --table")
    # Upsert mode's handles carry what its MERGE needs (keys, sequence): the query's options
    # are not recorded anywhere else (sinks/delta/upsert.py).
    upsert_spec = next((h["upsert"] for h in handles if "upsert" in h), None)
    upsert = (UpsertOptions(keys=tuple(upsert_spec["keys"]), sequence=upsert_spec["sequence"])
              if upsert_spec else None)
    options = DeltaOptions(
        path=path, partition_by=tuple(table.metadata().partition_columns) if table else (),
        merge_schema=False, app_id=app_id, app_id_explicit=bool(store.app_id),
        orphan_retention_ms=DEFAULT_ORPHAN_RETENTION_MS, storage_options=dict(store.storage_options),
        upsert=upsert,
    )
    schema = pa.schema(table.schema().to_arrow()) if table else pa.schema([])
    if upsert is not None:
        from sinks.delta.upsert import DeltaUpsertSink

        if table is None:  # nothing to merge into: only aborts reach the store (see above)
            schema = pa.schema([pa.field(c, pa.int64()) for c in (*upsert.keys, upsert.sequence)])
        return DeltaUpsertSink(_settings(cp, "delta-eos", store), options, schema)
    sink = DeltaSink(_settings(cp, "delta-eos", store), options, schema)
    if table is not None and plan.commit:
        _check_delta_app_id(sink, table, plan)
    return sink


def _check_delta_app_id(sink, table, plan: RecoveryPlan) -> None:
    """A wrong app id would make a committed batch look uncommitted, and resolve commit it
    again: refuse when the table already references the batch's files but has no txn for it."""
    from sinks.delta.referenced_files import referenced_files

    if sink.isCommitted(plan.batch_id):
        return
    fs, root = sink._fs()
    files = {a["file"] for h in plan.commit.values() for a in h.get("adds", [])}
    if files & referenced_files(table, fs, root):
        raise ResolveError(
            f"the table at {sink.options.path} already holds files of batch {plan.batch_id}, "
            f"but no txn action of app id {sink.options.app_id} says so: the query's sink "
            "uses another appId; give it with --app-id")


def build_sink(cp: SparkCheckpoint, plan: RecoveryPlan, store: StoreOptions):
    """The store's own sink for the handles of one batch (their shape tells which store)."""
    handles = [*plan.commit.values(), *plan.abort]
    kinds = {handle_kind(h) for h in handles}
    if not kinds:
        return _storeless_sink(_settings(cp, "none", store))
    if len(kinds) > 1 or "unknown" in kinds:
        raise ResolveError(f"batch {plan.batch_id}: handles of an unknown or mixed kind "
                           f"({sorted(kinds)}): not settled by resolve")
    kind = kinds.pop()
    if kind == "kafka-eos":
        return _kafka_sink(cp, handles, store)
    if kind == "postgres-eos":
        return _postgres_sink(cp, handles, store)
    return _delta_sink(cp, handles, store, plan)


def _storeless_sink(settings):
    """A sink for a batch whose plan touches no store (a log entry without handles): the
    writer marks or forgets the batch and calls nothing of it."""
    from sinks.two_phase_commit import TwoPhaseCommitSink

    class NoHandles(TwoPhaseCommitSink):
        def _never(self, *args: Any) -> Any:
            raise AssertionError("a plan without handles reached the store")

        beginTransaction = invoke = preCommit = commit = abort = _never

    return NoHandles(settings)


# -- resolve ----------------------------------------------------------------------------------


def resolve_checkpoint(location: str, store: StoreOptions, *, apply: bool, force: bool = False,
                       min_idle_s: float = DEFAULT_MIN_IDLE_S) -> dict[str, Any]:
    """The plan for every pending batch of the sink's log; with `apply`, carried out. Returns
    a JSON-able report (secrets redacted)."""
    cp = SparkCheckpoint(location)
    if apply and not force:
        check_not_running(cp, min_idle_s)
    txlog = sink_log(cp)
    batches = []
    for batch_id in txlog.pending():
        plan = plan_recovery(txlog.state(batch_id))
        entry: dict[str, Any] = {"batch": batch_id, "steps": plan.steps(),
                                 "sink": sorted({handle_kind(h) for h in
                                                 [*plan.commit.values(), *plan.abort]})}
        if apply:
            entry.update(_apply(cp, txlog, plan, store))
        batches.append(entry)
    # A kill while Spark wrote batch 0's offsets: Spark refuses to start until it is gone.
    leftovers = cp.remove_unfinished_first_offsets() if apply else cp.unfinished_first_offsets()
    return redact({
        "checkpoint": cp.location,
        "applied": apply,
        "nothing_to_do": not batches and not leftovers,
        "batches": batches,
        "unfinished_first_offsets": leftovers,
    })


def _apply(cp: SparkCheckpoint, txlog, plan: RecoveryPlan, store: StoreOptions) -> dict[str, Any]:
    from sinks.two_phase_commit import TwoPhaseCommitWriter

    sink = build_sink(cp, plan, store)
    started = time.monotonic()
    lost = TwoPhaseCommitWriter(sink).recover_batch(txlog, plan)
    result = ("forgotten" if plan.forget else
              f"lost partition(s) {lost}: the batch stays pending; the query's replay rewrites "
              "them" if lost else "done")
    return {"result": result, "lost_partitions": lost,
            "seconds": round(time.monotonic() - started, 2)}


def render_text(report: dict[str, Any]) -> str:
    lines = [f"checkpoint {report['checkpoint']}"]
    if report["nothing_to_do"]:
        lines.append("  nothing to do: no batch is pending in the sink's log")
        return "\n".join(lines) + "\n"
    verb = "resolved" if report["applied"] else "would resolve (dry run; --apply to act)"
    lines.append(f"  {verb}:")
    if report.get("unfinished_first_offsets"):
        lines.append("    Spark's unfinished write of batch 0's offsets ("
                     + ", ".join(report["unfinished_first_offsets"])
                     + "): " + ("removed" if report["applied"] else "would be removed")
                     + "; the query starts as a new query")
    for b in report["batches"]:
        sink = ", ".join(b["sink"]) or "no handles"
        lines.append(f"    batch {b['batch']} ({sink}): " + "; ".join(b["steps"]))
        if "result" in b:
            lines.append(f"      -> {b['result']} ({b['seconds']} s)")
    return "\n".join(lines) + "\n"


def store_from_env_var(var: str | None) -> str | None:
    """The value of the environment variable `var` names (the PostgreSQL URL): a clear error
    when it is unset, never its value."""
    if var is None:
        return None
    value = os.environ.get(var)
    if not value:
        raise OptionError("--pg-url-env", f"environment variable {var} is not set")
    return value
