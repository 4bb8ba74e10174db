"""The peers benchmark's targets, verdicts and tables (benchmarks/peers/lane.py): pure logic over
the sections of DIR/peers.json, no Spark, no broker (tests/test_peers_benchmark.py)."""

from __future__ import annotations

import math

#: The sections of `python -m benchmarks --peers`, in the order they run (`--peers-only`).
SECTIONS = ("source", "latency", "kafka-sink", "delta-sink")

#: The comparison's targets: name -> (path into peers.json, comparison, target). A "*" in the path
#: stands for every key found there (a value size, a read mode): one verdict each.
TARGETS = {
    "source_rows_per_s_vs_format_kafka": (("source", "by_value_size", "*", "ratio"), ">=", 0.8),
    "latency_batch_p50_vs_format_kafka_to_delta": (
        ("latency", "versus_spark", "*", "batch_p50_ratio"), "<=", 1.25),
    "kafka_sink_rows_per_s_vs_format_kafka": (
        ("kafka_sink", "by_value_size", "*", "ratio"), ">=", 0.7),
    "delta_sink_rows_per_s_vs_format_delta": (
        ("delta_sink", "by_value_size", "*", "ratio"), ">=", 1.0),
    "delta_sink_long_run_rows_per_s_vs_format_delta": (
        ("delta_sink", "long_run", "ratio"), ">=", 1.0),
}


def parse_sections(text: str) -> list[str]:
    """`--peers-only source,latency`: the sections named, in their running order."""
    names = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in names if s not in SECTIONS]
    if unknown or not names:
        raise ValueError(f"--peers-only: unknown section(s) {', '.join(unknown) or '(none)'}; "
                         f"choose from {','.join(SECTIONS)}")
    return [s for s in SECTIONS if s in names]


def section_key(name: str) -> str:
    """The JSON key of a section: `kafka-sink` -> `kafka_sink`."""
    return name.replace("-", "_")


def expand_path(d, path: tuple, label: tuple = ()):
    """(label, value) for every match of a path whose "*" stands for any key."""
    if not path:
        yield label, d
        return
    head, rest = path[0], path[1:]
    if not isinstance(d, dict):
        return
    if head == "*":
        for k, v in d.items():
            yield from expand_path(v, rest, label + (str(k),))
    elif head in d:
        yield from expand_path(d[head], rest, label)


def evaluate(results: dict) -> dict:
    """Every target's verdict over the sections present: {name[label]: value, target, met}."""
    out = {}
    for name, (path, op, target) in TARGETS.items():
        for label, value in expand_path(results, path):
            key = f"{name}[{','.join(label)}]" if label else name
            if not isinstance(value, (int, float)) or math.isnan(value):
                out[key] = {"value": None, "target": f"{op} {target}", "met": False}
                continue
            met = value >= target if op == ">=" else value <= target
            out[key] = {"value": value, "target": f"{op} {target}", "met": met}
    return out


def size_label(size) -> str:
    size = int(size)
    return f"{size} B" if size < 1024 else f"{size // 1024} KB"


def _verdict(value, op: str, target: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "no figure"
    return "met" if (value >= target if op == ">=" else value <= target) else "missed"


def _n(x) -> str:
    """A figure for a table: thousands separated, None as a dash."""
    if x is None:
        return "-"
    if isinstance(x, float) and math.isnan(x):
        return "nan"
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and abs(x) >= 100):
        return f"{int(x):,}"
    return f"{x:g}"


def source_table(section: dict) -> str:
    _, op, target = TARGETS["source_rows_per_s_vs_format_kafka"]
    lines = ["| value size | records | kafka-eos rows/s | format(\"kafka\") rows/s | ratio | "
             "wall, best run: kafka-eos / format(\"kafka\") | "
             f"target {op} {target} |", "|---|---|---|---|---|---|---|"]
    for size, r in section["by_value_size"].items():
        lines.append(
            f"| {size_label(size)} | {_n(r['records'])} | {_n(r['kafka_eos_rows_per_s'])} | "
            f"{_n(r['spark_kafka_rows_per_s'])} | {r['ratio']} | "
            f"{min(r['kafka_eos_wall_s'])} s / {min(r['spark_kafka_wall_s'])} s | "
            f"{_verdict(r['ratio'], op, target)} |")
    return "\n".join(lines)


