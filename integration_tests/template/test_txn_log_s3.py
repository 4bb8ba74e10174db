"""The sink's transaction log (sinks/txn_log.py) with its checkpoint on S3, on a real S3
protocol server (moto): what recovery reads back from it must be what was written, in a fresh
object (a restarted driver), with no directories, renames or temporary names on the way.

Spark itself cannot keep its checkpoint on s3a:// here (Hadoop's S3 jars come from Maven,
docs/design.md#production-conditions), so the log is exercised directly, as the sink's driver
and tasks use it.
"""

from __future__ import annotations

import os

import pyarrow.fs as pafs
import pytest

from connectors.core.paths import resolve_location
from sinks.txn_log import LOG_DIR, ConflictingWriters, TransactionLog


@pytest.fixture(scope="module")
def s3():
    """moto's S3 server; this process's AWS environment points at it for the module."""
    from integration_tests.support.s3 import s3_server

    with s3_server() as server:
        yield server


@pytest.fixture
def ck(s3):
    """A fresh checkpoint location in a bucket of its own, as Hadoop users write it."""
    return f"s3a://{s3.create_bucket()}/checkpoints/q1"


def _bucket(ck: str) -> str:
    return ck.split("://", 1)[1].split("/", 1)[0]


def _keys(s3, ck: str) -> list[str]:
    return sorted(k for k in s3.list_keys(_bucket(ck)) if not k.endswith("/"))


def _log_names(s3, ck: str, batch: int) -> list[str]:
    prefix = f"checkpoints/q1/{LOG_DIR}/{batch}/"
    return sorted(k[len(prefix):] for k in s3.list_keys(_bucket(ck), prefix))


def test_a_batch_through_its_life_and_back_after_a_restart(s3, ck):
    log = TransactionLog(ck)
    assert isinstance(log.fs, pafs.S3FileSystem)
    # Tasks: partitions 0 and 1 prepared; partition 1 again by a retried attempt.
    log.record_prepared(0, 0, 0, {"adds": ["p0"]})
    log.record_prepared(0, 1, 0, {"adds": ["p1-a0"]})
    log.record_prepared(0, 1, 1, {"adds": ["p1-a1"]})
    assert log.prepared_count(0) == 3
    # Driver: the decision, then each commit, then done.
    log.record_decision(0, {0: {"adds": ["p0"]}, 1: {"adds": ["p1-a1"]}})
    log.record_committed(0, [0])

    restarted = TransactionLog(ck)  # a new driver, nothing in memory
    assert restarted.pending() == [0]
    state = restarted.state(0)
    assert state.decided() == {0: {"adds": ["p0"]}, 1: {"adds": ["p1-a1"]}}
    assert state.committed == {0} and not state.done
    assert state.undecided_handles() == [{"adds": ["p1-a0"]}]  # the superseded attempt
    assert restarted.is_partition_committed(0, 0) and not restarted.is_partition_committed(0, 1)

    restarted.record_committed(0, [1])
    restarted.record_done(0)
    assert TransactionLog(ck).pending() == []
    assert TransactionLog(ck).is_partition_committed(0, 7)  # done: every partition is in
    names = _log_names(s3, ck, 0)
    assert len(names) == 7 and "done" in names and {"committed-0", "committed-1"} <= set(names)
    assert not [k for k in _keys(s3, ck) if ".tmp-" in k], "a temporary name on an object store"


def test_pending_and_later_decisions_after_a_restart(s3, ck):
    log = TransactionLog(ck)
    log.record_decision(0, {0: {"h": 0}})
    log.record_done(0)
    log.record_decision(1, {0: {"h": "a0"}, 1: {"h": "a1"}})
    log.record_decision(1, {1: {"h": "b1"}})  # the replay rewrote partition 1
    log.record_prepared(10, 0, 0, {"h": 10})  # batch 10: lists after 1, not between 1 and 2
    log.record_prepared(2, 0, 0, {"h": 2})  # only prepared: nothing to commit on recovery
    restarted = TransactionLog(ck)
    assert restarted.batches() == [0, 1, 2, 10]
    assert restarted.pending() == [1, 2, 10]
    assert restarted.state(1).decided() == {0: {"h": "a0"}, 1: {"h": "b1"}}
    assert restarted.state(2).decided() == {} and restarted.state(2).undecided_handles() == [{"h": 2}]


