"""`PostgresOptions`: the sink's options, parsed once at query start.

Cheap to import (no psycopg at module level): the format's DataSource reads the option names
here in every Spark Python worker that merely looks formats up. psycopg is imported where a
connection string or a table name is actually parsed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from connectors.core.options import OptionError, Options
from sinks.postgres.ids import gid_prefix

if TYPE_CHECKING:
    from psycopg import sql

    from sinks.two_phase_commit import SinkSettings

FORMAT_NAME = "postgres-eos"
#: The page listing every option (named in the message for an unknown one).
DOCS = "docs/postgres-sink.md#options"
#: The sink's own options (besides the template's); anything else is refused.
OPTIONS = ("url", "table", "createTable", "allowNewTable")


# -- connection strings: parsed once, never shown with the password -------------------------


def parse_url(url: str) -> dict[str, str]:
    """libpq's own parse of a URI or key=value string. Its error text can quote the string
    (and so the password), so the error here names the option and not the value."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(url)
    except psycopg.Error:
        raise OptionError(
            "url",
            "is not a valid libpq connection string: expected a URI such as "
            "postgresql://user:password@host:5432/dbname or key=value pairs "
            "(host=... dbname=... user=...)",
        ) from None
    return {k: str(v) for k, v in params.items()}


def redacted_url(params: dict[str, str]) -> str:
    """Where a connection string points, fit for logs and errors: no password, no other
    parameter (sslkey paths, options=... may say more than a log should)."""
    user = params.get("user", "")
    host = params.get("host") or params.get("hostaddr") or "localhost"
    port = params.get("port", "5432")
    db = params.get("dbname", user or "")
    return f"postgresql://{user + '@' if user else ''}{host}:{port}/{db}"


def scrub(text: str, secret: str | None) -> str:
    """`text` with every occurrence of `secret` masked (libpq does not echo passwords, but
    an error from a driver or a proxy might)."""
    return text.replace(secret, "***") if secret else text


# -- table names ----------------------------------------------------------------------------


_PART = re.compile(r'"((?:[^"]|"")+)"|([^".\s]+)')


@dataclass(frozen=True)
class TableName:
    """`[schema.]name`, resolved as PostgreSQL resolves SQL text: unquoted parts fold to lower
    case, "double-quoted" parts are taken as written."""

    schema: str | None
    name: str

    @classmethod
    def parse(cls, value: str) -> "TableName":
        parts: list[str] = []
        text, pos = value.strip(), 0
        while m := _PART.match(text, pos):
            parts.append(m.group(1).replace('""', '"') if m.group(1) is not None else m.group(2).lower())
            pos = m.end()
            if not text.startswith(".", pos) or pos + 1 == len(text):
                break  # the name ends here (a trailing dot is left unread: an error)
            pos += 1
        if pos != len(text) or not 1 <= len(parts) <= 2:
            raise OptionError(
                "table",
                f"expected name or schema.name (double-quote a part to keep its case or "
                f"special characters, e.g. public.\"Events\"); got {value!r}",
            )
        return cls(parts[0] if len(parts) == 2 else None, parts[-1])

    def sql(self) -> "sql.Identifier":
        from psycopg import sql

        return sql.Identifier(self.schema, self.name) if self.schema else sql.Identifier(self.name)

    def __str__(self) -> str:
        return self.sql().as_string(None)


# -- the options ----------------------------------------------------------------------------


@dataclass(frozen=True)
class PostgresOptions:
    url: str = field(repr=False)  # holds the password: never in a repr
    target: str  # the url without secrets, for messages
    password: str | None = field(repr=False)
    table: TableName
    create_table: bool
    gid_prefix: str
    #: Write on where the checkpoint's table was dropped or replaced (sinks/target_identity.py)
    allow_new_table: bool = False

    @classmethod
    def parse(cls, opts: Options, settings: SinkSettings) -> "PostgresOptions":
        url = opts.require(
            "url", "a libpq connection string, e.g. postgresql://user:password@host:5432/db"
        )
        params = parse_url(url)
        table = TableName.parse(opts.require("table", "the target table, name or schema.name"))
        origin = settings.checkpoint_location or f"{redacted_url(params)}/{table}"
        return cls(
            url=url,
            target=redacted_url(params),
            password=params.get("password"),
            table=table,
            create_table=opts.get_bool("createTable", True),
            gid_prefix=gid_prefix(origin),
            allow_new_table=opts.get_bool("allowNewTable", False),
        )
