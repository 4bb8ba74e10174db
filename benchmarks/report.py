"""The Performance tables of docs/performance.md, from a results.json, so the page says what the
run said.

    python -m benchmarks.report benchmark-results/results.json

`table` is the throughput run's; `long_run_table` the delta-eos long run's
(benchmarks/delta_long_run.py, `python -m benchmarks --delta-long-run`); `latency_table` the
latency section's (benchmarks/latency.py, `python -m benchmarks --only latency`).
"""

from __future__ import annotations

import json
import sys


def _k(n: float) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.0f}k"


def table(results: dict) -> str:
    sizes = list(results["by_value_size"])
    targets = results["targets"]

    def verdict(name: str) -> str:
        met = [targets[f"{name}[{s}]"]["met"] for s in sizes if f"{name}[{s}]" in targets]
        return "met" if all(met) else ("missed" if not any(met) else "partly met")

    rows: list[tuple[str, list[str], str]] = []

    def row(label: str, cell, target: str = "") -> None:
        rows.append((label, [cell(results["by_value_size"][s]) for s in sizes], target))

    row("`kafka-eos` source vs raw consumers, one process per partition",
        lambda v: f"{_k(v['source']['kafka_eos_rows_per_s'])} vs "
                  f"{_k(v['source']['raw_consumers_rows_per_s'])} rows/s: **{v['source']['ratio']:.2f}**",
        f"≥ 0.9: {verdict('source_vs_raw_consumers')}")
    row("ceiling: a Python source yielding ready-made Arrow batches, vs raw consumers",
        lambda v: f"{_k(v['source']['python_ready_batches_source_rows_per_s'])}: "
                  f"{v['source']['ratio_ready_batches_source_vs_raw_consumers']:.2f}")
    row("`kafka-eos` sink, exactly-once, vs raw idempotent producers",
        lambda v: f"{_k(v['kafka_sink']['exactly_once_rows_per_s'])} vs "
                  f"{_k(v['kafka_sink']['raw_idempotent_producers_rows_per_s'])}: "
                  f"**{v['kafka_sink']['ratio_vs_raw_producer']:.2f}**",
        f"≥ 0.5: {verdict('kafka_sink_vs_raw_idempotent_producers')}")
    row("ceiling: the same pipeline into `bench-noop`, vs raw producers",
        lambda v: f"{_k(v['kafka_sink']['python_noop_sink_rows_per_s'])}: "
                  f"{v['kafka_sink']['ratio_noop_pipeline_vs_raw_producer']:.2f}")
    row("`delta-eos` sink, exactly-once, vs one `write_deltalake`",
        lambda v: f"{_k(v['delta_sink']['exactly_once_rows_per_s'])} vs "
                  f"{_k(v['delta_sink']['write_deltalake_rows_per_s'])}: "
                  f"**{v['delta_sink']['ratio_vs_write_deltalake']:.3f}**",
        f"≥ 0.7: {verdict('delta_sink_vs_write_deltalake')}")
    row("ceiling: the same pipeline into `bench-noop`, vs `write_deltalake`; the sink vs it",
        lambda v: f"{_k(v['delta_sink']['python_noop_sink_rows_per_s'])}: "
                  f"{v['delta_sink']['ratio_python_noop_pipeline_vs_write_deltalake']:.3f}; "
                  f"sink {v['delta_sink']['ratio_vs_python_noop_pipeline']:.2f}")
    for sink, key in (("kafka-eos", "kafka_sink"), ("delta-eos", "delta_sink")):
        row(f"`{sink}` sink, exactly-once vs at-least-once, 1 s trigger",
            lambda v, key=key: f"{_k(v[key]['trigger_1s']['exactly_once_rows_per_s'])} vs "
                               f"{_k(v[key]['trigger_1s']['at_least_once_rows_per_s'])}: "
                               f"**{v[key]['trigger_1s']['ratio_exactly_once_vs_at_least_once']:.2f}**",
            f"≥ 0.85: {verdict(key + '_exactly_once_vs_at_least_once')}")
    for sink, key, target in (
        ("kafka-eos", "kafka_sink", f"median ≤ 50 ms: {verdict('kafka_commit_phase_median_ms')}"),
        ("delta-eos", "delta_sink", ""),
    ):
        row(f"`{sink}` commit phase per batch, median / p95",
            lambda v, key=key: f"**{v[key]['commit_phase_ms']['median']:.1f}** / "
                               f"{v[key]['commit_phase_ms']['p95']:.1f} ms",
            target)
    p = results["parameters"]
    head = (f"| measure ({p['records']:,} records, {p['partitions']} partitions) | "
            + " | ".join(f"{s} values" for s in sizes) + " | target |")
    lines = [head, "|---" * (len(sizes) + 2) + "|"]
    lines += [f"| {label} | " + " | ".join(cells) + f" | {target} |" for label, cells, target in rows]
    m = results["worker_memory"]
    lines += [
        "",
        f"Worker memory, {m['records']:,} records of {m['value_bytes']} B ({m['range_mb']:.0f} MB) "
        f"read in {m['batch_rows']:,}-row Arrow batches: peak RSS {m['peak_rss_mb']:.0f} MB, "
        f"{m['full_range']['growth_mb']:.0f} MB above the imports; a quarter of the range: "
        f"{m['quarter_range']['growth_mb']:.0f} MB (ratio {m['growth_full_vs_quarter_range']:.2f}); "
        f"a quarter of the batch size: {m['quarter_batch_rows']['growth_mb']:.0f} MB.",
    ]
    return "\n".join(lines)


