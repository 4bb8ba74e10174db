"""`TwoPhaseCommitSink`: Flink's TwoPhaseCommitSinkFunction for Spark Structured Streaming.

The whole commit protocol lives here, once, for every sink (docs/design.md#commit-protocol). A
store subclasses `TwoPhaseCommitSink` and fills in its steps:

    task side    beginTransaction(context) -> txn      open a transaction for one partition
                 invoke(txn, record_batch)              write one Arrow batch into it
                 preCommit(txn) -> handle               make it durable, not visible; a JSON-able
                                                        handle the driver can commit by
                 abortTransaction(txn)                  (optional) clean up after a task failure
    driver side  commit(batchId, handles)               make the handles visible; idempotent
                 abort(handles)                         discard prepared handles
                 recoverAndCommit / recoverAndAbort     (optional) the same, on restore
                 isCommitted(batchId)                   (optional) for stores that record a
                                                        batch atomically (Delta's txn action)

and hands Spark `sink.streamWriter()`. Per batch N the writer does:
  1. tasks: begin, invoke per Arrow batch, preCommit, record the handle in the log;
  2. driver: write the decision record "commit N with these handles" (the decision point);
  3. driver: commit the handles (bounded retries, commit timeout), mark partitions committed;
  4. driver: mark N done, garbage-collect old records; only then does Spark log N committed.
When Spark pickles the writer for a batch's tasks, recovery runs first: a decided batch is
committed (recoverAndCommit), an undecided one is aborted (recoverAndAbort). On a replay a
partition already committed writes nothing; one whose transaction was lost is written again.

`sink.batchWriter()` (for `df.write`, with SinkSettings.for_batch_job) runs the same steps with
the job in place of the micro-batch: a fresh job id instead of the checkpoint and the batch id,
no transaction log (nothing outlives the job), the job's commit making every handle visible,
and a failed job aborted through `abortJob` (see TwoPhaseCommitBatchWriter).
"""

from __future__ import annotations

import json
import logging
import pickle
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_before_delay,
    wait_exponential,
)

from connectors.core import logs
from connectors.core.options import OptionError
from sinks import faults
from sinks.task_reports import METRICS_ENV, PreparedPartition, log_batch  # noqa: F401
from sinks.recovery_plan import RecoveryPlan, plan_recovery
from sinks.settings import (  # noqa: F401 (re-exported: the template's public names)
    AT_LEAST_ONCE,
    BATCH_SETTINGS_OPTIONS,
    BATCH_SPARK_OPTIONS,
    EXACTLY_ONCE,
    GUARANTEES,
    NONE,
    SETTINGS_OPTIONS,
    SPARK_OPTIONS,
    SinkSettings,
    reject_unknown_options,
)
from sinks.txn_log import Handle, TransactionLog

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("kafka_eos.sink")

Txn = TypeVar("Txn")


class TransactionLost(Exception):
    """A prepared transaction the store can no longer commit (e.g. aborted by a timeout).

    Raised by `commit` / `recoverAndCommit`; its partitions are rewritten on the replay.
    """

    def __init__(self, partitions: list[int], reason: str) -> None:
        self.partitions = sorted(partitions)
        super().__init__(f"transaction(s) of partition(s) {self.partitions} lost: {reason}")


class QueryStartFailed(pickle.PicklingError):
    """What the store's open() or recovery raised before a batch's tasks (it surfaces while
    Spark pickles the writer for them); the message is the original error's."""


class CommitTimeoutError(RuntimeError):
    """The commit of a batch did not finish within commitTimeoutMs: the batch fails loudly."""


@dataclass(frozen=True)
class TaskInfo:
    """What a task knows of itself when it begins a transaction."""

    batch_id: int
    partition_id: int
    attempt: int


