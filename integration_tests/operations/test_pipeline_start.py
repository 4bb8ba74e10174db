"""The test pipeline (integration_tests/support/pipelines/eos_pipeline.py) starts a query again
when Spark's Python source runner misses its fixed 10 s connect-back, which CI's load once made
the crash matrix's fifth query do. Here a `sitecustomize` on the workers' path holds the first
source runner 12 s before it connects: the query's first start fails as it did in CI, the
second runs, and the table ends with every record once."""

from __future__ import annotations

import textwrap

from integration_tests.support.delta_oracle import assert_records_once, table_records
from integration_tests.support.kafka_data import create_topic, produce, unique_topic
from integration_tests.support.processes import CONNECT_BACK, RESTART_LINE, log_tail, run_pipeline

PIPELINE = "integration_tests.support.pipelines.eos_pipeline"

#: Spark puts the JVM's PYTHONPATH on its Python workers' path; the source runner is the one
#: started as `-m pyspark.sql.streaming.python_streaming_source_runner`.
SLOW_FIRST_RUNNER = textwrap.dedent("""\
    import os, sys, time
    if "pyspark.sql.streaming.python_streaming_source_runner" in sys.orig_argv:
        try:
            os.close(os.open(os.environ["SLOW_RUNNER_MARK"], os.O_CREAT | os.O_EXCL))
            time.sleep(12)
        except FileExistsError:
            pass
""")


def test_a_source_runner_that_misses_the_connect_back_gets_its_query_started_again(
        bootstrap, tmp_path):
    topic = unique_topic("slowrunner")
    create_topic(bootstrap, topic, 2)
    expected = produce(bootstrap, topic, 2, 10)
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SLOW_FIRST_RUNNER)
    mark = tmp_path / "held-once"
    checkpoint, table, log = tmp_path / "ck", tmp_path / "table", str(tmp_path / "log")

    run_pipeline(PIPELINE, "--bootstrap", bootstrap, "--topic", topic, "--checkpoint",
                 str(checkpoint), "--table", str(table), log_path=log,
                 env={"PYTHONPATH": str(hook), "SLOW_RUNNER_MARK": str(mark)})

    text = log_tail(log, 10**9)
    assert mark.exists(), "the first source runner was never held"
    assert CONNECT_BACK in text, "the held runner should have missed Spark's connect-back"
    assert RESTART_LINE.format(checkpoint) in text, text[-3000:]
    assert_records_once(table_records(str(table)), expected, "after the query's second start")
