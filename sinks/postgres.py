"""`postgres-eos`: the exactly-once PostgreSQL sink, on PREPARE TRANSACTION / COMMIT PREPARED.

Phase one (tasks): a task opens a connection and a transaction, COPYs its Arrow rows into the
table, and runs `PREPARE TRANSACTION '<gid>'`. The rows are then durable on the server (they
survive the task, its connection and a server restart) and invisible to every reader. Phase two
(driver): `COMMIT PREPARED '<gid>'`. The commit protocol (when to prepare, decide, commit,
recover) is the template's, in sinks/two_phase_commit.py; this module only speaks PostgreSQL.

The global id is `<prefix>-<batch>-<partition>-<attempt>`, the prefix derived from the query's
checkpoint: deterministic, so a restart finds in `pg_prepared_xacts` whatever a crashed run
prepared. A handle carries the gid and the transaction's id (`txid_current()`): once the gid is
gone from `pg_prepared_xacts`, `txid_status(xid)` tells "committed" (a repeated commit: success)
from "aborted" (rolled back behind our back: the template rewrites the partition).
In at-least-once mode a task commits its own transaction (plain COMMIT, no prepared state).

Leaked prepared transactions. A prepared transaction outlives its session: until someone commits
or rolls it back it holds its locks, holds back VACUUM's horizon and takes one of the server's
`max_prepared_transactions` slots. So nothing of this sink stays prepared past the next batch:
* a task whose preCommit or log write fails rolls back what it prepared (the template calls
  `abort([handle])`, or `abortTransaction`, which rolls back a PREPAREd transaction by gid and
  xid on a connection of its own, since preCommit closed the task's);
* before every batch's tasks, after recovery has committed every decided batch,
  `cleanupAbandoned` rolls back whatever of this sink is still prepared: no decision names it
  (a task killed between PREPARE and its log write, a speculative or retried attempt that
  prepared after its batch was committed). It costs one query when there is nothing to do.
  What such an attempt prepares after the last batch of a run, and what the other tasks of a
  batch that failed had prepared (Spark's abort does not always hear of them), are rolled back
  when the query next starts on its checkpoint.
The server-wide limit: each write task of a batch holds one prepared transaction until the
driver commits the batch, so `max_prepared_transactions` must cover the write tasks of a batch
(its partitions) plus task retries, speculative tasks and other clients' prepared transactions.
`open()` refuses a server with 0. It cannot compare the limit with the batch's write tasks:
PySpark does not tell a Python writer how many partitions a batch has, and this sink's own
prepared transactions present at that point are committed or rolled back by the recovery that
follows. The comparison is made where both numbers are known: a PREPARE refused for want of a
slot fails the task with `TooManyPreparedTransactions`, naming max_prepared_transactions and the
number of write tasks the batch has at least (its partitions then holding one, and this one).
"""

from __future__ import annotations

import hashlib
import io
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from connectors.options import OptionError, Options
from sinks.target_identity import TargetIdentity
from sinks.two_phase_commit import (
    EXACTLY_ONCE,
    SinkSettings,
    TaskInfo,
    TwoPhaseCommitSink,
    TransactionLost,
)
from sinks.postgres_data_source import FORMAT_NAME  # noqa: F401  (one spelling, both modules)
from sinks.txn_log import Handle

log = logging.getLogger("kafka_eos.sink.postgres")


#: The sink's own options (besides the template's); anything else is refused.
OPTIONS = ("url", "table", "createTable", "allowNewTable")
GID_MAX_BYTES = 200  # PostgreSQL's limit on a prepared transaction's identifier
#: libpq waits forever for a connection by default; a commit retry must not.
DEFAULT_CONNECT_TIMEOUT_S = "30"


class PreparedTransactionsDisabled(RuntimeError):
    """The server runs with max_prepared_transactions = 0: no PREPARE TRANSACTION."""


class TooManyPreparedTransactions(RuntimeError):
    """PREPARE TRANSACTION refused: every max_prepared_transactions slot is taken."""


class OutcomeUnknown(RuntimeError):
    """A prepared transaction is gone and the server no longer knows how it ended."""


class CannotConnect(psycopg.OperationalError):
    """No connection with the `url` option: a wrong url, or the server unavailable for now
    (then worth retrying). The message names the option and never holds the password."""


# -- connection strings: parsed once, never shown with the password -------------------------


