"""Unit tests for sinks/txn_log.py: the sink's per-batch transaction log (local pyarrow.fs)."""

from __future__ import annotations

import json
import re
import os

import pyarrow.fs as pafs
import pytest

from sinks.txn_log import (
    LOG_DIR,
    BatchState,
    ConflictingWriters,
    PreparedRecord,
    TransactionLog,
    prepared_record,
)


@pytest.fixture
def chk(tmp_path):
    return str(tmp_path / "checkpoint")


@pytest.fixture
def txlog(chk):
    return TransactionLog(chk)


def _batch_dir(chk: str, batch: int) -> str:
    return os.path.join(chk, LOG_DIR, str(batch))


def _all_files(chk: str) -> list[str]:
    out = []
    for root, _dirs, files in os.walk(os.path.join(chk, LOG_DIR)):
        out.extend(os.path.join(root, f) for f in files)
    return out


# --------------------------------------------------------------------------- layout


def test_root_is_under_checkpoint(chk, txlog):
    assert txlog.root == f"{chk}/{LOG_DIR}"
    assert txlog.location == chk
    # Trailing slashes on the checkpoint do not double up.
    assert TransactionLog(chk + "/").root == f"{chk}/{LOG_DIR}"


def test_empty_log(txlog):
    assert txlog.batches() == []
    assert txlog.pending() == []
    s = txlog.state(3)
    assert s == BatchState(3)
    assert s.decided() == {}
    assert not s.done
    assert not txlog.is_partition_committed(3, 0)


def test_record_prepared_file_name_and_content(chk, txlog):
    txlog.record_prepared(4, 2, 1, {"id": "t-2", "n": 7})
    names = os.listdir(_batch_dir(chk, 4))
    assert len(names) == 1
    name = names[0]
    assert name.startswith("prepared-2-1-") and name.endswith(".json")
    with open(os.path.join(_batch_dir(chk, 4), name)) as f:
        assert json.load(f) == {"id": "t-2", "n": 7}
    s = txlog.state(4)
    assert s.prepared == {name: (2, {"id": "t-2", "n": 7})}
    assert s.decisions == [] and s.committed == set() and not s.done


def test_same_partition_and_attempt_prepared_twice_keeps_both(txlog):
    # A replay's attempt 0 must not replace the first run's attempt-0 record.
    txlog.record_prepared(1, 0, 0, {"run": 1})
    txlog.record_prepared(1, 0, 0, {"run": 2})
    s = txlog.state(1)
    assert len(s.prepared) == 2
    assert sorted(h["run"] for _, h in s.prepared.values()) == [1, 2]
    assert {p for p, _ in s.prepared.values()} == {0}


def test_prepared_records_are_read_through_the_logs_own_names(txlog):
    """Readers of the log (kafka-eos inspect) take partition and attempt from here, never by
    splitting the file names themselves."""
    txlog.record_prepared(3, 12, 2, {"h": "p12a2"})
    txlog.record_prepared(3, 1, 0, {"h": "p1a0"})
    txlog.record_prepared(3, 1, 10, {"h": "p1a10"})
    records = txlog.state(3).prepared_records()
    assert [(r.partition, r.attempt) for r in records] == [(1, 0), (1, 10), (12, 2)]
    assert all(r.name.startswith(f"prepared-{r.partition}-{r.attempt}-") for r in records)
    assert prepared_record("prepared-7-3-ab12cd34.json") == PreparedRecord(
        "prepared-7-3-ab12cd34.json", 7, 3)
    for other in ("decision-0-w.json", "committed-7", "done", "prepared-7.json"):
        assert prepared_record(other) is None


