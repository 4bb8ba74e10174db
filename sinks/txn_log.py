"""The sink's transaction log (Flink's `pendingCommitTransactions`), under the checkpoint.

Layout, one directory per micro-batch, every file written once and never changed:

    <checkpointLocation>/eos-sink/<batchId>/
        prepared-<partition>-<attempt>-<run>.json   task side, at preCommit: the handle
        decision-<seq>-<writer>.json          driver: "commit these handles" (the decision point)
        committed-<partition>                 driver: that partition is in the store
        done                                  driver: every partition of the batch is in

Written through `pyarrow.fs`, so the checkpoint may be local, `s3://`, `hdfs://`, ...
(connectors/core/paths.py maps the schemes Spark users write). A record is written once and never
replaced, so a reader never sees half of one: on a local disk it is written to a temporary name
and hard-linked into place (which fails if the name exists); object stores have no atomic
rename, but a PUT is atomic, so there it is written in place. Decisions carry their writer's
id in the name: a second driver deciding the same batch is detected, never silently merged.
Garbage collection removes `done` last, so a crash inside it never leaves a decided batch
looking pending.

On a store other than the local disk every read, listing, delete and object write is retried
while it fails transiently (a 5xx or SlowDown, a reset connection, a timeout), for up to
sinks.storage_retries.STORAGE_RETRY_TIMEOUT_S: each is idempotent (a record's content is fixed by
its name), so a retry of one that landed unseen writes the same record again. Without it, one
request that pyarrow's client gave up on failed the batch, or the next one's planning
(integration_tests/operations/test_storage_faults.py).
"""

from __future__ import annotations

import json
import logging
import os
import re
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from connectors.core.paths import resolve_location
from sinks.storage_retries import with_storage_retries

if TYPE_CHECKING:
    import pyarrow.fs as pafs

LOG_DIR = "eos-sink"
_log = logging.getLogger("kafka_eos.sink")
#: pyarrow filesystems with no atomic rename, where a record is written in place.
OBJECT_STORES = ("s3", "gcs", "abfs")
_PREPARED = re.compile(r"^prepared-(\d+)-(\d+)-\w+\.json$")
_DECISION = re.compile(r"^decision-(\d+)(?:-\w+)?\.json$")
_COMMITTED = re.compile(r"^committed-(\d+)$")

Handle = dict[str, Any]


class PreparedRecord(NamedTuple):
    """What a prepared record's name says: the task's partition and attempt."""

    name: str
    partition: int
    attempt: int


def prepared_record(name: str) -> PreparedRecord | None:
    """The partition and attempt of a `prepared-<partition>-<attempt>-<run>.json` record's
    name; None for any other name. The names' format is this module's: readers ask here."""
    m = _PREPARED.match(name)
    return PreparedRecord(name, int(m.group(1)), int(m.group(2))) if m else None


class ConflictingWriters(RuntimeError):
    """Two drivers decided the same batch: two queries run on one checkpoint."""


@dataclass
class BatchState:
    """What the log says of one batch."""

    batch_id: int
    prepared: dict[str, tuple[int, Handle]] = field(default_factory=dict)  # file -> (partition, handle)
    decisions: list[dict[int, Handle]] = field(default_factory=list)  # in the order written
    committed: set[int] = field(default_factory=set)
    done: bool = False

    def decided(self) -> dict[int, Handle]:
        """Partition -> handle of the latest decision naming it."""
        merged: dict[int, Handle] = {}
        for decision in self.decisions:
            merged.update(decision)
        return merged

    def prepared_records(self) -> list[PreparedRecord]:
        """The prepared records, by partition and attempt."""
        records = [r for name in self.prepared if (r := prepared_record(name)) is not None]
        return sorted(records, key=lambda r: (r.partition, r.attempt))

    def undecided_handles(self) -> list[Handle]:
        """Prepared handles no decision names: failed, superseded or never-decided attempts."""
        decided = {json.dumps(h, sort_keys=True) for h in self.decided().values()}
        return [h for _, h in self.prepared.values() if json.dumps(h, sort_keys=True) not in decided]


class CheckpointNotShared(RuntimeError):
    """A task cannot see the query's checkpoint on a local path: the executor is another host."""


