"""`kafka-eos`: the replayable Kafka source's readers (streaming and batch; the data source
that makes them is sources/data_source.py).

Its offsets are the query's state: Spark writes each batch's end offsets to the checkpoint's
offset log before the batch runs, and a restarted query replays a logged batch from exactly
those offsets. Consumer groups are never used for recovery; with commitOffsetsToGroup=true the
end offsets of each completed batch are committed to kafka.group.id for lag monitoring only.
Each completed batch gets a metrics line (sources/batch_metrics.py).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from connectors.core.kafka.format import FORMAT_NAME
from connectors.core.options import OptionError
from connectors.core.worker_gc import freeze_long_lived
from sources import offsets as off
from sources.batch_metrics import PlannedBatch, batch_detail, batch_line, emit
from sources.group_commit import GroupOffsetCommitter
from sources.kafka_options import TASK_METRICS_OFF, KafkaSourceOptions
from sources.packed_reader import read_task
from sources.range_reader import DataLossError
from sources.registry_columns import RegistryColumns
from sources.offset_lookup import OffsetLookup, report_data_loss
from sources.task_metrics import ReportDirs, TaskTally
from sources.task_packing import LEGACY_TARGET_TASKS, pack_ranges

log = logging.getLogger(__name__)

#: Planned batches kept until they complete; more means plans that never ran.
MAX_PLANNED = 8


class KafkaInputPartition(InputPartition):
    """One Spark task: its offset ranges, each records [from_offset, until_offset) of one
    topic-partition (several when small ranges are packed: sources/task_packing.py), and where
    it leaves its read metrics for the driver (sources/task_metrics.py), if anywhere."""

    def __init__(self, ranges: tuple[off.OffsetRange, ...], report_dir: str | None = None,
                 report_shared: bool = False) -> None:
        super().__init__(ranges)
        self.ranges = tuple(ranges)
        self.report_dir = report_dir
        self.report_shared = report_shared


def read_partition(options: KafkaSourceOptions, partition: InputPartition,
                   columns: RegistryColumns | None = None) -> Iterator[pa.RecordBatch]:
    """One planned task's ranges, read by a task (or by the driver: sources/driver_reader.py),
    with the value and key decoded where they are in a Schema Registry format."""
    batches = _read_ranges(options, partition)
    if columns is None or not columns.active:
        return batches
    return map(columns.apply, batches)


def _read_ranges(options: KafkaSourceOptions,
                 partition: InputPartition) -> Iterator[pa.RecordBatch]:
    # Once per worker: PySpark's full collection after each task then skips the imports
    # (connectors/core/worker_gc.py), instead of costing every later task 35-280 ms.
    freeze_long_lived()
    if not isinstance(partition, KafkaInputPartition):
        # A batch read with nothing to read: PySpark runs one task with InputPartition(None)
        # when the plan is empty (pyspark/sql/worker/plan_data_source_read.py).
        if getattr(partition, "value", None) is None:
            return iter(())
        raise TypeError(f"kafka-eos: not a partition of this source: {partition!r}")
    ranges = [r for r in partition.ranges if r.size > 0]
    report_dir = partition.report_dir
    tally = TaskTally() if report_dir is not None and ranges else None
    batches = read_task(
        ranges,
        options.kafka_conf,
        include_headers=options.include_headers,
        batch_rows=options.arrow_batch_rows,
        poll_timeout_ms=options.poll_timeout_ms,
        fail_on_data_loss=options.fail_on_data_loss,
        cache_capacity=options.consumer_cache_capacity,
        cache_timeout_ms=options.consumer_cache_timeout_ms,
        on_range_done=tally.range_done if tally is not None else None,
    )
    if tally is None:
        return batches
    return tally.timed(batches, report_dir, shared=partition.report_shared)  # type: ignore[arg-type]


def _key(end: off.PartitionOffsets) -> str:
    """A batch's identity on the driver: its end offsets (Spark's commit(end) gives no id)."""
    return repr(sorted(end.items()))


def _plan(options: KafkaSourceOptions, start: off.PartitionOffsets,
          end: off.PartitionOffsets, plan: int = off.RECORDS_SIZED_PLAN,
          ) -> list[KafkaInputPartition]:
    """The batch's Spark tasks: its ranges, split where large (minPartitions,
    maxRecordsPerPartition), then packed where small (targetTasksPerBatch,
    maxPartitionsPerTask). A function of the logged offsets and the options only, so a
    replayed batch gets the same tasks, each with the same ranges (sources/task_packing.py).
    `plan`: the end offsets' (offsets.plan_from_json); a batch an older version logged keeps
    that version's default of 8 tasks."""
    target = options.target_tasks
    if target is None and plan == off.LEGACY_PLAN:
        target = LEGACY_TARGET_TASKS
    ranges = off.plan_ranges(
        start,
        end,
        min_partitions=options.min_partitions,
        max_records_per_partition=options.max_records_per_partition,
    )
    tasks = pack_ranges(
        ranges,
        target_tasks=target,
        max_ranges_per_task=options.max_partitions_per_task,
        max_records_per_task=options.max_records_per_partition,
        min_tasks=options.min_partitions,
    )
    return [KafkaInputPartition(task) for task in tasks]