def test_decision_record_round_trips_with_int_partitions(chk, txlog):
    txlog.record_decision(2, {0: {"a": 1}, 11: {"b": [1, 2]}})
    (name,) = [n for n in os.listdir(_batch_dir(chk, 2)) if n.startswith("decision-")]
    assert re.fullmatch(r"decision-0-[0-9a-f]{12}\.json", name)  # sequence, then the writer
    with open(os.path.join(_batch_dir(chk, 2), name)) as f:
        doc = json.load(f)
    assert doc == {"batch": 2, "handles": {"0": {"a": 1}, "11": {"b": [1, 2]}}}
    s = txlog.state(2)
    assert s.decisions == [{0: {"a": 1}, 11: {"b": [1, 2]}}]
    assert s.decided() == {0: {"a": 1}, 11: {"b": [1, 2]}}
    assert all(isinstance(p, int) for p in s.decided())


def test_decisions_are_numbered_in_order(chk, txlog):
    txlog.record_decision(0, {0: {"v": 0}})
    txlog.record_decision(0, {1: {"v": 1}})
    txlog.record_decision(0, {0: {"v": 2}})
    names = sorted(n for n in os.listdir(_batch_dir(chk, 0)) if n.startswith("decision-"))
    assert [n.split("-")[1] for n in names] == ["0", "1", "2"]


def test_decided_merges_later_decisions_over_earlier(txlog):
    txlog.record_decision(5, {0: {"h": "a0"}, 1: {"h": "a1"}, 2: {"h": "a2"}})
    txlog.record_decision(5, {1: {"h": "b1"}})  # the replay rewrote partition 1
    s = txlog.state(5)
    assert len(s.decisions) == 2
    assert s.decided() == {0: {"h": "a0"}, 1: {"h": "b1"}, 2: {"h": "a2"}}


def test_decisions_ordered_numerically_not_lexicographically(txlog):
    # decision-10/11 sort before decision-2 as strings: the merge must follow the sequence.
    for i in range(12):
        txlog.record_decision(7, {0: {"seq": i}})
    s = txlog.state(7)
    assert [d[0]["seq"] for d in s.decisions] == list(range(12))
    assert s.decided() == {0: {"seq": 11}}


def test_batch_state_decided_is_pure_merge():
    s = BatchState(1, decisions=[{0: {"x": 1}, 1: {"x": 1}}, {1: {"x": 2}}, {2: {"x": 3}}])
    assert s.decided() == {0: {"x": 1}, 1: {"x": 2}, 2: {"x": 3}}
    # The decisions themselves are not changed by merging.
    assert s.decisions[0] == {0: {"x": 1}, 1: {"x": 1}}


def test_committed_and_done(txlog):
    txlog.record_decision(3, {0: {}, 1: {}, 2: {}})
    txlog.record_committed(3, [0, 2])
    s = txlog.state(3)
    assert s.committed == {0, 2}
    assert not s.done
    assert txlog.is_partition_committed(3, 0)
    assert not txlog.is_partition_committed(3, 1)
    assert txlog.is_partition_committed(3, 2)
    assert not txlog.is_partition_committed(4, 0)  # other batch
    txlog.record_done(3)
    assert txlog.state(3).done
    # Once done, every partition of the batch counts as committed.
    assert txlog.is_partition_committed(3, 1)
    assert txlog.is_partition_committed(3, 99)


def test_record_committed_empty_list_writes_nothing(chk, txlog):
    txlog.record_committed(1, [])
    assert txlog.batches() == []


def test_batches_sorted_numerically_and_pending_excludes_done(chk, txlog):
    for b in (10, 2, 9):
        txlog.record_prepared(b, 0, 0, {"b": b})
    txlog.record_done(9)
    # Something that is not a batch directory is ignored.
    os.makedirs(os.path.join(chk, LOG_DIR, "not-a-batch"))
    assert txlog.batches() == [2, 9, 10]
    assert txlog.pending() == [2, 10]


def test_forget_removes_batch_and_tolerates_missing(chk, txlog):
    txlog.record_prepared(1, 0, 0, {})
    txlog.record_decision(1, {0: {}})
    txlog.forget(1)
    assert not os.path.exists(_batch_dir(chk, 1))
    assert txlog.batches() == []
    txlog.forget(1)  # again: no error
    txlog.forget(42)  # never existed: no error