#: The long run's configurations, in the table's order, with their labels.
LONG_RUN_LABELS = {
    "compaction_off": "compaction off, default checkpoint interval",
    "compact_every_100": "`compactEvery=100`",
    "checkpoint_interval_10": "`delta.checkpointInterval=10`",
    "compact_every_100_checkpoint_interval_10": "`compactEvery=100`, `delta.checkpointInterval=10`",
    "compact_every_100_checkpoint_interval_10_no_log_cleanup":
        "the same and `delta.enableExpiredLogCleanup=false`",
}


def _ms(v: float) -> str:
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}"


def _arrow(a: float, b: float) -> str:
    return f"{_ms(a)} → {_ms(b)} ({b / a:.2f})" if a else f"{_ms(a)} → {_ms(b)}"


def long_run_table(section: dict) -> str:
    """The delta-eos long run (benchmarks/delta_long_run.py): commit time of the first and the
    last batches, and a full read after batch 10 and after the last, against write_deltalake."""
    n = section["batches"]
    last_k = f"after_batch_{n}"
    lines = [
        f"`delta-eos`, {n:,} micro-batches of {section['rows_per_batch']:,} rows "
        f"({section['partitions']} tasks each) into one table ({section['mode']}); "
        "`write_deltalake` appends the same rows per batch in the same run. p50 in ms, "
        f"batches 1-10 → {n - 9:,}-{n:,}; *same time*: the last 10 batches alternating with "
        "a fresh table's first 10; *window*: the p50 of the first and of the last {w} batches "
        "(one checkpoint cycle at the default interval, 100 samples: the steadiest figure on a "
        "shared machine).",
        "",
        f"| configuration | `delta-eos` commit, batches 1-10 → {n - 9:,}-{n:,} | same time | "
        "first → last {w}-batch window | `write_deltalake` append | same time | "
        "first → last window | planning (open, compaction, recovery), first → last window |",
        "|---|---|---|---|---|---|---|---|",
    ]
    reads = [
        "",
        f"After batch 10 → after batch {n:,} (best of 3, ms; *fresh*: a 10-batch table read "
        "at the same time as the long one):",
        "",
        "| configuration | full read `to_pyarrow_table()` | fresh | table load `DeltaTable()` "
        "| data files in the snapshot / on disk | `_delta_log` files (checkpoints) | "
        "`write_deltalake` table: full read, data files |",
        "|---|---|---|---|---|---|---|",
    ]
    missing, window = [], 100
    for name, res in section["configs"].items():
        label = LONG_RUN_LABELS.get(name, name)
        sink = res["sink"]
        if not sink.get("available"):
            missing.append(f"{label}: not measured ({sink.get('error', 'unavailable')})")
            continue
        props = [f"{k}={v['wanted']}" for k, v in sink.get("table_properties", {}).items()
                 if not v["applied"]]
        if props:
            label += f" (**not applied**: {', '.join(props)})"
        raw = res["write_deltalake"]
        c, a, p = sink["commit_ms"], raw["append_ms"], sink["planning_ms"]
        ci, ai = sink["interleaved"], raw["interleaved"]
        window = c["window_batches"]
        lines.append(
            f"| {label} | {_ms(c['first_10_p50'])} → {_ms(c['last_10_p50'])} "
            f"(**{c['ratio_last_vs_first']:.2f}**) | "
            f"{_arrow(ci['fresh_table_first_10_p50'], ci['long_table_last_10_p50'])} | "
            f"{_arrow(c['window_p50'][0], c['window_p50'][-1])} | "
            f"{_arrow(a['first_10_p50'], a['last_10_p50'])} | "
            f"{_arrow(ai['fresh_table_first_10_p50'], ai['long_table_last_10_p50'])} | "
            f"{_arrow(a['window_p50'][0], a['window_p50'][-1])} | "
            f"{_arrow(p['window_p50'][0], p['window_p50'][-1])} |")
        s0, s1, sf = sink["after_batch_10"], sink[last_k], sink["fresh_table_after_batch_10"]
        r0, r1 = raw["after_batch_10"], raw[last_k]
        reads.append(
            f"| {label} | {_ms(s0['full_read_ms'])} → **{_ms(s1['full_read_ms'])}** | "
            f"{_ms(sf['full_read_ms'])} | "
            f"{_ms(s0['table_load_ms'])} → **{_ms(s1['table_load_ms'])}** | "
            f"{s0['data_files_in_snapshot']} / {s0['data_files_on_disk']} → "
            f"{s1['data_files_in_snapshot']} / {s1['data_files_on_disk']} | "
            f"{s0['delta_log_files']} ({s0['delta_log_checkpoints']}) → "
            f"{s1['delta_log_files']} ({s1['delta_log_checkpoints']}) | "
            f"{_ms(r0['full_read_ms'])} → {_ms(r1['full_read_ms'])}, "
            f"{r0['data_files_in_snapshot']} → {r1['data_files_in_snapshot']} |")
    lines[0] = lines[0].replace("{w}", str(window))
    lines[2] = lines[2].replace("{w}", str(window))
    out = lines + reads
    if missing:
        out += [""] + missing
    return "\n".join(out)


