"""The test pipeline (integration_tests/support/pipelines/eos_pipeline.py) starts a query again
when a Python runner Spark starts on the driver misses its fixed 10 s connect-back, which CI's
load made the crash matrix's queries do: the source runner at the query's start, and the read
planner at its first batch, after the source was up. Here a `sitecustomize` on the workers'
path holds the first of each 12 s before it connects: the query's first start fails on the
source runner, its second on the planner, its third runs, and the table ends with every
record once."""

from __future__ import annotations

import textwrap

from integration_tests.support.delta_oracle import assert_records_once, table_records
from integration_tests.support.kafka_data import create_topic, produce, unique_topic
from integration_tests.support.processes import CONNECT_BACK, RESTART_LINE, log_tail, run_pipeline

PIPELINE = "integration_tests.support.pipelines.eos_pipeline"

#: The runners held, by the module Spark starts them as (`python -m ...`).
HELD = ("pyspark.sql.streaming.python_streaming_source_runner",
        "pyspark.sql.worker.plan_data_source_read")
#: Spark puts the JVM's PYTHONPATH on its Python workers' path.
SLOW_FIRST_RUNNERS = textwrap.dedent("""\
    import os, sys, time
    for module in os.environ["SLOW_RUNNERS"].split(","):
        if module in sys.orig_argv:
            try:
                mark = os.path.join(os.environ["SLOW_RUNNER_MARKS"], module)
                os.close(os.open(mark, os.O_CREAT | os.O_EXCL))
                time.sleep(12)
            except FileExistsError:
                pass
""")


def test_a_query_whose_runners_miss_the_connect_back_is_started_again_each_time(
        bootstrap, tmp_path):
    topic = unique_topic("slowrunner")
    create_topic(bootstrap, topic, 2)
    expected = produce(bootstrap, topic, 2, 10)
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SLOW_FIRST_RUNNERS)
    marks = tmp_path / "held"
    marks.mkdir()
    checkpoint, table, log = tmp_path / "ck", tmp_path / "table", str(tmp_path / "log")

    # Without Spark's daemon: with it, the planner is forked by a daemon, whose start has no
    # such window; without it (the crash matrix's run 3), the planner is a simple worker too.
    run_pipeline(PIPELINE, "--no-daemon", "--bootstrap", bootstrap, "--topic", topic,
                 "--checkpoint", str(checkpoint), "--table", str(table), log_path=log,
                 env={"PYTHONPATH": str(hook), "SLOW_RUNNERS": ",".join(HELD),
                      "SLOW_RUNNER_MARKS": str(marks)})

    text = log_tail(log, 10**9)
    assert sorted(p.name for p in marks.iterdir()) == sorted(HELD), "a runner was never held"
    assert text.count(CONNECT_BACK) >= 2, "both held runners should have missed the connect-back"
    assert text.count(RESTART_LINE.format(checkpoint)) == 2, text[-3000:]
    assert_records_once(table_records(str(table)), expected, "after the query's second start")