class _UsesBroker:
    """Lazily opened metadata client: readers are pickled to tasks, a client cannot be.

    One per reader: the stream reader lives in one Python process for the whole query, so its
    client (one librdkafka consumer, one connection and handshake) serves every batch's
    look-ups, and is closed on stop(). A look-up that failed drops it (a client in doubt is not
    used again): the next look-up opens a new one."""

    options: KafkaSourceOptions
    _lookup: OffsetLookup | None = None

    @property
    def lookup(self) -> OffsetLookup:
        if self._lookup is None:
            self._lookup = OffsetLookup(self.options)
        return self._lookup

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_lookup"] = None
        return state

    def _close(self) -> None:
        if self._lookup is not None:
            lookup, self._lookup = self._lookup, None
            lookup.close()

    @contextlib.contextmanager
    def _dropping_client_on_error(self) -> Iterator[None]:
        try:
            yield
        except (OptionError, DataLossError):
            raise  # answers, not failures of the client
        except Exception:
            try:
                self._close()
            except Exception as e:
                log.info("kafka-eos: closing the metadata client after an error failed: %s", e)
            raise


class KafkaStreamReader(_UsesBroker, DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: KafkaSourceOptions,
                 columns: RegistryColumns | None = None) -> None:
        self.options = options
        self.columns = columns or RegistryColumns()
        self._lookup = None
        self._last_batch_at = time.monotonic()
        self._target: off.PartitionOffsets | None = None  # Trigger.AvailableNow's end
        self._latest: off.PartitionOffsets | None = None
        self._initial: dict | None = None
        # Metrics and group commits of completed batches (sources/batch_metrics.py).
        self._planned: dict[str, tuple[PlannedBatch, str | None]] = {}
        self._reports: ReportDirs | None = None
        self._committer = (GroupOffsetCommitter(options.kafka_conf, options.commit_group)
                           if options.commit_group else None)

    def initialOffset(self) -> dict:
        # Only a fresh query calls this: a topic or partition that does not exist is a bad
        # option here, while on a restart it is data loss (handled in latestOffset).
        # Resolved once: Spark asks again when it runs the first batch (its start is not in the
        # offset log), and "latest" asked again under a live producer is a later offset than
        # the one the first batch's end was computed from: the batch would start after its end
        # (seen: "the offsets of t-0 went back from 8311 to 8261" at every start).
        if self._initial is None:
            with self._dropping_client_on_error():
                tps = self.lookup.partitions(strict=True)
                ids = self.lookup.topic_ids(t for t, _ in tps)  # before the offsets
                start = self.lookup.offsets_for(self.options.starting, tps,
                                              self.options.starting_option)
            log.info("kafka-eos: query starts at %s", off.to_json(start))
            self._initial = off.to_json(start, ids)
        return dict(self._initial)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        with self._dropping_client_on_error():
            tps = self.lookup.partitions(strict=False)
            self._target = self.lookup.latest(tps)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        # `start` is where the last batch ended, and that batch has completed: Spark plans the
        # next one only then. Spark's own commit(end) comes later, once a next batch is
        # decided, and never for the last batch of a Trigger.AvailableNow run.
        self._completed(start)
        logged = off.from_json(start)
        recorded = off.ids_from_json(start)
        with self._dropping_client_on_error():
            tps = list(self._target) if self._target is not None else \
                self.lookup.partitions(strict=False)
            # The ids are looked up before the offsets: a topic recreated between the two
            # look-ups then gets its new offsets recorded under its old id, and the next batch
            # sees the new id (data loss reported, never a silent skip). The other order would
            # record the old topic's offsets under the new id: the skip this check prevents.
            ids = self.lookup.topic_ids({t for t, _ in tps} | {t for t, _ in logged})
            begin, renewed = self._renew_recreated(logged, recorded, ids)
            latest = self._settled_latest(begin, tps)
            begin = self._reconcile(begin, latest)
        self._latest = latest
        if isinstance(limit, ReadAllAvailable):
            end = {tp: max(latest[tp], begin[tp]) for tp in latest}
        else:
            end = self._limited_end(begin, latest)
        if end == logged and not renewed:
            # No new batch. `start` as it was, so that ids recorded for the first time (offsets
            # JSON of an older version) or a failed id look-up never make a batch of nothing.
            return dict(start)
        return off.to_json(end, off.carried_ids(recorded, ids, (t for t, _ in end)),
                           plan=off.RECORDS_SIZED_PLAN)

    def _renew_recreated(
        self, begin: off.PartitionOffsets, recorded: off.TopicIds, ids: off.TopicIds
    ) -> tuple[off.PartitionOffsets, list[str]]:
        """Topics whose id differs from the one recorded with `begin`: deleted and created
        again, whatever their offsets say (the new topic's may well be past the old ones).
        Data loss: fail naming the topic and both ids, or with failOnDataLoss=false leave the
        topic's partitions out of `begin`, so that they are read from the new topic's earliest
        offsets as new partitions are (and from offset 0 in the plan: `offsets.replay_start`)."""
        renewed = off.recreated_topics(recorded, ids, {t for t, _ in begin})
        result = dict(begin)
        for topic, old_id, new_id in renewed:
            parts = {tp: o for tp, o in begin.items() if tp[0] == topic}
            self.lookup.report_data_loss(
                f"topic {topic} was deleted and created again (topic id {old_id}, now "
                f"{new_id}); the query had read the old topic up to offsets "
                + ", ".join(f"{t}-{p}: {o}" for (t, p), o in sorted(parts.items()))
            )
            log.warning(
                "kafka-eos: skipped: whatever the old topic %s (id %s) held at or after those "
                "offsets, and the new topic's offsets are not those of the old one; reading "
                "the new topic %s (id %s) from its earliest offsets", topic, old_id, topic,
                new_id)
            for tp in parts:
                del result[tp]
        return result, [t for t, _, _ in renewed]

    def _settled_latest(self, begin: off.PartitionOffsets,
                        tps: list[off.TopicPartition]) -> off.PartitionOffsets:
        """Latest offsets of `tps` (Trigger.AvailableNow's target if set), looked up again
        while any is below `begin`, fetchOffset.numRetries times, before one that went back is
        believed."""
        first = self._target
        latest = off.settle_latest(
            lambda: self.lookup.latest(tps),
            begin,
            retries=self.options.fetch_retries,
            interval_ms=self.options.fetch_retry_interval_ms,
            first=first,
        )
        if self._target is not None:
            self._target = latest
        return latest

    def _reconcile(self, begin: off.PartitionOffsets, latest: off.PartitionOffsets) -> off.PartitionOffsets:
        """Bring `begin` in line with the partitions that exist now.

        New partitions (topic grew, or a new topic matched the pattern) start at their earliest
        offset; a partition that vanished, or whose offsets went backwards (topic recreated),
        is data loss.
        """
        gone = sorted(set(begin) - set(latest))
        if gone:
            self.lookup.report_data_loss(
                "partition(s) " + ", ".join(f"{t}-{p}" for t, p in gone)
                + " no longer exist (topic deleted?)"
            )
        result = {tp: o for tp, o in begin.items() if tp in latest}
        return self._fill_and_rewind(result, latest)

    def _fill_and_rewind(
        self, begin: off.PartitionOffsets, end: off.PartitionOffsets
    ) -> off.PartitionOffsets:
        """`begin` for sizing the next batch: new partitions (topic grew, or a new topic matched
        the pattern) count from their earliest offset, and so do those whose offsets went back
        (topic recreated), which is data loss: fail, or with failOnDataLoss=false read them
        again. The plan reads both from offset 0 (`offsets.replay_start`)."""
        result = dict(begin)
        new = [tp for tp in end if tp not in result]
        if new:
            log.info("kafka-eos: new partitions %s are read from their earliest offset", new)
            result.update(self.lookup.earliest(new))
        went_back = [tp for tp in end if end[tp] < result[tp]]
        for tp in went_back:
            self.lookup.report_data_loss(
                f"the latest offset of {tp[0]}-{tp[1]} went back from {result[tp]} to {end[tp]} "
                "(topic recreated?)"
            )
        if went_back:
            result.update(self.lookup.earliest(went_back))
        return result

    def _limited_end(self, begin: off.PartitionOffsets, latest: off.PartitionOffsets) -> off.PartitionOffsets:
        opts = self.options
        available = off.total_rows(begin, latest)
        # Not under Trigger.AvailableNow (a target is set): Spark ends that run at the first
        # trigger without a new batch, so a delayed batch would leave the records unread.
        # Spark's own source reads them too.
        if (opts.min_offsets_per_trigger and self._target is None
                and available < opts.min_offsets_per_trigger):
            waited_ms = (time.monotonic() - self._last_batch_at) * 1000
            if waited_ms < opts.max_trigger_delay_ms:
                return begin  # not enough yet: no new batch
        self._last_batch_at = time.monotonic()
        if opts.max_offsets_per_trigger:
            return off.allocate_limit(begin, latest, opts.max_offsets_per_trigger)
        return dict(latest)

    def reportLatestOffset(self) -> dict | None:
        return off.to_json(self._latest) if self._latest is not None else None

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        """The batch's tasks, from its logged offsets and the options only: a replayed batch
        gets the same plan whatever the broker says now. Records removed since are data loss
        when they are read."""
        logged, stop = off.from_json(start), off.from_json(end)
        end_ids = off.ids_from_json(end)
        renewed = off.recreated_topics(off.ids_from_json(start), end_ids, {t for t, _ in stop})
        for topic, old_id, new_id in renewed:
            report_data_loss(
                self.options,
                f"topic {topic} was deleted and created again (topic id {old_id}, now "
                f"{new_id}) before this batch; its partitions are read from offset 0",
            )
        begin, went_back = off.replay_start(logged, stop, [t for t, _, _ in renewed])
        for tp in went_back:
            report_data_loss(
                self.options,
                f"the offsets of {tp[0]}-{tp[1]} went back from {logged[tp]} to {stop[tp]} "
                "(topic recreated?)",
            )
        key = _key(stop)  # the batch's identity: its logged end, whatever is read of it
        if self._latest is None and end_ids:
            # A batch logged by an earlier run, replayed now: if a topic was recreated since,
            # its logged offsets name records of a topic that is gone.
            begin, stop = self._without_topics_recreated_since(begin, stop, end_ids)
        plan = _plan(self.options, begin, stop, off.plan_from_json(end))
        report_dir = self._report_dir(stop)
        if report_dir is not None:
            for p in plan:
                p.report_dir, p.report_shared = report_dir, self._reports.shared  # type: ignore[union-attr]
        if key not in self._planned:
            # The latest offsets known when this end was chosen; unknown for a batch logged by
            # an earlier run and replayed now.
            latest = dict(self._latest) if self._latest is not None else None
            self._planned[key] = (
                PlannedBatch(begin, stop, tuple(r for p in plan for r in p.ranges), latest,
                             tasks=tuple(p.ranges for p in plan)), report_dir)
            while len(self._planned) > MAX_PLANNED:  # plans never completed (replanned)
                del self._planned[next(iter(self._planned))]
        return plan  # type: ignore[return-value]

    def _without_topics_recreated_since(
        self, begin: off.PartitionOffsets, stop: off.PartitionOffsets, logged_ids: off.TopicIds
    ) -> tuple[off.PartitionOffsets, off.PartitionOffsets]:
        """`begin` and `stop` of a replayed batch, less the topics whose id is no longer the
        one logged with it: data loss (fail, or with failOnDataLoss=false read nothing of them
        in this batch; the next batch sees the new id and reads the new topic from its
        earliest offsets). One id look-up, at a restart only."""
        with self._dropping_client_on_error():
            ids = self.lookup.topic_ids({t for t, _ in stop})
        renewed = off.recreated_topics(logged_ids, ids, {t for t, _ in stop})
        gone = {t for t, _, _ in renewed}
        for topic, old_id, new_id in renewed:
            report_data_loss(
                self.options,
                f"topic {topic} was deleted and created again (topic id {old_id}, now "
                f"{new_id}) after a batch reading it was logged; that batch's records of the "
                "old topic are gone, and it reads nothing of the new one",
            )
        if not gone:
            return begin, stop
        return ({tp: o for tp, o in begin.items() if tp[0] not in gone},
                {tp: o for tp, o in stop.items() if tp[0] not in gone})

    def _report_dir(self, end: off.PartitionOffsets) -> str | None:
        location = self.options.task_metrics_location
        if location == TASK_METRICS_OFF:
            return None
        try:
            if self._reports is None:
                self._reports = ReportDirs(location)
            return self._reports.for_batch(end)
        except Exception as e:  # monitoring only
            log.warning("kafka-eos: cannot prepare the task metrics directory (%s); this "
                        "batch is reported without read times", e)
            return None

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, partition, self.columns)

    def commit(self, end: dict) -> None:
        """The batch ending at `end` completed (usually already seen by latestOffset)."""
        self._completed(end)

    def _completed(self, end_json: dict) -> None:
        """A batch ending at `end_json` has completed: log its metrics line, and with
        commitOffsetsToGroup commit its end offsets to the group. Never raises: both are
        monitoring, and the checkpoint stays the query's truth."""
        try:
            end = off.from_json(end_json)
            key = _key(end)
            planned = self._planned.pop(key, None)
            if self._committer is not None:
                self._committer.commit(end)
            if planned is not None:
                batch, report_dir = planned
                reports = self._reports.collect(report_dir) if (
                    report_dir is not None and self._reports is not None) else []
                line = batch_line(self._describe(), batch, reports,
                                  group=self.options.commit_group)
                if line["tasks_without_report"] and report_dir is not None:
                    self._warn_missing_reports(line["tasks_without_report"], line["tasks"])
                emit(line, batch_detail(batch, reports))
        except Exception as e:
            log.warning("kafka-eos: the metrics of a completed batch failed: %s", e)

    _warned_missing = False

    def _warn_missing_reports(self, missing: int, tasks: int) -> None:
        if self._warned_missing:
            return
        self._warned_missing = True
        log.warning(
            "kafka-eos: %d of %d task(s) left no read metrics where the driver could read "
            "them; their rows and read times are missing from the batch metrics line. On a "
            "cluster, set the source option taskMetricsLocation to storage that executors and "
            "the driver share (or 'none' to stop collecting them)", missing, tasks)

    def _describe(self) -> str:
        return f"{FORMAT_NAME} {self.options.subscription.describe()}"

    def stop(self) -> None:
        if self._committer is not None:
            self._committer.close()
        if self._reports is not None:
            self._reports.close()
        self._close()


