"""Which table a query's checkpoint has committed into, so that a table deleted or replaced while
the query was stopped fails the restart loudly instead of being silently created again.

A sink that creates its table on the first batch cannot tell "no table yet" from "the table
was deleted": both look like a missing table, and the restarted query would create a new one
holding only the rows after the restart (the earlier batches are in Spark's commit log, so they
are never replayed). The checkpoint knows better: the sink records the identity of its table
(Delta's table id, PostgreSQL's relation OID) here, beside its transaction log, the first time
it sees or creates it; each start compares. `allowNewTable=true` is the user's explicit way to
start a new table on the same checkpoint.

Checkpoints written before this record existed have none: the record is written at their next
start, and only from then on is the table checked.
"""

from __future__ import annotations

import json
import threading

from connectors.core.options import OptionError
from sinks.query_identity import last_committed_batch
from sinks.txn_log import TransactionLog

#: Beside the template's `eos-sink` transaction log.
RECORD_FILE = "eos-sink-target.json"

_CACHE: dict[str, dict[str, str]] = {}
_LOCK = threading.Lock()


class TargetIdentity:
    """The record of `<checkpointLocation>/eos-sink-target.json`: target name -> identity."""

    def __init__(self, checkpoint_location: str) -> None:
        txlog = TransactionLog(checkpoint_location)  # the same filesystem and scheme rules
        self.checkpoint_location = checkpoint_location
        self.fs = txlog.fs
        self.path = f"{txlog.root.rsplit('/', 1)[0]}/{RECORD_FILE}"

    def recorded(self) -> dict[str, str]:
        """Read once per process and checkpoint: the identity changes only through record()."""
        with _LOCK:
            if self.path not in _CACHE:
                try:
                    with self.fs.open_input_stream(self.path) as f:
                        _CACHE[self.path] = dict(json.loads(f.read().decode()))
                except FileNotFoundError:
                    _CACHE[self.path] = {}
            return dict(_CACHE[self.path])

    def record(self, target: str, identity: str) -> None:
        records = self.recorded()
        if records.get(target) == identity:
            return
        records[target] = identity
        parent = self.path.rsplit("/", 1)[0]
        self.fs.create_dir(parent, recursive=True)
        tmp = f"{self.path}.tmp"
        with self.fs.open_output_stream(tmp) as out:
            out.write(json.dumps(records, indent=1, sort_keys=True).encode())
        self.fs.move(tmp, self.path)
        with _LOCK:
            _CACHE[self.path] = records

    def check(self, target: str, current: str | None, *, allow_new: bool, what: str,
              sink: str) -> None:
        """Refuse a `target` that is gone (`current` None) or is another one than the recorded
        identity, unless `allow_new`; record the current identity when there is none yet (or
        when a new table is allowed). `what` names the target for the message ("the Delta
        table at /data/t")."""
        expected = self.recorded().get(target)
        if expected is None or allow_new:
            if current is not None:
                self.record(target, current)
            return
        if current == expected:
            return
        last = last_committed_batch(self.checkpoint_location)
        happened = ("was deleted" if current is None
                    else f"was replaced by another one (id {current}, not {expected})")
        raise OptionError(
            "allowNewTable",
            f"{sink}: {what} {happened} while this query was stopped, but this query's "
            f"checkpoint ({self.checkpoint_location}) committed batches up to batch {last} into "
            f"it (table id {expected}). Writing on would hold only the rows from now on, "
            "silently. Restore the table, or start the query on a new checkpoint (it then reads "
            "its source from startingOffsets again), or set allowNewTable=true to start a new "
            "table on this checkpoint knowingly",
        )


def forget_cached(checkpoint_location: str) -> None:
    """For tests that edit the record behind a process's back."""
    with _LOCK:
        _CACHE.pop(TargetIdentity(checkpoint_location).path, None)


__all__ = ["RECORD_FILE", "TargetIdentity", "forget_cached"]
