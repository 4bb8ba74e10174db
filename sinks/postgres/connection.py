"""The sink's conversations with the server: a connection that never shows the password, and
the catalogue of this sink's prepared transactions (`pg_prepared_xacts`)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import psycopg
from psycopg import sql

from sinks.postgres.errors import CannotConnect
from sinks.postgres.ids import gid_batch
from sinks.postgres.options import PostgresOptions, parse_url, scrub

log = logging.getLogger("kafka_eos.sink.postgres")

#: libpq waits forever for a connection by default; a commit retry must not.
DEFAULT_CONNECT_TIMEOUT_S = "30"


def connect(options: PostgresOptions, who: str, *, autocommit: bool = False) -> psycopg.Connection:
    """A connection by the `url` option. A failure is `CannotConnect`, named after `who` (the
    sink's description), with the password masked and the original not chained: it may quote
    the connection string."""
    params: dict[str, Any] = {}
    if "connect_timeout" not in parse_url(options.url):
        params["connect_timeout"] = DEFAULT_CONNECT_TIMEOUT_S
    try:
        return psycopg.connect(options.url, autocommit=autocommit, **params)
    except psycopg.Error as e:
        raise CannotConnect(
            f"{who}: cannot connect (option 'url'): {scrub(str(e), options.password)}"
        ) from None


def prepared_xacts(conn: psycopg.Connection, prefix: str) -> dict[str, int]:
    """gid -> 32-bit xid of the prepared transactions of the sink with gid prefix `prefix`, in
    the connection's database."""
    rows = conn.execute(
        "SELECT gid, transaction::text::bigint FROM pg_prepared_xacts "
        "WHERE database = current_database() AND starts_with(gid, %s)",
        [prefix + "-"],
    ).fetchall()
    return {gid: xid for gid, xid in rows if gid_batch(prefix, gid) is not None}


def rollback_prepared(conn: psycopg.Connection, gids: Iterable[str], who: str) -> None:
    """ROLLBACK PREPARED each gid; one already gone (committed or rolled back by someone else)
    is skipped."""
    for gid in gids:
        try:
            conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
            log.info("%s: rolled back prepared transaction %s", who, gid)
        except psycopg.errors.UndefinedObject:
            pass
