"""The demo's progress line says what the pipeline is doing before its first batch, instead of
"0 rows/0 batches" for the half minute Spark takes to start on 2 cores."""

from __future__ import annotations

import io
from types import SimpleNamespace

from connectors.demo.run import DemoConfig, Progress, _report


def line(progress: Progress, *, running: bool, kills: int = 0, chaos: int = 0) -> str:
    out = io.StringIO()
    _report(12.3, SimpleNamespace(produced=1001), progress, kills, DemoConfig(chaos=chaos), out,
            running=running)
    return out.getvalue()


def test_before_the_queries_run_the_line_says_spark_is_starting(tmp_path):
    text = line(Progress(str(tmp_path / "none.jsonl")), running=False)
    assert text == ("  [  12.3s] produced 1,001/20,000  pipeline: starting Spark and its two "
                    "queries\n")
    assert "0 rows/0 batches" not in text


def test_running_queries_without_a_batch_are_waiting_for_their_first(tmp_path):
    progress = Progress(str(tmp_path / "none.jsonl"))
    assert "delta-eos waiting for its first batch  kafka-eos waiting for its first batch" in \
        line(progress, running=True)
    progress.rows["delta-eos"], progress.batches["delta-eos"] = 5000, 1
    assert "delta-eos 5,000 rows/1 batches  kafka-eos waiting for its first batch" in \
        line(progress, running=True)


def test_a_restart_after_a_kill_says_so_and_keeps_what_was_committed(tmp_path):
    progress = Progress(str(tmp_path / "none.jsonl"))
    progress.rows["kafka-eos"], progress.batches["kafka-eos"] = 700, 2
    text = line(progress, running=False, kills=1, chaos=3)
    assert "pipeline: starting Spark and its two queries again after the kill" in text
    assert "kafka-eos 700 rows/2 batches so far" in text and text.endswith("kills 1/3\n")
