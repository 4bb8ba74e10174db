"""The README's Performance table, from a results.json, so the README says what the run said.

    python -m benchmarks.report benchmark-results/results.json
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


if __name__ == "__main__":
    with open(sys.argv[1] if len(sys.argv) > 1 else "docs/benchmarks/results.json") as f:
        print(table(json.load(f)))
