"""The partition-count benchmark's pure parts (benchmarks/partitions*.py): its arguments, its
targets and verdicts, its table, and how it counts what a commit carries, on a real Delta table
written by delta-rs and a real sink transaction log. No Spark, no broker."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, Transaction, write_deltalake

from benchmarks.__main__ import parse_args
from benchmarks.partitions import (
    delta_commits,
    delta_rows,
    kafka_transactions_per_commit,
    order,
)
from benchmarks.partitions_report import (
    FLOOR,
    MOST_FILES_PER_COMMIT,
    TWO_TASKS,
    PIPELINES,
    evaluate,
    p50,
    parse_counts,
    table,
)
from sinks.txn_log import TransactionLog

ROOT = Path(__file__).resolve().parents[1]


def test_partition_counts_are_sorted_positive_and_bad_ones_name_the_option(capsys):
    assert parse_counts("1000, 8,200,8") == [8, 200, 1000]
    for bad in ("", "8,x", "0,8", "-1"):
        with pytest.raises(ValueError, match="--partition-counts"):
            parse_counts(bad)
    with pytest.raises(SystemExit):
        parse_args(["--only", "partitions", "--partition-counts", "eight"])
    assert "--partition-counts" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--only", "partitions", "--partition-batches", "0"])


def test_quick_shrinks_the_widths_unless_given():
    args = parse_args(["--only", "partitions", "--quick"])
    assert parse_counts(args.partition_counts) == [2, 8] and args.records_per_partition == 5
    args = parse_args(["--only", "partitions", "--quick", "--partition-counts", "3"])
    assert args.partition_counts == "3"
    full = parse_args(["--only", "partitions"])
    assert parse_counts(full.partition_counts) == [8, 200, 1000]
    assert (full.records_per_partition, full.partition_batches) == (20, 5)


def test_pipelines_alternate_their_order_between_counts_and_those_beside_them_run_last():
    assert order(0) == [*PIPELINES, TWO_TASKS, FLOOR]
    assert order(1) == [*list(PIPELINES)[::-1], TWO_TASKS, FLOOR]
    assert order(2) == order(0)


def _section(eos: dict[int, float], spark: dict[int, float], files: list[int] | None) -> dict:
    by = {}
    for c in eos:
        by[str(c)] = {
            "kafka_eos_noop": {"trigger_execution_ms_p50": eos[c], "wall_s": 9.0,
                               "tasks_per_batch": [8] * 5},
            "spark_kafka_noop": {"trigger_execution_ms_p50": spark[c], "wall_s": 11.5,
                                 "tasks_per_batch": [c] * 5},
            "kafka_eos_delta_eos": {"trigger_execution_ms_p50": 700.0, "wall_s": 12.0,
                                    "files_per_commit": files},
            "kafka_eos_kafka_eos": {"error": "RuntimeError: broker gone"},
            FLOOR: {"trigger_execution_ms_p50": 150.0, "wall_s": 4.0, "tasks_per_batch": [8] * 5},
        }
    return {"by_partitions": by}


def test_targets_growth_against_the_smallest_count_peer_at_every_count_and_files():
    section = _section({8: 400.0, 200: 500.0, 1000: 900.0}, {8: 300.0, 200: 900.0, 1000: 3000.0},
                       [8, 8, 7, 8, 8])
    v = evaluate(section)
    assert v["kafka_eos_noop_p50_vs_its_p50_at_8[1000]"] == {
        "value": 2.25, "target": "<= 2", "met": False}
    assert v["kafka_eos_noop_p50_vs_format_kafka_noop[8]"]["value"] == pytest.approx(1.333, 1e-3)
    assert not v["kafka_eos_noop_p50_vs_format_kafka_noop[8]"]["met"]
    assert v["kafka_eos_noop_p50_vs_format_kafka_noop[200]"]["met"]
    assert v["kafka_eos_noop_p50_vs_format_kafka_noop[1000]"]["met"]
    assert v["delta_eos_files_per_commit_max[1000]"] == {
        "value": 8, "target": f"<= {MOST_FILES_PER_COMMIT}", "met": True}
    wider = evaluate(_section({8: 400.0, 1000: 800.0}, {8: 500.0, 1000: 900.0}, [9, 1]))
    assert wider["kafka_eos_noop_p50_vs_its_p50_at_8[1000]"]["met"]  # exactly 2x
    assert not wider["delta_eos_files_per_commit_max[1000]"]["met"]


def test_a_missing_figure_is_not_met():
    section = _section({8: 400.0}, {8: 300.0}, None)
    section["by_partitions"]["8"]["spark_kafka_noop"] = {"error": "boom"}
    v = evaluate(section)
    assert set(v) == {"kafka_eos_noop_p50_vs_format_kafka_noop[8]",
                      "delta_eos_files_per_commit_max[8]"}  # one count: no growth to judge
    assert all(t["value"] is None and t["met"] is False for t in v.values())


def test_table_shows_each_pipeline_its_ratio_failures_and_the_verdicts():
    section = _section({8: 400.0, 1000: 900.0}, {8: 300.0, 1000: 3000.0}, [8, 8])
    text = table(section)
    assert "| 1,000 | kafka-eos -> noop | **900 ms** | 0.30x | 9 s |" in text
    assert "| 8 | format(\"kafka\") -> noop | **300 ms** | 1 (the reference) |" in text
    assert ("| 1,000 | format(\"kafka\") -> noop | **3,000 ms** | 1 (the reference) | 11.5 s | "
            "- / - ms | 1,000 | - |") in text
    assert "| 8 | kafka-eos -> delta-eos | **700 ms** | 2.33x | 12 s | - / - ms | - | 8 |" in text
    assert "| 8 | kafka-eos -> kafka-eos | **failed**: RuntimeError: broker gone" in text
    assert ("| 8 | Python source floor -> noop | **150 ms** | 0.50x | 4 s | - / - ms | 8 | - |"
            in text)
    assert "`kafka_eos_noop_p50_vs_its_p50_at_8[1000]` 2.25 (target <= 2): MISSED" in text


def test_p50_is_the_nearest_rank_median():
    assert p50([5, 1, 3]) == 3 and p50([4, 1, 2, 3]) == 3 and p50([]) is None


def test_files_per_commit_are_the_add_actions_of_each_streaming_version(tmp_path):
    """A table whose first version is a plain write (no txn: not a batch's commit) and then two
    batch commits of 3 and 1 files, as delta-eos makes them (one Delta commit per batch)."""
    path = str(tmp_path / "t")

    def rows(n: int, parts: int) -> pa.Table:  # a partitioned table: a file per value of p
        return pa.table({"x": pa.array(range(n), pa.int64()),
                         "p": pa.array([i % parts for i in range(n)], pa.int64())})

    write_deltalake(path, rows(10, 2), partition_by=["p"])
    for batch, files in ((0, 3), (1, 1)):
        write_deltalake(path, rows(4 * files, files), mode="append", partition_by=["p"],
                        commit_properties=CommitProperties(
                            app_transactions=[Transaction("bench", batch)]))
    commits = delta_commits(path)
    assert [len(c) for c in commits] == [3, 1]
    assert delta_rows(commits) == 16


def test_transactions_per_commit_count_the_decided_transactions_of_each_batch(tmp_path):
    log = TransactionLog(str(tmp_path))

    def txn(p: int) -> dict:
        return {"transactional_id": f"bench-{p}-0", "producer_id": 7, "producer_epoch": 0}

    log.record_decision(0, {0: txn(0), 1: txn(1), 2: txn(2)})
    log.record_decision(1, {0: txn(0), 1: {"flushed": True}})  # no transaction in it
    log.record_decision(1, {0: txn(0)})  # a re-decision of the same partition: one transaction
    assert kafka_transactions_per_commit(str(tmp_path)) == [3, 1]


def test_the_performance_page_shows_the_table_of_the_run_it_links_to():
    """`python -m benchmarks.partitions_report docs/benchmarks/partitions-apache-kafka-4.4.json`
    is what docs/performance.md shows, with the run's verdicts: a new run updates both."""
    section = json.loads(
        (ROOT / "docs/benchmarks/partitions-apache-kafka-4.4.json").read_text())["partitions"]
    assert section["targets"] == evaluate(section)
    page = (ROOT / "docs/performance.md").read_text()
    assert table(section).split("\n\nTargets:")[0] in page
    assert "](benchmarks/partitions-apache-kafka-4.4.json)" in page
    assert "](benchmarks/partitions-apache-kafka-4.4.png)" in page