def latency_table(section: dict) -> str:
    """The latency section (benchmarks/latency.py): per-batch p50/p90 of each pipeline, its
    ratio to the floor, the end-to-end latency of the exactly-once pipelines, the verdicts."""
    from benchmarks.latency import PIPELINES, TARGETS

    limits = {pipeline: most for pipeline, most in TARGETS.values()}
    lines = [
        f"| pipeline (`local[2]`, {section['trigger_s']:g} s trigger, "
        f"{section['rate_records_per_s']} records/s into {section['partitions']} partitions, "
        f"{section['measured_batches']} batches) | per batch p50 / p90 | p50 vs floor | "
        "end to end p50 / p99 | target |",
        "|---|---|---|---|---|",
    ]
    for name, res in section["pipelines"].items():
        label = PIPELINES.get(name, name)
        if "error" in res:
            err = res["error"].splitlines()
            why = next((x for x in err if "Error:" in x and "PYTHON_EXCEPTION" not in x), err[0])
            tries = len(res.get("failed_attempts", [])) or 1
            lines.append(f"| {label} | **failed** ({tries} attempts): {why.strip()[:300]} "
                         "| | | |")
            continue
        e = res.get("end_to_end")
        e2e = (f"**{_ms(e['p50_ms'])}** / {_ms(e['p99_ms'])} ms"
               + (f" ({e['missing']} missing)" if e["missing"] else "")) if e else ""
        target = ""
        if name in limits:
            met = res["p50_vs_floor"] <= limits[name]
            target = f"≤ {limits[name]:g}x: {'met' if met else 'missed'}"
        if "p50_vs_floor" in res:
            vs = f"{res['p50_vs_floor']:.2f}x"
        elif res["trigger_execution_ms_p50"] == section.get("floor_p50_ms"):
            vs = "1 (the floor)"
        else:  # the other floor run: above the floor taken
            vs = f"{res['trigger_execution_ms_p50'] / section['floor_p50_ms']:.2f}x (not taken)"
        lines.append(f"| {label} | **{res['trigger_execution_ms_p50']:.0f}** / "
                     f"{res['trigger_execution_ms_p90']:.0f} ms | {vs} | {e2e} | {target} |")
    extra = [f"`{k}`: {v['value']} (target {v['target']}: {'met' if v['met'] else 'missed'})"
             for k, v in section.get("targets", {}).items() if k not in TARGETS]
    load = section.get("load_average", {})
    lines += ["", f"1-minute load average {load.get('start', ['?'])[0]} at the start, "
              f"{load.get('end', ['?'])[0]} at the end; {section.get('duration_s', '?')} s."]
    if extra:
        lines += ["Same results.json, throughput section: " + "; ".join(extra) + "."]
    return "\n".join(lines)


if __name__ == "__main__":
    with open(sys.argv[1] if len(sys.argv) > 1 else "docs/benchmarks/results.json") as f:
        results = json.load(f)
    parts = []
    if "by_value_size" in results:
        parts.append(table(results))
    if "delta_long_run" in results:
        parts.append(long_run_table(results["delta_long_run"]))
    if "latency" in results:
        parts.append(latency_table(results["latency"]))
    print("\n\n".join(parts))
