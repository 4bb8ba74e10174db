"""The `delta-eos` sink kind (sinks/kinds.py): how `kafka-eos inspect` shows its handles (data
files, or staged changes for one MERGE) and which sink `resolve` commits or deletes them with
(the query's app id, recorded in its checkpoint; the MERGE's keys, in the handles).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sinks.delta.ids import recorded_app_id
from sinks.delta.handles import KIND, is_upsert
from sinks.kinds import PendingBatch, ResolveError, SinkKind, register

if TYPE_CHECKING:
    from sinks.delta.sink import DeltaSink


class DeltaKind(SinkKind):
    name = KIND
    legacy_keys = ("adds", "staged")

    def describe(self, handle: Mapping[str, Any], now_ms: int, open_txn: bool) -> dict[str, Any]:
        """The files the handle holds outside the table: data files (append mode) or staged
        changes for one MERGE (upsert mode)."""
        if is_upsert(handle):
            staged = handle.get("staged", [])
            return {"mode": "upsert", "files": [s.get("file") for s in staged],
                    "rows": sum(int(s.get("rows", 0)) for s in staged),
                    "deletes": sum(int(s.get("deletes", 0)) for s in staged),
                    "bytes": sum(int(s.get("size", 0)) for s in staged),
                    "merge_keys": (handle.get("upsert") or {}).get("keys")}
        adds = handle.get("adds", [])
        return {"files": [a.get("file") for a in adds],
                "rows": sum(int(a.get("rows", 0)) for a in adds),
                "bytes": sum(int(a.get("size", 0)) for a in adds)}

    def text(self, described: Mapping[str, Any]) -> str:
        files = described["files"]
        shown = ", ".join(files[:2]) + (" ..." if len(files) > 2 else "")
        if described.get("mode") == "upsert":
            return (f"delta upsert: {described['rows']} change(s) ({described['deletes']} "
                    f"delete(s)) staged in {len(files)} file(s) for one MERGE on "
                    f"{','.join(described.get('merge_keys') or [])}: {shown}")
        return f"delta {len(files)} file(s), {described['rows']} rows: {shown}"

    def recovery_sink(self, batch: PendingBatch) -> DeltaSink:
        """The query's sink as far as its commit needs it: the table (named by the operator),
        the app id (recorded in the checkpoint, or named with --app-id), and in upsert mode the
        MERGE's keys and sequence (in the handles)."""
        import pyarrow as pa
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        from connectors.core.paths import normalise
        from sinks.delta.options import DEFAULT_ORPHAN_RETENTION_MS, DeltaOptions, UpsertOptions
        from sinks.delta.sink import DeltaSink

        store, plan = batch.store, batch.plan
        if not store.delta_table:
            raise ResolveError("the log holds delta-eos files: name the table with --table PATH "
                               "(the sink's path option)")
        path = normalise("--table", store.delta_table)
        try:
            table: Any = DeltaTable(path, storage_options=store.storage_options or None)
        except TableNotFoundError:
            table = None
        if table is None and plan.commit:
            raise ResolveError(
                f"no Delta table at {path}, and batch {plan.batch_id} is decided: resolve does not "
                "create tables (the query does, with its table properties); restart the query, or "
                "check --table")
        spec = next((h["upsert"] for h in batch.handles if "upsert" in h), None)
        upsert = UpsertOptions(keys=tuple(spec["keys"]), sequence=spec["sequence"]) if spec else None
        options = DeltaOptions(
            path=path, partition_by=tuple(table.metadata().partition_columns) if table else (),
            merge_schema=False, app_id=store.app_id or recorded_app_id(batch.log),
            app_id_explicit=bool(store.app_id), orphan_retention_ms=DEFAULT_ORPHAN_RETENTION_MS,
            storage_options=dict(store.storage_options), upsert=upsert,
        )
        schema = pa.schema(table.schema().to_arrow()) if table else pa.schema([])
        if upsert is not None:
            from sinks.delta.upsert import DeltaUpsertSink

            if table is None:  # nothing to merge into: only aborts reach the store (see above)
                schema = pa.schema([pa.field(c, pa.int64()) for c in (*upsert.keys, upsert.sequence)])
            return DeltaUpsertSink(batch.settings(KIND), options, schema)
        sink = DeltaSink(batch.settings(KIND), options, schema)
        if table is not None and plan.commit:
            _check_app_id(sink, table, batch)
        return sink


def _check_app_id(sink: DeltaSink, table: Any, batch: PendingBatch) -> None:
    """A wrong app id would make a committed batch look uncommitted, and resolve commit it
    again: refuse when the table already references the batch's files but has no txn for it."""
    from sinks.delta.referenced_files import referenced_files

    if sink.isCommitted(batch.plan.batch_id):
        return
    fs, root = sink._fs()
    files = {a["file"] for h in batch.plan.commit.values() for a in h.get("adds", [])}
    if files & referenced_files(table, fs, root):
        raise ResolveError(
            f"the table at {sink.options.path} already holds files of batch {batch.plan.batch_id}, "
            f"but no txn action of app id {sink.options.app_id} says so: the query's sink "
            "uses another appId; give it with --app-id")


register(DeltaKind())
