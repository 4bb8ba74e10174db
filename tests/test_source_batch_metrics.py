"""Unit tests for the source's per-batch metrics and its opt-in group commit: the arithmetic of
offsets behind latest, the batch line built from task reports, when a batch counts as
completed, and the options. No broker, no Spark session."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from connectors.core.options import OptionError
from sources.batch_metrics import (
    SOURCE_METRICS_ENV,
    PlannedBatch,
    TaskReport,
    batch_detail,
    batch_line,
    emit,
    offsets_behind_latest,
)
from sources.group_commit import GroupOffsetCommitter
from sources.kafka_options import parse_source_options
from sources.kafka_source import KafkaStreamReader
from sources.offsets import OffsetRange, PartitionOffsets, TopicPartition
from sources.task_metrics import ReportDirs, timed, write_report

A0, A1, A2 = ("a", 0), ("a", 1), ("a", 2)


# --------------------------------------------------------------------------- behind latest


def test_offsets_behind_latest_avg_max_min():
    got = offsets_behind_latest({A0: 10, A1: 50, A2: 7}, {A0: 40, A1: 50, A2: 8})
    assert got == {"avgOffsetsBehindLatest": round(31 / 3, 1), "maxOffsetsBehindLatest": 30,
                   "minOffsetsBehindLatest": 0}


def test_a_partition_the_batch_did_not_reach_counts_from_zero_as_in_spark():
    assert offsets_behind_latest({A0: 5}, {A0: 5, A1: 12})["maxOffsetsBehindLatest"] == 12


def test_a_latest_offset_that_went_back_is_not_a_lead():
    assert offsets_behind_latest({A0: 9}, {A0: 5})["minOffsetsBehindLatest"] == 0


def test_nothing_known_nothing_reported():
    assert offsets_behind_latest({A0: 9}, {}) is None


# --------------------------------------------------------------------------- the batch line


def _planned(ranges, latest=None) -> PlannedBatch:
    end = {}
    for r in ranges:
        end[(r.topic, r.partition)] = max(end.get((r.topic, r.partition), 0), r.until_offset)
    return PlannedBatch({}, end, tuple(ranges), latest)


def test_line_sums_the_ranges_of_one_partition_and_names_the_slowest():
    """A partition's read time is its longest range's (ranges run side by side, or in turn in
    one packed task whose clock they share): here a-1's 6 ms, not a-0's 3 + 4.5."""
    ranges = [OffsetRange("a", 0, 0, 10), OffsetRange("a", 0, 10, 20), OffsetRange("a", 1, 5, 9)]
    reports = [TaskReport(7, "a", 0, 0, 10, 10, 3.0), TaskReport(7, "a", 0, 10, 20, 8, 4.5),
               TaskReport(7, "a", 1, 5, 9, 4, 6.0)]
    planned = _planned(ranges, {A0: 25, A1: 9})
    line = batch_line("kafka-eos subscribe=['a']", planned, reports)
    assert line["batch"] == 7
    assert line["rows"] == 22 and line["offsets"] == 24  # 2 offsets were markers
    assert line["tasks"] == 3 and line["partitions_read"] == 2
    assert line["slowest_partition"] == "a-1" and line["read_ms_max"] == 6.0
    assert line["read_ms_median"] == 5.2 and line["skew"] == 1.1  # 6.0 / 5.25
    assert line["maxOffsetsBehindLatest"] == 5 and line["minOffsetsBehindLatest"] == 0
    assert line["tasks_without_report"] == 0
    assert "committed_to_group" not in line and "partitions" not in line
    detail = batch_detail(planned, reports)
    assert detail["slowest"] == {"a-1": {"offsets": 4, "rows": 4, "ms": 6.0},
                                 "a-0": {"offsets": 20, "rows": 18, "ms": 4.5}}
    assert list(detail["slowest"]) == ["a-1", "a-0"]  # slowest first
    assert detail["most_behind"] == {"a-0": 5} and detail["partitions_not_listed"] == 0


def test_a_range_without_report_has_no_rows_or_time_and_the_total_is_unknown():
    ranges = [OffsetRange("a", 0, 0, 10), OffsetRange("a", 1, 0, 3)]
    reports = [TaskReport(1, "a", 1, 0, 3, 3, 1.0)]
    line = batch_line("s", _planned(ranges), reports, group="g")
    assert line["rows"] is None and line["tasks_without_report"] == 1
    assert line["slowest_partition"] == "a-1" and line["skew"] == 1.0
    assert "avgOffsetsBehindLatest" not in line  # a replayed batch: latest unknown
    assert line["committed_to_group"] == "g"
    detail = batch_detail(_planned(ranges), reports)
    assert detail["slowest"]["a-0"] == {"offsets": 10, "rows": None, "ms": None}
    assert list(detail["slowest"]) == ["a-1", "a-0"] and detail["most_behind"] == {}


def _wide_batch(partitions: int, topic: str = "orders-eu-west-1") -> tuple[PlannedBatch, list]:
    ranges = [OffsetRange(topic, p, 1000, 1004 + p % 5) for p in range(partitions)]
    latest = {(topic, p): 2000 + 10 * p for p in range(partitions)}
    planned = PlannedBatch({}, {(r.topic, r.partition): r.until_offset for r in ranges},
                           tuple(ranges), latest, tasks=tuple(
                               tuple(ranges[i::8]) for i in range(min(8, partitions))))
    reports = [TaskReport(4, r.topic, r.partition, r.from_offset, r.until_offset, r.size,
                          1.0 + r.partition % 97 / 10) for r in ranges]
    return planned, reports


def test_the_line_and_its_detail_do_not_grow_with_the_partition_count():
    """Listing every partition, the line was tens of kilobytes a batch at 1,000 partitions."""
    sizes = {}
    for n in (20, 1000, 5000):
        planned, reports = _wide_batch(n)
        line = batch_line("kafka-eos subscribe=['orders-eu-west-1']", planned, reports)
        detail = batch_detail(planned, reports)
        assert line["partitions_read"] == n and line["rows"] == sum(r.rows for r in reports)
        assert len(detail["slowest"]) == len(detail["most_behind"]) == 10
        assert detail["partitions_not_listed"] == n - 10
        sizes[n] = (len(json.dumps(line)), len(json.dumps(detail)))
    assert max(s for s, _ in sizes.values()) < 600
    assert max(d for _, d in sizes.values()) < 1500
    planned, reports = _wide_batch(1000)
    detail = batch_detail(planned, reports)
    assert list(detail["most_behind"])[0] == "orders-eu-west-1-999"  # furthest behind first
    assert all(v["ms"] == 10.6 for v in detail["slowest"].values())  # partition % 97 == 96
    # a tie names the first, as the detail lists it
    assert batch_line("s", planned, reports)["slowest_partition"] == next(iter(detail["slowest"]))


def test_a_subscription_of_many_topics_is_named_in_a_few():
    from sources.kafka_options import Subscription

    many = Subscription("subscribe", topics=tuple(f"t{i}" for i in range(200)))
    assert many.describe() == "subscribe=['t0', 't1', 't2'] and 197 more topic(s)"
    assert Subscription("subscribe", topics=("a", "b")).describe() == "subscribe=['a', 'b']"
    wide = Subscription("assign", assignment=tuple(("t", p) for p in range(1000)))
    assert wide.describe() == "assign=[1000 partitions of ['t']]"


def test_the_detail_is_a_debug_line(caplog_source):
    planned, reports = _wide_batch(30)
    line, detail = batch_line("s", planned, reports), batch_detail(planned, reports)
    emit(line, detail)
    assert [r.levelname for r in caplog_source.records] == ["INFO"]
    caplog_source.set_level(logging.DEBUG, logger="kafka_eos.source")  # undone after the test
    emit(line, detail)
    debug = [r.getMessage() for r in caplog_source.records if r.levelname == "DEBUG"]
    (text,) = debug
    doc = json.loads(text.split("batch read detail ", 1)[1])
    assert doc["source"] == "s" and len(doc["slowest"]) == 10


# --------------------------------------------------------------------------- task reports


def _batches(rows: list[int]):
    for n in rows:
        yield pa.RecordBatch.from_pydict({"x": list(range(n))})


def test_a_task_reports_its_rows_and_read_time(tmp_path):
    dirs = ReportDirs(str(tmp_path / "m"))
    batch_dir = dirs.for_batch({A0: 10})
    rng = OffsetRange("a", 0, 0, 10)
    assert sum(b.num_rows for b in timed(_batches([4, 6]), rng, batch_dir, shared=False)) == 10
    (report,) = dirs.collect(batch_dir)
    assert (report.rows, report.from_offset, report.until_offset) == (10, 0, 10)
    assert report.read_ms >= 0
    assert not os.path.exists(batch_dir)  # collected once, then gone


def test_a_task_that_failed_reports_nothing(tmp_path):
    dirs = ReportDirs(str(tmp_path / "m"))
    batch_dir = dirs.for_batch({A0: 10})

    def failing():
        yield from _batches([3])
        raise RuntimeError("broker gone")

    with pytest.raises(RuntimeError):
        list(timed(failing(), OffsetRange("a", 0, 0, 10), batch_dir, shared=False))
    assert dirs.collect(batch_dir) == []


def test_a_task_far_from_the_driver_leaves_nothing_behind(tmp_path):
    """The default directory is the driver's: where it does not exist, nothing is written."""
    elsewhere = str(tmp_path / "driver-only" / "batch")
    write_report(elsewhere, TaskReport(0, "a", 0, 0, 1, 1, 1.0), shared=False)
    assert not os.path.exists(elsewhere)


