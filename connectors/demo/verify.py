"""The demo's verdict: each sink's output read back independently of the sinks and compared,
record by record, with what the broker acknowledged to the producer.

Delta rows are read with deltalake; Kafka output with the marker-aware oracle
(`connectors.testing.kafka_oracle`), which counts a transactional record only once its COMMIT
marker is in the log, whatever the broker's read_committed does.
"""

from __future__ import annotations

import collections
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from connectors.demo.events import Event
from connectors.testing.kafka_oracle import committed

# (source partition, source offset, event id, amount in cents): what identifies an output row.
OutputRow = tuple[int, int, int, int]


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
    data = table.to_pyarrow_table(columns=cols)
    return list(zip(*(data.column(c).to_pylist() for c in cols)))


def kafka_rows(bootstrap_servers: str, topic: str,
               options: Mapping[str, str] | None = None) -> list[OutputRow]:
    """The topic's committed rows, read with the client settings `options` (librdkafka names:
    TLS, SASL)."""
    rows = []
    for record in committed(bootstrap_servers, topic, options=dict(options or {}) or None):
        v = json.loads(record.value)
        rows.append((v["source_partition"], v["source_offset"], v["event_id"], v["amount_cents"]))
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
