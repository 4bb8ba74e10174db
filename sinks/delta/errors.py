"""What the `delta-eos` sink raises beyond the template's errors: a batch that cannot be
written as it is (a null in a NOT NULL column; in upsert mode, a change without its key or
sequence). Either fails the task before anything of the batch is committed."""

from __future__ import annotations


class NotNullViolation(ValueError):
    """A NOT NULL column of the Delta table holds a null in a micro-batch: nothing of the
    batch is written (the task fails before its file is opened, so the batch aborts)."""

    def __init__(self, column: str, nulls: int, batch_id: int, partition_id: int,
                 detail: str = "") -> None:
        self.column = column
        self.batch_id = batch_id
        self.partition_id = partition_id
        self.nulls = nulls
        super().__init__(
            f"delta-eos: column '{column}' is NOT NULL in the Delta table, but micro-batch "
            f"{batch_id} (Spark partition {partition_id}) holds {detail or f'{nulls} null value(s) in it'}; "
            "nothing of the batch is written. Filter or fill the nulls upstream "
            f"(e.g. .where(col('{column}').isNotNull()) or coalesce)"
        )


class NullKeyOrSequence(ValueError):
    """A change without a key or a sequence cannot be placed: the task fails (Spark retries it,
    then the query stops) and nothing of the batch is committed. Never a silent skip."""

    def __init__(self, option: str, column: str, nulls: int, batch_id: int,
                 partition_id: int) -> None:
        self.option, self.column, self.batch_id = option, column, batch_id
        super().__init__(
            f"delta-eos upsert: micro-batch {batch_id} (Spark partition {partition_id}) holds "
            f"{nulls} change(s) whose {option} column '{column}' is null; a change needs its "
            "key and its sequence. Nothing of the batch is committed: filter or fill them "
            f"upstream (e.g. .where(col('{column}').isNotNull()))"
        )