# --------------------------------------------------------------------------- the reader


class _Resolver:
    def __init__(self, highs: list[PartitionOffsets]) -> None:
        self.highs = highs

    def close(self) -> None:
        pass

    def partitions(self, *, strict: bool) -> list[TopicPartition]:
        return sorted(self.highs[0])

    def latest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        answer = self.highs.pop(0) if len(self.highs) > 1 else self.highs[0]
        return {tp: answer[tp] for tp in tps}

    def topic_ids(self, topics: Iterable[str]) -> dict[str, str]:
        return {}  # a broker that gives none


class _Committer:
    def __init__(self) -> None:
        self.commits: list[PartitionOffsets] = []

    def commit(self, offsets: PartitionOffsets) -> bool:
        if self.commits and self.commits[-1] == offsets:
            return False
        self.commits.append(dict(offsets))
        return True

    def close(self) -> None:
        pass


def _reader(highs, **extra) -> KafkaStreamReader:
    raw = {"kafka.bootstrap.servers": "nowhere:9092", "subscribe": "a", **extra}
    reader = KafkaStreamReader(parse_source_options(raw, batch=False))
    reader._lookup = _Resolver(highs)
    return reader


def _lines(caplog) -> list[dict]:
    return [json.loads(r.getMessage().split("batch read ", 1)[1])
            for r in caplog.records if r.name == "kafka_eos.source"]