def parse_url(url: str) -> dict[str, str]:
    """libpq's own parse of a URI or key=value string. Its error text can quote the string
    (and so the password), so the error here names the option and not the value."""
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

    def sql(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.name) if self.schema else sql.Identifier(self.name)

    def __str__(self) -> str:
        return self.sql().as_string(None)


# -- Arrow -> PostgreSQL --------------------------------------------------------------------


def pg_type(t: pa.DataType) -> str | None:
    """The column type `createTable` gives an Arrow type, or None if the sink cannot write it."""
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_uint8(t):
        return "smallint"
    if pa.types.is_int32(t) or pa.types.is_uint16(t):
        return "integer"
    if pa.types.is_int64(t) or pa.types.is_uint32(t):
        return "bigint"
    if pa.types.is_uint64(t):
        return "numeric(20)"
    if pa.types.is_float16(t) or pa.types.is_float32(t):
        return "real"
    if pa.types.is_float64(t):
        return "double precision"
    if pa.types.is_decimal(t):
        return f"numeric({t.precision},{t.scale})"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "text"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "bytea"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "timestamp with time zone" if t.tz else "timestamp without time zone"
    if pa.types.is_time(t):
        return "time without time zone"
    return None


def check_columns(schema: pa.Schema, type_names: dict[str, str] | None = None) -> None:
    """Every column must have a PostgreSQL counterpart: fail at query start, naming it (and
    its type as the user knows it: `type_names`, e.g. Spark's, else Arrow's)."""
    for f in schema:
        if pg_type(f.type) is None:
            shown = (type_names or {}).get(f.name, str(f.type))
            raise OptionError(
                f.name,
                f"column '{f.name}' has type {shown}, which postgres-eos does not write; it "
                "writes booleans, integers, floats, decimals, strings, binary, dates, times and "
                "timestamps (serialise nested values, e.g. to_json(), first)",
            )


_HEX = np.array([list(f"{i:02x}".encode()) for i in range(256)], dtype=np.uint8)


def bytea_hex(arr: pa.Array) -> pa.Array:
    r"""binary -> bytea's text form '\x<hex>', a column at a time (no Python object per value)."""
    arr = arr.cast(pa.large_binary())
    n = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset : arr.offset + n + 1]
    data_buf = arr.buffers()[2]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.empty(0, np.uint8)
    body = _HEX[data[offsets[0] : offsets[-1]]].reshape(-1)
    starts = np.concatenate([[0], np.cumsum(2 + 2 * np.diff(offsets))]).astype(np.int64)
    out = np.empty(int(starts[-1]), dtype=np.uint8)
    prefix = np.zeros(len(out), dtype=bool)
    prefix[starts[:-1]] = prefix[starts[:-1] + 1] = True
    out[starts[:-1]], out[starts[:-1] + 1] = ord("\\"), ord("x")
    out[~prefix] = body
    text = pa.Array.from_buffers(pa.large_string(), n, [None, pa.py_buffer(starts), pa.py_buffer(out)])
    return pc.if_else(arr.is_null(), pa.scalar(None, pa.large_string()), text)


def to_csv(batch: pa.RecordBatch) -> bytes:
    """COPY's CSV input for one Arrow batch, written by pyarrow: strings are always quoted
    (so "" is an empty string) and nulls are bare empty fields (NULL to COPY)."""
    columns = [
        bytea_hex(c) if pa.types.is_binary(c.type) or pa.types.is_large_binary(c.type) else c
        for c in batch.columns
    ]
    out = io.BytesIO()
    pacsv.write_csv(
        pa.RecordBatch.from_arrays(columns, names=batch.schema.names),
        out,
        pacsv.WriteOptions(include_header=False),
    )
    return out.getvalue()


# -- global transaction ids -----------------------------------------------------------------


def gid_prefix(checkpoint_location: str) -> str:
    """This query's gids: one prefix per checkpoint, so two queries never share one."""
    return "pg-eos-" + hashlib.sha256(checkpoint_location.encode()).hexdigest()[:16]


def make_gid(prefix: str, batch_id: int, partition: int, attempt: int) -> str:
    """Per (sink, batch, partition), and per attempt so that a task Spark retries (or runs
    speculatively) prepares beside its predecessor instead of colliding with it."""
    gid = f"{prefix}-{batch_id}-{partition}-{attempt}"
    assert len(gid.encode()) <= GID_MAX_BYTES
    return gid