def test_garbage_collect_only_done_batches_before_keep_from(chk, txlog):
    for b in range(6):
        txlog.record_decision(b, {0: {"b": b}})
        if b != 1:
            txlog.record_done(b)
    txlog.garbage_collect(4)
    # 0, 2, 3 done and < 4: gone; 1 not done: kept; 4, 5 >= keep_from: kept.
    assert txlog.batches() == [1, 4, 5]
    assert txlog.pending() == [1]
    assert txlog.state(1).decided() == {0: {"b": 1}}


def test_garbage_collection_lists_each_old_batch_once(chk, txlog, monkeypatch):
    """Per batch, the collection lists the log and the batch that fell out of the window:
    that listing also serves its deletion."""
    for b in range(4):
        txlog.record_decision(b, {0: {"b": b}})
        txlog.record_done(b)
    listed: list[str] = []
    names = txlog._names
    monkeypatch.setattr(txlog, "_names", lambda d: (listed.append(d), names(d))[1])
    txlog.garbage_collect(1)
    assert sorted(listed) == sorted([txlog.root, f"{txlog.root}/0"])
    assert txlog.batches() == [1, 2, 3]


def test_garbage_collect_keep_from_zero_or_negative_keeps_all(txlog):
    for b in range(3):
        txlog.record_done(b)
    txlog.garbage_collect(0)
    txlog.garbage_collect(-5)
    assert txlog.batches() == [0, 1, 2]


# --------------------------------------------------------------------------- atomic writes


def test_no_tmp_files_left_after_writes(chk, txlog):
    txlog.record_prepared(0, 0, 0, {"a": 1})
    txlog.record_prepared(0, 1, 0, {"a": 2})
    txlog.record_decision(0, {0: {"a": 1}, 1: {"a": 2}})
    txlog.record_committed(0, [0, 1])
    txlog.record_done(0)
    files = [os.path.basename(p) for p in _all_files(chk)]
    assert len(files) == 6
    assert not [f for f in files if f.startswith(".tmp-")]


class _SpyFS:
    """Delegates to a real pyarrow filesystem, recording output streams and moves."""

    def __init__(self, real: pafs.FileSystem) -> None:
        self._real = real
        self.events: list[tuple[str, ...]] = []

    def open_output_stream(self, path, *a, **kw):
        self.events.append(("open", path))
        return self._real.open_output_stream(path, *a, **kw)

    def move(self, src, dest):
        # At the time of the move the final name must not be there yet: readers see nothing.
        exists = self._real.get_file_info(dest).type != pafs.FileType.NotFound
        self.events.append(("move", src, dest, "exists" if exists else "absent"))
        return self._real.move(src, dest)

    def __getattr__(self, name):
        return getattr(self._real, name)


def test_local_record_written_to_tmp_name_then_linked_into_place(chk, txlog, monkeypatch):
    linked = []
    real_link = os.link
    monkeypatch.setattr(os, "link", lambda src, dst: (linked.append((src, dst)), real_link(src, dst)))
    txlog.record_decision(8, {0: {"h": 1}})
    ((tmp, final),) = linked
    assert tmp.rsplit("/", 1)[1].startswith(".tmp-") and tmp.rsplit("/", 1)[0] == f"{txlog.root}/8"
    assert final.startswith(f"{txlog.root}/8/decision-0-")
    assert not [n for n in os.listdir(_batch_dir(chk, 8)) if n.startswith(".tmp-")]
    assert txlog.state(8).decided() == {0: {"h": 1}}


def test_object_store_record_is_written_in_place_never_moved(chk, txlog):
    """Object stores have no atomic rename (pyarrow's move is copy + delete); a PUT is atomic."""
    spy = _SpyFS(txlog.fs)
    spy.type_name = "s3"  # what an S3FileSystem says of itself
    txlog.fs = spy
    os.makedirs(_batch_dir(chk, 8))  # the local disk under the spy needs it; S3 would not
    txlog.record_decision(8, {0: {"h": 1}})
    assert [e[0] for e in spy.events] == ["open"]
    assert spy.events[0][1].startswith(f"{txlog.root}/8/decision-0-")
    assert txlog.state(8).decided() == {0: {"h": 1}}


