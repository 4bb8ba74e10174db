"""The partition-count benchmark's targets, verdicts and table (benchmarks/partitions.py): pure
logic over its section of results.json, no Spark, no broker (tests/test_partitions_benchmark.py).

    python -m benchmarks.partitions_report docs/benchmarks/partitions-apache-kafka-4.4.json
"""

from __future__ import annotations

import math

#: name -> label, in the order the pipelines are listed (each count runs them alternately).
PIPELINES = {
    "kafka_eos_noop": "kafka-eos -> noop",
    "spark_kafka_noop": "format(\"kafka\") -> noop",
    "kafka_eos_delta_eos": "kafka-eos -> delta-eos",
    "kafka_eos_kafka_eos": "kafka-eos -> kafka-eos",
}
#: Reported beside them, no target, after them at each count: kafka-eos with one task per core
#: of this machine instead of its default (sized by the batch's records), and the same batches
#: from a Python source that reads nothing, in as many tasks as kafka-eos plans by default
#: (what any Python source pays per batch here).
TWO_TASKS = "kafka_eos_2_tasks_noop"
FLOOR = "python_floor_noop"
BESIDE = {
    TWO_TASKS: "kafka-eos, targetTasksPerBatch=2 -> noop",
    FLOOR: "Python source floor -> noop",
}
#: Per-batch cost at the largest partition count over that at the smallest, kafka-eos -> noop.
MOST_GROWTH = 2.0
#: kafka-eos -> noop's per-batch p50 over format("kafka") -> noop's, at every count.
MOST_VS_SPARK = 1.0
#: "A few files per commit": at most the tasks of a batch the source plans by default
#: (sources/task_packing.DEFAULT_TARGET_TASKS), whatever the partition count.
MOST_FILES_PER_COMMIT = 8


def parse_counts(text: str) -> list[int]:
    """`--partition-counts 8,200,1000`: at least one positive count, ascending, no repeats."""
    try:
        counts = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        counts = []
    if not counts or counts[0] < 1:
        raise ValueError(f"--partition-counts: comma-separated positive integers, such as "
                         f"8,200,1000 (got {text!r})")
    return counts


def p50(values: list[float]) -> float | None:
    """The median by the nearest-rank method, as benchmarks.common.pct."""
    if not values:
        return None
    values = sorted(values)
    return values[int(round(0.5 * (len(values) - 1)))]


def _p50_of(section: dict, count, name: str) -> float | None:
    res = section["by_partitions"].get(str(count), {}).get(name, {})
    return res.get("trigger_execution_ms_p50") if "error" not in res else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def evaluate(section: dict) -> dict:
    """Every target's verdict: {name[label]: {value, target, met}}; a missing figure is not met."""
    counts = sorted(int(c) for c in section["by_partitions"])
    out: dict = {}

    def verdict(name: str, value, op: str, target: float) -> None:
        ok = value is not None and not (isinstance(value, float) and math.isnan(value))
        met = ok and (value >= target if op == ">=" else value <= target)
        out[name] = {"value": value if ok else None, "target": f"{op} {target:g}", "met": met}

    lo, hi = counts[0], counts[-1]
    def eos(c) -> float | None:
        return _p50_of(section, c, "kafka_eos_noop")

    if hi != lo:
        verdict(f"kafka_eos_noop_p50_vs_its_p50_at_{lo}[{hi}]", _ratio(eos(hi), eos(lo)), "<=",
                MOST_GROWTH)
    for c in counts:
        verdict(f"kafka_eos_noop_p50_vs_format_kafka_noop[{c}]",
                _ratio(eos(c), _p50_of(section, c, "spark_kafka_noop")), "<=", MOST_VS_SPARK)
    files = section["by_partitions"][str(hi)].get("kafka_eos_delta_eos", {}).get("files_per_commit")
    verdict(f"delta_eos_files_per_commit_max[{hi}]", max(files) if files else None, "<=",
            MOST_FILES_PER_COMMIT)
    return out


def _n(x, unit: str = "") -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and not x.is_integer():
        return f"{x:,.1f}{unit}" if abs(x) < 100 else f"{x:,.0f}{unit}"
    return f"{int(x):,}{unit}"


def _v(x) -> str:
    """A verdict's value: a ratio to two decimals, a count as it is."""
    return "-" if x is None else f"{x:.2f}" if isinstance(x, float) else f"{x:,}"


def _spread(values: list[int] | None) -> str:
    if not values:
        return "-"
    lo, hi = min(values), max(values)
    return f"{lo:,}" if lo == hi else f"{lo:,}-{hi:,}"


def table(section: dict) -> str:
    """One row per (partition count, pipeline): per-batch p50 and its ratio to format("kafka"),
    wall time, where the batch's time went, tasks per batch, files or transactions per commit."""
    lines = [
        f"| partitions | pipeline | `triggerExecution` p50 per batch | vs `format(\"kafka\")` | "
        f"wall | `latestOffset` / `addBatch` p50 | tasks per batch | files per Delta commit / "
        f"transactions per Kafka commit |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for count in sorted(section["by_partitions"], key=int):
        runs = section["by_partitions"][count]
        spark_p50 = _p50_of(section, count, "spark_kafka_noop")
        for name, label in (*PIPELINES.items(), *BESIDE.items()):
            r = runs.get(name)
            if r is None:
                continue
            if "error" in r:
                lines.append(f"| {int(count):,} | {label} | **failed**: {r['error'][:200]} "
                             "| | | | | |")
                continue
            ph = r.get("phases_ms_p50", {})
            vs = "1 (the reference)" if name == "spark_kafka_noop" else (
                f"{r['trigger_execution_ms_p50'] / spark_p50:.2f}x" if spark_p50 else "-")
            per_commit = r.get("files_per_commit") or r.get("transactions_per_commit")
            lines.append(
                f"| {int(count):,} | {label} | **{_n(r['trigger_execution_ms_p50'], ' ms')}** | "
                f"{vs} | {_n(r['wall_s'], ' s')} | {_n(ph.get('latestOffset'))} / "
                f"{_n(ph.get('addBatch'))} ms | {_spread(r.get('tasks_per_batch'))} | "
                f"{_spread(per_commit)} |")
    verdicts = section.get("targets") or evaluate(section)
    lines += ["", "Targets: " + "; ".join(
        f"`{name}` {_v(v['value'])} (target {v['target']}): {'met' if v['met'] else 'MISSED'}"
        for name, v in verdicts.items()) + "."]
    load = section.get("load_average", {})
    start = (load.get("start") or ["?"])[0]
    end = (load.get("end") or ["?"])[0]
    lines.append(f"1-minute load average {start} at the start, {end} at the end; "
                 f"{section.get('duration_s', '?')} s.")
    return "\n".join(lines)


if __name__ == "__main__":
    import json
    import sys

    with open(sys.argv[1] if len(sys.argv) > 1 else
              "docs/benchmarks/partitions-apache-kafka-4.4.json") as f:
        print(table(json.load(f)["partitions"]))