class TransactionLog:
    def __init__(self, checkpoint_location: str, filesystem: pafs.FileSystem | None = None) -> None:
        if filesystem is None:
            location = resolve_location("checkpointLocation", checkpoint_location)
            filesystem, path = location.fs, location.path
        else:
            path = checkpoint_location
        self.fs = filesystem
        self.root = f"{path.rstrip('/')}/{LOG_DIR}"
        self.location = checkpoint_location
        #: Local disks fail for good (a full disk, a permission): nothing to retry there.
        self._remote = getattr(filesystem, "base_fs", filesystem).type_name != "local"

    def _retried(self, what: str, fn):
        if not self._remote:
            return fn()
        return with_storage_retries(fn, f"transaction log: {what}", log=_log)

    # -- paths and raw I/O ----------------------------------------------------------------------

    def _dir(self, batch_id: int) -> str:
        return f"{self.root}/{batch_id}"

    def _write(self, path: str, payload: bytes, *, exclusive: bool = False) -> None:
        """Write a record once. `exclusive`: fail if it exists (else an existing one, which
        has the same meaning, is kept or rewritten with the same meaning)."""
        import pyarrow.fs as pafs  # here: workers that never write a record skip pyarrow

        parent = path.rsplit("/", 1)[0]
        if self.fs.type_name in OBJECT_STORES:
            # No rename there (pyarrow's move is copy + delete), but a PUT is atomic; and no
            # directories to create (a marker object would be a round trip).
            if exclusive and self._retried(
                f"looking for {path}", lambda: self.fs.get_file_info(path).type
            ) != pafs.FileType.NotFound:
                raise FileExistsError(path)

            def put() -> None:
                with self.fs.open_output_stream(path) as out:
                    out.write(payload)

            self._retried(f"writing {path}", put)  # a PUT that landed unseen: the same again
            return
        self.fs.create_dir(parent, recursive=True)
        tmp = f"{parent}/.tmp-{uuid.uuid4().hex}"
        with self.fs.open_output_stream(tmp) as out:
            out.write(payload)
        if isinstance(self.fs, pafs.LocalFileSystem):
            try:
                os.link(tmp, path)  # atomic, and never replaces
            except FileExistsError:
                if exclusive:
                    raise
            finally:
                os.unlink(tmp)
            return
        if exclusive and self.fs.get_file_info(path).type != pafs.FileType.NotFound:
            self.fs.delete_file(tmp)
            raise FileExistsError(path)
        self.fs.move(tmp, path)

    def _read_json(self, path: str) -> Any:
        def read() -> bytes:
            with self.fs.open_input_stream(path) as f:
                return f.read()

        return json.loads(self._retried(f"reading {path}", read).decode("utf-8"))

    def _names(self, directory: str) -> list[str]:
        import pyarrow.fs as pafs

        infos = self._retried(
            f"listing {directory}",
            lambda: self.fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True)),
        )
        return [info.base_name for info in infos]

    def _delete_file(self, path: str) -> None:
        try:
            self._retried(f"deleting {path}", lambda: self.fs.delete_file(path))
        except FileNotFoundError:
            pass

    # -- task side ------------------------------------------------------------------------------

    def assert_visible_here(self) -> None:
        """Before a task prepares: a checkpoint on a local path must be the one the driver
        wrote, or the task's record of its prepared transaction lands on its own host's disk,
        where the driver's recovery never finds it (a prepared PostgreSQL transaction would
        then stay open). Spark writes `<checkpointLocation>/metadata` on the driver before
        any task runs, so a task that does not see it runs on another host's filesystem."""
        if self._remote:
            return
        import pyarrow.fs as pafs

        checkpoint = self.root.rsplit("/", 1)[0]
        if self.fs.get_file_info(f"{checkpoint}/metadata").type == pafs.FileType.NotFound:
            import socket

            raise CheckpointNotShared(
                f"checkpointLocation {self.location!r} is a path on the driver's local disk, "
                f"which this executor (host {socket.gethostname()}) does not see: on a cluster "
                "of several hosts the checkpoint must be on storage every host shares "
                "(s3://, s3a://, gs://, abfss://, or a shared mount at the same path), because "
                "each task records its prepared transaction there for the driver's commit and "
                "recovery (docs/deploying.md)")

    def record_prepared(self, batch_id: int, partition: int, attempt: int, handle: Handle) -> None:
        self._write(
            # The random part keeps a replay's attempt 0 from replacing the first run's record.
            f"{self._dir(batch_id)}/prepared-{partition}-{attempt}-{uuid.uuid4().hex[:8]}.json",
            json.dumps(handle).encode("utf-8"),
        )

    def prepared_count(self, batch_id: int) -> int:
        return sum(1 for n in self._names(self._dir(batch_id)) if _PREPARED.match(n))

    def is_partition_committed(self, batch_id: int, partition: int) -> bool:
        names = set(self._names(self._dir(batch_id)))
        return "done" in names or f"committed-{partition}" in names

    # -- driver side ----------------------------------------------------------------------------

    def record_decision(self, batch_id: int, handles: dict[int, Handle]) -> None:
        """The decision point: once this file exists, these handles will be committed."""
        # Count decision files by name: reading the whole state would parse every prepared
        # handle of the batch on the commit path just to number this record.
        directory = self._dir(batch_id)
        seq = self._next_decision_seq(directory)
        doc = {"batch": batch_id, "handles": {str(p): h for p, h in handles.items()}}
        self._write(
            f"{directory}/decision-{seq}-{uuid.uuid4().hex[:12]}.json",
            json.dumps(doc).encode("utf-8"), exclusive=True,
        )
        rivals = [n for n in self._names(directory) if (m := _DECISION.match(n)) and int(m.group(1)) == seq]
        if len(rivals) > 1:
            raise ConflictingWriters(
                f"batch {batch_id} was decided by two writers ({', '.join(sorted(rivals))} in "
                f"{directory}): two queries run on one checkpoint; stop one of them"
            )

    def _next_decision_seq(self, directory: str) -> int:
        return len({int(m.group(1)) for n in self._names(directory) if (m := _DECISION.match(n))})

    def record_committed(self, batch_id: int, partitions: list[int]) -> None:
        for p in partitions:
            self._write(f"{self._dir(batch_id)}/committed-{p}", b"")

    def record_done(self, batch_id: int) -> None:
        self._write(f"{self._dir(batch_id)}/done", b"")

    def write_record(self, name: str, payload: bytes) -> None:
        """A record of the whole log (not of a batch), written once: FileExistsError if there."""
        self._write(f"{self.root}/{name}", payload, exclusive=True)

    def read_record(self, name: str) -> bytes | None:
        """A record `write_record` wrote; None if there is none."""

        def read() -> bytes | None:
            try:
                with self.fs.open_input_stream(f"{self.root}/{name}") as f:
                    return f.read()
            except FileNotFoundError:
                return None

        return self._retried(f"reading {self.root}/{name}", read)

    def batches(self) -> list[int]:
        return sorted(int(n) for n in self._names(self.root) if n.isdigit())

    def pending(self) -> list[int]:
        """Batches with anything logged but not yet done."""
        return [b for b in self.batches() if "done" not in self._names(self._dir(b))]

    def state(self, batch_id: int) -> BatchState:
        state = BatchState(batch_id)
        directory = self._dir(batch_id)
        decisions: list[tuple[int, dict[int, Handle]]] = []
        for name in self._names(directory):
            if name == "done":
                state.done = True
            elif m := _COMMITTED.match(name):
                state.committed.add(int(m.group(1)))
            elif m := _PREPARED.match(name):
                state.prepared[name] = (int(m.group(1)), self._read_json(f"{directory}/{name}"))
            elif m := _DECISION.match(name):
                doc = self._read_json(f"{directory}/{name}")
                decisions.append((int(m.group(1)), {int(p): h for p, h in doc["handles"].items()}))
        seqs = [seq for seq, _ in decisions]
        if len(seqs) != len(set(seqs)):
            raise ConflictingWriters(
                f"batch {batch_id} has two decisions with one sequence number in {directory}: "
                "two queries ran on one checkpoint; which one to commit is not for the sink to "
                "guess: inspect the directory, keep one decision file, and restart"
            )
        state.decisions = [d for _, d in sorted(decisions, key=lambda x: x[0])]
        return state

    def forget(self, batch_id: int, names: list[str] | None = None) -> None:
        """Drop a batch's records (`names`: its directory's listing, if just taken). `done`
        goes last and the directory after it: a crash inside leaves the batch done (collected
        again later) or without a decision (nothing to commit); never a decision without
        `done`, which would be committed again."""
        directory = self._dir(batch_id)
        if names is None:
            names = self._names(directory)
        last = [n for n in ("done",) if n in names]
        decisions = [n for n in names if _DECISION.match(n)]
        for name in [n for n in names if n not in last and n not in decisions] + decisions + last:
            self._delete_file(f"{directory}/{name}")
        try:
            self._retried(f"deleting {directory}", lambda: self.fs.delete_dir(directory))
        except FileNotFoundError:
            pass

    def garbage_collect(self, keep_from: int) -> None:
        """Drop the records of done batches before `keep_from`: Spark never replays them."""
        for b in self.batches():
            if b < keep_from:
                names = self._names(self._dir(b))
                if "done" in names:
                    self.forget(b, names)  # one listing of the directory, not two