def test_an_exclusive_record_is_never_replaced(chk, txlog):
    spy = _SpyFS(txlog.fs)
    spy.type_name = "s3"
    for fs in (txlog.fs, spy, pafs.SubTreeFileSystem("/", txlog.fs)):
        txlog.fs = fs
        path = f"{txlog.root}/3/x-{fs.type_name}"
        txlog._write(path, b"first", exclusive=True)
        with pytest.raises(FileExistsError):
            txlog._write(path, b"second", exclusive=True)
        with open(path, "rb") as f:
            assert f.read() == b"first"


def test_a_second_writer_of_the_same_decision_is_detected(chk, txlog):
    """Two drivers on one checkpoint (two queries, or a zombie driver) both decide batch 4."""
    rival = TransactionLog(chk)
    rival._next_decision_seq = lambda directory: 0  # it counted before the first one wrote
    txlog.record_decision(4, {0: {"h": "a"}})
    with pytest.raises(ConflictingWriters, match="two writers"):
        rival.record_decision(4, {0: {"h": "b"}})
    with pytest.raises(ConflictingWriters, match="two queries"):
        TransactionLog(chk).state(4)


class _CrashingDeletes:
    """A filesystem whose deletes remove files one by one, `done` first (as a recursive delete
    may), and die after `budget` removals: a crash inside garbage collection."""

    def __init__(self, real: pafs.FileSystem, budget: int) -> None:
        self._real, self.budget = real, budget

    def _spend(self) -> None:
        if self.budget == 0:
            raise KeyboardInterrupt("killed")
        self.budget -= 1

    def delete_file(self, path):
        self._spend()
        self._real.delete_file(path)

    def delete_dir(self, path):
        names = sorted(i.path for i in self._real.get_file_info(pafs.FileSelector(path)))
        for p in sorted(names, key=lambda p: not p.endswith("/done")):
            self._spend()
            self._real.delete_file(p)
        self._real.delete_dir(path)

    def __getattr__(self, name):
        return getattr(self._real, name)


@pytest.mark.parametrize("budget", range(5))
def test_a_crash_inside_garbage_collection_never_leaves_a_decided_batch_pending(chk, budget):
    txlog = TransactionLog(chk)
    txlog.record_prepared(0, 0, 0, {"h": 0})
    txlog.record_prepared(0, 1, 0, {"h": 1})
    txlog.record_decision(0, {0: {"h": 0}, 1: {"h": 1}})
    txlog.record_committed(0, [0, 1])
    txlog.record_done(0)
    real = txlog.fs
    txlog.fs = _CrashingDeletes(real, budget)
    with pytest.raises(KeyboardInterrupt):
        txlog.garbage_collect(1)
    after = TransactionLog(chk)
    for b in after.pending():  # what recovery would see
        assert not after.state(b).decided(), f"budget {budget}: batch {b} decided but not done"


def test_stray_tmp_file_is_ignored_by_state(chk, txlog):
    txlog.record_prepared(2, 0, 0, {"a": 1})
    # A writer that died mid-write leaves a half file under a temporary name.
    with open(os.path.join(_batch_dir(chk, 2), ".tmp-deadbeef"), "w") as f:
        f.write('{"half": ')
    s = txlog.state(2)
    assert len(s.prepared) == 1
    assert s.decisions == [] and s.committed == set() and not s.done


# --------------------------------------------------------------------------- filesystems


def test_explicit_filesystem_and_relative_root(tmp_path):
    fs = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    txlog = TransactionLog("chk", filesystem=fs)
    assert txlog.root == f"chk/{LOG_DIR}"
    txlog.record_prepared(0, 3, 0, {"x": 1})
    txlog.record_decision(0, {3: {"x": 1}})
    assert os.path.isdir(tmp_path / "chk" / LOG_DIR / "0")
    assert txlog.state(0).decided() == {3: {"x": 1}}
    # The same records read back through a URI-built log on the same directory.
    other = TransactionLog(str(tmp_path / "chk"))
    assert other.state(0).decided() == {3: {"x": 1}}
    assert other.batches() == [0]
