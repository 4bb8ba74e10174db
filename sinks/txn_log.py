"""The sink's transaction log (Flink's `pendingCommitTransactions`), under the checkpoint.

Layout, one directory per micro-batch, every file written once and never changed:

    <checkpointLocation>/eos-sink/<batchId>/
        prepared-<partition>-<attempt>-<run>.json   task side, at preCommit: the handle
        decision-<seq>.json                   driver: "commit these handles" (the decision point)
        committed-<partition>                 driver: that partition is in the store
        done                                  driver: every partition of the batch is in

Written through `pyarrow.fs`, so the checkpoint may be local, `s3://`, `hdfs://`, ...; a JSON
file is written to a temporary name and moved into place, so a reader never sees half of one.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

import pyarrow.fs as pafs

LOG_DIR = "eos-sink"
_PREPARED = re.compile(r"^prepared-(\d+)-(\d+)-\w+\.json$")
_DECISION = re.compile(r"^decision-(\d+)\.json$")
_COMMITTED = re.compile(r"^committed-(\d+)$")

Handle = dict[str, Any]


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

    def undecided_handles(self) -> list[Handle]:
        """Prepared handles no decision names: failed, superseded or never-decided attempts."""
        decided = {json.dumps(h, sort_keys=True) for h in self.decided().values()}
        return [h for _, h in self.prepared.values() if json.dumps(h, sort_keys=True) not in decided]


class TransactionLog:
    def __init__(self, checkpoint_location: str, filesystem: pafs.FileSystem | None = None) -> None:
        if filesystem is None:
            filesystem, path = pafs.FileSystem.from_uri(checkpoint_location)
        else:
            path = checkpoint_location
        self.fs = filesystem
        self.root = f"{path.rstrip('/')}/{LOG_DIR}"
        self.location = checkpoint_location

    # -- paths and raw I/O ----------------------------------------------------------------------

    def _dir(self, batch_id: int) -> str:
        return f"{self.root}/{batch_id}"

    def _write(self, path: str, payload: bytes) -> None:
        parent = path.rsplit("/", 1)[0]
        self.fs.create_dir(parent, recursive=True)
        tmp = f"{parent}/.tmp-{uuid.uuid4().hex}"
        with self.fs.open_output_stream(tmp) as out:
            out.write(payload)
        self.fs.move(tmp, path)

    def _read_json(self, path: str) -> Any:
        with self.fs.open_input_stream(path) as f:
            return json.loads(f.read().decode("utf-8"))

    def _names(self, directory: str) -> list[str]:
        infos = self.fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
        return [info.base_name for info in infos]

    # -- task side ------------------------------------------------------------------------------

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
        seq = sum(1 for n in self._names(self._dir(batch_id)) if _DECISION.match(n))
        doc = {"batch": batch_id, "handles": {str(p): h for p, h in handles.items()}}
        self._write(f"{self._dir(batch_id)}/decision-{seq}.json", json.dumps(doc).encode("utf-8"))

    def record_committed(self, batch_id: int, partitions: list[int]) -> None:
        for p in partitions:
            self._write(f"{self._dir(batch_id)}/committed-{p}", b"")

    def record_done(self, batch_id: int) -> None:
        self._write(f"{self._dir(batch_id)}/done", b"")

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
        state.decisions = [d for _, d in sorted(decisions, key=lambda x: x[0])]
        return state

    def forget(self, batch_id: int) -> None:
        """Drop a batch's records (after its undecided attempts were aborted)."""
        try:
            self.fs.delete_dir(self._dir(batch_id))
        except FileNotFoundError:
            pass

    def garbage_collect(self, keep_from: int) -> None:
        """Drop the records of done batches before `keep_from`: Spark never replays them."""
        for b in self.batches():
            if b < keep_from and "done" in self._names(self._dir(b)):
                self.forget(b)