class KafkaBatchReader(_UsesBroker, DataSourceReader):
    def __init__(self, options: KafkaSourceOptions,
                 columns: RegistryColumns | None = None) -> None:
        self.options = options
        self.columns = columns or RegistryColumns()
        self._lookup = None

    def partitions(self) -> list[InputPartition]:
        opts = self.options
        try:
            tps = self.lookup.partitions(strict=True)
            start = self.lookup.offsets_for(opts.starting, tps, opts.starting_option)
            # An end below the start may be a latest offset that went back (KAFKA-7703; the
            # embedded demo broker, Tansu, under load too): looked up again,
            # fetchOffset.numRetries times, fetchOffset.retryIntervalMs apart, before it is
            # believed.
            def ending() -> off.PartitionOffsets:
                return self.lookup.offsets_for(opts.ending, tps, opts.ending_option)

            may_be_latest = opts.ending.kind != "offsets" or off.LATEST in opts.ending.offsets.values()
            end = off.settle_latest(
                ending,
                start,
                retries=opts.fetch_retries if may_be_latest else 0,
                interval_ms=opts.fetch_retry_interval_ms,
            )
        finally:
            self._close()
        for tp in tps:
            if end[tp] < start[tp]:
                raise OptionError(
                    opts.ending_option,
                    f"ends at {end[tp]} for {tp[0]}-{tp[1]}, before its start {start[tp]}"
                    + (f" ({opts.starting_option})" if opts.starting_option != "startingOffsets"
                       else ""),
                )
        return _plan(opts, start, end)  # type: ignore[return-value]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, partition, self.columns)