@pytest.fixture
def caplog_source(caplog):
    caplog.set_level(logging.INFO, logger="kafka_eos.source")
    return caplog


def test_a_batch_completes_when_the_next_is_planned_and_is_reported_once(
        caplog_source, tmp_path, monkeypatch):
    metrics_file = tmp_path / "source.jsonl"
    monkeypatch.setenv(SOURCE_METRICS_ENV, str(metrics_file))
    reader = _reader([{A0: 100, A1: 30}], maxOffsetsPerTrigger="40",
                     taskMetricsLocation=str(tmp_path / "m"),
                     targetTasksPerBatch="2")  # a task per range, as read below
    reader._committer = _Committer()
    start = {"a": {"0": 0, "1": 0}}
    end = reader.latestOffset(start, ReadMaxRows(40))
    assert reader._committer.commits == [{A0: 0, A1: 0}]  # the query's position at start
    plan = reader.partitions(start, end)
    for p in plan:  # the tasks
        (rng,) = p.ranges
        list(timed(_batches([rng.size]), rng, p.report_dir, shared=p.report_shared))
    assert _lines(caplog_source) == []  # not completed yet
    reader.latestOffset(end, ReadMaxRows(40))  # Spark plans the next batch: this one is done
    reader.commit(end)  # Spark's own commit, later: nothing twice
    (line,) = _lines(caplog_source)
    assert line["rows"] == 40 == line["offsets"]
    ends = {(t, int(p)): o for t, ps in end.items() if not t.startswith("@")
            for p, o in ps.items()}
    behind = [100 - ends[A0], 30 - ends[A1]]
    assert line["maxOffsetsBehindLatest"] == max(behind)
    assert line["minOffsetsBehindLatest"] == min(behind)
    assert line["avgOffsetsBehindLatest"] == sum(behind) / 2
    assert reader._committer.commits[-1] == ends and len(reader._committer.commits) == 2
    (in_file,) = [json.loads(x) for x in metrics_file.read_text().splitlines()]
    assert {k: v for k, v in in_file.items() if k in line} == line  # the line, and the detail:
    assert in_file["slowest"].keys() == {"a-0", "a-1"} and in_file["partitions_not_listed"] == 0
    assert sum(p["rows"] for p in in_file["slowest"].values()) == 40
    assert in_file["most_behind"] == {"a-0": behind[0], "a-1": behind[1]}


