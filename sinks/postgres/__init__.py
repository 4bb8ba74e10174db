"""`postgres-eos`: the exactly-once PostgreSQL sink, one module per concern.

    data_source.py  PostgresEosDataSource: the format Spark registers; options checked at start
    options.py      PostgresOptions: the options, connection strings (never shown with the
                    password) and table names, parsed once
    ids.py          the global transaction ids: built and parsed here only
    handles.py      the handles: a prepared transaction's gid and xid
    kind.py         the sink kind: how inspect shows the handles and resolve settles them
    connection.py   connections by the `url` option; this sink's rows of pg_prepared_xacts
    encoding.py     Arrow -> PostgreSQL: createTable's column types, COPY's CSV input
    errors.py       what the sink raises beyond the template's errors
    sink.py         PostgresSink: PREPARE TRANSACTION by tasks, COMMIT PREPARED by the driver

psycopg comes with the `[postgres]` extra. `from sinks.postgres import PostgresSink` (and the
other names below) keeps working: the names are resolved on first use, so registering the
format (every Spark Python worker imports `pyspark_postgres_eos`) costs no psycopg.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sinks.postgres.data_source import PostgresEosDataSource
    from sinks.postgres.encoding import bytea_hex, check_columns, pg_type, to_csv
    from sinks.postgres.errors import (
        CannotConnect,
        OutcomeUnknown,
        PreparedTransactionsDisabled,
        TooManyPreparedTransactions,
        is_prepared_limit,
        prepared_limit_message,
    )
    from sinks.postgres.ids import GID_MAX_BYTES, gid_batch, gid_prefix, make_gid, parse_gid
    from sinks.postgres.options import (
        FORMAT_NAME,
        OPTIONS,
        PostgresOptions,
        TableName,
        parse_url,
        redacted_url,
        scrub,
    )
    from sinks.postgres.sink import PostgresSink

#: Public name -> the module that defines it.
_EXPORTS = {
    "PostgresEosDataSource": "sinks.postgres.data_source",
    **dict.fromkeys(("bytea_hex", "check_columns", "pg_type", "to_csv"), "sinks.postgres.encoding"),
    **dict.fromkeys(("CannotConnect", "OutcomeUnknown", "PreparedTransactionsDisabled",
                     "TooManyPreparedTransactions", "is_prepared_limit",
                     "prepared_limit_message"), "sinks.postgres.errors"),
    **dict.fromkeys(("GID_MAX_BYTES", "gid_batch", "gid_prefix", "make_gid", "parse_gid"),
                    "sinks.postgres.ids"),
    **dict.fromkeys(("FORMAT_NAME", "OPTIONS", "PostgresOptions", "TableName", "parse_url",
                     "redacted_url", "scrub"), "sinks.postgres.options"),
    "PostgresSink": "sinks.postgres.sink",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sinks.postgres' has no attribute {name!r}")
    return getattr(import_module(module), name)
