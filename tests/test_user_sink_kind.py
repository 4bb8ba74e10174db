"""A user's own sink kind settles its pending batch with `resolve`, reading the settings it
registered (`SinkKind.store_settings`) from `StoreOptions.kind_settings`, as
docs/writing-a-sink.md shows. The store is a directory: a task stages a file, the driver's
commit renames it into `committed/` (idempotent)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pytest

from connectors.inspection import sink_log
from connectors.resolution import ResolveError, StoreOptions, resolve_checkpoint
from connectors.checkpoint_reader import SparkCheckpoint
from sinks import TaskInfo, TwoPhaseCommitSink
from sinks.kinds import PendingBatch, SinkKind, register

KIND = "files-eos"


class FilesSink(TwoPhaseCommitSink[dict]):
    """Rows staged as files in `<directory>/staged`, committed by a rename."""

    def __init__(self, settings, directory: str) -> None:
        super().__init__(settings)
        self.directory = directory

    def beginTransaction(self, context: TaskInfo) -> dict:
        return {"name": f"b{context.batch_id}-p{context.partition_id}-a{context.attempt}"}

    def invoke(self, txn: dict, batch: pa.RecordBatch) -> None:
        raise AssertionError("resolve writes nothing")

    def preCommit(self, txn: dict) -> dict:
        return {"kind": KIND, "file": txn["name"]}

    def abortTransaction(self, txn: dict) -> None:
        pass

    def commit(self, batchId: int, handles: dict[int, dict]) -> None:
        for h in handles.values():
            staged = os.path.join(self.directory, "staged", h["file"])
            if os.path.exists(staged):  # else committed before: nothing to do
                os.replace(staged, os.path.join(self.directory, "committed", h["file"]))

    def abort(self, handles: list[dict]) -> None:
        for h in handles:
            staged = os.path.join(self.directory, "staged", h["file"])
            if os.path.exists(staged):
                os.remove(staged)


class FilesKind(SinkKind):
    name = KIND
    store_settings = {"directory": "the store's directory"}

    def describe(self, handle: Mapping[str, Any], now_ms: int, open_txn: bool) -> dict[str, Any]:
        return {"file": handle["file"]}

    def text(self, described: Mapping[str, Any]) -> str:
        return f"staged file {described['file']}"

    def recovery_sink(self, batch: PendingBatch) -> FilesSink:
        return FilesSink(batch.settings(self.name), self.store_setting(batch, "directory"))


register(FilesKind())


@pytest.fixture
def query(tmp_path):
    """A stopped query's checkpoint: batch 0 decided (not committed), batch 1 prepared only;
    the store holds both batches' staged files."""
    checkpoint, store = tmp_path / "ck", tmp_path / "store"
    for d in (checkpoint, store / "staged", store / "committed"):
        d.mkdir(parents=True)
    (checkpoint / "metadata").write_text('{"id":"q"}')
    txlog = sink_log(SparkCheckpoint(str(checkpoint)))
    handles = {}
    for batch, partition in ((0, 0), (0, 1), (1, 0)):
        h = {"kind": KIND, "file": f"b{batch}-p{partition}-a0"}
        (store / "staged" / h["file"]).write_text("rows")
        txlog.record_prepared(batch, partition, 0, h)
        handles.setdefault(batch, {})[partition] = h
    txlog.record_decision(0, handles[0])
    return str(checkpoint), store, txlog


def test_resolve_settles_a_user_defined_sinks_pending_batches(query):
    checkpoint, store, txlog = query
    report = resolve_checkpoint(checkpoint, StoreOptions(kind_settings={KIND: {
        "directory": str(store)}}), apply=True, force=True)
    assert [(b["batch"], b["sink"], b["result"]) for b in report["batches"]] == [
        (0, [KIND], "done"), (1, [KIND], "forgotten")]
    assert sorted(os.listdir(store / "committed")) == ["b0-p0-a0", "b0-p1-a0"]
    assert os.listdir(store / "staged") == []  # batch 1 undecided: aborted
    assert txlog.pending() == []
    # what was resolved was read from the log and the kind, not guessed: a second run has
    # nothing to do
    again = resolve_checkpoint(checkpoint, StoreOptions(kind_settings={KIND: {
        "directory": str(store)}}), apply=True, force=True)
    assert again["batches"] == []


def test_a_missing_setting_is_named_with_its_flag(query):
    checkpoint, store, _ = query
    with pytest.raises(ResolveError, match=f"--store-option {KIND}:directory=VALUE"):
        resolve_checkpoint(checkpoint, StoreOptions(), apply=True, force=True)
    assert sorted(os.listdir(store / "staged")) == ["b0-p0-a0", "b0-p1-a0", "b1-p0-a0"]


def test_a_setting_the_kind_did_not_register_is_refused(query):
    checkpoint, store, _ = query
    with pytest.raises(ResolveError, match="no setting dir .*its settings: directory"):
        resolve_checkpoint(checkpoint, StoreOptions(kind_settings={KIND: {"dir": str(store)}}),
                           apply=True, force=True)


def test_the_command_line_settles_it_with_the_kinds_module_and_its_setting(query, capsys):
    from connectors.cli import EXIT_OK, main

    checkpoint, store, txlog = query
    assert main(["resolve", checkpoint, "--apply", "--force", "--kind-module", __name__,
                 "--store-option", f"{KIND}:directory={store}"]) == EXIT_OK, \
        capsys.readouterr().err
    assert sorted(os.listdir(store / "committed")) == ["b0-p0-a0", "b0-p1-a0"]
    assert txlog.pending() == []


@pytest.mark.parametrize("flags, error", [
    (["--store-option", "directory=/x"], "expected KIND:NAME=VALUE"),
    (["--kind-module", "no_such_module_of_kinds"], "cannot import no_such_module_of_kinds"),
])
def test_the_command_line_refuses_a_malformed_store_option_or_module(query, capsys, flags,
                                                                    error):
    from connectors.cli import EXIT_USAGE, main

    with pytest.raises(SystemExit) as exited:
        main(["resolve", query[0], *flags])
    assert exited.value.code == EXIT_USAGE and error in capsys.readouterr().err
