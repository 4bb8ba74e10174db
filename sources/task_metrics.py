"""How a task's read time and row count reach the driver's batch metrics line.

PySpark's Python data source gives readers no accumulators and no task metrics, so each task
leaves a small JSON report in a per-batch directory the driver planned, and the driver reads
them when the batch has completed (then deletes the directory). The cost is one small file
write per task and one listing per batch: no broker round trip. A task's report lists every
range it read (a packed task reads several: sources/task_packing.py), each with its rows and
read time, so the batch's metrics account for every range whatever the packing.

By default the directory is in the driver's temp dir: that serves local mode and executors on
the driver's machine. A task that runs elsewhere finds no such directory and writes nothing
(nothing left behind on executors); its range is then reported without rows or time. On a
cluster, `taskMetricsLocation` names storage that executors and the driver share.
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.fs as pafs

from connectors.core.paths import resolve_location
from sources.batch_metrics import TaskReport
from sources.offsets import OffsetRange, PartitionOffsets, to_json

log = logging.getLogger(__name__)

OPTION = "taskMetricsLocation"
#: The default directories: `<temp dir>/kafka-eos-source-metrics-<pid>-<random>`, the pid being
#: the driver-side Python process whose stream reader made it.
LOCAL_PREFIX = "kafka-eos-source-metrics-"


class ReportDirs:
    """The driver's side: one base directory per stream reader, one subdirectory per batch."""

    def __init__(self, location: str | None) -> None:
        """`location`: None for a directory in the driver's temp dir, else a normalised path
        or URI (the reader's directory is a new subdirectory of it)."""
        self.shared = location is not None
        if location is None:
            sweep_dead_local_dirs()
            self.base = tempfile.mkdtemp(prefix=f"{LOCAL_PREFIX}{os.getpid()}-")
        else:
            self.base = f"{location.rstrip('/')}/kafka-eos-source-{uuid.uuid4().hex[:12]}"

    def for_batch(self, end: PartitionOffsets) -> str:
        """The batch's directory (created now), named by its end offsets: a batch planned
        twice gets the same one."""
        digest = hashlib.sha1(json.dumps(to_json(end), sort_keys=True).encode()).hexdigest()
        path = f"{self.base}/{digest[:20]}"
        loc = resolve_location(OPTION, path)
        loc.fs.create_dir(loc.path, recursive=True)
        return path

    def collect(self, batch_dir: str) -> list[TaskReport]:
        """Every report in `batch_dir`, which is deleted; never raises (monitoring only)."""
        reports: list[TaskReport] = []
        try:
            loc = resolve_location(OPTION, batch_dir)
            infos = loc.fs.get_file_info(pafs.FileSelector(loc.path, allow_not_found=True))
            for info in infos:
                if info.type != pafs.FileType.File or not info.base_name.endswith(".json"):
                    continue
                with loc.fs.open_input_stream(info.path) as f:
                    doc = json.loads(f.read())
                # a task's list of range reports (one range's report alone: older tasks)
                for item in doc if isinstance(doc, list) else [doc]:
                    reports.append(TaskReport.from_json(item))
            loc.fs.delete_dir(loc.path)
        except Exception as e:
            log.warning("kafka-eos: cannot read the tasks' read metrics in %s: %s", batch_dir, e)
        return reports

    def close(self) -> None:
        try:
            if self.shared:
                loc = resolve_location(OPTION, self.base)
                loc.fs.delete_dir(loc.path)
            else:
                shutil.rmtree(self.base, ignore_errors=True)
        except Exception as e:
            log.info("kafka-eos: cannot remove the task metrics directory %s: %s", self.base, e)


