"""`demo --upsert`'s input: a table's change stream as Debezium writes it, and its fold.

A simulated database table `customers(id, name, email)` takes inserts, updates and deletes;
each change gets the database's log position (`lsn`, unique and growing: what orders the
changes of a key) and becomes a Debezium-style JSON envelope
`{"before", "after", "op", "ts_ms", "source": {"lsn"}}` keyed by id, produced (by the demo's
EventProducer) to the partition `id % partitions`, so a key's changes stay in one partition.
Then the delivery order is disturbed as change streams are in production (a connector restarted
from an older position, two producers, a re-snapshot):

* **late changes**: one change in ten is delivered up to LATE_BY_MAX positions later than its
  place, often after a newer change of its key;
* **deletes then late updates**: for some deleted keys that are not changed again, an update
  older than the delete (its lsn between the key's previous change and the delete) is delivered
  at the stream's end, batches after the delete: only the sink's tombstones keep the key out;
* **re-created keys**: a deleted key inserted again with a newer lsn is present.

`fold()` is the table the stream must end as, computed here in plain Python, independently of
the sink's own fold and MERGE (sinks/delta/fold.py, upsert.py): per key the change with the
highest lsn wins (a delete winning a tie, as the crash matrix's fold has it:
integration_tests/support/crash_matrix.py; a unit test checks the two agree), and
a key whose winner is a delete is absent.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

#: The Debezium envelope the pipeline parses (`from_json`), and the table's row.
ROW_TYPE = "struct<id:bigint,name:string,email:string>"
ENVELOPE_TYPE = (f"struct<before:{ROW_TYPE},after:{ROW_TYPE},op:string,ts_ms:bigint,"
                 "source:struct<lsn:bigint>>")
#: lsn step between two changes of the database: room for a late update below a delete.
LSN_STEP = 10
LATE_SHARE = 0.1
LATE_BY_MAX = 400
#: At most this share of the deletes gets an update older than it, delivered at the end.
LATE_AFTER_DELETE_SHARE = 0.5


@dataclass(frozen=True)
class Change:
    """One change of the customers table. `event_id`: its index in the delivery order (what
    the producer's delivery reports map (partition, offset) to)."""

    event_id: int
    id: int
    lsn: int
    op: str  # "c" insert, "u" update, "d" delete
    name: str | None  # the row after the change (None for a delete)
    email: str | None
    before: tuple[str, str] | None  # the row before it (name, email), as Debezium sends it
    ts_ms: int

    @property
    def key_id(self) -> int:
        """The Kafka key and partitioner input (EventProducer)."""
        return self.id

    def value(self) -> bytes:
        def image(row: tuple[str | None, str | None] | None) -> dict | None:
            return None if row is None else {"id": self.id, "name": row[0], "email": row[1]}

        after = None if self.op == "d" else (self.name, self.email)
        return json.dumps({"before": image(self.before), "after": image(after), "op": self.op,
                           "ts_ms": self.ts_ms, "source": {"lsn": self.lsn}},
                          separators=(",", ":")).encode()


def sample_changes(count: int, keys: int, seed: int) -> list[Change]:
    """About `count` changes of a table of up to `keys` rows, in delivery order (see the module
    docstring)."""
    rng = random.Random(seed)
    rows: dict[int, tuple[str, str]] = {}  # the database's current rows
    deleted: list[int] = []
    history: list[tuple[int, int, str, tuple[str, str] | None, tuple[str, str] | None]] = []
    next_id = 0
    lsn = 1_000
    ts = 1_767_225_600_000  # 2026-01-01T00:00:00Z

    def person(k: int, version: int) -> tuple[str, str]:
        first = rng.choice(("ada", "alan", "grace", "edsger", "barbara", "donald", "frances"))
        return f"{first.title()} #{k} v{version}", f"{first}.{k}.v{version}@example.com"

    def change(n: int) -> None:
        nonlocal next_id, lsn
        lsn += LSN_STEP
        roll = rng.random()
        if next_id < keys and (len(rows) < keys // 2 or roll < 0.2):
            k, op = next_id, "c"
            next_id += 1
        elif deleted and roll < (0.08 if len(deleted) > keys // 10 else 0.02):
            k, op = deleted.pop(rng.randrange(len(deleted))), "c"  # re-created
        elif len(rows) > 1 and roll < 0.16:
            k, op = rng.choice(list(rows)), "d"
        else:
            k, op = rng.choice(list(rows)), "u"
        before = rows.get(k)
        if op == "d":
            del rows[k]
            deleted.append(k)
            history.append((k, lsn, op, before, None))
        else:
            rows[k] = person(k, n)
            history.append((k, lsn, op, before, rows[k]))

    # Most of the stream; then some deleted keys are left deleted for good, each to get an
    # update older than its delete, delivered at the end; then the rest of the stream.
    budget = max(1, int(count * 0.02))
    for n in range(count - 2 * budget):
        change(n)
    rng.shuffle(deleted)
    parked = set(deleted[:min(budget, int(len(deleted) * LATE_AFTER_DELETE_SHARE))])
    deleted[:] = [k for k in deleted if k not in parked]
    last_delete = {k: (s, before) for k, s, op, before, _ in history if op == "d" and k in parked}
    tail = []
    for k in sorted(parked):  # a parked key's last change is its delete
        delete_lsn, before = last_delete[k]
        old = before or ("?", "?")
        tail.append((k, delete_lsn - LSN_STEP // 2, "u", old,
                     (old[0] + " (late)", "late." + old[1])))
    rng.shuffle(tail)
    while len(history) + len(tail) < count:
        change(len(history))

    # The delivery order: most changes in lsn order, one in ten later than its place.
    placed = [(float(i), h) for i, h in enumerate(history)]
    placed = [(p + rng.randint(1, LATE_BY_MAX) + 0.5 if rng.random() < LATE_SHARE else p, h)
              for p, h in placed]
    placed.sort(key=lambda ph: ph[0])
    ordered = [h for _, h in placed] + tail
    return [
        Change(event_id=i, id=k, lsn=s, op=op, name=after[0] if after else None,
               email=after[1] if after else None, before=before, ts_ms=ts + (s - 1_000) * 7)
        for i, (k, s, op, before, after) in enumerate(ordered)
    ]


def fold(changes: list[Change]) -> dict[int, Change]:
    """The table the stream ends as: per key its winning change (highest lsn, a delete winning
    a tie), deleted keys absent. Independent of the sink's code."""
    best: dict[int, Change] = {}
    for c in changes:
        old = best.get(c.id)
        if old is None or (c.lsn, c.op == "d") > (old.lsn, old.op == "d"):
            best[c.id] = c
    return {k: c for k, c in best.items() if c.op != "d"}


@dataclass(frozen=True)
class StreamFacts:
    """What the delivered stream holds, counted from the delivery order (per partition, by
    offset: a key's changes are in one partition)."""

    changes: int
    inserts: int
    updates: int
    deletes: int
    keys: int
    late: int  # delivered after a newer change of their key
    late_after_delete: int  # late, and a newer delete of their key was delivered before
    recreated: int  # inserts of a key that had been deleted


def stream_facts(delivered: dict[tuple[int, int], int], by_id: dict[int, Change]) -> StreamFacts:
    newest: dict[int, int] = {}
    newest_delete: dict[int, int] = {}
    late = late_after_delete = 0
    ops = {"c": 0, "u": 0, "d": 0}
    for _pos, event_id in sorted(delivered.items()):
        c = by_id[event_id]
        ops[c.op] += 1
        if c.lsn < newest.get(c.id, -1):
            late += 1
            if c.lsn < newest_delete.get(c.id, -1):
                late_after_delete += 1
        newest[c.id] = max(c.lsn, newest.get(c.id, -1))
        if c.op == "d":
            newest_delete[c.id] = max(c.lsn, newest_delete.get(c.id, -1))
    # re-created: in the database's order (lsn), an insert of a key after its delete
    recreated = 0
    deleted: set[int] = set()
    for c in sorted((by_id[e] for e in delivered.values()), key=lambda c: c.lsn):
        if c.op == "d":
            deleted.add(c.id)
        elif c.op == "c" and c.id in deleted:
            recreated += 1
            deleted.discard(c.id)
    return StreamFacts(changes=len(delivered), inserts=ops["c"], updates=ops["u"],
                       deletes=ops["d"], keys=len(newest), late=late,
                       late_after_delete=late_after_delete, recreated=recreated)