def test_a_replayed_batch_is_reported_without_behind_latest(caplog_source, tmp_path):
    reader = _reader([{A0: 100}], taskMetricsLocation="none")
    start, end = {"a": {"0": 0}}, {"a": {"0": 10}}
    reader.partitions(start, end)  # logged by an earlier run: no latestOffset before it
    reader.commit(end)
    (line,) = _lines(caplog_source)
    assert line["offsets"] == 10 and line["rows"] is None and line["tasks_without_report"] == 1
    assert "maxOffsetsBehindLatest" not in line


def test_no_line_and_no_commit_without_a_new_batch(caplog_source):
    reader = _reader([{A0: 5}])
    reader._committer = _Committer()
    for _ in range(3):
        reader.latestOffset({"a": {"0": 5}}, ReadAllAvailable())
    assert _lines(caplog_source) == [] and reader._committer.commits == [{A0: 5}]


# --------------------------------------------------------------------------- the options


def _parse(batch, **extra):
    return parse_source_options({"kafka.bootstrap.servers": "b:9092", "subscribe": "a", **extra},
                                batch=batch)


@pytest.mark.parametrize("batch", [False, None])
def test_commit_to_group_needs_kafka_group_id(batch):
    with pytest.raises(OptionError, match=r"Option 'commitOffsetsToGroup'.*'kafka.group.id'"):
        _parse(batch, commitOffsetsToGroup="true")


def test_commit_to_group_is_off_by_default_and_uses_kafka_group_id():
    assert _parse(False, **{"kafka.group.id": "lag"}).commit_group is None
    assert _parse(False, commitOffsetsToGroup="TRUE", **{"kafka.group.id": " lag "}).commit_group \
        == "lag"


def test_commit_to_group_is_ignored_in_batch_reads_with_a_warning(caplog):
    assert _parse(True, commitOffsetsToGroup="true").commit_group is None
    assert "commitOffsetsToGroup applies to streaming queries only" in caplog.text


def test_commit_to_group_takes_true_or_false_only():
    with pytest.raises(OptionError, match="Option 'commitOffsetsToGroup': expected 'true'"):
        _parse(False, commitOffsetsToGroup="sometimes", **{"kafka.group.id": "g"})


def test_task_metrics_location():
    assert _parse(False).task_metrics_location is None
    assert _parse(False, taskMetricsLocation="NONE").task_metrics_location == "none"
    assert _parse(False, taskMetricsLocation="file:///shared/m/").task_metrics_location \
        == "/shared/m"
    with pytest.raises(OptionError, match="Option 'taskMetricsLocation'"):
        _parse(False, taskMetricsLocation="ftp://x/y")


# --------------------------------------------------------------------------- the committer


