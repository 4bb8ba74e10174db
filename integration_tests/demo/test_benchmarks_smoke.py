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

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

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


def _run_benchmarks(out, *args: str, timeout: int,
                    env: dict | None = None) -> tuple[dict, str]:
    """`python -m benchmarks ARGS --output-dir OUT`, which must succeed: its results.json and
    what it printed."""
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", *args, "--output-dir", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads((out / "results.json").read_text()), proc.stdout


def _get(d, path):
    for k in path:
        d = d[k]
    return d


#: The smoke test's latency pipelines: the floor and one exactly-once pipeline end to end (all
#: nine take four times as long; the others run the same measuring code on other formats).
LATENCY_PIPELINES = ("rate_noop", "driver_kafka_eos_delta_eos")
EXACTLY_ONCE_PIPELINES = ("driver_kafka_eos_delta_eos",)


@pytest.fixture(scope="module")
def together(tmp_path_factory, broker) -> tuple:
    """One `python -m benchmarks` run of the sections that share a broker and a Spark session
    (throughput, worker memory, latency: the default `--only`), on tiny inputs, for the tests
    of those sections: one Spark start, not two. One value size: a second one runs the same
    code with other numbers. The output folder already holds a section measured alone
    (`partitions`), which the run must keep. (its results.json, what it printed, the folder)"""
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=broker.bootstrap_servers)
    out = tmp_path_factory.mktemp("bench") / "results"
    out.mkdir()
    (out / "results.json").write_text(json.dumps({"partitions": {"kept": True}}))
    results, stdout = _run_benchmarks(
        out, "--quick", "--only", "source,kafka,delta,memory,latency", "--value-sizes", "100",
        "--latency-pipelines", ",".join(LATENCY_PIPELINES), timeout=600, env=env)
    return results, stdout, out


@pytest.mark.timeout(660)
def test_benchmark_runs_on_tiny_inputs(together):
    results, _, out = together
    assert (out / "chart.png").stat().st_size > 0

    assert results["machine"]["cores"] >= 1 and results["machine"]["librdkafka"]
    assert results["load_average"]["start"]
    assert set(results["by_value_size"]) == {"100 B"}
    for size, res in results["by_value_size"].items():
        for path in RATES:
            value = _get(res, path)
            assert isinstance(value, (int, float)) and math.isfinite(value) and value > 0, (size, path, value)
        assert res["kafka_sink"]["commit_phase_ms"]["batches"] > 0
        assert res["delta_sink"]["commit_phase_ms"]["batches"] > 0
    mem = results["worker_memory"]
    for key in ("full_range", "quarter_range", "quarter_batch_rows"):
        assert mem[key]["rows"] > 0 and mem[key]["peak_rss_mb"] > 0
    # six verdicts per value size, each named for it
    assert len(results["targets"]) == 6
    assert all(name.endswith("[100 B]") for name in results["targets"]), results["targets"]


LONG_RUN_PROBE = ("table_load_ms", "full_read_ms", "transaction_version_ms",
                  "orphan_sweep_referenced_files_ms")


@pytest.mark.timeout(300)
def test_delta_long_run_reports_every_configuration_and_keeps_the_other_sections(tmp_path):
    """`--delta-long-run` at 20 batches: no broker, no Spark. Its section is merged into an
    existing results.json; the row and file counts are those of the batches driven."""
    out = tmp_path / "results"
    out.mkdir()
    (out / "results.json").write_text(json.dumps({"by_value_size": {"100 B": {"kept": True}}}))
    batches, rows = 20, 50
    results, stdout = _run_benchmarks(out, "--delta-long-run", "--batches", str(batches),
                                      "--long-run-rows", str(rows), timeout=300)
    assert results["by_value_size"] == {"100 B": {"kept": True}}
    section = results["delta_long_run"]
    assert section["batches"] == batches and section["rows_per_batch"] == rows
    assert "--delta-long-run" in section["command"] and section["machine"]["cores"] >= 1
    tasks = section["partitions"]
    assert set(section["configs"]) == {
        "compaction_off", "compact_every_100", "checkpoint_interval_10",
        "compact_every_100_checkpoint_interval_10",
        "compact_every_100_checkpoint_interval_10_no_log_cleanup",
    }
    for name, res in section["configs"].items():
        sink = res["sink"]
        assert sink["available"], (name, sink.get("error"))
        raw = res["write_deltalake"]
        assert sink["batches"] == batches and sink["rows"] == batches * rows
        assert len(sink["commit_ms_per_batch"]) == len(raw["append_ms_per_batch"]) == batches
        for stats in (sink["commit_ms"], sink["planning_ms"], raw["append_ms"]):
            for key in ("first_10_p50", "last_10_p50", "ratio_last_vs_first", "same_phase_p50"):
                assert math.isfinite(stats[key]) and stats[key] > 0, (name, key, stats)
        compacting = "compactEvery" in sink["options"]
        for key, n in (("after_batch_10", 10), (f"after_batch_{batches}", batches),
                       ("fresh_table_after_batch_10", 10)):
            s, r = sink[key], raw[key]
            assert s["rows"] == r["rows"] == n * rows, (name, key)
            assert r["version"] == n - 1 and r["data_files_in_snapshot"] == n  # appends only
            assert s["delta_log_json_files"] == s["version"] + 1
            assert all(s[k] > 0 for k in LONG_RUN_PROBE), (name, key, s)
            assert s["spark_commit_files"] == n and 0 < s["eos_sink_log_batches"] <= 10
            if compacting:  # OPTIMIZE commits: fewer files in the snapshot, none deleted
                assert s["data_files_in_snapshot"] <= n * tasks <= s["data_files_on_disk"]
            else:
                assert s["version"] == n - 1
                assert s["data_files_in_snapshot"] == s["data_files_on_disk"] == n * tasks
                assert s["orphan_sweep_referenced_paths"] == n * tasks
        for side in (sink["interleaved"], raw["interleaved"]):
            assert len(side["fresh_table_per_batch"]) == 10 and side["ratio_last_vs_first"] > 0
        for prop in sink["table_properties"].values():
            assert prop["applied"], (name, prop)
        assert res["growth"]["sink_commit_last_vs_first"] > 0
    assert "| compaction off, default checkpoint interval |" in stdout