def latency_table(section: dict) -> str:
    _, op, target = TARGETS["latency_batch_p50_vs_format_kafka_to_delta"]
    lines = ["| pipeline | batches | per batch p50 / p99 (ms) | end to end p50 / p99 (ms) | "
             "start() to first batch committed (s) | p50 vs Spark's | "
             f"target {op} {target} |", "|---|---|---|---|---|---|---|"]
    vs = section.get("versus_spark", {})
    for name, r in section["pipelines"].items():
        if "error" in r:
            lines.append(f"| {r.get('label', name)} | failed: {r['error'][:120]} | | | | | |")
            continue
        e = r.get("end_to_end", {})
        mode = r.get("read_mode")
        ratio = vs.get(mode, {}).get("batch_p50_ratio") if mode else None
        lines.append(
            f"| {r['label']} | {r['batches']} | {_n(r['trigger_execution_ms_p50'])} / "
            f"{_n(r['trigger_execution_ms_p99'])} | {_n(e.get('p50_ms'))} / {_n(e.get('p99_ms'))} | "
            f"{_n(r.get('first_batch_s_median'))} | {_n(ratio) if mode else '1 (the reference)'} | "
            f"{_verdict(ratio, op, target) if mode else ''} |")
    return "\n".join(lines)


def kafka_sink_table(section: dict) -> str:
    _, op, target = TARGETS["kafka_sink_rows_per_s_vs_format_kafka"]
    lines = ["| value size | rows | kafka-eos exactly-once rows/s | format(\"kafka\") rows/s | "
             f"ratio | file source -> Python no-op sink rows/s | target {op} {target} |",
             "|---|---|---|---|---|---|---|"]
    for size, r in section["by_value_size"].items():
        lines.append(
            f"| {size_label(size)} | {_n(r['rows'])} | {_n(r['kafka_eos_rows_per_s'])} | "
            f"{_n(r['spark_kafka_rows_per_s'])} | {r['ratio']} | "
            f"{_n(r.get('python_noop_rows_per_s'))} | {_verdict(r['ratio'], op, target)} |")
    return "\n".join(lines)


def delta_sink_table(section: dict) -> str:
    _, op, target = TARGETS["delta_sink_rows_per_s_vs_format_delta"]
    lines = ["| value size | rows | delta-eos rows/s | format(\"delta\") rows/s | ratio | "
             f"target {op} {target} |", "|---|---|---|---|---|---|"]
    for size, r in section.get("by_value_size", {}).items():
        lines.append(
            f"| {size_label(size)} | {_n(r['rows'])} | {_n(r['delta_eos_rows_per_s'])} | "
            f"{_n(r['spark_delta_rows_per_s'])} | {r['ratio']} | "
            f"{_verdict(r['ratio'], op, target)} |")
    lr = section.get("long_run")
    if lr:
        _, op, target = TARGETS["delta_sink_long_run_rows_per_s_vs_format_delta"]
        lines += ["", f"Over {lr['batches']} batches of {lr['rows_per_batch']} rows "
                  "(p50 ms of each window; `commit` is delta-eos's own commit phase):", "",
                  "| sink | rows/s | triggerExecution batches 10-19 / last 10 | "
                  "addBatch batches 10-19 / last 10 | commit batches 10-19 / last 10 | "
                  "wall (s) |", "|---|---|---|---|---|---|"]
        for name in ("delta_eos", "spark_delta"):
            r = lr[name]
            c = r.get("commit_ms")
            lines.append(
                f"| {r['label']} | {_n(r['rows_per_s'])} | "
                f"{_n(r['trigger_execution_ms']['early_p50'])} / "
                f"{_n(r['trigger_execution_ms']['late_p50'])} | "
                f"{_n(r['add_batch_ms']['early_p50'])} / {_n(r['add_batch_ms']['late_p50'])} | "
                + (f"{_n(c['early_p50'])} / {_n(c['late_p50'])}" if c else "-")
                + f" | {_n(r['wall_s'])} |")
        lines.append(f"\nrows/s ratio {lr['ratio']}: {_verdict(lr['ratio'], op, target)} "
                     f"(target {op} {target})")
    return "\n".join(lines)


TABLES = {"source": source_table, "latency": latency_table, "kafka_sink": kafka_sink_table,
          "delta_sink": delta_sink_table}


def tables(results: dict) -> str:
    """A table per section present, then the verdicts."""
    parts = []
    for key, fn in TABLES.items():
        if key in results:
            parts.append(f"## {key}\n\n{fn(results[key])}")
    verdicts = results.get("targets") or evaluate(results)
    if verdicts:
        parts.append("## targets\n\n" + "\n".join(
            f"- {name}: {_n(v['value'])} (target {v['target']}): "
            f"{'met' if v['met'] else 'MISSED'}" for name, v in verdicts.items()))
    return "\n\n".join(parts)


def window_p50s(values: list[float], n: int = 10) -> dict:
    """p50 of batches 10-19 (the table past its first batches) and of the last n."""
    from benchmarks.common import pct

    early = values[10:10 + n] if len(values) >= 10 + n else values[:n]
    return {"early_p50": round(pct(early, 0.5), 1) if early else None,
            "late_p50": round(pct(values[-n:], 0.5), 1) if values else None}
