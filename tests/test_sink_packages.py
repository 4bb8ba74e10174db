"""The sinks' public import paths, and what importing them costs a Spark Python worker.

Every Python worker Spark starts imports the `pyspark_*` registration modules (and a task
unpickles its sink's module): deltalake, pyarrow.compute and pyarrow.dataset are imported only
where they are used, so a worker that only registers formats, or a task that only writes
Parquet, does not load them. Checked in a fresh interpreter (this one has them loaded)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("deltalake", "pyarrow.compute", "pyarrow.dataset")


def _loaded_after(statement: str) -> list[str]:
    code = (f"import sys\n{statement}\n"
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    return [m for m in out.stdout.strip().split(",") if m]


@pytest.mark.parametrize("statement", [
    "import pyspark_delta_eos",
    "from sinks.delta import DeltaEosDataSource",
    "import sinks.delta.sink",
    "import sinks.delta.upsert",  # what an upsert task unpickles
])
def test_registering_or_unpickling_the_delta_sink_loads_no_heavy_module(statement):
    assert _loaded_after(statement) == [], f"`{statement}` imported {_loaded_after(statement)}"


def test_the_template_and_the_delta_names_keep_their_documented_paths():
    from sinks import SinkSettings, TaskInfo, TransactionLost, TwoPhaseCommitSink
    from sinks.delta import FORMAT_NAME, DeltaEosDataSource, DeltaOptions, DeltaSink
    from sinks.two_phase_commit import TwoPhaseCommitSink as Template

    assert TwoPhaseCommitSink is Template
    assert {SinkSettings.__module__, TaskInfo.__module__, TransactionLost.__module__} == {
        "sinks.two_phase_commit"}
    assert issubclass(DeltaSink, Template)
    assert DeltaEosDataSource.name() == FORMAT_NAME == "delta-eos"
    assert DeltaOptions.__module__ == "sinks.delta.options"
    with pytest.raises(ImportError, match="cannot import name 'Nope'"):
        from sinks.delta import Nope  # noqa: F401
    # The old flat modules are gone for good: one package, sinks/delta/.
    with pytest.raises(ModuleNotFoundError):
        __import__("sinks.delta_options")


def test_the_postgres_names_keep_their_paths_in_a_package_of_modules():
    import sinks.postgres as package
    from sinks.data_source import TwoPhaseCommitDataSource
    from sinks.postgres import FORMAT_NAME, PostgresEosDataSource, PostgresOptions, PostgresSink
    from sinks.two_phase_commit import TwoPhaseCommitSink as Template

    assert issubclass(PostgresSink, Template) and PostgresSink.__module__ == "sinks.postgres.sink"
    assert issubclass(PostgresEosDataSource, TwoPhaseCommitDataSource)
    assert PostgresEosDataSource.name() == FORMAT_NAME == "postgres-eos"
    assert PostgresOptions.__module__ == "sinks.postgres.options"
    assert all(getattr(package, name) is not None for name in package.__all__)
    # The old flat modules are gone: one package, sinks/postgres/.
    with pytest.raises(ModuleNotFoundError):
        __import__("sinks.postgres_data_source")
