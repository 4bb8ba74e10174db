"""`demo --upsert`'s change stream and its verdict, without Kafka or Spark: the stream holds
what the demo claims (late changes, deletes followed by older updates, re-created keys), the
demo's fold is the crash matrix's independent fold, and the verification fails on each kind of
wrong table."""

from __future__ import annotations

import collections
import json

from connectors.demo import verify
from connectors.demo.changes import Change, fold, sample_changes, stream_facts
from integration_tests.support import crash_matrix

PARTITIONS = 3


def _delivered(changes: list[Change]) -> dict[tuple[int, int], int]:
    """(partition, offset) -> event id, as the producer's delivery reports give it."""
    offsets = collections.Counter()
    out = {}
    for c in changes:
        p = c.id % PARTITIONS
        out[(p, offsets[p])] = c.event_id
        offsets[p] += 1
    return out


def _as_crash_matrix_events(changes: list[Change]) -> list[tuple]:
    return [(c.id, c.lsn, "d" if c.op == "d" else "u", c.name) for c in changes]


def test_the_demo_fold_is_the_crash_matrix_fold():
    for changes in (sample_changes(3000, 150, seed=5), sample_changes(20_000, 1000, seed=9)):
        theirs = crash_matrix.fold(_as_crash_matrix_events(changes))
        ours = {k: (c.lsn, c.name) for k, c in fold(changes).items()}
        assert ours == theirs
    events = crash_matrix.change_events()
    as_changes = [Change(i, k, seq, op, v, None, None, 0) for i, (k, seq, op, v) in enumerate(events)]
    assert {k: (c.lsn, c.name) for k, c in fold(as_changes).items()} == crash_matrix.fold(events)


def test_the_stream_holds_late_changes_deletes_late_updates_after_delete_and_recreations():
    changes = sample_changes(3000, 150, seed=11)
    assert len(changes) == 3000
    by_id = {c.event_id: c for c in changes}
    facts = stream_facts(_delivered(changes), by_id)
    assert facts.changes == 3000 and facts.keys == 150
    assert facts.inserts + facts.updates + facts.deletes == 3000
    assert facts.deletes > 100 and facts.late > 50 and facts.recreated > 20
    assert facts.late_after_delete >= 10
    # lsn orders a key's changes: unique per key
    assert len({(c.id, c.lsn) for c in changes}) == len(changes)
    # keys deleted for good, then updated with an older lsn at the end: the fold drops them
    expected = fold(changes)
    tail_keys = {c.id for c in changes[-40:] if "(late)" in (c.name or "")}
    assert tail_keys and not tail_keys & set(expected)
    # a Debezium envelope: a delete's key is in `before`, its `after` is null
    delete = next(c for c in changes if c.op == "d")
    envelope = json.loads(delete.value())
    assert envelope["after"] is None and envelope["before"]["id"] == delete.id
    assert envelope["source"]["lsn"] == delete.lsn and envelope["op"] == "d"


def _table_of(changes: list[Change], delivered) -> list[dict]:
    position = {e: pos for pos, e in delivered.items()}
    return [{"id": k, "lsn": c.lsn, "name": c.name, "email": c.email,
             "source_partition": position[c.event_id][0],
             "source_offset": position[c.event_id][1]} for k, c in fold(changes).items()]


def test_the_verification_passes_the_fold_and_fails_each_wrong_table():
    changes = sample_changes(2000, 100, seed=3)
    delivered = _delivered(changes)
    by_id = {c.event_id: c for c in changes}
    rows = _table_of(changes, delivered)
    good = verify.check_upsert("t", rows, delivered, by_id, [0, 1, 2], [0, 1, 2])
    assert good.ok and good.rows == good.keys_expected == len(rows)
    deleted_key = next(c.id for c in reversed(changes) if c.id not in fold(changes))

    def verdict(rows=rows, batches=(0, 1, 2), txns=(0, 1, 2)):
        return verify.check_upsert("t", rows, delivered, by_id, list(batches), list(txns))

    stale = [dict(r, lsn=r["lsn"] - 1) if i == 0 else r for i, r in enumerate(rows)]
    altered = [dict(r, email="x") if i == 0 else r for i, r in enumerate(rows)]
    cases = {
        "missing": verdict(rows=rows[1:]),
        "duplicate_keys": verdict(rows=rows + rows[:1]),
        "resurrected": verdict(rows=rows + [dict(rows[0], id=deleted_key)]),
        "stale": verdict(rows=stale),
        "batches_applied_twice": verdict(txns=(0, 1, 1, 2)),
        "batches_not_in_table": verdict(txns=(0, 2)),
    }
    for field, check in cases.items():
        assert not check.ok and getattr(check, field) == 1, (field, check)
    assert verdict(rows=altered).stale == 1
    text = verify.render_upsert(cases["stale"], kills=1, elapsed_s=1.0, processing_s=1.0)
    assert "FAILED" in text and "stale or altered rows" in text
