"""The `delta-eos` sink's handles (sinks/delta/kind.py shows and settles them for
`kafka-eos inspect` and `resolve`).

Append mode: a task's Parquet files, written into the table directory and not yet added to the
table, each with what its add action needs. Upsert mode (mergeKeys): a task's staged changes,
and the keys and sequence column of the MERGE that applies them, since the query's options are
recorded nowhere else and resolve must commit without them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, NotRequired, TypedDict

from sinks.delta.options import FORMAT_NAME

KIND = FORMAT_NAME


class DataFile(TypedDict):
    """A data file written by a task, and what its add action needs."""

    path: str  # URL-encoded, relative to the table
    file: str  # relative to the table, as written
    size: int
    partition_values: dict[str, str | None]
    modification_time: int
    rows: int
    stats: str  # the add action's statistics JSON


class AppendHandle(TypedDict):
    #: Absent from handles written before handles recorded their kind.
    kind: NotRequired[Literal["delta-eos"]]
    adds: list[DataFile]


class MergeSpec(TypedDict):
    keys: list[str]
    sequence: str


class StagedChanges(TypedDict):
    """A task's changes, staged in one Parquet file under the table for the batch's MERGE."""

    file: str
    rows: int
    deletes: int
    size: int


class UpsertHandle(TypedDict):
    #: Absent from handles written before handles recorded their kind.
    kind: NotRequired[Literal["delta-eos"]]
    upsert: MergeSpec
    staged: list[StagedChanges]


def append_handle(adds: list[DataFile]) -> AppendHandle:
    return {"kind": KIND, "adds": adds}


def upsert_handle(keys: list[str], sequence: str, staged: list[StagedChanges]) -> UpsertHandle:
    return {"kind": KIND, "upsert": {"keys": keys, "sequence": sequence}, "staged": staged}


def is_upsert(handle: Mapping[str, Any]) -> bool:
    return "staged" in handle