def test_garbage_collection_removes_done_batches_only(s3, ck):
    log = TransactionLog(ck)
    for b in range(4):
        log.record_prepared(b, 0, 0, {"b": b})
        log.record_decision(b, {0: {"b": b}})
        if b != 1:
            log.record_committed(b, [0])
            log.record_done(b)
    log.garbage_collect(3)
    restarted = TransactionLog(ck)
    assert restarted.batches() == [1, 3]  # 0, 2 collected; 1 not done; 3 not before keep_from
    assert restarted.pending() == [1]
    assert restarted.state(1).decided() == {0: {"b": 1}}
    assert not [k for k in _keys(s3, ck) if f"/{LOG_DIR}/0/" in k or f"/{LOG_DIR}/2/" in k]
    restarted.forget(2)  # already gone: no error


class _DeletesThenDies:
    """The S3 filesystem, killed after `budget` deletes: a crash inside garbage collection."""

    def __init__(self, real: pafs.FileSystem, budget: int) -> None:
        self._real, self.budget = real, budget

    def delete_file(self, path):
        if self.budget == 0:
            raise KeyboardInterrupt("killed")
        self.budget -= 1
        self._real.delete_file(path)

    def delete_dir(self, path):
        if self.budget == 0:
            raise KeyboardInterrupt("killed")
        self._real.delete_dir(path)

    def __getattr__(self, name):
        return getattr(self._real, name)


@pytest.mark.parametrize("budget", [0, 2, 4])
def test_a_crash_inside_garbage_collection_never_leaves_a_decided_batch_pending(s3, ck, budget):
    log = TransactionLog(ck)
    log.record_prepared(0, 0, 0, {"h": 0})
    log.record_prepared(0, 1, 0, {"h": 1})
    log.record_decision(0, {0: {"h": 0}, 1: {"h": 1}})
    log.record_committed(0, [0, 1])
    log.record_done(0)
    log.fs = _DeletesThenDies(log.fs, budget)
    with pytest.raises(KeyboardInterrupt):
        log.garbage_collect(1)
    after = TransactionLog(ck)
    for b in after.pending():  # what recovery would see
        assert not after.state(b).decided(), f"budget {budget}: batch {b} decided but not done"


def test_a_second_driver_deciding_the_same_batch_is_detected(s3, ck):
    log, rival = TransactionLog(ck), TransactionLog(ck)
    rival._next_decision_seq = lambda directory: 0  # it counted before the first one wrote
    log.record_decision(4, {0: {"h": "a"}})
    with pytest.raises(ConflictingWriters, match="two writers"):
        rival.record_decision(4, {0: {"h": "b"}})
    with pytest.raises(ConflictingWriters, match="two queries"):
        TransactionLog(ck).state(4)


def test_a_log_record_is_written_once(s3, ck):
    log = TransactionLog(ck)
    log.write_record("writer", b"first")
    with pytest.raises(FileExistsError):
        TransactionLog(ck).write_record("writer", b"second")
    with log.fs.open_input_stream(f"{log.root}/writer") as f:
        assert f.read() == b"first"


def test_the_log_through_storage_options_alone(s3, monkeypatch):
    """No AWS environment: the log on a filesystem built from delta-rs's storage options
    (connectors.core.paths.resolve_location), as Spark passes them (lower-cased keys)."""
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    options = {k.lower(): v for k, v in s3.storage_options.items()}
    loc = resolve_location("checkpointLocation", f"s3://{s3.create_bucket()}/ck", options)
    log = TransactionLog(loc.path, filesystem=loc.fs)
    log.record_prepared(0, 0, 0, {"h": 0})
    log.record_decision(0, {0: {"h": 0}})
    again = resolve_location("checkpointLocation", loc.uri, options)
    restarted = TransactionLog(loc.path, filesystem=again.fs)
    assert restarted.pending() == [0] and restarted.state(0).decided() == {0: {"h": 0}}