class TwoPhaseCommitSink(ABC, Generic[Txn]):
    """Subclass and fill in the store's steps; the protocol is not yours to repeat."""

    #: True for stores whose handles commit one by one (Kafka), False for one atomic commit
    #: of the whole batch (Delta): decides whether partitions are marked committed singly.
    commits_per_partition: bool = False

    #: With commits_per_partition: how many partitions' handles may be committed at once, from
    #: threads of the driver (`commit` is then called concurrently, one partition each). 1 (the
    #: default): one after the other, for stores whose commit is not thread-safe.
    concurrent_commits: int = 1

    #: True for stores that record the batch id itself (Delta's txn action): `commit` is then
    #: called for a batch that wrote no rows too (one that read only transaction markers), so
    #: the store's record of the last batch keeps up with Spark's.
    commit_empty_batches: bool = False

    def __init__(self, settings: SinkSettings) -> None:
        self.settings = settings

    # -- task side --------------------------------------------------------------------------

    @abstractmethod
    def beginTransaction(self, context: TaskInfo) -> Txn:
        """Open a transaction for one partition of one batch. Its identity must be
        deterministic per (sink, partition) or (sink, batch, partition), so that a restart
        can find, fence or replace what a crashed attempt left behind."""

    @abstractmethod
    def invoke(self, txn: Txn, batch: pa.RecordBatch) -> None:
        """Write one Arrow record batch into the transaction (Flink's invoke)."""

    @abstractmethod
    def preCommit(self, txn: Txn) -> Handle:
        """Flush and make the transaction durable but not visible; return a JSON-serialisable
        handle from which another process can commit or abort it."""

    def abortTransaction(self, txn: Txn) -> None:
        """Clean up a transaction whose task failed before preCommit returned."""

    # -- driver side ------------------------------------------------------------------------

    @abstractmethod
    def commit(self, batchId: int, handles: dict[int, Handle]) -> None:
        """Make the handles (partition -> handle) visible. Must be idempotent: it is retried,
        and repeated after a crash. Raise TransactionLost for handles that cannot be
        committed any more; anything else is retried as transient (see `isTransient`)."""

    @abstractmethod
    def abort(self, handles: list[Handle]) -> None:
        """Discard prepared handles that will never be committed. Idempotent."""

    def recoverAndCommit(self, batchId: int, handles: dict[int, Handle]) -> None:
        """Commit handles decided by an earlier run; by default the same as `commit`."""
        self.commit(batchId, handles)

    def recoverAndAbort(self, batchId: int, handles: list[Handle]) -> None:
        """Discard what an earlier run prepared but never decided; by default `abort`."""
        self.abort(handles)

    def isCommitted(self, batchId: int) -> bool | None:
        """True if the store itself records that batch `batchId` is in; None if it can't say."""
        return None

    def cleanupAbandoned(self) -> None:
        """Remove what tasks killed before preCommit left behind (they logged no handle, so
        recoverAndAbort cannot know of it), or what a speculative or zombie attempt prepared
        after its batch was committed. Called before every batch's tasks, after recovery has
        committed every decided batch: keep it cheap, or throttle it in the store."""

    def abortJob(self, handles: list[Handle], partitions: int) -> None:
        """Batch writes: discard what a failed job prepared. `handles` are those of the tasks
        Spark reported before the failure; tasks it did not report (still running when the job
        failed, or killed) may have prepared too, so a store that can find them by the job's
        identity (`settings.job_id`; `partitions` is the job's number of write tasks) should.
        Called twice, JOB_ABORT_RECHECK_S apart, for tasks that prepared after the first call.
        Must not undo a commit that landed (Spark also aborts a job whose commit raised).
        By default `abort(handles)`."""
        self.abort(handles)

    def isTransient(self, exc: BaseException) -> bool:
        """Whether a failed commit is worth retrying."""
        return not isinstance(exc, (TransactionLost, OptionError))

    def open(self) -> None:
        """Driver side, before a batch's tasks: validate the store (schema, table, ...)."""

    def describe(self) -> str:
        return self.settings.name

    # -- wiring -----------------------------------------------------------------------------

    def streamWriter(self) -> "TwoPhaseCommitWriter":
        return TwoPhaseCommitWriter(self)

    def batchWriter(self) -> "TwoPhaseCommitBatchWriter":
        """For `df.write`: the sink must have been built with SinkSettings.for_batch_job."""
        if not self.settings.batch_job:
            raise ValueError("a batch writer needs SinkSettings.for_batch_job")
        return TwoPhaseCommitBatchWriter(self)


