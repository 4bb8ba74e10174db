"""`PostgresSink`: the exactly-once PostgreSQL sink, on PREPARE TRANSACTION / COMMIT PREPARED.

Phase one (tasks): a task opens a connection and a transaction, COPYs its Arrow rows into the
table, and runs `PREPARE TRANSACTION '<gid>'`. The rows are then durable on the server (they
survive the task, its connection and a server restart) and invisible to every reader. Phase two
(driver): `COMMIT PREPARED '<gid>'`. The commit protocol (when to prepare, decide, commit,
recover) is the template's, in sinks/two_phase_commit.py; this module only speaks PostgreSQL.

The global id (sinks/postgres/ids.py) is deterministic, so a restart finds in
`pg_prepared_xacts` whatever a crashed run prepared. A handle carries the gid and the transaction's id (`txid_current()`): once the gid is
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

import logging
from dataclasses import dataclass

import psycopg
import pyarrow as pa
from psycopg import sql

from connectors.core.options import OptionError
from sinks.postgres.connection import connect, prepared_xacts, rollback_prepared
from sinks.postgres.encoding import check_columns, pg_type, to_csv
from sinks.postgres.errors import (
    NOT_TRANSIENT,
    OutcomeUnknown,
    PreparedTransactionsDisabled,
    TooManyPreparedTransactions,
    is_prepared_limit,
    prepared_limit_message,
)
from sinks.postgres.ids import gid_batch, make_gid, parse_gid
from sinks.postgres.handles import PostgresHandle, postgres_handle
from sinks.postgres.options import FORMAT_NAME, PostgresOptions
from sinks.target_identity import TargetIdentity
from sinks.two_phase_commit import (
    EXACTLY_ONCE,
    SinkSettings,
    TaskInfo,
    TransactionLost,
    TwoPhaseCommitSink,
)
from sinks.txn_log import Handle

log = logging.getLogger("kafka_eos.sink.postgres")


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
        return f"{FORMAT_NAME}[{self.options.target} {self.options.table}]"

    def _connect(self, *, autocommit: bool = False) -> psycopg.Connection:
        return connect(self.options, self.describe(), autocommit=autocommit)

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

    def preCommit(self, txn: PgTxn) -> PostgresHandle | Handle:
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
        return postgres_handle(txn.gid, txn.xid)

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
            self.abort([postgres_handle(txn.gid, txn.xid)])

    # -- driver side -------------------------------------------------------------------------

    def _prepared_xacts(self, conn: psycopg.Connection) -> dict[str, int]:
        """gid -> 32-bit xid of this sink's prepared transactions in this database."""
        return prepared_xacts(conn, self.options.gid_prefix)

    def _rollback(self, conn: psycopg.Connection, gids: list[str]) -> None:
        rollback_prepared(conn, gids, self.describe())

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
        return super().isTransient(exc) and not isinstance(exc, NOT_TRANSIENT)
