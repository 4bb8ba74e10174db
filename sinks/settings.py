"""The options every two-phase-commit sink takes, parsed once: the delivery guarantee, the
checkpoint (where the transaction log lives), the commit's timeout and retries, the batches to
retain; and the check that refuses an option no part of the sink reads. Re-exported by
sinks/two_phase_commit.py, the template's public spelling."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from connectors.core.options import OptionError, Options
from connectors.core.paths import normalise

EXACTLY_ONCE, AT_LEAST_ONCE, NONE = "exactly-once", "at-least-once", "none"
GUARANTEES = (EXACTLY_ONCE, AT_LEAST_ONCE, NONE)


#: Options every two-phase-commit sink takes (SinkSettings), for the unknown-option check.
SETTINGS_OPTIONS = (
    "deliveryGuarantee", "checkpointLocation", "commitTimeout", "commitRetries",
    "minBatchesToRetain",
)
#: What Spark itself adds to a sink's options (seen with PySpark 4.3): `queryName` from
#: DataStreamWriter.queryName(), `path` from start(path) / save(path), `checkpointLocation`
#: from .option(). Never refused, even by a sink that has no use for them.
SPARK_OPTIONS = ("path", "queryName", "checkpointLocation")
#: A batch write (df.write) has no checkpoint, no transaction log and no batches: of the
#: template's options it takes these; Spark adds `path` (save(path)).
BATCH_SETTINGS_OPTIONS = ("deliveryGuarantee", "commitTimeout", "commitRetries")
BATCH_SPARK_OPTIONS = ("path",)


def reject_unknown_options(
    opts: Options, known: tuple[str, ...], *, format_name: str, prefixes: tuple[str, ...] = (),
    batch: bool = False, docs: str | None = None,
) -> None:
    """At query start: an option no part of the sink reads fails, naming the closest known
    one and the sink's page of options (`docs`), instead of being silently ignored (a misspelt
    `checkpointLocaton`, a source option such as `subscribe` given to a writer, a
    streaming-only option given to a batch write)."""
    if batch:
        names = dict.fromkeys((*known, *BATCH_SETTINGS_OPTIONS, *BATCH_SPARK_OPTIONS))
        where = f"a {format_name} batch write (df.write)"
    else:
        names = dict.fromkeys((*known, *SETTINGS_OPTIONS, *SPARK_OPTIONS))
        where = f"the {format_name} sink"
    opts.reject_unknown(names, prefixes=prefixes, format_name=where, docs=docs)


@dataclass(frozen=True)
class SinkSettings:
    """Options every two-phase-commit sink takes."""

    name: str
    guarantee: str
    checkpoint_location: str | None
    commit_timeout_ms: int
    commit_attempts: int
    retain_batches: int
    #: Set for a batch write (df.write): the job's own id, which stands in for the checkpoint
    #: and the batch id (transaction and file names). None for a streaming query.
    job_id: str | None = None

    @property
    def batch_job(self) -> bool:
        return self.job_id is not None

    @classmethod
    def for_batch_job(cls, name: str, opts: Options) -> "SinkSettings":
        """A batch write's settings: a fresh job id, no checkpoint (the tasks' handles travel
        in their commit messages; nothing outlives the job, so nothing needs a log)."""
        return cls(
            name=name,
            guarantee=opts.get_choice("deliveryGuarantee", GUARANTEES, EXACTLY_ONCE),
            checkpoint_location=None,
            commit_timeout_ms=opts.get_duration_ms("commitTimeout", 120_000),
            commit_attempts=opts.get_int("commitRetries", 8, minimum=0) + 1,
            retain_batches=0,
            job_id=uuid.uuid4().hex,
        )

    @classmethod
    def from_options(cls, name: str, opts: Options) -> "SinkSettings":
        guarantee = opts.get_choice("deliveryGuarantee", GUARANTEES, EXACTLY_ONCE)
        raw_checkpoint = opts.get("checkpointLocation")
        # The same place on every executor, in a scheme pyarrow.fs serves (or an error now).
        checkpoint = normalise("checkpointLocation", raw_checkpoint) if raw_checkpoint else None
        if guarantee == EXACTLY_ONCE and not checkpoint:
            raise OptionError(
                "checkpointLocation",
                f"{name} in exactly-once mode keeps its transaction log under the query's "
                'checkpoint: set .option("checkpointLocation", ...) on writeStream',
            )
        return cls(
            name=name,
            guarantee=guarantee,
            checkpoint_location=checkpoint,
            commit_timeout_ms=opts.get_duration_ms("commitTimeout", 120_000),
            commit_attempts=opts.get_int("commitRetries", 8, minimum=0) + 1,
            retain_batches=opts.get_int("minBatchesToRetain", 10, minimum=2),
        )