class _Protocol:
    """What the streaming and the batch writer share: the task side, the commit with bounded
    retries, the batch log line."""

    def __init__(self, sink: TwoPhaseCommitSink) -> None:
        self.sink = sink
        self.settings = sink.settings
        #: True once the store was opened (and, streaming, recovery ran) for the tasks this
        #: writer goes to.
        self.ready_for_tasks = False

    def __getstate__(self) -> dict[str, Any]:
        """Spark pickles the writer it built for a batch's tasks, and only that one (the writer
        built to commit or abort is used in place): so pickling is when recovery must run. This
        does not depend on how Spark starts its Python workers (daemon or not, any platform)."""
        if not self.ready_for_tasks:
            try:
                self.prepare_for_tasks()
            except Exception as e:
                # PySpark's serializer re-raises a PicklingError as it is, and wraps anything
                # else as "Could not serialize object": keep the store's own message first.
                raise QueryStartFailed(f"{type(e).__name__}: {e}") from e
        return dict(self.__dict__)

    def prepare_for_tasks(self) -> None:
        raise NotImplementedError

    @property
    def exactly_once(self) -> bool:
        return self.settings.guarantee == EXACTLY_ONCE

    def _refuse_unprepared(self) -> None:
        if not self.ready_for_tasks:
            # Never write without the recovery that must precede a batch's tasks.
            raise RuntimeError(
                f"{self.sink.describe()}: this writer reached a task without having recovered "
                "the transaction log first; it must be pickled by Spark's planner"
            )

    def _write_partition(
        self, info: TaskInfo, iterator: Iterator[pa.RecordBatch], started: float
    ) -> PreparedPartition:
        """The task side of the protocol, for a micro-batch and a batch job alike: begin at the
        first rows, invoke per Arrow batch, preCommit; the handle goes to the log (streaming,
        exactly-once), or is committed here (at-least-once, none). Any failure aborts."""
        batch_id = info.batch_id
        txn: Any = None
        handle: Handle | None = None
        rows = nbytes = 0
        txlog = self._log() if self.exactly_once and not self.settings.batch_job else None
        if txlog is not None:  # the handle goes there: seen first, before the store is touched
            txlog.assert_visible_here()
        try:
            for batch in iterator:
                if batch.num_rows == 0:
                    continue
                if txn is None:
                    txn = self.sink.beginTransaction(info)
                self.sink.invoke(txn, batch)
                rows += batch.num_rows
                nbytes += batch.nbytes
                self._fault("task_write", batch_id, info.partition_id)
            self._fault("task_fail", batch_id, info.partition_id, info.attempt)
            handle = self.sink.preCommit(txn) if txn is not None else None
            if handle is not None and txlog is not None:
                # Inside the abort scope: a prepared transaction whose handle never reached
                # the log would be known to nobody.
                txlog.record_prepared(batch_id, info.partition_id, info.attempt, handle)
        except BaseException:
            self._abort_failed_task(txn, handle)
            raise
        if handle is not None and not self.exactly_once:
            # at-least-once / none: every task commits its own transaction
            lost = self._commit(batch_id, {info.partition_id: handle}, recovering=False)
            if lost:  # fail the task: Spark's retry writes the partition again
                raise TransactionLost(lost, f"{self.sink.describe()} lost a task's commit")
        return PreparedPartition(
            batch_id, info.partition_id, info.attempt, handle,
            rows=rows, bytes=nbytes, write_ms=(time.perf_counter() - started) * 1000,
        )

    def _fault(self, point: str, batch_id: int, partition: int | None = None,
               attempt: int = 0) -> None:
        """The crash matrix's fault points (sinks/faults.py; inert in production), scoped by
        this query's checkpoint so that one pipeline can run several sinks' rows at once."""
        faults.inject(point, batch_id, partition, attempt, scope=self.settings.checkpoint_location)

    def _abort_failed_task(self, txn: Any, handle: Handle | None) -> None:
        """A task failed: before preCommit its open transaction is the store's to clean up;
        after it, the handle is what can still abort the prepared transaction."""
        try:
            if handle is not None:
                self.sink.abort([handle])
            elif txn is not None:
                self.sink.abortTransaction(txn)
        except Exception:  # the original failure matters more
            log.exception("%s: aborting a failed task's transaction failed", self.sink.describe())

    def _commit(
        self,
        batch_id: int,
        handles: dict[int, Handle],
        *,
        recovering: bool,
        txlog: TransactionLog | None = None,
    ) -> list[int]:
        """Commit with bounded retries; mark partitions committed; return the lost ones."""
        step = self.sink.recoverAndCommit if recovering else self.sink.commit
        groups = (
            [{p: h} for p, h in sorted(handles.items())]
            if self.sink.commits_per_partition
            else [handles]
        )
        lost: list[int] = []

        def commit_group(group: dict[int, Handle]) -> list[int]:
            """Commit one group with its retries; the partitions it lost."""
            try:
                self._with_retries(batch_id, lambda: step(batch_id, group))
            except TransactionLost as e:
                # An atomic store that could not commit committed none of the group.
                lost_here = list(e.partitions if self.sink.commits_per_partition else group)
                log.warning("%s: batch %d: %s", self.sink.describe(), batch_id, e)
                return lost_here
            return []

        def committed(i: int, group: dict[int, Handle], lost_here: list[int]) -> None:
            lost.extend(lost_here)
            self._fault("after_store_commit", batch_id,
                        next(iter(group)) if self.sink.commits_per_partition else None)
            if txlog is not None:
                txlog.record_committed(batch_id, [p for p in group if p not in lost_here])
            if i == 0 and len(groups) > 1:
                self._fault("after_some_commits", batch_id)

        workers = min(len(groups), max(1, self.sink.concurrent_commits))
        if workers <= 1:
            for i, group in enumerate(groups):
                committed(i, group, commit_group(group))
            return sorted(set(lost))
        # Partitions committed at once (stores whose commit may run in threads): the batch
        # pays for the slowest commit, not for their sum. Each is retried on its own, and
        # marked committed as soon as it is (a crash between two marks is what recovery
        # finishes, as with sequential commits); the first failure other than a lost
        # transaction fails the batch once every started commit has ended.
        with ThreadPoolExecutor(max_workers=workers,
                                thread_name_prefix=f"{self.settings.name}-commit") as pool:
            futures = {pool.submit(commit_group, g): g for g in groups}
            failure: BaseException | None = None
            for i, future in enumerate(as_completed(futures)):
                try:
                    lost_here = future.result()
                except BaseException as e:  # noqa: BLE001  (re-raised below)
                    failure = failure or e
                    continue
                committed(i, futures[future], lost_here)
        if failure is not None:
            raise failure
        return sorted(set(lost))

    def _with_retries(self, batch_id: int, fn) -> None:
        s = self.settings
        if s.guarantee == NONE:
            fn()
            return
        retrying = Retrying(
            retry=retry_if_exception(self.sink.isTransient),
            stop=stop_after_attempt(s.commit_attempts) | stop_before_delay(s.commit_timeout_ms / 1000),
            wait=wait_exponential(multiplier=0.2, max=10),
            before_sleep=lambda rs: log.warning(
                "%s: commit of batch %d failed (attempt %d), retrying: %s",
                self.sink.describe(), batch_id, rs.attempt_number,
                rs.outcome.exception() if rs.outcome else "",
            ),
        )
        try:
            retrying(fn)
        except RetryError as e:
            cause = e.last_attempt.exception()
            raise CommitTimeoutError(
                f"{self.sink.describe()}: the commit of batch {batch_id} did not succeed within "
                f"commitTimeout={s.commit_timeout_ms} ms / {s.commit_attempts} attempts; the "
                f"batch fails and is committed on restart. Last error: {cause}"
            ) from cause

