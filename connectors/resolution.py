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

import os
import time
from typing import TYPE_CHECKING, Any

from connectors.inspection import sink_log
from connectors.core.options import OptionError, is_secret
from connectors.core.redaction import redact
from connectors.checkpoint_reader import SparkCheckpoint, idle_seconds
from sinks.kinds import (
    DEFAULT_COMMIT_TIMEOUT_MS,
    PendingBatch,
    ResolveError,
    StoreOptions,
    kind_of,
    sink_kind,
)
from sinks.recovery_plan import RecoveryPlan, plan_recovery
from sinks.txn_log import TransactionLog

if TYPE_CHECKING:
    from sinks.two_phase_commit import SinkSettings, TwoPhaseCommitSink

#: A checkpoint written to less than this long ago may belong to a running query.
DEFAULT_MIN_IDLE_S = 600

__all__ = ["DEFAULT_COMMIT_TIMEOUT_MS", "DEFAULT_MIN_IDLE_S", "QueryMayBeRunning", "ResolveError",
           "StoreOptions", "build_sink", "check_not_running", "parse_key_values", "render_text",
           "resolve_checkpoint", "store_from_env_var"]


class QueryMayBeRunning(ResolveError):
    """The checkpoint was written to recently: its query may still be running."""


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


def build_sink(txlog: TransactionLog, plan: RecoveryPlan, store: StoreOptions) -> TwoPhaseCommitSink:
    """The store's own sink for the handles of one batch, built by the sink kind they record
    (sinks/kinds.py)."""
    batch = PendingBatch(txlog, plan, store)
    kinds = {kind_of(h) for h in batch.handles}
    if not kinds:
        return _storeless_sink(batch.settings("none"))
    kind = sink_kind(kinds.pop()) if len(kinds) == 1 else None
    if kind is None:
        raise ResolveError(f"batch {plan.batch_id}: handles of an unknown or mixed kind "
                           f"({sorted({kind_of(h) for h in batch.handles})}): not settled by "
                           "resolve")
    kind.check_store_settings(store)
    return kind.recovery_sink(batch)


def _storeless_sink(settings: SinkSettings) -> TwoPhaseCommitSink:
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
                                 "sink": sorted({kind_of(h) for h in
                                                 [*plan.commit.values(), *plan.abort]})}
        if apply:
            entry.update(_apply(txlog, plan, store))
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


def _apply(txlog: TransactionLog, plan: RecoveryPlan, store: StoreOptions) -> dict[str, Any]:
    from sinks.two_phase_commit import TwoPhaseCommitWriter

    sink = build_sink(txlog, plan, store)
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
