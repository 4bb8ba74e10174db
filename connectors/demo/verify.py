"""The demo's verdict: each sink's output read back independently of the sinks and compared,
record by record, with what the broker acknowledged to the producer.

Delta rows are read with deltalake; Kafka output with the marker-aware oracle
(`connectors.local.kafka_oracle`), which counts a transactional record only once its COMMIT
marker is in the log, whatever the broker's read_committed does.
"""

from __future__ import annotations

import collections
import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import pyarrow.fs as pafs
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from confluent_kafka.serialization import SerializationError

from connectors.demo.events import Event
from connectors.local.kafka_oracle import committed

if TYPE_CHECKING:
    import pyarrow as pa

# (source partition, source offset, event id, amount in cents): what identifies an output row.
OutputRow = tuple[int, int, int, int]
#: An output value that does not decode: counted as unexpected (no input record has it).
UNDECODABLE: OutputRow = (-1, -1, -1, -1)


@dataclass(frozen=True)
class SinkCheck:
    sink: str
    rows: int
    duplicates: int  # rows beyond the first for one input record
    missing: int  # input records with no row
    unexpected: int  # rows that match no input record, or carry the wrong content
    batches: int  # micro-batches in Spark's commit log

    @property
    def ok(self) -> bool:
        return self.duplicates == 0 and self.missing == 0 and self.unexpected == 0


def check(
    sink: str,
    rows: Iterable[OutputRow],
    delivered: dict[tuple[int, int], int],
    events: dict[int, Event],
    batches: int,
) -> SinkCheck:
    counts = collections.Counter(rows)
    seen = collections.Counter()
    unexpected = 0
    for (partition, offset, event_id, cents), n in counts.items():
        want_id = delivered.get((partition, offset))
        if want_id is None or want_id != event_id or cents != round(events[want_id].amount * 100):
            unexpected += n
            continue
        seen[(partition, offset)] += n
    return SinkCheck(
        sink=sink,
        rows=sum(counts.values()),
        duplicates=sum(n - 1 for n in seen.values() if n > 1),
        missing=sum(1 for key in delivered if key not in seen),
        unexpected=unexpected,
        batches=batches,
    )


def delta_rows(path: str) -> list[OutputRow]:
    try:
        table = DeltaTable(path)
    except TableNotFoundError:  # nothing was ever committed
        return []
    cols = ["source_partition", "source_offset", "event_id", "amount_cents"]
    data = _read(table, cols)
    return list(zip(*(data.column(c).to_pylist() for c in cols)))


def _read(table: DeltaTable, columns: list[str]) -> pa.Table:
    """The table's columns, its files read through pyarrow's own file system for the table's
    URI. deltalake's `to_pyarrow_table()` reads them through deltalake's Python file system
    handler, and a process ending right after such a read aborted in std::terminate (exit -6)
    in most runs here (the demo printed its verdict and exited -6); scanned on one thread, in 3
    of 60; through pyarrow's file system, in none of 120 (two at a time, sharing 2 cores)."""
    fs, root = pafs.FileSystem.from_uri(table.table_uri)
    return table.to_pyarrow_dataset(filesystem=pafs.SubTreeFileSystem(root, fs)).to_table(
        columns=columns)


def kafka_rows(bootstrap_servers: str, topic: str,
               options: Mapping[str, str] | None = None,
               decode: Callable[[bytes], dict] = json.loads) -> list[OutputRow]:
    """The topic's committed rows, read with the client settings `options` (librdkafka names:
    TLS, SASL), each value decoded by `decode` (JSON; `demo --format avro`: confluent-kafka's
    AvroDeserializer)."""
    rows = []
    for record in committed(bootstrap_servers, topic, options=dict(options or {}) or None):
        try:
            v = decode(record.value)
            rows.append((v["source_partition"], v["source_offset"], v["event_id"],
                         v["amount_cents"]))
        except (ValueError, KeyError, TypeError, SerializationError):
            rows.append(UNDECODABLE)  # a value that does not decode is altered: not a crash
    return rows


def spark_batches(checkpoint: str) -> int:
    """Micro-batches Spark recorded as complete (its commit log) for one query."""
    commits = os.path.join(checkpoint, "commits")
    if not os.path.isdir(commits):
        return 0
    return sum(1 for name in os.listdir(commits) if name.isdigit())


def render(
    produced: int, checks: list[SinkCheck], *, kills: int, elapsed_s: float, processing_s: float
) -> str:
    """The verification table: one column per sink."""
    def row(label: str, values: list[object]) -> str:
        return f"  {label:<28}" + "".join(f"{v!s:>16}" for v in values)

    verdict = ["OK" if c.ok else "FAILED" for c in checks]
    lines = [
        row("", [c.sink for c in checks]),
        row("records produced", [f"{produced:,}"] * len(checks)),
        row("rows committed", [f"{c.rows:,}" for c in checks]),
        row("duplicates", [c.duplicates for c in checks]),
        row("missing", [c.missing for c in checks]),
        row("unexpected or altered", [c.unexpected for c in checks]),
        row("micro-batches", [c.batches for c in checks]),
        row("exactly once", verdict),
        "",
        f"  pipeline kills (SIGKILL)    {kills}",
        (
            f"  throughput                  {produced / processing_s if processing_s else 0:,.0f} "
            f"records/s per sink, over the pipeline's {processing_s:.1f} s of running time "
            "(start-ups and restarts included; the input is rate-limited by --rate)"
        ),
        f"  elapsed                     {elapsed_s:.1f} s",
    ]
    return "\n".join(lines)


def as_json(produced: int, checks: list[SinkCheck], **extra: object) -> str:
    return json.dumps(
        {"produced": produced, "sinks": [asdict(c) | {"ok": c.ok} for c in checks], **extra},
        indent=2,
    )