@pytest.mark.timeout(660)
def test_latency_section_reports_every_pipeline_and_keeps_the_other_sections(together):
    """`--only ...,latency --quick`: 1 warm-up and 3 measured batches per pipeline, in the run
    the throughput sections share. The section measured alone before (`partitions`) is kept;
    every pipeline has its per-batch figures, the exactly-once one its end-to-end figures, with
    every record of the window seen. No timed assertions."""
    results, stdout, out = together
    assert results["partitions"] == {"kept": True}
    assert set(results["by_value_size"]) == {"100 B"}
    assert (out / "latency.png").stat().st_size > 0
    section = results["latency"]
    assert "--only source,kafka,delta,memory,latency" in section["command"]
    assert section["machine"]["cores"] >= 1
    assert section["load_average"]["start"] and section["load_average"]["end"]
    assert section["measured_batches"] == 3 and section["rate_records_per_s"] == 200
    assert section["produced"] > 0 and section["produce_errors"] == 0
    assert list(section["pipelines"]) == list(LATENCY_PIPELINES)
    for name, res in section["pipelines"].items():
        assert res["batches"] == 3 and len(res["trigger_execution_ms"]) == 3, name
        assert 0 < res["trigger_execution_ms_p50"] <= res["trigger_execution_ms_p90"], name
        assert res["phases_ms_p50"]["addBatch"] > 0, name
        if name.startswith("rate_noop"):
            assert "p50_vs_floor" not in res, name
        else:
            assert res["p50_vs_floor"] > 0, name
        if name in EXACTLY_ONCE_PIPELINES:
            e = res["end_to_end"]
            assert e["records"] > 0 and e["missing"] == 0, (name, e)
            assert len(e["latency_ms"]) == e["records"]
            assert 0 < e["p50_ms"] <= e["p99_ms"] <= e["max_ms"], (name, e)
        else:
            assert "end_to_end" not in res, name
    # The kafka-eos pipeline reads an input topic of its own, named in its figures.
    inputs = [r["input_topic"] for n, r in section["pipelines"].items() if "kafka_eos_" in n]
    assert len(inputs) == 1 and inputs[0], inputs
    assert section["floor_p50_ms"] == section["pipelines"]["rate_noop"]["trigger_execution_ms_p50"]
    assert set(section["targets"]) == {  # those of the pipelines run, and the kept one
        "kafka_eos_delta_eos_p50_vs_floor[readMode=driver]",
        "kafka_sink_exactly_once_vs_at_least_once[100 B]"}
    for t in section["targets"].values():
        assert isinstance(t["met"], bool) and t["target"]
    assert "| kafka-eos readMode=driver -> delta-eos |" in stdout


#: Every pipeline of `--only partitions`, the floor included.
PARTITION_PIPELINES = ("kafka_eos_noop", "spark_kafka_noop", "kafka_eos_delta_eos",
                       "kafka_eos_kafka_eos", "kafka_eos_2_tasks_noop", "python_floor_noop")


