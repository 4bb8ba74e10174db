"""The throughput table of docs/performance.md is generated from docs/benchmarks/results.json: it
must carry the run's own figures and verdicts, not numbers typed by hand."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.report import table

ROOT = Path(__file__).resolve().parents[1]
RESULTS = json.loads((ROOT / "docs/benchmarks/results.json").read_text())


def test_table_carries_each_ratio_and_verdict_of_the_run():
    text = table(RESULTS)
    for size, figures in RESULTS["by_value_size"].items():
        assert f"**{figures['source']['ratio']:.2f}**" in text
        assert f"**{figures['kafka_sink']['trigger_1s']['ratio_exactly_once_vs_at_least_once']:.2f}**" in text
        assert f"**{figures['kafka_sink']['commit_phase_ms']['median']:.1f}**" in text
        assert f"{size} values" in text
    for name, t in RESULTS["targets"].items():
        family = name.split("[")[0]
        assert family in {
            "source_vs_raw_consumers", "kafka_sink_vs_raw_idempotent_producers",
            "delta_sink_vs_write_deltalake", "kafka_sink_exactly_once_vs_at_least_once",
            "delta_sink_exactly_once_vs_at_least_once", "kafka_commit_phase_median_ms",
        }
    met = sum(t["met"] for t in RESULTS["targets"].values())
    assert text.count(": met |") + text.count(": partly met |") >= (1 if met else 0)


def test_the_performance_page_shows_the_table_of_the_results_it_links_to():
    """`python -m benchmarks.report docs/benchmarks/results.json` is what the page shows: a run
    that updates results.json must update the page (paste the report's output), and the reverse."""
    page = (ROOT / "docs/performance.md").read_text()
    assert table(RESULTS).split("\n\n")[0] in page
    assert "](benchmarks/results.json)" in page and "](benchmarks/chart.png)" in page