def parse_gid(prefix: str, gid: str) -> tuple[int, int, int] | None:
    """(batch, partition, attempt) of one of this sink's gids; None for anybody else's."""
    m = re.fullmatch(re.escape(prefix) + r"-(\d+)-(\d+)-(\d+)", gid)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def gid_batch(prefix: str, gid: str) -> int | None:
    """The batch of one of this sink's gids; None for anybody else's."""
    parsed = parse_gid(prefix, gid)
    return parsed[0] if parsed else None


def is_prepared_limit(exc: BaseException) -> bool:
    """PostgreSQL's "maximum number of prepared transactions reached" (SQLSTATE 53200, the
    out-of-memory class, which other shortages share: hence the message check)."""
    return isinstance(exc, psycopg.errors.OutOfMemory) and "prepared transactions" in (
        exc.diag.message_primary or str(exc)
    )


def prepared_limit_message(
    limit: int, batch_id: int, partition: int, held: dict[str, tuple[int, int, int] | None]
) -> str:
    """Why a PREPARE found no slot, with both numbers: the server's limit and the write tasks
    this batch has at least. `held`: every prepared gid on the server -> parse_gid of it."""
    ours = [g for g in held.values() if g is not None]
    this_batch = [g for g in ours if g[0] == batch_id]
    tasks = max(len({p for _, p, _ in this_batch} | {partition}), partition + 1)
    return (
        f"PREPARE TRANSACTION of batch {batch_id}, partition {partition} was refused: the "
        f"server has max_prepared_transactions = {limit}, and this batch has at least {tasks} "
        "write tasks, each holding a prepared transaction until the driver commits the batch "
        f"(held now: {len(this_batch)} by this batch, {len(ours) - len(this_batch)} left by "
        f"earlier batches of this query, {len(held) - len(ours)} by other clients). Raise "
        "max_prepared_transactions in postgresql.conf (a server restart) to at least the "
        "number of write tasks per batch plus room for task retries, speculative tasks and "
        "other clients, or write fewer partitions (coalesce()), or use "
        "deliveryGuarantee=at-least-once"
    )


# -- options --------------------------------------------------------------------------------


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


# -- the sink -------------------------------------------------------------------------------


@dataclass
class PgTxn:
    info: TaskInfo
    conn: psycopg.Connection
    gid: str | None  # None when the task commits by itself (at-least-once, none)
    prepared: bool = False
    xid: int | None = None  # the transaction's id, once prepared


