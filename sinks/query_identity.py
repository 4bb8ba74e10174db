"""What a sink reads of Spark's own checkpoint: the query's id and the batches Spark committed.

A sink whose store records "batch N is in" (Delta's `txn` action) must key that record on
something that changes when the checkpoint is reset: a new checkpoint on the same path starts
again at batch 0, and a key derived from the path would make the new query skip every batch the
old one wrote. Spark writes `<checkpointLocation>/metadata` (`{"id": "<uuid>"}`) when a query
first starts on a checkpoint and keeps it across restarts
(docs/design.md#production-conditions); delta-spark keys its streaming sink's `txn` on it too.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from connectors.core.paths import resolve_location

if TYPE_CHECKING:
    import pyarrow.fs as pafs
from sinks.txn_log import LOG_DIR, TransactionLog

IDENTITY_FILE = "identity.json"


def _retried(fs: pafs.FileSystem, what: str, fn):
    """Object storage: retried while it fails transiently (sinks/storage_retries.py)."""
    if fs.type_name == "local":
        return fn()
    import logging

    from sinks.storage_retries import with_storage_retries

    return with_storage_retries(fn, f"checkpoint: {what}", log=logging.getLogger("kafka_eos.sink"))


def _read(fs: pafs.FileSystem, path: str) -> bytes | None:
    def read() -> bytes | None:
        try:
            with fs.open_input_stream(path) as f:
                return f.read()
        except FileNotFoundError:
            return None

    return _retried(fs, f"reading {path}", read)


def query_id(checkpoint_location: str) -> str | None:
    """The id Spark gave the query that owns this checkpoint, if it has started."""
    loc = resolve_location("checkpointLocation", checkpoint_location)
    raw = _read(loc.fs, f"{loc.path}/metadata")
    return json.loads(raw.decode("utf-8")).get("id") if raw else None


def last_committed_batch(checkpoint_location: str) -> int:
    """The last batch Spark logged in `<checkpoint>/commits`; -1 if none."""
    import pyarrow.fs as pafs

    loc = resolve_location("checkpointLocation", checkpoint_location)
    selector = pafs.FileSelector(f"{loc.path}/commits", allow_not_found=True)
    infos = _retried(loc.fs, f"listing {selector.base_dir}", lambda: loc.fs.get_file_info(selector))
    return max((int(i.base_name) for i in infos if i.base_name.isdigit()), default=-1)


def recorded_writer_identity(txlog: TransactionLog) -> str | None:
    """The writer identity recorded in a checkpoint's transaction log; None before its first
    exactly-once start (and in checkpoints of versions that recorded none)."""
    raw = txlog.read_record(IDENTITY_FILE)
    return json.loads(raw.decode("utf-8"))["writer"] if raw else None


def writer_identity(checkpoint_location: str, *, legacy: str) -> str:
    """This checkpoint's writer identity, fixed at its first exactly-once start and recorded in
    the transaction log: the query id for a new checkpoint; `legacy` (the path-derived id of
    earlier versions) for a checkpoint that already has batches, so that upgrading never
    changes the key under which the store recorded them."""
    loc = resolve_location("checkpointLocation", checkpoint_location)
    path = f"{loc.path}/{LOG_DIR}/{IDENTITY_FILE}"
    raw = _read(loc.fs, path)
    if raw:
        return json.loads(raw.decode("utf-8"))["writer"]
    if last_committed_batch(checkpoint_location) >= 0:
        identity = legacy
    else:
        qid = query_id(checkpoint_location)
        if qid is None:
            raise RuntimeError(
                f"no query id in {checkpoint_location}/metadata: the sink's checkpointLocation "
                "must be the query's own checkpoint (Spark writes that file at query start)"
            )
        identity = qid
    try:
        TransactionLog(checkpoint_location).write_record(
            IDENTITY_FILE, json.dumps({"writer": identity}).encode("utf-8")
        )
    except FileExistsError:  # recorded concurrently: that one stands
        return json.loads((_read(loc.fs, path) or b"{}").decode("utf-8"))["writer"]
    return identity