# -- demo --upsert: the table against the fold of the change stream -----------------------------

#: The upsert table's columns the verification reads (sequence, values, lineage).
UPSERT_COLUMNS = ["id", "lsn", "name", "email", "source_partition", "source_offset"]


@dataclass(frozen=True)
class UpsertCheck:
    """`demo --upsert`'s verdict: the Delta table against the fold of the delivered changes
    (connectors.demo.changes.fold, computed without the sink's code)."""

    sink: str
    stream: dict  # connectors.demo.changes.StreamFacts, as a dict
    keys_expected: int  # keys the fold keeps (present at the end)
    rows: int  # rows in the table
    duplicate_keys: int  # rows beyond the first for one key
    missing: int  # keys the fold keeps, absent from the table
    resurrected: int  # keys the fold deletes (or never saw), present in the table
    stale: int  # rows whose sequence, values or source position are not their key's winner's
    batches: int  # micro-batches in Spark's commit log
    batches_applied_twice: int  # batch ids whose txn action is in the table more than once
    batches_not_in_table: int  # batches Spark committed with no txn action in the table

    @property
    def ok(self) -> bool:
        return not (self.duplicate_keys or self.missing or self.resurrected or self.stale
                    or self.batches_applied_twice or self.batches_not_in_table)


def check_upsert(
    sink: str,
    rows: list[dict],
    delivered: dict[tuple[int, int], int],
    changes: dict,
    batches: list[int],
    txn_versions: list[int],
) -> UpsertCheck:
    """`rows`: the table's rows (UPSERT_COLUMNS); `changes`: event id -> Change; `batches`:
    the batch ids of Spark's commit log; `txn_versions`: the table's txn versions of the
    sink's appId, one per commit that carries one."""
    from connectors.demo.changes import fold, stream_facts

    position = {event_id: pos for pos, event_id in delivered.items()}
    expected = fold([changes[e] for e in delivered.values()])
    seen = collections.Counter(r["id"] for r in rows)
    stale = 0
    for r in rows:
        want = expected.get(r["id"])
        if want is None:
            continue
        got = (r["lsn"], r["name"], r["email"], (r["source_partition"], r["source_offset"]))
        if got != (want.lsn, want.name, want.email, position[want.event_id]):
            stale += 1
    applied = collections.Counter(txn_versions)
    return UpsertCheck(
        sink=sink,
        stream=asdict(stream_facts(delivered, changes)),
        keys_expected=len(expected),
        rows=len(rows),
        duplicate_keys=sum(n - 1 for n in seen.values() if n > 1),
        missing=sum(1 for k in expected if k not in seen),
        resurrected=sum(1 for k in seen if k not in expected),
        stale=stale,
        batches=len(batches),
        batches_applied_twice=sum(1 for n in applied.values() if n > 1),
        batches_not_in_table=sum(1 for b in batches if b not in applied),
    )


def upsert_rows(path: str) -> list[dict]:
    try:
        table = DeltaTable(path)
    except TableNotFoundError:
        return []
    return _read(table, UPSERT_COLUMNS).to_pylist()


def txn_versions(path: str) -> dict[str, list[int]]:
    """appId -> the txn versions in the table's log, one per commit that carries one: read from
    the JSON commits themselves, not through the sink (a demo's table keeps all of them: its
    log is days younger than delta.logRetentionDuration)."""
    found: dict[str, list[int]] = {}
    log_dir = os.path.join(path, "_delta_log")
    if not os.path.isdir(log_dir):
        return found
    for name in sorted(os.listdir(log_dir)):
        if name.endswith(".json") and name[:-5].isdigit():
            with open(os.path.join(log_dir, name)) as f:
                for action in map(json.loads, f):
                    if "txn" in action:
                        found.setdefault(action["txn"]["appId"], []).append(
                            action["txn"]["version"])
    return found


def spark_batch_ids(checkpoint: str) -> list[int]:
    commits = os.path.join(checkpoint, "commits")
    if not os.path.isdir(commits):
        return []
    return sorted(int(n) for n in os.listdir(commits) if n.isdigit())


def render_upsert(c: UpsertCheck, *, kills: int, elapsed_s: float, processing_s: float) -> str:
    s = c.stream

    def row(label: str, value: object) -> str:
        return f"  {label:<46}{value!s:>12}"

    lines = [
        row("", c.sink),
        row("changes produced", f"{s['changes']:,}"),
        row("  inserts / updates / deletes",
            f"{s['inserts']:,} / {s['updates']:,} / {s['deletes']:,}"),
        row("  late (after a newer change of their key)", f"{s['late']:,}"),
        row("  late updates after their key's delete", f"{s['late_after_delete']:,}"),
        row("  keys re-created after a delete", f"{s['recreated']:,}"),
        row("keys in the fold (present at the end)", f"{c.keys_expected:,}"),
        row("rows in the table", f"{c.rows:,}"),
        row("duplicate keys", c.duplicate_keys),
        row("missing keys", c.missing),
        row("deleted keys present", c.resurrected),
        row("stale or altered rows", c.stale),
        row("micro-batches", c.batches),
        row("batches applied twice", c.batches_applied_twice),
        row("batches missing from the table", c.batches_not_in_table),
        row("table = fold of the changes", "OK" if c.ok else "FAILED"),
        "",
        f"  pipeline kills (SIGKILL)    {kills}",
        (
            f"  throughput                  {s['changes'] / processing_s if processing_s else 0:,.0f} "
            f"changes/s, over the pipeline's {processing_s:.1f} s of running time "
            "(start-ups and restarts included; the input is rate-limited by --rate)"
        ),
        f"  elapsed                     {elapsed_s:.1f} s",
    ]
    return "\n".join(lines)
