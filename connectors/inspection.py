"""`kafka-eos inspect CHECKPOINT`: what a query's checkpoint says, batch by batch, without Spark.

Per batch: the source's offsets from Spark's offset log (start = the previous batch's end),
whether Spark committed it, the sink's transaction log (prepared, decided, committed, done)
with the handles as their sink kind describes them (sinks/kinds.py: Kafka transactional ids and
producer id/epoch with each open transaction's age against its timeout, PostgreSQL gids, Delta
files), and what a restart's recovery would do: the plan of sinks/recovery_plan.py, the one the
template's recovery carries out. Nothing is written and no store is contacted. Secrets never
reach the output (connectors/core/redaction.py).
"""

from __future__ import annotations

import json
import time
from typing import Any

# Each sink's kind module registers its kind (sinks/kinds.py) when imported.
import sinks.delta.kind  # noqa: F401
import sinks.kafka.kind  # noqa: F401
import sinks.postgres.kind  # noqa: F401
from connectors.core.redaction import redact
from connectors.checkpoint_reader import OffsetEntry, SparkCheckpoint, idle_seconds
from sinks.kinds import duration_text, kind_of, sink_kind
from sinks.recovery_plan import RecoveryPlan, plan_recovery
from sinks.txn_log import BatchState, Handle, TransactionLog

DEFAULT_BATCHES = 10


class NoSuchBatch(ValueError):
    """A batch the checkpoint has no record of (no offsets, no commit, no sink log)."""


def sink_log(checkpoint: SparkCheckpoint) -> TransactionLog:
    """The sink's transaction log under the checkpoint, on the checkpoint's filesystem."""
    txlog = TransactionLog(checkpoint.root, filesystem=checkpoint.fs)
    txlog.location = checkpoint.location
    return txlog


def describe_handle(h: Handle, now_ms: int, open_txn: bool) -> dict[str, Any]:
    """A handle as the operator needs it: its kind, what its sink kind tells of it, and the
    whole record (for scripts; redacted with the rest of the report). A handle of a kind no
    sink registered shows its keys."""
    name = kind_of(h)
    kind = sink_kind(name)
    out: dict[str, Any] = {"kind": name}
    if kind is not None:
        out.update(kind.describe(h, now_ms, open_txn))
    else:
        out["keys"] = sorted(h)
    out["handle"] = h
    return out


def _source_report(entry: OffsetEntry, previous: OffsetEntry | None) -> list[dict[str, Any]]:
    out = []
    for i, src in enumerate(entry.sources):
        if src.partitions is None:
            out.append({"source": i, "offsets": src.raw})
            continue
        before = previous.sources[i].partitions if previous and i < len(previous.sources) else None
        topics: dict[str, dict[str, Any]] = {}
        for (topic, p), end in sorted(src.partitions.items()):
            start = before.get((topic, p)) if before is not None else None
            t = topics.setdefault(topic, {"source": i, "topic": topic, "partitions": {}, "total": 0})
            count = end - start if start is not None else None
            t["partitions"][str(p)] = {"start": start, "end": end, "count": count}
            if count is None:
                t["total"] = None
            elif t["total"] is not None:
                t["total"] += count
        out.extend(topics.values())
    return out


def _sink_report(state: BatchState, now_ms: int) -> dict[str, Any]:
    decided = state.decided()
    prepared = [{"partition": r.partition, "attempt": r.attempt, "record": r.name}
                for r in state.prepared_records()]
    handles = {}
    for name, (p, h) in sorted(state.prepared.items(), key=lambda x: (x[1][0], x[0])):
        open_txn = not state.done and p not in state.committed
        entry = describe_handle(h, now_ms, open_txn)
        entry["decided"] = decided.get(p) == h
        handles.setdefault(str(p), []).append(entry)
    for p, h in decided.items():  # a decided handle whose prepared record is gone
        if not any(e["decided"] for e in handles.get(str(p), [])):
            entry = describe_handle(h, now_ms, not state.done and p not in state.committed)
            entry["decided"] = True
            handles.setdefault(str(p), []).append(entry)
    kinds = sorted({e["kind"] for es in handles.values() for e in es})
    return {
        "sink": kinds[0] if len(kinds) == 1 else (kinds or None),
        "prepared": prepared,
        "decided": bool(state.decisions),
        "decided_partitions": sorted(decided),
        "decisions": len(state.decisions),
        "committed_partitions": sorted(state.committed),
        "done": state.done,
        "handles": handles,
    }