@pytest.mark.timeout(600)
def test_partitions_section_reports_every_pipeline_and_what_a_commit_carries(tmp_path, broker):
    """`--only partitions` at one tiny width in the peers' PySpark 4.2.0 session (3 partitions
    of 2 records, 2 batches, no warm-up): every pipeline read every record in its 2 batches,
    and each sink's commits carry what the status tracker says its batches ran: a file per
    task in the Delta log, a transaction per task in the Kafka sink's log. Merged into an
    existing results.json. No timed assertions."""
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=broker.bootstrap_servers)
    out = tmp_path / "results"
    out.mkdir()
    (out / "results.json").write_text(json.dumps({"by_value_size": {"100 B": {"kept": True}}}))
    width, per, batches = 3, 2, 2
    results, stdout = _run_benchmarks(
        out, "--only", "partitions", "--quick", "--partition-counts", str(width),
        "--records-per-partition", str(per), "--partition-batches", str(batches),
        timeout=600, env=env)
    assert results["by_value_size"] == {"100 B": {"kept": True}}
    assert (out / "partitions.png").stat().st_size > 0
    section = results["partitions"]
    assert "--only partitions" in section["command"] and section["pyspark"] == "4.2.0"
    runs = section["by_partitions"][str(width)]
    assert list(runs) == list(PARTITION_PIPELINES)
    for name, r in runs.items():
        assert "error" not in r, (name, r.get("error"))
        assert r["batches"] == batches and r["rows"] == width * per, name
        assert len(r["trigger_execution_ms"]) == batches and r["trigger_execution_ms_p50"] > 0
        assert r["wall_s"] > 0 and len(r["tasks_per_batch"]) == batches, name
        assert all(t >= 1 for t in r["tasks_per_batch"]), name
    delta, kafka = runs["kafka_eos_delta_eos"], runs["kafka_eos_kafka_eos"]
    assert delta["files_per_commit"] == delta["tasks_per_batch"]
    assert delta["sink_rows"] == kafka["sink_rows"] == width * per
    assert kafka["transactions_per_commit"] == kafka["tasks_per_batch"]
    assert set(section["targets"]) == {  # one width: no growth to judge
        f"kafka_eos_noop_p50_vs_format_kafka_noop[{width}]",
        f"delta_eos_files_per_commit_max[{width}]"}
    assert "| 3 | Python source floor -> noop |" in stdout
REGISTRY_RATES = ("kafka_eos_avro_rows_per_s", "kafka_eos_binary_rows_per_s",
                  "spark_from_avro_rows_per_s", "avro_deserializer_loop_rows_per_s",
                  "ratio_avro_vs_binary", "ratio_avro_vs_deserializer_loop",
                  "ratio_avro_vs_spark_from_avro")


@pytest.mark.timeout(300)
def test_registry_section_reports_every_reader_and_keeps_the_other_sections(
        tmp_path, broker, schema_registry_url):
    """`--only registry --quick`: one size, one run of each reader, on the suite's broker and
    registry. Every reader's figure is there, the decoders alone too; no timed assertions."""
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=broker.bootstrap_servers,
               SCHEMA_REGISTRY_URL=schema_registry_url)
    out = tmp_path / "results"
    out.mkdir()
    (out / "results.json").write_text(json.dumps({"by_value_size": {"100 B": {"kept": True}}}))
    results, stdout = _run_benchmarks(out, "--only", "registry", "--quick", timeout=300, env=env)
    assert results["by_value_size"] == {"100 B": {"kept": True}}
    section = results["registry"]
    assert "--only registry" in section["command"] and section["machine"]["cores"] >= 1
    [(size, res)] = section["sizes"].items()
    assert size == "200B" and res["records"] > 0
    for key in REGISTRY_RATES:
        assert math.isfinite(res[key]) and res[key] > 0, (key, res[key])
    assert all(v > 0 for v in res["decoders_alone"].values()), res["decoders_alone"]
    for fmt in ("protobuf", "json_schema"):
        assert res["other_formats_alone"][fmt]["ratio"] > 0
    sink = res["sink"]
    assert sink["write"]["ratio"] > 0 and sink["encode"]["ratio"] > 0
    assert sink["producer_loop_rows_per_s"] > 0 and sink["ratio_sink_avro_vs_producer_loop"] > 0
    assert f"| {size} (" in stdout


def test_kafka_sink_main_section_runs_both_sinks_in_this_pyspark(tmp_path, broker):
    """`--only kafka-sink-main --quick`: kafka-eos exactly once and Spark's own Kafka sink in the
    main environment's PySpark (Spark's 4.2.0 connector jar), each run having written every row
    (the section raises otherwise); its section lands beside the kept ones."""
    import pyspark

    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=broker.bootstrap_servers)
    out = tmp_path / "results"
    out.mkdir()
    (out / "results.json").write_text(json.dumps({"by_value_size": {"100 B": {"kept": True}}}))
    results, stdout = _run_benchmarks(out, "--only", "kafka-sink-main", "--quick",
                                      "--value-sizes", "100", timeout=300, env=env)
    assert results["by_value_size"] == {"100 B": {"kept": True}}
    section = results["kafka_sink_main_session"]
    assert "--only kafka-sink-main" in section["command"]
    assert section["pyspark"] == pyspark.__version__
    [(size, res)] = section["by_value_size"].items()
    assert size == "100" and res["rows"] > 0
    eos, spark = res["kafka_eos_rows_per_s"], res["spark_kafka_rows_per_s"]
    assert eos > 0 and spark > 0
    assert res["ratio"] == pytest.approx(eos / spark, rel=0.01)
    assert f"kafka sink 100 B, PySpark {pyspark.__version__}" in stdout