class PostgresSink(TwoPhaseCommitSink[PgTxn]):
    commits_per_partition = True  # each prepared transaction is committed on its own

    def __init__(self, settings: SinkSettings, options: PostgresOptions, schema: pa.Schema) -> None:
        super().__init__(settings)
        check_columns(schema)
        self.options = options
        self.schema = schema

    @property
    def _exactly_once(self) -> bool:
        return self.settings.guarantee == EXACTLY_ONCE

    def describe(self) -> str:
        return f"postgres-eos[{self.options.target} {self.options.table}]"

    def _connect(self, *, autocommit: bool = False) -> psycopg.Connection:
        params: dict[str, Any] = {}
        if "connect_timeout" not in parse_url(self.options.url):
            params["connect_timeout"] = DEFAULT_CONNECT_TIMEOUT_S
        try:
            return psycopg.connect(self.options.url, autocommit=autocommit, **params)
        except psycopg.Error as e:
            raise CannotConnect(
                f"{self.describe()}: cannot connect (option 'url'): "
                f"{scrub(str(e), self.options.password)}"
            ) from None  # not chained: the original may carry the connection string

    # -- driver side: the store must be able to take the stream ------------------------------

    def open(self) -> None:
        """Before each batch's tasks: prepared transactions enabled, the table there (created
        if asked), every column of the stream in it. Whether max_prepared_transactions covers
        the batch's write tasks is told by the first PREPARE that does not fit (module doc)."""
        with self._connect(autocommit=True) as conn:
            if self._exactly_once:
                (limit,) = conn.execute("SHOW max_prepared_transactions").fetchone()
                if int(limit) == 0:
                    raise PreparedTransactionsDisabled(
                        f"{self.describe()}: the server runs with max_prepared_transactions = 0, "
                        "so PREPARE TRANSACTION (the first phase of exactly-once) is disabled. "
                        "Set max_prepared_transactions in postgresql.conf to at least the "
                        "number of write tasks per batch and restart the server, or use "
                        "deliveryGuarantee=at-least-once"
                    )
            table = self.options.table
            (oid,) = conn.execute("SELECT to_regclass(%s)::oid", [str(table)]).fetchone()
            self._check_same_table(oid)
            if oid is None:
                if not self.options.create_table:
                    raise OptionError(
                        "createTable",
                        f"table {table} does not exist in {self.options.target}; create it, or "
                        "set createTable=true to create it from the stream's schema",
                    )
                columns = sql.SQL(", ").join(
                    sql.SQL("{} {}{}").format(
                        sql.Identifier(f.name), sql.SQL(pg_type(f.type)),
                        sql.SQL("" if f.nullable else " NOT NULL"),
                    )
                    for f in self.schema
                )
                conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(table.sql(), columns))
                log.info("%s: created table %s", self.describe(), table)
                (oid,) = conn.execute("SELECT to_regclass(%s)::oid", [str(table)]).fetchone()
                self._check_same_table(oid)  # recorded: the table this checkpoint writes into
            cur = conn.execute(sql.SQL("SELECT * FROM {} LIMIT 0").format(table.sql()))
            have = [d.name for d in cur.description or []]
            missing = [n for n in self.schema.names if n not in have]
            if missing:
                raise OptionError(
                    "table",
                    f"table {table} has no column(s) {', '.join(missing)} (it has "
                    f"{', '.join(have)}); the stream's columns are written by name",
                )

    def _check_same_table(self, oid: int | None) -> None:
        """The table this checkpoint committed into is still there, and still that table (its
        OID): a dropped table is never re-created silently (sinks/target_identity.py)."""
        if not self.settings.checkpoint_location or getattr(self.settings, "batch_job", False):
            return
        TargetIdentity(self.settings.checkpoint_location).check(
            f"{self.options.target}/{self.options.table}", None if oid is None else str(oid),
            allow_new=self.options.allow_new_table,
            what=f"table {self.options.table} in {self.options.target}", sink=self.describe())

    # -- task side ---------------------------------------------------------------------------

    def beginTransaction(self, context: TaskInfo) -> PgTxn:
        gid = (
            make_gid(self.options.gid_prefix, context.batch_id, context.partition_id, context.attempt)
            if self._exactly_once else None
        )
        return PgTxn(context, self._connect(), gid)  # psycopg opens the transaction

    def invoke(self, txn: PgTxn, batch: pa.RecordBatch) -> None:
        copy = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(
            self.options.table.sql(), sql.SQL(", ").join(map(sql.Identifier, batch.schema.names))
        )
        with txn.conn.cursor() as cur, cur.copy(copy) as out:
            out.write(to_csv(batch))

    def preCommit(self, txn: PgTxn) -> Handle:
        """PREPARE TRANSACTION: durable and invisible until COMMIT PREPARED, from any session."""
        if txn.gid is None:
            txn.conn.commit()
            txn.conn.close()
            return {"committed": True}
        (xid,) = txn.conn.execute("SELECT txid_current()").fetchone()
        try:
            txn.conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(txn.gid)))
        except psycopg.errors.OutOfMemory as e:
            if not is_prepared_limit(e):
                raise
            raise self._too_many_prepared(txn) from None
        txn.prepared, txn.xid = True, int(xid)
        txn.conn.close()
        return {"gid": txn.gid, "xid": txn.xid}

    def _too_many_prepared(self, txn: PgTxn) -> TooManyPreparedTransactions:
        """The refused PREPARE ended the transaction; its session can still say how the
        server's slots are taken."""
        (limit,) = txn.conn.execute("SHOW max_prepared_transactions").fetchone()
        gids = [g for (g,) in txn.conn.execute("SELECT gid FROM pg_prepared_xacts").fetchall()]
        held = {g: parse_gid(self.options.gid_prefix, g) for g in gids}
        message = prepared_limit_message(int(limit), txn.info.batch_id, txn.info.partition_id, held)
        return TooManyPreparedTransactions(f"{self.describe()}: {message}")

    def abortTransaction(self, txn: PgTxn) -> None:
        """Closing the connection rolls back an open transaction. A prepared one outlives it
        (and preCommit has closed it): it is rolled back by gid and xid on a new connection."""
        txn.conn.close()
        if txn.prepared and txn.gid and txn.xid is not None:
            self.abort([{"gid": txn.gid, "xid": txn.xid}])

    # -- driver side -------------------------------------------------------------------------

    def _prepared_xacts(self, conn: psycopg.Connection) -> dict[str, int]:
        """gid -> 32-bit xid of this sink's prepared transactions in this database."""
        rows = conn.execute(
            "SELECT gid, transaction::text::bigint FROM pg_prepared_xacts "
            "WHERE database = current_database() AND starts_with(gid, %s)",
            [self.options.gid_prefix + "-"],
        ).fetchall()
        return {gid: xid for gid, xid in rows if gid_batch(self.options.gid_prefix, gid) is not None}

    def _rollback(self, conn: psycopg.Connection, gids: Iterable[str]) -> None:
        for gid in gids:
            try:
                conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
                log.info("%s: rolled back prepared transaction %s", self.describe(), gid)
            except psycopg.errors.UndefinedObject:
                pass  # already gone: committed or rolled back by someone else

    def commit(self, batchId: int, handles: dict[int, Handle]) -> None:
        """COMMIT PREPARED each handle still prepared (matched by gid and xid, so a gid reused
        by a later attempt is never committed in its place); for a handle already gone, the
        server's record of its xid decides: committed is success, aborted is lost."""
        if not self._exactly_once:
            return  # the task committed its own transaction
        with self._connect(autocommit=True) as conn:
            prepared = self._prepared_xacts(conn)
            for partition, h in sorted(handles.items()):
                gid, xid = h["gid"], int(h["xid"])
                if prepared.get(gid) == xid % 2**32:
                    try:
                        conn.execute(sql.SQL("COMMIT PREPARED {}").format(sql.Literal(gid)))
                        continue
                    except psycopg.errors.UndefinedObject:
                        pass  # finished concurrently: ask how
                (status,) = conn.execute("SELECT txid_status(%s::bigint)", [xid]).fetchone()
                if status == "committed":
                    continue  # already committed: a retry, or a recovery after a crash
                if status == "aborted":
                    raise TransactionLost(
                        [partition], f"prepared transaction {gid} was rolled back before its commit"
                    )
                if status is None:
                    raise OutcomeUnknown(
                        f"{self.describe()}: prepared transaction {gid} (xid {xid}) is gone and "
                        "the server no longer records how it ended; check the table for batch "
                        f"{batchId}, partition {partition} by hand"
                    )
                raise RuntimeError(f"{self.describe()}: transaction {gid} is {status}")  # retried

    def abort(self, handles: list[Handle]) -> None:
        """ROLLBACK PREPARED the handles still prepared (gid and xid match); others are gone."""
        if not self._exactly_once:
            return
        with self._connect(autocommit=True) as conn:
            prepared = self._prepared_xacts(conn)
            self._rollback(
                conn,
                [h["gid"] for h in handles if "gid" in h and prepared.get(h["gid"]) == int(h["xid"]) % 2**32],
            )

    def recoverAndAbort(self, batchId: int, handles: list[Handle]) -> None:
        """Everything of this batch still in pg_prepared_xacts, logged or not, is undecided."""
        with self._connect(autocommit=True) as conn:
            prepared = self._prepared_xacts(conn)
            self._rollback(conn, [g for g in prepared if gid_batch(self.options.gid_prefix, g) == batchId])

    def cleanupAbandoned(self) -> None:
        """Roll back every prepared transaction of this sink. Safe: the template calls this
        only after recovery has committed every decided handle (a decided one it could not
        commit fails recovery before this runs), and before the batch's tasks start, so what is
        left belongs to no decision: a task killed between PREPARE and its log write, or a
        speculative or retried attempt that prepared after its batch was committed. Cheap, as
        it runs before every batch: one query when there is nothing to roll back."""
        with self._connect(autocommit=True) as conn:
            leftover = sorted(self._prepared_xacts(conn))
            if leftover:
                log.warning(
                    "%s: rolling back %d prepared transaction(s) no decision names (killed, "
                    "retried or speculative task attempts): %s",
                    self.describe(), len(leftover), ", ".join(leftover),
                )
                self._rollback(conn, leftover)

    def isTransient(self, exc: BaseException) -> bool:
        return super().isTransient(exc) and not isinstance(
            exc, (OutcomeUnknown, PreparedTransactionsDisabled, TooManyPreparedTransactions)
        )


# The format's DataSource lives in a module of its own that imports this one only when a query
# starts (psycopg costs every Python worker that merely looks formats up); kept importable here.
from sinks.postgres_data_source import PostgresEosDataSource  # noqa: E402, F401