class TwoPhaseCommitWriter(_Protocol, DataSourceStreamArrowWriter):
    """PySpark's streaming writer (Arrow variant) running the protocol around a sink."""

    def prepare_for_tasks(self) -> None:
        """Before any task of a batch: validate the store, then (exactly-once) recover."""
        logs.from_environment()
        self.sink.open()
        if self.exactly_once:
            self.recover()
        self.ready_for_tasks = True

    def _log(self) -> TransactionLog:
        assert self.settings.checkpoint_location
        return TransactionLog(self.settings.checkpoint_location)

    # -- task side --------------------------------------------------------------------------

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PreparedPartition:
        from pyspark import TaskContext

        self._refuse_unprepared()
        ctx = TaskContext.get()
        batch_id = int(ctx.getLocalProperty("streaming.sql.batchId"))
        info = TaskInfo(batch_id, ctx.partitionId(), ctx.attemptNumber())
        started = time.perf_counter()
        if self.exactly_once and self._log().is_partition_committed(batch_id, info.partition_id):
            for _ in iterator:  # an earlier run committed this partition: write nothing
                pass
            return PreparedPartition(batch_id, info.partition_id, info.attempt, None, skipped=True)
        return self._write_partition(info, iterator, started)

    # -- driver side ------------------------------------------------------------------------

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        logs.from_environment()
        started = time.perf_counter()
        prepared = [m for m in messages if isinstance(m, PreparedPartition)]
        handles = {m.partition: m.handle for m in prepared if m.handle is not None}
        if self.exactly_once:
            txlog = self._log()
            self._fault("after_precommit", batchId)
            if handles:
                txlog.record_decision(batchId, handles)
            self._fault("after_decision", batchId)
            if handles or self.sink.commit_empty_batches:
                lost = self._commit(batchId, handles, recovering=False, txlog=txlog)
                if lost:
                    raise TransactionLost(
                        lost,
                        f"batch {batchId} of {self.sink.describe()} cannot be committed; the "
                        "query stops, and on restart those partitions are written again",
                    )
            txlog.record_done(batchId)
            self._abort_superseded(txlog, batchId, handles)
            txlog.garbage_collect(batchId - self.settings.retain_batches + 1)
            self._fault("after_commit", batchId)
        log_batch(self.sink.describe(), self.settings, batchId, prepared, (time.perf_counter() - started) * 1000)

    def _abort_superseded(self, txlog: TransactionLog, batch_id: int, handles: dict[int, Handle]) -> None:
        """Abort what failed or superseded task attempts prepared: logged, never decided."""
        if txlog.prepared_count(batch_id) <= len(handles):
            return  # the common case: one prepared record per committed handle
        stale = txlog.state(batch_id).undecided_handles()
        if stale:
            self.sink.abort(stale)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        handles = [m.handle for m in messages if isinstance(m, PreparedPartition) and m.handle]
        if not self.exactly_once:
            return
        state = self._log().state(batchId)
        if state.decisions:
            log.warning(
                "%s: batch %d failed after its commit was decided; its handles are kept and "
                "committed when the query restarts", self.sink.describe(), batchId,
            )
            return
        # Spark hands over only some tasks' messages when a batch fails: what the other tasks
        # prepared is in the log, and would hold the store (locks, read_committed readers)
        # until the next start otherwise.
        known = {json.dumps(h, sort_keys=True) for h in handles}
        handles += [h for h in state.undecided_handles() if json.dumps(h, sort_keys=True) not in known]
        if handles:
            self.sink.recoverAndAbort(batchId, handles)

    # -- recovery ---------------------------------------------------------------------------

    def recover(self) -> None:
        """Finish or undo what earlier runs left in the log, before any new task runs; then let
        the store clean up what no decision names. Runs at every batch's planning: a worker
        process may outlive a query run, and a speculative or zombie task of the last batch may
        have prepared after that batch's commit."""
        txlog = self._log()
        self._recover_batches(txlog)
        self.sink.cleanupAbandoned()

    def _recover_batches(self, txlog: TransactionLog) -> None:
        for batch_id in txlog.pending():
            self.recover_batch(txlog, plan_recovery(txlog.state(batch_id)))

    def recover_batch(self, txlog: TransactionLog, plan: RecoveryPlan) -> list[int]:
        """Carry out one batch's recovery plan (sinks/recovery_plan.py: the rules, shared with
        the operator commands `inspect` and `resolve`); the partitions whose commit was lost."""
        batch_id = plan.batch_id
        if plan.done:
            return []
        if not plan.decided:
            if plan.abort:
                log.info("%s: aborting %d undecided handle(s) of batch %d",
                         self.sink.describe(), len(plan.abort), batch_id)
                self.sink.recoverAndAbort(batch_id, plan.abort)
            txlog.forget(batch_id)
            return []
        lost: list[int] = []
        if plan.commit:
            if self.sink.isCommitted(batch_id) is True:
                txlog.record_committed(batch_id, sorted(plan.commit))
            else:
                log.info("%s: committing %d decided handle(s) of batch %d left by an "
                         "earlier run", self.sink.describe(), len(plan.commit), batch_id)
                lost = self._commit(batch_id, plan.commit, recovering=True, txlog=txlog)
        if plan.abort:
            self.sink.recoverAndAbort(batch_id, plan.abort)
        if lost:
            log.warning(
                "%s: batch %d: partition(s) %s were lost before their commit (e.g. the "
                "store's transaction timeout); the replay of the batch writes them again",
                self.sink.describe(), batch_id, lost,
            )
        else:
            txlog.record_done(batch_id)
        return lost


