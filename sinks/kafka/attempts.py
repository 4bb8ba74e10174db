"""The notes of a checkpoint's task attempts beyond the first, kept beside the transaction log
so the driver fences the transactional ids they may have left open.
"""

from __future__ import annotations

import json
import uuid

import pyarrow.fs as pafs

from sinks.txn_log import TransactionLog


class AttemptNotes:
    """Which transactional ids beyond attempt 0 a checkpoint's tasks used, so the driver can
    fence what they may have left open. Spark numbers a partition's attempts 0, 1, ... (task
    retries and speculative copies), so `<prefix>-<p>-<a>` is a bounded id space; but an id of
    attempt a >= 1 may never be used again, and an open transaction on it (a speculative loser
    or a retry that was killed before its preCommit, without running its own abort) would hold
    read_committed readers of its partitions at the last stable offset until
    transaction.timeout.ms. A task of attempt a >= 1 notes (prefix, p, a) here, beside the
    transaction log, before it opens its transaction; before the next batch's tasks the driver
    fences ids a..0 of that partition (an attempt a exists only if 0..a-1 failed or were slow)
    and forgets the note. Attempt 0 needs no note: the next batch's attempt 0 of the partition
    fences its id when it begins, and a restart's replay of the batch does."""

    def __init__(self, checkpoint_location: str) -> None:
        txlog = TransactionLog(checkpoint_location)  # the same filesystem and scheme rules
        self.fs = txlog.fs
        self.root = f"{txlog.root.rsplit('/', 1)[0]}/{ATTEMPTS_DIR}"

    def note(self, prefix: str, partition: int, attempt: int) -> None:
        self.fs.create_dir(self.root, recursive=True)
        path = f"{self.root}/{partition}-{attempt}-{uuid.uuid4().hex[:8]}.json"
        with self.fs.open_output_stream(path) as out:
            note = {"prefix": prefix, "partition": partition, "attempt": attempt}
            out.write(json.dumps(note).encode())

    def pending(self) -> dict[str, dict]:
        infos = self.fs.get_file_info(pafs.FileSelector(self.root, allow_not_found=True))
        notes = {}
        for info in infos:
            if info.base_name.endswith(".json"):
                try:
                    with self.fs.open_input_stream(info.path) as f:
                        notes[info.path] = json.loads(f.read().decode())
                except (OSError, ValueError):
                    continue  # being written by a task right now: the next batch's sweep
        return notes

    def forget(self, path: str) -> None:
        try:
            self.fs.delete_file(path)
        except FileNotFoundError:
            pass


#: The directory of AttemptNotes, beside the template's `eos-sink` transaction log.
ATTEMPTS_DIR = "eos-sink-kafka-attempts"
