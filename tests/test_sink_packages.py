"""The sinks' public import paths, and what importing them costs a Spark Python worker.

Every Python worker Spark starts imports the `pyspark_*` registration modules (and a task
unpickles its sink's module): deltalake, pyarrow.compute and pyarrow.dataset are imported only
where they are used, so a worker that only registers formats, or a task that only writes
Parquet, does not load them. Checked in a fresh interpreter (this one has them loaded)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
    import sinks.two_phase_commit as template

    # the template's public names, as `sinks` and `sinks.two_phase_commit` spell them (the
    # settings are defined in sinks/settings.py and re-exported by the template)
    assert (SinkSettings, TaskInfo, TransactionLost) == (
        template.SinkSettings, template.TaskInfo, template.TransactionLost)
    assert {TaskInfo.__module__, TransactionLost.__module__} == {"sinks.two_phase_commit"}
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


# -- one shape for every sink package ---------------------------------------------------------

SINKS_DIR = Path(__file__).resolve().parents[1] / "sinks"
#: The modules every sink package has, each for the same concern (sinks/__init__.py).
SHAPE = ("__init__", "data_source", "options", "ids", "handles", "kind", "errors", "sink")
#: What the root of sinks/ holds: the template and its log, nothing of any one store.
TEMPLATE = {"__init__", "two_phase_commit", "settings", "task_reports", "txn_log",
            "recovery_plan", "query_identity", "kinds", "data_source", "storage_retries", "faults",
            "target_identity"}


def _sink_packages() -> list[str]:
    return sorted(p.name for p in SINKS_DIR.iterdir()
                  if p.is_dir() and (p / "__init__.py").exists())


def test_the_root_of_sinks_holds_the_template_only_and_one_package_per_sink():
    root = {p.stem for p in SINKS_DIR.glob("*.py")}
    assert root == TEMPLATE, f"modules at the root of sinks/ beyond the template: {root - TEMPLATE}"
    assert _sink_packages() == ["delta", "kafka", "postgres"]


@pytest.mark.parametrize("package", ["delta", "kafka", "postgres"])
def test_every_sink_package_has_the_same_shape(package):
    """The same modules for the same concerns: a reader who knows one sink finds their way in
    the others, and a new sink knows what to write."""
    import importlib

    from sinks.data_source import TwoPhaseCommitDataSource
    from sinks.kinds import sink_kind
    from sinks.two_phase_commit import TwoPhaseCommitSink

    modules = {p.stem for p in (SINKS_DIR / package).glob("*.py")}
    assert set(SHAPE) <= modules, f"sinks/{package}/ lacks {sorted(set(SHAPE) - modules)}"
    pkg = importlib.import_module(f"sinks.{package}")
    # the package's docstring names each of its modules, and its public names all resolve
    unnamed = [m for m in sorted(modules - {"__init__"}) if f"{m}.py" not in (pkg.__doc__ or "")]
    assert not unnamed, f"sinks/{package}/__init__.py does not describe {unnamed}"
    assert pkg.__all__ and all(getattr(pkg, name) is not None for name in pkg.__all__)

    def defined_in(module: str, base: type) -> list[type]:
        mod = importlib.import_module(f"sinks.{package}.{module}")
        return [v for v in vars(mod).values() if isinstance(v, type) and issubclass(v, base)
                and v is not base and v.__module__ == mod.__name__]

    [data_source] = defined_in("data_source", TwoPhaseCommitDataSource)
    assert defined_in("sink", TwoPhaseCommitSink), f"sinks/{package}/sink.py defines no sink"
    assert defined_in("errors", Exception), f"sinks/{package}/errors.py defines no error"
    handles = importlib.import_module(f"sinks.{package}.handles")
    options = importlib.import_module(f"sinks.{package}.options")
    importlib.import_module(f"sinks.{package}.kind")  # registers the kind
    assert data_source.name() == options.FORMAT_NAME == handles.KIND
    assert type(sink_kind(handles.KIND)).__module__ == f"sinks.{package}.kind"
