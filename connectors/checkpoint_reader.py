"""Reading a Structured Streaming checkpoint without Spark: its offset and commit logs, its
query id, and how recently anything in it was written.

For the operator commands (`inspect`, `resolve`). Everything goes through pyarrow.fs
(connectors/core/paths.py `resolve_location`), so a checkpoint on `s3://`, `gs://`,
`abfss://` reads like a local one. Spark's layout (PySpark 4.3):

    <checkpoint>/metadata         {"id": "<query uuid>"}
    <checkpoint>/offsets/<n>      "v1", Spark's batch metadata JSON, then one line per source
    <checkpoint>/commits/<n>      exists once Spark committed batch n
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs

from connectors.core.paths import Location, resolve_location
from sinks import query_identity
from sinks.txn_log import LOG_DIR
from sources.offsets import METADATA_KEYS


class NotACheckpoint(ValueError):
    """The path holds no Structured Streaming checkpoint (no metadata, offsets or commits)."""


@dataclass(frozen=True)
class SourceOffsets:
    """One source's line of an offsets file: kafka-eos's {"topic": {"partition": offset}}
    as `partitions` (its "@topicIds" left out); any other source's offset kept as its raw
    text."""

    partitions: dict[tuple[str, int], int] | None
    raw: str


@dataclass(frozen=True)
class OffsetEntry:
    batch_id: int
    batch_timestamp_ms: int | None
    sources: list[SourceOffsets]


class SparkCheckpoint:
    """A query's checkpoint, read-only."""

    def __init__(self, location: str) -> None:
        try:
            self.loc: Location = resolve_location("checkpoint", location)
        except ValueError as e:
            raise NotACheckpoint(str(e)) from None
        self.location = self.loc.uri
        self.fs = self.loc.fs
        self.root = self.loc.path.rstrip("/")
        names = self._names(self.root)
        if names is None:
            raise NotACheckpoint(f"{location}: no such directory")
        if not {"metadata", "offsets", "commits", LOG_DIR} & set(names):
            raise NotACheckpoint(
                f"{location} is not a Structured Streaming checkpoint: it has no metadata, "
                "offsets/ or commits/ (give the query's checkpointLocation)"
            )

    # -- raw access -------------------------------------------------------------------------

    def _names(self, directory: str) -> list[str] | None:
        info = self.fs.get_file_info(directory)
        if info.type == pafs.FileType.NotFound:
            return None
        return [i.base_name for i in self.fs.get_file_info(pafs.FileSelector(directory))]

    def _read(self, path: str) -> str | None:
        try:
            with self.fs.open_input_stream(path) as f:
                return f.read().decode("utf-8")
        except FileNotFoundError:
            return None

    def _batch_ids(self, log: str) -> list[int]:
        names = self._names(f"{self.root}/{log}") or []
        return sorted(int(n) for n in names if n.isdigit())

    # -- what Spark logged ------------------------------------------------------------------

    def query_id(self) -> str | None:
        return query_identity.query_id(self.location)

    def offset_batches(self) -> list[int]:
        return self._batch_ids("offsets")

    def committed_batches(self) -> list[int]:
        return self._batch_ids("commits")

    def offsets(self, batch_id: int) -> OffsetEntry | None:
        """The offsets Spark logged for `batch_id` (None if it logged none, or they were
        purged: Spark keeps spark.sql.streaming.minBatchesToRetain of them)."""
        raw = self._read(f"{self.root}/offsets/{batch_id}")
        if raw is None:
            return None
        return parse_offsets_file(batch_id, raw)

    def unfinished_first_offsets(self) -> list[str]:
        """What a kill while Spark wrote batch 0's offsets leaves: its temporary file (and
        Hadoop's .crc of it) in an offsets/ that holds no batch. Spark 4 then refuses to start
        the query (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY: offsets/ "should be empty on
        batch 0"), though nothing was read or written for that batch."""
        names = self._names(f"{self.root}/offsets") or []
        if any(n.isdigit() for n in names):  # a batch is logged: Spark starts from it
            return []
        return sorted(n for n in names if n.startswith(".") and ".tmp" in n)

    def remove_unfinished_first_offsets(self) -> list[str]:
        """Delete `unfinished_first_offsets()`, so the query starts as the new query it is."""
        names = self.unfinished_first_offsets()
        for name in names:
            self.fs.delete_file(f"{self.root}/offsets/{name}")
        return names

    def newest_write(self) -> tuple[float, str] | None:
        """The newest modification time (seconds since the epoch) of a file in the offset log,
        the commit log or the sink's transaction log, and that file: how recently a query
        wrote here."""
        newest: tuple[float, str] | None = None
        for sub, recursive in (("offsets", False), ("commits", False), (LOG_DIR, True)):
            selector = pafs.FileSelector(f"{self.root}/{sub}", allow_not_found=True,
                                         recursive=recursive)
            for info in self.fs.get_file_info(selector):
                name = info.base_name
                if (info.type != pafs.FileType.File or info.mtime is None
                        or name.endswith(".crc")  # Hadoop's checksums
                        or (name.startswith(".") and not name.endswith(".tmp"))):
                    continue  # a temporary file counts: a query may be writing it now
                mtime = info.mtime.timestamp()
                if newest is None or mtime > newest[0]:
                    newest = (mtime, info.path)
        return newest


def parse_offsets_file(batch_id: int, text: str) -> OffsetEntry:
    """Spark's offsets file: "v1", the batch metadata JSON, then one line per source (a JSON
    offset, or "-" for a source with none yet)."""
    lines = text.split("\n")
    if not lines or not lines[0].startswith("v"):
        raise ValueError(f"offsets/{batch_id}: not a Spark offsets file (first line "
                         f"{lines[0][:20]!r}, expected 'v1')")
    meta: dict[str, Any] = {}
    if len(lines) > 1 and lines[1].strip():
        try:
            meta = json.loads(lines[1])
        except ValueError:
            meta = {}
    sources = [_source_offsets(line) for line in lines[2:] if line.strip()]
    ts = meta.get("batchTimestampMs")
    return OffsetEntry(batch_id, int(ts) if isinstance(ts, (int, float)) else None, sources)


def _source_offsets(line: str) -> SourceOffsets:
    try:
        doc = json.loads(line)
    except ValueError:
        return SourceOffsets(None, line)
    if isinstance(doc, dict):
        doc = {k: v for k, v in doc.items() if k not in METADATA_KEYS}  # topic ids, task plan
    if isinstance(doc, dict) and doc and all(
        isinstance(parts, dict) and all(
            str(p).lstrip("-").isdigit() and isinstance(o, int) for p, o in parts.items())
        for parts in doc.values()
    ):
        return SourceOffsets(
            {(topic, int(p)): o for topic, parts in doc.items() for p, o in parts.items()},
            line,
        )
    return SourceOffsets(None, line)


def idle_seconds(checkpoint: SparkCheckpoint, now: float | None = None) -> tuple[float, str] | None:
    """How long ago a query last wrote to the checkpoint, and the file; None if never."""
    newest = checkpoint.newest_write()
    if newest is None:
        return None
    return max(0.0, (time.time() if now is None else now) - newest[0]), newest[1]
