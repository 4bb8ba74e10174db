"""What a Spark Python worker pays to load the formats. Spark starts a fresh Python process for
each format lookup, source creation and planner (and for tasks), and each one imports the
registered DataSource classes: a library imported at module level there is paid many times per
query start (a first batch took 13-20 s on 2 cores). The driver-only libraries stay
out of those imports and are loaded where they are used."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: Imported only where used: kafka-python by the Kafka sink's driver commit, psycopg by the
#: postgres-eos sink, deltalake by the delta-eos sink's tasks and commit, urllib.request (with
#: http.client and email, about 0.1 s a process) by an OAUTHBEARER token fetch, pyarrow.compute
#: (some 50 ms) by the source's tasks that read.
DRIVER_ONLY = ("kafka", "psycopg", "deltalake", "urllib.request", "pyarrow.compute")


def _modules_after(statement: str) -> set[str]:
    code = f"import sys, json; {statement}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=str(__import__("pathlib").Path(__file__).parents[1]))
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


#: Not imported by a look-up either: each role's process (look-up, creation, a sink's writer
#: and commit) unpickles every format class, and these are the reading side's and the
#: template's (pyarrow about 0.3 s of CPU a process with pyspark.sql's part of it,
#: confluent-kafka with the asyncio it imports 0.1 s, tenacity 0.02 s). With them
#: `import pyspark.worker, connectors.formats` took 1.10 s of CPU here, without them 0.53 s.
READING_OR_WRITING = ("pyarrow", "confluent_kafka", "tenacity", "sources.kafka_options",
                      "sources.kafka_source", "sinks.two_phase_commit")


@pytest.mark.parametrize("statement", [
    "import connectors.formats",
    "import pyspark_kafka_eos, pyspark_delta_eos, pyspark_postgres_eos",
])
def test_looking_formats_up_imports_no_driver_only_library(statement: str) -> None:
    loaded = _modules_after(statement)
    heavy = sorted(m for m in DRIVER_ONLY + READING_OR_WRITING if m in loaded)
    assert not heavy, f"{statement!r} imports {heavy}: every Python worker Spark starts pays it"


def test_the_kafka_sink_loads_kafka_python_only_to_commit() -> None:
    assert "kafka" not in _modules_after("import sinks.kafka.sink")
    assert "kafka" in _modules_after(
        "import sinks.kafka.commit_client as k; k.error_name(47)")


def test_the_postgres_format_loads_psycopg_only_when_a_query_starts() -> None:
    assert "psycopg" not in _modules_after("import sinks.postgres.data_source")
    assert "psycopg" not in _modules_after("import sinks.postgres")
    assert "psycopg" in _modules_after("import sinks.postgres.sink")