def test_a_commit_that_cannot_be_made_is_a_warning_never_an_error(caplog):
    committer = GroupOffsetCommitter({"bootstrap.servers": "b:9092", "no.such.setting": "1"},
                                     "g", wait_s=0.1)
    assert committer.commit({A0: 5}) is False
    assert committer.failures == 1
    assert "committing offsets to consumer group 'g' failed" in caplog.text


def test_the_same_offsets_are_committed_once():
    committer = GroupOffsetCommitter({"bootstrap.servers": "b:9092"}, "g", wait_s=0.0)
    committer._last = {A0: 5}
    assert committer.commit({A0: 5}) is False
    assert committer.commit({}) is False


def test_default_directories_of_ended_processes_are_swept_at_the_next_start(tmp_path, monkeypatch):
    """Spark often ends the driver's Python source process before the reader's stop(): each
    query start left its directory in the temp dir. A new reader removes those of processes
    that are gone, and leaves a live process's alone."""
    import subprocess
    import sys

    from sources.task_metrics import LOCAL_PREFIX

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        gone = tmp_path / f"{LOCAL_PREFIX}{ended.pid}-abc"
        kept = tmp_path / f"{LOCAL_PREFIX}{live.pid}-def"
        other = tmp_path / f"{LOCAL_PREFIX}oldname"  # no pid in its name: not ours to judge
        for d in (gone, kept, other):
            (d / "batch").mkdir(parents=True)
        dirs = ReportDirs(None)
        assert not gone.exists() and kept.exists() and other.exists()
        assert os.path.basename(dirs.base).startswith(f"{LOCAL_PREFIX}{os.getpid()}-")
        ReportDirs(None)  # this process's own directory is never swept
        assert os.path.isdir(dirs.base)
    finally:
        live.kill()
        live.wait()


# --------------------------------------------------------------------------- packed tasks


def test_a_packed_task_reports_every_range_it_read_in_one_file(tmp_path, monkeypatch):
    """One report file per task, listing each range's rows and read time: the batch line
    accounts for every range and counts the tasks."""
    import sources.kafka_source as ks

    def scripted(ranges, conf, *, on_range_done=None, **_):
        for r in ranges:
            yield pa.RecordBatch.from_pydict({"x": list(range(r.size - 1))})  # one marker each
            on_range_done(r, r.size - 1)

    monkeypatch.setattr(ks, "read_task", scripted)
    reader = _reader([{("a", p): 10 for p in range(30)}], targetTasksPerBatch="3",
                     taskMetricsLocation=str(tmp_path / "m"))
    start = {"a": {str(p): 0 for p in range(30)}}
    end = reader.latestOffset(start, ReadAllAvailable())
    plan = reader.partitions(start, end)
    assert len(plan) == 3 and sum(len(p.ranges) for p in plan) == 30
    for p in plan:
        assert sum(b.num_rows for b in ks.read_partition(reader.options, p)) == 90
    (batch_dir,) = [d for _, d in reader._planned.values()]
    assert len(os.listdir(batch_dir)) == 3  # one file per task
    planned, report_dir = next(iter(reader._planned.values()))
    reports = reader._reports.collect(report_dir)
    assert len(reports) == 30  # every range accounted for
    line = batch_line("s", planned, reports)
    assert line["tasks"] == 3 and line["tasks_without_report"] == 0
    assert line["rows"] == 270 and line["offsets"] == 300 and line["partitions_read"] == 30
    detail = batch_detail(planned, reports)
    assert all(e["rows"] == 9 for e in detail["slowest"].values())
    assert detail["partitions_not_listed"] == 20


def test_a_packed_task_without_report_counts_once(tmp_path):
    ranges = [OffsetRange("a", p, 0, 5) for p in range(4)]
    planned = PlannedBatch({}, {}, tuple(ranges), None, tasks=(tuple(ranges[:3]), (ranges[3],)))
    line = batch_line("s", planned, [TaskReport(1, "a", 3, 0, 5, 5, 1.0)])
    assert line["tasks"] == 2 and line["tasks_without_report"] == 1
    assert line["rows"] is None and line["offsets"] == 20
