"""The `postgres-eos` sink kind (sinks/kinds.py): how `kafka-eos inspect` shows its handles
(prepared transactions) and which sink `resolve` commits or rolls them back with (the query's
gid prefix, read from the handles' gids).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sinks.kinds import PendingBatch, ResolveError, SinkKind, register
from sinks.postgres.ids import split_gid
from sinks.postgres.handles import KIND

if TYPE_CHECKING:
    from sinks.postgres.sink import PostgresSink


class PostgresKind(SinkKind):
    name = KIND
    legacy_keys = ("gid",)

    def describe(self, handle: Mapping[str, Any], now_ms: int, open_txn: bool) -> dict[str, Any]:
        return {"gid": handle["gid"], "xid": handle.get("xid")}

    def text(self, described: Mapping[str, Any]) -> str:
        return f"postgres prepared transaction {described['gid']} (xid {described['xid']})"

    def recovery_sink(self, batch: PendingBatch) -> PostgresSink:
        """The query's sink as far as COMMIT / ROLLBACK PREPARED need it: the server (its URL
        named by the operator) and the gids' prefix, read from the handles' own gids: the one
        the query derived from its checkpoint location, however it was spelt."""
        import pyarrow as pa

        from connectors.core import extras

        extras.require("postgres")  # MissingExtra: the pip install to run
        from sinks.postgres.options import PostgresOptions, TableName, parse_url, redacted_url
        from sinks.postgres.sink import PostgresSink

        store = batch.store
        if not store.pg_url:
            raise ResolveError("the log holds postgres-eos prepared transactions: name the "
                               "environment variable holding the libpq URL with --pg-url-env VAR")
        prefixes = {_prefix(h["gid"]) for h in batch.handles}
        if len(prefixes) != 1:
            raise ResolveError(f"batch {batch.plan.batch_id}: prepared transactions of several "
                               f"gid prefixes ({sorted(prefixes)}): not settled by resolve")
        params = parse_url(store.pg_url)
        options = PostgresOptions(
            url=store.pg_url, target=redacted_url(params), password=params.get("password"),
            table=TableName.parse(store.pg_table) if store.pg_table else TableName(None, "?"),
            create_table=False,
            gid_prefix=prefixes.pop(),
        )
        return PostgresSink(batch.settings(KIND), options, pa.schema([]))


def _prefix(gid: str) -> str:
    parsed = split_gid(gid)
    if parsed is None:
        raise ResolveError(f"{gid!r} is not a postgres-eos gid "
                           "(<prefix>-<batch>-<partition>-<attempt>)")
    return parsed.prefix


register(PostgresKind())