def _restart(plan: RecoveryPlan | None, offsets: bool, spark_committed: bool,
             replayed: bool) -> list[str]:
    """What a restart does with the batch: the sink's recovery plan, then Spark's replay."""
    steps = plan.steps() if plan is not None and not plan.done else []
    if offsets and not spark_committed and replayed:
        if plan is not None and plan.decided:
            steps.append("Spark replays it (committed partitions write nothing)")
        else:
            steps.append("Spark replays it from the same offsets")
    if not steps:
        steps.append("nothing")
    return steps


def inspect_checkpoint(location: str, *, batches: int | None = DEFAULT_BATCHES,
                       batch: int | None = None, now: float | None = None) -> dict[str, Any]:
    """The report, as a JSON-able dict (secrets redacted). `batches`: how many of the latest
    batches (None: all); `batch`: that one only. Batches the sink has not settled are shown
    whatever the window."""
    cp = SparkCheckpoint(location)
    now = time.time() if now is None else now
    now_ms = int(now * 1000)
    txlog = sink_log(cp)
    offset_ids = cp.offset_batches()
    commit_ids = set(cp.committed_batches())
    log_ids = txlog.batches()
    pending = txlog.pending()
    every = sorted(set(offset_ids) | commit_ids | set(log_ids))
    if batch is not None:
        if batch not in every:
            raise NoSuchBatch(
                f"batch {batch} has no record in {cp.location}: no offsets/{batch}, no "
                f"commits/{batch}, no eos-sink/{batch} (batches known: {_span(every)})"
            )
        shown = [batch]
    else:
        window = every if batches is None else every[-batches:] if batches > 0 else []
        shown = sorted(set(window) | set(pending))
    # Spark replays the last batch of its offset log when it is not committed.
    replayed = offset_ids[-1] if offset_ids and offset_ids[-1] not in commit_ids else None
    reports = []
    restart: list[str] = []
    for b in shown:
        entry = cp.offsets(b)
        previous = cp.offsets(b - 1) if entry is not None and b > 0 else None
        state = txlog.state(b) if b in log_ids else None
        plan = plan_recovery(state) if state is not None else None
        steps = _restart(plan, entry is not None, b in commit_ids, b == replayed)
        report = {
            "batch": b,
            "spark": {
                "offsets_logged": entry is not None,
                "batch_timestamp_ms": entry.batch_timestamp_ms if entry else None,
                "committed": b in commit_ids,
            },
            "source": _source_report(entry, previous) if entry is not None else [],
            "sink_log": _sink_report(state, now_ms) if state is not None else None,
            "restart": steps,
        }
        if steps != ["nothing"]:
            restart.append(f"batch {b}: " + "; ".join(steps))
        reports.append(report)
    leftovers = cp.unfinished_first_offsets()
    if leftovers:
        restart.insert(0, f"fail: Spark refuses to start, as offsets/ holds the unfinished "
                          f"write of batch 0's offsets ({', '.join(leftovers)}), left by a kill "
                          "while Spark wrote it; nothing was read or written for batch 0: "
                          "`kafka-eos resolve --apply` removes it")
    idle = idle_seconds(cp, now)
    return redact({
        "checkpoint": cp.location,
        "query_id": cp.query_id(),
        "spark": {
            "offsets": _span(offset_ids),
            "last_offsets_batch": offset_ids[-1] if offset_ids else None,
            "last_committed_batch": max(commit_ids) if commit_ids else None,
        },
        "sink_log": {"batches": _span(log_ids), "pending": pending},
        "last_write": ({"seconds_ago": round(idle[0], 1),
                        "file": idle[1][len(cp.root):].lstrip("/")} if idle else None),
        "restart": restart or ["nothing: the checkpoint is settled"],
        "batches": reports,
    })


