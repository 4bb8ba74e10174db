"""The results as one PNG: ratios against the targets, commit latency, worker memory."""

from __future__ import annotations

from typing import Any, Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

#: Where the pipeline with a do-nothing Python end would stand: the ceiling of each ratio.
CEILINGS = {
    0: ("source", "ratio_ready_batches_source_vs_raw_consumers"),
    1: ("kafka_sink", "ratio_noop_pipeline_vs_raw_producer"),
    2: ("delta_sink", "ratio_python_noop_pipeline_vs_write_deltalake"),
}

RATIOS = [
    # (label, path into a size's results, target)
    ("source /\nraw consumers", ("source", "ratio"), 0.9),
    ("kafka sink EO /\nraw idem. producers", ("kafka_sink", "ratio_vs_raw_producer"), 0.5),
    ("delta sink EO /\nwrite_deltalake", ("delta_sink", "ratio_vs_write_deltalake"), 0.7),
    ("kafka sink\nEO / ALO (1 s)", ("kafka_sink", "trigger_1s", "ratio_exactly_once_vs_at_least_once"), 0.85),
    ("delta sink\nEO / ALO (1 s)", ("delta_sink", "trigger_1s", "ratio_exactly_once_vs_at_least_once"), 0.85),
]


def _get(d: dict, path: tuple):
    for k in path:
        d = d[k]
    return d


