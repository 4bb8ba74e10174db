"""The benchmark's entry point runs end to end on tiny inputs and reports every measurement.

No timed assertions: the figures of a tiny run mean nothing, only that each is there.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RATES = [
    ("source", "raw_consumers_rows_per_s"),
    ("source", "kafka_eos_rows_per_s"),
    ("source", "ratio"),
    ("kafka_sink", "raw_idempotent_producers_rows_per_s"),
    ("kafka_sink", "exactly_once_rows_per_s"),
    ("kafka_sink", "python_noop_sink_rows_per_s"),
    ("kafka_sink", "ratio_vs_raw_producer"),
    ("kafka_sink", "trigger_1s", "exactly_once_rows_per_s"),
    ("kafka_sink", "trigger_1s", "at_least_once_rows_per_s"),
    ("kafka_sink", "trigger_1s", "ratio_exactly_once_vs_at_least_once"),
    ("kafka_sink", "commit_phase_ms", "median"),
    ("kafka_sink", "commit_phase_ms", "p95"),
    ("delta_sink", "write_deltalake_rows_per_s"),
    ("delta_sink", "exactly_once_rows_per_s"),
    ("delta_sink", "python_noop_sink_rows_per_s"),
    ("delta_sink", "spark_noop_sink_rows_per_s"),
    ("delta_sink", "ratio_vs_write_deltalake"),
    ("delta_sink", "trigger_1s", "exactly_once_rows_per_s"),
    ("delta_sink", "trigger_1s", "at_least_once_rows_per_s"),
    ("delta_sink", "trigger_1s", "ratio_exactly_once_vs_at_least_once"),
    ("delta_sink", "commit_phase_ms", "median"),
    ("delta_sink", "commit_phase_ms", "p95"),
]


def _get(d, path):
    for k in path:
        d = d[k]
    return d


@pytest.mark.timeout(300)
def test_benchmark_runs_on_tiny_inputs(tmp_path, broker):
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=broker.bootstrap_servers)
    out = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--output-dir", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads((out / "results.json").read_text())
    assert (out / "chart.png").stat().st_size > 0

    assert results["machine"]["cores"] >= 1 and results["machine"]["librdkafka"]
    assert results["load_average"]["start"]
    assert set(results["by_value_size"]) == {"100 B", "1 KB"}
    for size, res in results["by_value_size"].items():
        for path in RATES:
            value = _get(res, path)
            assert isinstance(value, (int, float)) and math.isfinite(value) and value > 0, (size, path, value)
        assert res["kafka_sink"]["commit_phase_ms"]["batches"] > 0
        assert res["delta_sink"]["commit_phase_ms"]["batches"] > 0
    mem = results["worker_memory"]
    for key in ("full_range", "quarter_range", "quarter_batch_rows"):
        assert mem[key]["rows"] > 0 and mem[key]["peak_rss_mb"] > 0
    assert len(results["targets"]) == 12