def sweep_dead_local_dirs() -> None:
    """Remove the default directories of processes that are gone. A stream reader's stop()
    would remove its own, but Spark often ends the Python process that holds the reader
    before stop() runs, and every query start left one behind in the temp dir. A directory
    whose process is gone can no longer be used; one of a live process (or a pid this cannot
    check) is left alone. Never raises."""
    for path in glob.glob(os.path.join(tempfile.gettempdir(), f"{LOCAL_PREFIX}*")):
        pid_text = os.path.basename(path)[len(LOCAL_PREFIX):].split("-", 1)[0]
        if not pid_text.isdigit() or int(pid_text) == os.getpid() or _alive(int(pid_text)):
            continue
        shutil.rmtree(path, ignore_errors=True)
        log.info("kafka-eos: removed the task metrics directory %s of a process that ended", path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, not ours to signal (or cannot tell): leave its directory
        return True
    return True


def write_report(batch_dir: str, report: TaskReport | Sequence[TaskReport], *,
                 shared: bool) -> None:
    """A task's side: leave its reports (one per range it read) in `batch_dir`, in one file.
    Without a shared location, only where the directory exists (the task runs on the driver's
    machine). Never raises."""
    reports = [report] if isinstance(report, TaskReport) else list(report)
    if not reports:
        return
    first = reports[0]
    try:
        loc = resolve_location(OPTION, batch_dir)
        if not shared and loc.fs.get_file_info(loc.path).type != pafs.FileType.Directory:
            return
        name = f"{first.topic}-{first.partition}-{first.from_offset}.json"
        data = json.dumps([r.to_json() for r in reports]).encode()
        if loc.is_local:  # written aside, then renamed: the driver never reads half a file
            tmp = f"{loc.path}/.{name}.{uuid.uuid4().hex[:8]}"
            with loc.fs.open_output_stream(tmp) as f:
                f.write(data)
            loc.fs.move(tmp, f"{loc.path}/{name}")
        else:  # an object store's PUT is atomic
            with loc.fs.open_output_stream(f"{loc.path}/{name}") as f:
                f.write(data)
    except Exception as e:
        log.warning("kafka-eos: cannot leave the read metrics of %s-%s%s in %s: %s",
                    first.topic, first.partition,
                    f" and {len(reports) - 1} more range(s)" if len(reports) > 1 else "",
                    batch_dir, e)


def current_batch_id() -> int | None:
    """The micro-batch the running task belongs to (Spark sets it on the job), if known."""
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        value = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
        return int(value) if value is not None else None
    except Exception:
        return None


def timed(batches: Iterator[pa.RecordBatch], rng: OffsetRange, batch_dir: str, *,
          shared: bool) -> Iterator[pa.RecordBatch]:
    """`batches` of one range, passed through, counting rows and the time spent producing them
    (not the time Spark spends with each one); the report is written when the range was read
    whole. A task of one range, as TaskTally counts it."""
    tally = TaskTally()

    def counted() -> Iterator[pa.RecordBatch]:
        rows = 0
        for batch in batches:
            rows += batch.num_rows
            yield batch
        tally.range_done(rng, rows)

    return tally.timed(counted(), batch_dir, shared=shared)


class TaskTally:
    """What a task read, range by range, for its report: each range's rows, and the task's
    read time until that range was read whole (the ranges of a packed task are read at once,
    so that is the time the range held the task). Read time counts the time spent producing
    record batches, not the time Spark spends with each one."""

    def __init__(self) -> None:
        self._done: list[tuple[OffsetRange, int, float]] = []
        self._spent = 0.0
        self._since: float | None = None

    def _elapsed_ms(self) -> float:
        running = time.perf_counter() - self._since if self._since is not None else 0.0
        return round((self._spent + running) * 1000, 1)

    def range_done(self, rng: OffsetRange, rows: int) -> None:
        self._done.append((rng, rows, self._elapsed_ms()))

    def timed(self, batches: Iterator[pa.RecordBatch], batch_dir: str, *,
              shared: bool) -> Iterator[pa.RecordBatch]:
        """`batches`, passed through; the report is written when every range was read whole
        (a task that failed reports nothing: its retry will)."""
        try:
            self._since = time.perf_counter()
            for batch in batches:
                self._spent += time.perf_counter() - self._since
                self._since = None
                yield batch
                self._since = time.perf_counter()
            self._spent += time.perf_counter() - self._since
            self._since = None
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()
        batch_id = current_batch_id()
        write_report(batch_dir, [TaskReport(batch_id, r.topic, r.partition, r.from_offset,
                                            r.until_offset, rows, ms)
                                 for r, rows, ms in self._done], shared=shared)
