"""What the PostgreSQL sink raises beyond the template's errors, and how a refused PREPARE
is told apart from other shortages."""

from __future__ import annotations

import psycopg


class PreparedTransactionsDisabled(RuntimeError):
    """The server runs with max_prepared_transactions = 0: no PREPARE TRANSACTION."""


class TooManyPreparedTransactions(RuntimeError):
    """PREPARE TRANSACTION refused: every max_prepared_transactions slot is taken."""


class OutcomeUnknown(RuntimeError):
    """A prepared transaction is gone and the server no longer knows how it ended."""


class CannotConnect(psycopg.OperationalError):
    """No connection with the `url` option: a wrong url, or the server unavailable for now
    (then worth retrying). The message names the option and never holds the password."""


#: Errors no commit retry can mend.
NOT_TRANSIENT = (OutcomeUnknown, PreparedTransactionsDisabled, TooManyPreparedTransactions)


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