#: A failed batch job's tasks that Spark did not report may still be running when it calls
#: abort (seen with PySpark 4.3: a task finished and prepared seconds after its job failed):
#: the store's job clean-up runs once at once and again this many seconds later.
JOB_ABORT_RECHECK_S = 5.0
#: The batch id a batch job's tasks see (TaskInfo.batch_id): a job has one "batch".
JOB_BATCH_ID = 0


class TwoPhaseCommitBatchWriter(_Protocol, DataSourceArrowWriter):
    """PySpark's batch writer (`df.write`, Arrow variant) running the same protocol around a
    sink, with the job in place of the micro-batch:

    * the job's id (SinkSettings.job_id, a fresh uuid per `save()`) stands in for the
      checkpoint and the batch id in the store's names (Kafka transactional ids, Delta files);
    * there is no transaction log: nothing outlives the job. The tasks' handles travel in their
      commit messages; Spark calls `commit` once every task succeeded, and the store makes
      them all visible (one Delta commit; each Kafka transaction, with the commit's retries);
    * a failed job (any task failed after Spark's retries, or the commit raised) is aborted:
      the reported handles, and whatever the store finds under the job's identity that Spark
      did not report (`TwoPhaseCommitSink.abortJob`), twice, JOB_ABORT_RECHECK_S apart.
    No recovery is needed at the start: a job never resumes another's work.
    """

    def prepare_for_tasks(self) -> None:
        """Before the job's tasks: validate the store."""
        logs.from_environment()
        self.sink.open()
        self.ready_for_tasks = True

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PreparedPartition:
        from pyspark import TaskContext

        self._refuse_unprepared()
        ctx = TaskContext.get()
        info = TaskInfo(JOB_BATCH_ID, ctx.partitionId(), ctx.attemptNumber())
        return self._write_partition(info, iterator, time.perf_counter())

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        logs.from_environment()
        started = time.perf_counter()
        prepared = [m for m in messages if isinstance(m, PreparedPartition)]
        handles = {m.partition: m.handle for m in prepared if m.handle is not None}
        if self.exactly_once and (handles or self.sink.commit_empty_batches):
            lost = self._commit(JOB_BATCH_ID, handles, recovering=False)
            if lost:
                committed = sorted(p for p in handles if p not in lost)
                raise TransactionLost(
                    lost,
                    f"{self.sink.describe()}: batch job {self.settings.job_id} cannot be "
                    f"committed; partition(s) {committed} were committed before",
                )
        log_batch(self.sink.describe(), self.settings, JOB_BATCH_ID, prepared, (time.perf_counter() - started) * 1000)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        logs.from_environment()
        if not self.exactly_once:
            return  # every task committed its own writes: what succeeded stays
        handles = [m.handle for m in messages if isinstance(m, PreparedPartition) and m.handle]
        log.warning("%s: batch job %s failed; aborting what its tasks prepared",
                    self.sink.describe(), self.settings.job_id)
        self.sink.abortJob(handles, len(messages))
        self._between_abort_passes()
        self.sink.abortJob([], len(messages))

    def _between_abort_passes(self) -> None:
        time.sleep(JOB_ABORT_RECHECK_S)
