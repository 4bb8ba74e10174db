"""The package supports pyspark>=4.2,<4.4: an older PySpark is refused where PySpark
looks the formats up and where `connectors.register()` runs, with a message naming the versions
needed, before any PySpark API the old version lacks is imported (which would fail with a bare
`No module named 'pyspark.sql.streaming.datasource'`)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from connectors import pyspark_version
from connectors.pyspark_version import UnsupportedPySpark

ROOT = Path(__file__).resolve().parents[1]


def test_the_range_in_the_message_is_pyproject_s():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"pyspark{pyspark_version.SUPPORTED}" in deps


@pytest.mark.parametrize("version", ["4.1.1", "4.0.0", "3.5.6", "4.1.0.dev0"])
def test_an_older_pyspark_is_refused_naming_the_versions_needed(version):
    with pytest.raises(UnsupportedPySpark) as e:
        pyspark_version.check(version, "/somewhere/pyspark/__init__.py")
    assert str(e.value) == (
        "kafka-eos needs PySpark 4.2 or 4.3 (pyspark>=4.2,<4.4); this is PySpark "
        f"{version} (/somewhere/pyspark/__init__.py), whose Python Data Source API lacks what "
        "the kafka-eos, delta-eos and postgres-eos formats use: pip install "
        "'pyspark>=4.2,<4.4'")
    assert isinstance(e.value, ImportError)  # what a failed import raises, for callers' handlers


@pytest.mark.parametrize("version", ["4.2.0", "4.2.1", "4.3.0", "4.4.0.dev1", "unknown"])
def test_supported_and_unreadable_versions_pass(version):
    pyspark_version.check(version)


def test_the_installed_pyspark_is_supported():
    pyspark_version.require()


def _fake_pyspark(where: Path, version: str) -> None:
    """A `pyspark` package that has nothing but its version: importing anything else of it (as
    the formats' modules would, after the check) fails with ModuleNotFoundError."""
    package = where / "pyspark"
    package.mkdir()
    (package / "__init__.py").write_text(f"__version__ = {version!r}\n")


@pytest.mark.parametrize("module", [
    "pyspark_kafka_eos", "pyspark_delta_eos", "pyspark_postgres_eos", "connectors.formats"])
def test_the_modules_pyspark_imports_to_find_the_formats_refuse_pyspark_4_1(tmp_path, module):
    """In a fresh interpreter whose `import pyspark` finds PySpark "4.1.0" (first on sys.path,
    this checkout after it), importing a shim fails with the versions needed, not with a
    missing PySpark module."""
    _fake_pyspark(tmp_path, "4.1.0")
    result = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(1, {str(ROOT)!r}); import {module}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("connectors.pyspark_version.UnsupportedPySpark: kafka-eos needs "
                           "PySpark 4.2 or 4.3 (pyspark>=4.2,<4.4); this is PySpark 4.1.0 ("
                           f"{tmp_path / 'pyspark' / '__init__.py'})"), result.stderr[-2000:]


def test_register_refuses_pyspark_4_1_before_touching_the_session(tmp_path):
    _fake_pyspark(tmp_path, "4.1.2")
    code = ("import sys; sys.path.insert(1, %r); import connectors\n"
            "class Session:\n"
            "    def __getattr__(self, name): raise AssertionError('touched ' + name)\n"
            "connectors.register(Session())\n") % str(ROOT)
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode != 0
    assert "UnsupportedPySpark: kafka-eos needs PySpark 4.2 or 4.3" in result.stderr, \
        result.stderr[-2000:]
    assert "this is PySpark 4.1.2" in result.stderr
