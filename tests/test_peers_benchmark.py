"""The peers benchmark's pure logic (benchmarks/peers/): arguments, targets and verdicts,
percentile windows, the first-batch time, the tables. No Spark, no broker."""

from __future__ import annotations

import math

import pytest

from benchmarks.__main__ import parse_args
from benchmarks.peers.lane import spec_for
from benchmarks.peers.latency import PIPELINES, REFERENCE, first_batch_s, round_order
from benchmarks.peers.report import (
    SECTIONS,
    evaluate,
    parse_sections,
    size_label,
    tables,
    window_p50s,
)
from benchmarks.peers.sinks import alternating


def test_peers_only_keeps_the_running_order_and_refuses_unknown_names(capsys):
    assert parse_sections("delta-sink, source") == ["source", "delta-sink"]
    assert parse_sections(",".join(SECTIONS)) == list(SECTIONS)
    with pytest.raises(ValueError, match="--peers-only: unknown section.*kafka"):
        parse_sections("source,kafka")
    with pytest.raises(SystemExit):
        parse_args(["--peers", "--peers-only", "sinks"])
    assert "--peers-only" in capsys.readouterr().err


def test_peers_delta_batches_needs_its_early_and_late_windows(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--peers", "--peers-delta-batches", "19"])
    assert "--peers-delta-batches" in capsys.readouterr().err


def test_quick_shrinks_every_section_and_the_spec_follows_the_arguments():
    args = parse_args(["--peers", "--quick", "--peers-delta-batches", "500"])
    assert (args.peers_delta_batches, args.latency_batches, args.repeats) == (20, 3, 1)
    assert args.warmup is False
    spec = spec_for(args, "b:1", {"100": "t"}, ["source", "delta-sink"])
    assert spec["rows"] == args.records // args.peers_partitions * args.peers_partitions
    assert spec["sizes"] == ["100", "1024"]
    assert spec["long_run"]["batches"] == 20
    assert spec["sinks"]["files_per_batch"] == args.batch_rows // args.rows_per_file
    full = parse_args(["--peers"])
    assert full.peers_delta_batches == 1000 and full.warmup is True


def _results(source_ratio=0.9, latency=(1.1, 1.4), kafka=0.69, delta=1.2, long_run=float("nan")):
    return {
        "source": {"by_value_size": {"100": {"ratio": source_ratio}, "1024": {"ratio": 0.5}}},
        "latency": {"versus_spark": {"tasks": {"batch_p50_ratio": latency[0]},
                                     "driver": {"batch_p50_ratio": latency[1]}}},
        "kafka_sink": {"by_value_size": {"100": {"ratio": kafka}}},
        "delta_sink": {"by_value_size": {"1024": {"ratio": delta}},
                       "long_run": {"ratio": long_run}},
    }


def test_each_target_is_judged_where_it_was_measured():
    v = evaluate(_results())
    assert v["source_rows_per_s_vs_format_kafka[100]"]["met"] is True
    assert v["source_rows_per_s_vs_format_kafka[1024]"]["met"] is False
    # Latency is lower-is-better: 1.1 meets <= 1.25, 1.4 misses it.
    assert v["latency_batch_p50_vs_format_kafka_to_delta[tasks]"]["met"] is True
    assert v["latency_batch_p50_vs_format_kafka_to_delta[driver]"]["met"] is False
    assert v["kafka_sink_rows_per_s_vs_format_kafka[100]"]["met"] is False
    assert v["delta_sink_rows_per_s_vs_format_delta[1024]"]["met"] is True
    # A figure that is not a number (a failed run) is a miss, never a pass.
    lr = v["delta_sink_long_run_rows_per_s_vs_format_delta"]
    assert lr["met"] is False and lr["value"] is None
    assert lr["target"] == ">= 1.0"


def test_a_section_not_run_has_no_verdict():
    v = evaluate({"source": {"by_value_size": {"100": {"ratio": 1.0}}}})
    assert list(v) == ["source_rows_per_s_vs_format_kafka[100]"]


def test_window_p50s_takes_batches_11_to_20_and_the_last_ten():
    values = list(range(1000))
    w = window_p50s(values)
    assert w["early_p50"] == pytest.approx(sorted(values[10:20])[5], abs=1)
    assert w["late_p50"] == pytest.approx(sorted(values[-10:])[5], abs=1)
    short = window_p50s([5.0] * 12)  # fewer than 20: the first ten
    assert short == {"early_p50": 5.0, "late_p50": 5.0}


def test_first_batch_counts_from_start_to_the_first_batch_that_ran():
    progress = [
        # An idle trigger reports progress without addBatch: not a batch that ran.
        {"batchId": 0, "timestamp": "2026-11-26T09:00:01.000Z",
         "durationMs": {"triggerExecution": 100, "latestOffset": 90}},
        {"batchId": 1, "timestamp": "2026-11-26T09:00:02.000Z",
         "durationMs": {"triggerExecution": 1500, "addBatch": 1200}},
    ]
    from datetime import datetime, timezone

    started = datetime(2026, 11, 26, 9, 0, 0, tzinfo=timezone.utc).timestamp()
    assert first_batch_s(progress, started) == pytest.approx(3.5)
    assert first_batch_s(progress[:1], started) is None


def test_pairs_and_rounds_alternate_their_order():
    assert list(alternating(("a", "b"), 3)) == ["a", "b", "b", "a", "a", "b"]
    assert round_order(0) == list(PIPELINES)
    assert round_order(1) == list(PIPELINES)[::-1]
    assert REFERENCE in PIPELINES


def test_tables_name_every_section_and_verdict():
    results = _results()
    results["source"]["by_value_size"] = {"100": {
        "records": 1000, "kafka_eos_rows_per_s": 900, "spark_kafka_rows_per_s": 1000,
        "ratio": 0.9, "kafka_eos_wall_s": [2.0, 1.5], "spark_kafka_wall_s": [1.0]}}
    results["latency"]["pipelines"] = {}
    results["kafka_sink"]["by_value_size"]["100"].update(
        rows=1000, kafka_eos_rows_per_s=690, spark_kafka_rows_per_s=1000)
    results["delta_sink"] = {"by_value_size": {"1024": {
        "rows": 1000, "delta_eos_rows_per_s": 1200, "spark_delta_rows_per_s": 1000,
        "ratio": 1.2}}}
    text = tables(results)
    assert "| 100 B | 1,000 | 900 | 1,000 | 0.9 | 1.5 s / 1.0 s | met |" in text
    assert "| 1 KB | 1,000 | 1,200 | 1,000 | 1.2 | met |" in text
    assert "kafka_sink_rows_per_s_vs_format_kafka[100]: 0.69 (target >= 0.7): MISSED" in text
    assert size_label("1024") == "1 KB" and size_label(100) == "100 B"
    assert not math.isnan(evaluate(results)["delta_sink_rows_per_s_vs_format_delta[1024]"]
                          ["value"])


def _long_run(batches: int = 20) -> dict:
    series = {"series": list(range(100, 100 + batches))}
    return {"batches": batches, "rows_per_batch": 100,
            "delta_eos": {"label": "delta-eos", "trigger_execution_ms": series,
                          "commit_ms": series},
            "spark_delta": {"label": 'format("delta")', "trigger_execution_ms": series}}


def test_the_chart_draws_only_the_sections_that_ran(tmp_path):
    """`--peers-only delta-sink` has no latency figures: no empty latency panel."""
    from benchmarks.chart import draw_peers

    delta_only = {"delta_sink": {"long_run": {**_long_run(), "ratio": 2.5}}}
    titles = draw_peers(delta_only, str(tmp_path / "delta.png"))
    assert (tmp_path / "delta.png").stat().st_size > 0
    assert len(titles) == 2 and titles[0].startswith("Against the peers")
    assert titles[1].startswith("Delta sinks as the table grows: 20 batches")
    latency = {"latency": {"rate_records_per_s": 200, "trigger_s": 1, "pipelines": {
        "eos": {"label": "kafka-eos -> delta-eos", "trigger_execution_ms_p50": 500,
                "trigger_execution_ms_p99": 900,
                "end_to_end": {"p50_ms": 700, "p99_ms": 1200}}}}}
    titles = draw_peers(latency, str(tmp_path / "latency.png"))
    assert len(titles) == 2 and titles[1].startswith("Latency, 200 records/s")