def draw(results: dict, path: str) -> None:
    sizes = list(results["by_value_size"])
    fig, (ax1, ax2, ax3) = plt.subplots(
        1, 3, figsize=(17, 5.2), gridspec_kw={"width_ratios": [3.2, 1.4, 1.4]}
    )
    width = 0.8 / len(sizes)
    colors = ["#4C72B0", "#DD8452", "#55A868"]
    for i, size in enumerate(sizes):
        vals = [_get(results["by_value_size"][size], p) for _, p, _ in RATIOS]
        xs = [j + (i - (len(sizes) - 1) / 2) * width for j in range(len(RATIOS))]
        bars = ax1.bar(xs, vals, width, label=f"{size} values", color=colors[i % 3])
        for b, v in zip(bars, vals):
            ax1.text(b.get_x() + b.get_width() / 2, v + 0.01, f"{v:.2f}", ha="center", va="bottom",
                     fontsize=8)
        for j, cpath in CEILINGS.items():
            try:
                c = _get(results["by_value_size"][size], cpath)
            except KeyError:
                continue
            ax1.plot([xs[j]], [min(c, 1.5)], marker="_", markersize=18, markeredgewidth=2.5,
                     color="black", label="ceiling: same pipeline, Python end does nothing"
                     if i == 0 and j == 0 else None)
    for j, (_, _, target) in enumerate(RATIOS):
        ax1.hlines(target, j - 0.45, j + 0.45, colors="crimson", linestyles="--", linewidth=1.5,
                   label="target" if j == 0 else None)
    ax1.set_xticks(range(len(RATIOS)), [label for label, _, _ in RATIOS], fontsize=8.5)
    ax1.set_ylabel("ratio (same run)")
    ax1.set_title("Throughput as ratios against the raw clients")
    ax1.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=4)
    ax1.set_ylim(0, min(1.6, max(1.15, ax1.get_ylim()[1])))

    labels, med, p95 = [], [], []
    for size in sizes:
        for sink in ("kafka_sink", "delta_sink"):
            c = results["by_value_size"][size][sink]["commit_phase_ms"]
            labels.append(f"{sink.split('_')[0]}\n{size}")
            med.append(c["median"])
            p95.append(c["p95"])
    xs = range(len(labels))
    ax2.bar([x - 0.2 for x in xs], med, 0.4, label="median", color="#4C72B0")
    ax2.bar([x + 0.2 for x in xs], p95, 0.4, label="p95", color="#8172B3")
    ax2.axhline(50, color="crimson", linestyle="--", linewidth=1.5, label="Kafka target (median)")
    ax2.set_xticks(list(xs), labels, fontsize=8)
    ax2.set_ylabel("ms per batch")
    ax2.set_title("Commit phase latency (1 s trigger)")
    ax2.legend(fontsize=8)

    m = results["worker_memory"]
    mlabels = [
        f"{m['records'] // 1000}k rows\n{m['batch_rows'] // 1000}k/batch",
        f"{m['records'] // 4000}k rows\n{m['batch_rows'] // 1000}k/batch",
        f"{m['records'] // 1000}k rows\n{m['quarter_batch_rows']['batch_rows'] // 1000}k/batch",
    ]
    mvals = [m["full_range"]["growth_mb"], m["quarter_range"]["growth_mb"],
             m["quarter_batch_rows"]["growth_mb"]]
    bars = ax3.bar(range(3), mvals, 0.6, color=["#55A868", "#55A868", "#C44E52"])
    for b, v in zip(bars, mvals):
        ax3.text(b.get_x() + b.get_width() / 2, v, f"{v:.0f} MB", ha="center", va="bottom", fontsize=8)
    ax3.set_xticks(range(3), mlabels, fontsize=8)
    ax3.set_ylabel("peak RSS growth over the imports (MB)")
    ax3.set_title(f"Worker memory, {m['value_bytes']} B values\n(range {m['range_mb']:.0f} MB)",
                  fontsize=10)

    mach = results["machine"]
    fig.suptitle(
        f"kafka-eos / delta-eos benchmarks: {mach['cpu']}, {mach['cores']} cores, "
        f"{mach['memory_gb']} GB, {results['broker']} broker, load {results['load_average']['start']}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_latency(section: dict, path: str) -> None:
    """The latency section: per-batch p50/p90 against the floor and the targets; end to end."""
    from benchmarks.latency import PIPELINES, TARGETS

    pipes = {n: r for n, r in section["pipelines"].items() if "error" not in r}
    names = list(pipes)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(18, 6), gridspec_kw={"width_ratios": [3, 1.2]})
    xs = range(len(names))
    p50 = [pipes[n]["trigger_execution_ms_p50"] for n in names]
    p90 = [pipes[n]["trigger_execution_ms_p90"] for n in names]
    ax1.bar([x - 0.2 for x in xs], p50, 0.4, label="p50", color="#4C72B0")
    ax1.bar([x + 0.2 for x in xs], p90, 0.4, label="p90", color="#8172B3")
    for x, n, v in zip(xs, names, p50):
        vs = pipes[n].get("p50_vs_floor")
        ax1.text(x - 0.2, v, f"{v:.0f}" + (f"\n{vs:.2f}x" if vs else ""), ha="center",
                 va="bottom", fontsize=8)
    floor = section.get("floor_p50_ms")
    first = True
    for pipeline, most in TARGETS.values():
        if floor and pipeline in names:
            j = names.index(pipeline)
            ax1.hlines(floor * most, j - 0.45, j + 0.45, colors="crimson", linestyles="--",
                       linewidth=1.5, label="target (x floor p50)" if first else None)
            first = False
    ax1.set_xticks(list(xs), [_label(PIPELINES.get(n, n)) for n in names], fontsize=7)
    ax1.set_ylabel("triggerExecution per batch (ms)")
    ax1.set_title(f"Per-batch latency, {section['rate_records_per_s']} records/s, "
                  f"{section['trigger_s']:g} s trigger, one session")
    ax1.legend(fontsize=8)

    e2e = [n for n in names if "end_to_end" in pipes[n]]
    ex = range(len(e2e))
    ax2.bar([x - 0.2 for x in ex], [pipes[n]["end_to_end"]["p50_ms"] for n in e2e], 0.4,
            label="p50", color="#55A868")
    ax2.bar([x + 0.2 for x in ex], [pipes[n]["end_to_end"]["p99_ms"] for n in e2e], 0.4,
            label="p99", color="#C44E52")
    for x, n in zip(ex, e2e):
        e = pipes[n]["end_to_end"]
        ax2.text(x - 0.2, e["p50_ms"], f"{e['p50_ms']:.0f}", ha="center", va="bottom", fontsize=8)
        ax2.text(x + 0.2, e["p99_ms"], f"{e['p99_ms']:.0f}", ha="center", va="bottom", fontsize=8)
    ax2.set_xticks(list(ex), [_label(PIPELINES.get(n, n).split(",")[0]) for n in e2e],
                   fontsize=7)
    ax2.set_ylabel("produce -> visible (ms)")
    ax2.set_title("End to end (Delta commit / read_committed)")
    ax2.legend(fontsize=8)
    mach = section.get("machine", {})
    load = section.get("load_average", {})
    fig.suptitle(f"kafka-eos / delta-eos latency: {mach.get('cores', '?')} cores, "
                 f"load {load.get('start')} -> {load.get('end')}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _label(text: str, width: int = 16) -> str:
    """A pipeline's name wrapped to fit under its bars."""
    import textwrap

    return "\n".join(textwrap.wrap(text, width))


def draw_peers(results: dict, path: str) -> list[str]:
    """`python -m benchmarks --peers`: every ratio against its target; per-batch and end-to-end
    latency beside `format("kafka") -> format("delta")`; the Delta sinks' per-batch time as the
    table grows. A section that did not run (`--peers-only`) gets no panel. Returns the panels'
    titles."""
    lat = results.get("latency", {})
    ok = [n for n, r in lat.get("pipelines", {}).items() if "error" not in r]
    lr = results.get("delta_sink", {}).get("long_run")
    panels: list[tuple[float, Callable[[Any], None]]] = [
        (2.2, lambda ax: _peers_ratios(ax, results))]
    if ok:
        panels.append((1.6, lambda ax: _peers_latency(ax, lat, ok)))
    if lr:
        panels.append((1.8, lambda ax: _peers_growth(ax, lr)))
    fig, axes = plt.subplots(1, len(panels), figsize=(3.5 + 2.8 * sum(w for w, _ in panels), 5.8),
                             gridspec_kw={"width_ratios": [w for w, _ in panels]}, squeeze=False)
    for ax, (_, draw) in zip(axes[0], panels):
        draw(ax)
    mach = results.get("machine", {})
    fig.suptitle(f"kafka-eos / delta-eos against format(\"kafka\") and format(\"delta\"), "
                 f"PySpark {results.get('pyspark', '?')}, {results.get('broker', '?')} broker, "
                 f"{mach.get('cores', '?')} cores, 1-minute load "
                 f"{_peak_load(_load_averages(results))}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [ax.get_title() for ax in axes[0]]


def _peers_ratios(ax, results: dict) -> None:
    """Every ratio measured, against its target."""
    from benchmarks.peers.report import TARGETS, expand_path

    labels, vals, targets, colors = [], [], [], []
    names = {"source_rows_per_s_vs_format_kafka": "source rows/s",
             "latency_batch_p50_vs_format_kafka_to_delta": "batch p50\n(lower is better)",
             "kafka_sink_rows_per_s_vs_format_kafka": "Kafka sink rows/s",
             "delta_sink_rows_per_s_vs_format_delta": "Delta sink rows/s",
             "delta_sink_long_run_rows_per_s_vs_format_delta": "Delta sink rows/s,\nsmall batches"}
    for name, (p, op, target) in TARGETS.items():
        for label, value in expand_path(results, p):
            if not isinstance(value, (int, float)):
                continue
            what = label[0] if label else ""
            if what.isdigit():
                what = f"{what} B" if int(what) < 1024 else f"{int(what) // 1024} KB"
            labels.append(f"{names[name]}\n{what}".strip())
            vals.append(value)
            targets.append(target)
            met = value >= target if op == ">=" else value <= target
            colors.append("#55A868" if met else "#C44E52")
    xs = range(len(vals))
    bars = ax.bar(xs, vals, 0.6, color=colors)
    for b, v in zip(bars, vals):
        ax.text(b.get_x() + b.get_width() / 2, v, f"{v:.2f}", ha="center", va="bottom",
                fontsize=8)
    for x, t in zip(xs, targets):
        ax.hlines(t, x - 0.4, x + 0.4, colors="black", linestyles="--", linewidth=1.5,
                  label="target" if x == 0 else None)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xticks(list(xs), labels, fontsize=7.5, rotation=35, ha="right")
    ax.set_ylabel("kafka-eos / delta-eos as a multiple of the peer's figure")
    ax.set_title("Against the peers (green: target met, red: missed)")
    if vals:
        ax.legend(fontsize=8)


def _peers_latency(ax, sec: dict, ok: list[str]) -> None:
    """Per-batch and end-to-end latency of the pipelines that ran."""
    lat = sec["pipelines"]
    lx = range(len(ok))
    series = [("batch p50", "trigger_execution_ms_p50", None, "#4C72B0"),
              ("batch p99", "trigger_execution_ms_p99", None, "#8172B3"),
              ("end to end p50", "p50_ms", "end_to_end", "#55A868"),
              ("end to end p99", "p99_ms", "end_to_end", "#C44E52")]
    w = 0.2
    for i, (lbl, key, sub, color) in enumerate(series):
        v = [(lat[n][sub] if sub else lat[n])[key] for n in ok]
        b = ax.bar([x + (i - 1.5) * w for x in lx], v, w, label=lbl, color=color)
        for bb, vv in zip(b, v):
            ax.text(bb.get_x() + bb.get_width() / 2, vv, f"{vv:.0f}", ha="center",
                    va="bottom", fontsize=6.5)
    ax.set_xticks(list(lx), [_label(lat[n]["label"], 22) for n in ok], fontsize=7.5)
    ax.set_ylabel("ms")
    ax.set_title(f"Latency, {sec.get('rate_records_per_s', '?')} records/s, "
                 f"{sec.get('trigger_s', 1):g} s trigger")
    ax.legend(fontsize=7.5)


def _peers_growth(ax, lr: dict) -> None:
    """Both Delta sinks' per-batch time (and delta-eos's own commit) as the table grows."""
    k = max(1, lr["batches"] // 50)  # a rolling median: a stray batch does not hide the trend
    for key, color in (("delta_eos", "#4C72B0"), ("spark_delta", "#DD8452")):
        curves = [(lr[key]["trigger_execution_ms"]["series"], "-", "triggerExecution")]
        if lr[key].get("commit_ms"):
            curves.append((lr[key]["commit_ms"]["series"], ":", "own commit phase"))
        for s, style, what in curves:
            smooth = [sorted(s[i:i + k])[len(s[i:i + k]) // 2] for i in range(0, len(s), k)]
            ax.plot([i + k / 2 for i in range(0, len(s), k)], smooth, color=color,
                    linestyle=style, label=f"{lr[key]['label']} {what}")
    ax.set_xlabel("batch")
    ax.set_ylabel(f"ms per batch (median of each {k})")
    ax.set_title(f"Delta sinks as the table grows: {lr['batches']} batches of "
                 f"{lr['rows_per_batch']} rows")
    ax.legend(fontsize=7.5)
    ax.set_ylim(bottom=0)


def _peak_load(load: dict) -> str:
    """The 1-minute load averages recorded over a run, as "lowest-highest"."""
    ones = []
    stack = [load]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, list) and x and isinstance(x[0], (int, float)):
            ones.append(x[0])
        elif isinstance(x, list):
            stack.extend(x)
    return f"{min(ones):g}-{max(ones):g}" if ones else "?"


def _load_averages(d) -> list:
    """Every `load_average` recorded anywhere in a run's results."""
    if isinstance(d, dict):
        return [v if k == "load_average" else x for k, v in d.items()
                for x in ([v] if k == "load_average" else _load_averages(v))]
    if isinstance(d, list):
        return [x for v in d for x in _load_averages(v)]
    return []


def draw_partitions(section: dict, path: str) -> list[str]:
    """`--only partitions`: per-batch p50 and wall time against the partition count for each
    pipeline, kafka-eos -> noop's growth target drawn; files and transactions per commit.
    Returns the panels' titles."""
    from benchmarks.partitions_report import (
        BESIDE,
        FLOOR,
        MOST_FILES_PER_COMMIT,
        MOST_GROWTH,
        PIPELINES,
        TWO_TASKS,
    )

    counts = sorted(int(c) for c in section["by_partitions"])
    colors = {"kafka_eos_noop": "#4C72B0", "spark_kafka_noop": "#DD8452",
              "kafka_eos_delta_eos": "#55A868", "kafka_eos_kafka_eos": "#8172B3"}
    runs = {name: [(c, section["by_partitions"][str(c)].get(name, {})) for c in counts]
            for name in PIPELINES}
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(18, 5.6),
                                        gridspec_kw={"width_ratios": [1.5, 1.5, 1]})
    from matplotlib.ticker import FuncFormatter, NullFormatter

    plain = FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}")
    for ax, key, title, ylabel in (
        (ax1, "trigger_execution_ms_p50", "Per batch: triggerExecution p50",
         "ms per batch (log)"),
        (ax2, "wall_s", "Whole query: start() to its end", "wall time, s (log)"),
    ):
        for name, label in PIPELINES.items():
            pts = [(c, r[key]) for c, r in runs[name] if key in r]
            if not pts:
                continue
            ax.plot([c for c, _ in pts], [v for _, v in pts], marker="o", color=colors[name],
                    label=label)
            for c, v in pts:
                ax.annotate(f"{v:,.0f}" if v >= 10 else f"{v:.1f}", (c, v), fontsize=7.5,
                            textcoords="offset points", xytext=(4, 4), color=colors[name])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(counts, [f"{c:,}" for c in counts])
        ax.minorticks_off()
        ax.yaxis.set_major_formatter(plain)
        ax.set_xlabel("partitions (same records per partition)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend(fontsize=8)
    for name, style in ((TWO_TASKS, "--"), (FLOOR, ":")):
        beside = [(c, section["by_partitions"][str(c)].get(name, {})) for c in counts]
        pts = [(c, r["trigger_execution_ms_p50"]) for c, r in beside
               if "trigger_execution_ms_p50" in r]
        if pts:
            ax1.plot([c for c, _ in pts], [v for _, v in pts], linestyle=style, marker=".",
                     color="grey", label=f"{BESIDE[name]} (no target)")
    base = runs["kafka_eos_noop"][0][1].get("trigger_execution_ms_p50")
    if base and len(counts) > 1:
        ax1.hlines(base * MOST_GROWTH, counts[0], counts[-1], colors="crimson", linestyles="--",
                   linewidth=1.2, label=f"target: kafka-eos -> noop ≤ {MOST_GROWTH:g}x its "
                                        f"p50 at {counts[0]:,}")
    ax1.legend(fontsize=7.5)

    xs = range(len(counts))
    files = [max(r.get("files_per_commit") or [0]) for _, r in runs["kafka_eos_delta_eos"]]
    txns = [max(r.get("transactions_per_commit") or [0]) for _, r in runs["kafka_eos_kafka_eos"]]
    tasks = [max(r.get("tasks_per_batch") or [0]) for _, r in runs["spark_kafka_noop"]]
    for off, vals, label, color in ((-0.27, files, "files per delta-eos commit (max)", "#55A868"),
                                    (0, txns, "transactions per kafka-eos commit (max)", "#8172B3"),
                                    (0.27, tasks, "format(\"kafka\") tasks per batch", "#DD8452")):
        bars = ax3.bar([x + off for x in xs], vals, 0.27, label=label, color=color)
        for b, v in zip(bars, vals):
            ax3.text(b.get_x() + b.get_width() / 2, v, f"{v:,}", ha="center", va="bottom",
                     fontsize=7.5)
    ax3.axhline(MOST_FILES_PER_COMMIT, color="crimson", linestyle="--", linewidth=1.2,
                label=f"target: ≤ {MOST_FILES_PER_COMMIT} files per commit")
    ax3.set_yscale("log")
    ax3.set_ylim(bottom=0.8)
    ax3.yaxis.set_major_formatter(plain)
    ax3.yaxis.set_minor_formatter(NullFormatter())
    ax3.set_xticks(list(xs), [f"{c:,} partitions" for c in counts], fontsize=8)
    ax3.set_title("What one commit carries")
    ax3.legend(fontsize=7.5)
    mach = section.get("machine", {})
    fig.suptitle(
        f"Per-batch cost against the partition count: {section.get('records_per_partition')} "
        f"records per partition, {section.get('batches')} batches, availableNow; PySpark "
        f"{section.get('pyspark', '?')}, {section.get('broker', '?')} broker, "
        f"{mach.get('cores', '?')} cores, 1-minute load {_peak_load(_load_averages(section))}",
        fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [ax1.get_title(), ax2.get_title(), ax3.get_title()]