def _span(ids: list[int] | set[int]) -> str:
    ids = sorted(ids)
    if not ids:
        return "none"
    if ids == list(range(ids[0], ids[-1] + 1)):
        return str(ids[0]) if len(ids) == 1 else f"{ids[0]}-{ids[-1]}"
    return ", ".join(map(str, ids))


# -- text -----------------------------------------------------------------------------------


def render_text(report: dict[str, Any], *, summary_only: bool = False) -> str:
    """The report for a terminal: a summary, then one paragraph per batch."""
    s = report["spark"]
    lines = [f"checkpoint {report['checkpoint']}"
             + (f" (query {report['query_id']})" if report["query_id"] else "")]
    committed = s["last_committed_batch"]
    lines.append(f"  Spark: offsets logged for batches {s['offsets']}; committed through "
                 f"{'batch ' + str(committed) if committed is not None else 'none yet'}")
    sl = report["sink_log"]
    lines.append(f"  sink log (eos-sink): batches {sl['batches']}; pending: "
                 f"{', '.join(map(str, sl['pending'])) or 'none'}")
    if report["last_write"]:
        lw = report["last_write"]
        lines.append(f"  last write: {_ago(lw['seconds_ago'])} ({lw['file']})")
    lines.append("  a restart would:")
    lines.extend(f"    {step}" for step in report["restart"])
    if summary_only:
        return "\n".join(lines) + "\n"
    for b in report["batches"]:
        lines.append("")
        lines.extend(_batch_lines(b))
    return "\n".join(lines) + "\n"


def _batch_lines(b: dict[str, Any]) -> list[str]:
    sp = b["spark"]
    head = f"batch {b['batch']}: Spark "
    head += ("committed" if sp["committed"] else
             "offsets logged, not committed" if sp["offsets_logged"] else "no offsets logged")
    sink = b["sink_log"]
    if sink is None:
        head += "; sink log: none (collected, or nothing written)"
    else:
        state = "done" if sink["done"] else (
            f"decided, committed {len(sink['committed_partitions'])}/"
            f"{len(sink['decided_partitions'])}" if sink["decided"] else "prepared, not decided")
        head += f"; sink {sink['sink'] or '?'}: {state}"
    out = [head]
    for src in b["source"]:
        if "topic" not in src:
            out.append(f"  source {src['source']}: {src['offsets'][:200]}")
            continue
        shown, rest = _partitions_shown(src["partitions"])
        parts = ", ".join(
            f"p{p} {_o(r['start'])}->{r['end']}" + (f" ({r['count']})" if r["count"] is not None else "")
            for p, r in shown.items())
        if rest:
            parts += f" and {rest} more partitions"
        total = f"; {src['total']} offsets" if src["total"] is not None else "; start unknown (first batch)"
        out.append(f"  source {src['topic']}: {parts}{total}")
    if sink is not None and not sink["done"]:
        for p, entries in sink["handles"].items():
            for e in entries:
                out.append(f"  p{p} {_handle_text(e)}")
    out.append("  restart: " + "; ".join(b["restart"]))
    return out


#: A topic's partitions named in the text report of a batch, at most (the JSON report has all).
TEXT_PARTITIONS = 8


def _partitions_shown(parts: dict[str, dict[str, Any]]) -> tuple[dict[str, dict[str, Any]], int]:
    """The partitions a batch's text line names: all of them up to TEXT_PARTITIONS, else those
    that moved most in the batch (in partition order), and how many are left out: a line per
    topic whatever its partition count (1,000 partitions made a line of some 20 kB a batch)."""
    if len(parts) <= TEXT_PARTITIONS:
        return parts, 0
    most = sorted(parts, key=lambda p: (-(parts[p]["count"] or 0), int(p)))[:TEXT_PARTITIONS]
    return {p: parts[p] for p in sorted(most, key=int)}, len(parts) - TEXT_PARTITIONS


def _handle_text(e: dict[str, Any]) -> str:
    flag = "decided" if e.get("decided") else "undecided"
    kind = sink_kind(e["kind"])
    text = kind.text(e) if kind is not None else f"handle with keys {e.get('keys')}"
    return f"{flag} {text}"


def _o(v: int | None) -> str:
    return "?" if v is None else str(v)


def _ago(seconds: float) -> str:
    return duration_text(seconds) + " ago"


def render_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, sort_keys=False)
