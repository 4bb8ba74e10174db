"""The interpreter-start hook that makes Spark's Python the one the package is installed in
(kafka_eos_pyspark_python.py, run by kafka_eos_pyspark_python.pth). Spark takes its Python from
the environment only (PYSPARK_PYTHON, else `python3` on PATH), so a venv's Python started by
its path, the venv not activated, found no `kafka-eos`."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import kafka_eos_pyspark_python as hook

ROOT = Path(__file__).resolve().parents[1]

def _venv(root: Path, *, python3: bool = True) -> str:
    """A venv's bin folder: `python3.11`, and `python3` linking to it unless told not."""
    bin_dir = root / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    exe = bin_dir / "python3.11"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    if python3:
        (bin_dir / "python3").symlink_to("python3.11")
    return str(exe)


def _other_python(root: Path) -> str:
    """Another `python3` (the system's, a node's) on the PATH."""
    other = root / "usr" / "bin"
    other.mkdir(parents=True)
    (other / "python3").write_text("#!/bin/sh\n")
    (other / "python3").chmod(0o755)
    return str(other)


def test_unset_it_becomes_a_name_that_is_this_interpreter_here_and_a_nodes_own_there(tmp_path):
    """Spark sends the value to every executor: `python3`, never a path on this host. On this
    host the interpreter's folder goes first on PATH, so the name is this interpreter."""
    py = _venv(tmp_path)
    system = _other_python(tmp_path)
    env = {"PATH": system}
    hook.set_pyspark_python(env, py)
    assert env == {"PYSPARK_PYTHON": "python3", hook.MARK: "python3",
                   "PATH": os.pathsep.join([os.path.dirname(py), system])}


def test_a_path_that_finds_this_interpreter_already_is_kept(tmp_path):
    py = _venv(tmp_path)
    env = {"PATH": os.pathsep.join([os.path.dirname(py), _other_python(tmp_path)])}
    before = env["PATH"]
    hook.set_pyspark_python(env, py)
    assert env["PATH"] == before and env["PYSPARK_PYTHON"] == "python3"


def test_without_a_python3_beside_it_the_interpreters_own_name(tmp_path):
    py = _venv(tmp_path, python3=False)
    env = {"PATH": _other_python(tmp_path)}
    hook.set_pyspark_python(env, py)
    assert env["PYSPARK_PYTHON"] == "python3.11"
    assert env["PATH"].split(os.pathsep)[0] == os.path.dirname(py)


def test_a_value_the_user_set_is_kept(tmp_path):
    env = {"PYSPARK_PYTHON": "/opt/python/bin/python3", "PATH": "/usr/bin"}
    hook.set_pyspark_python(env, _venv(tmp_path))
    assert env == {"PYSPARK_PYTHON": "/opt/python/bin/python3", "PATH": "/usr/bin"}


def test_a_value_inherited_from_this_hook_follows_the_interpreter(tmp_path):
    """A child started with another interpreter that has the package: its own Python, not the
    parent's, which the mark shows was not the user's choice."""
    parent = _venv(tmp_path / "parent")
    child = _venv(tmp_path / "child")
    env = {"PYSPARK_PYTHON": "python3", hook.MARK: "python3",
           "PATH": os.path.dirname(parent)}
    hook.set_pyspark_python(env, child)
    assert env["PYSPARK_PYTHON"] == "python3"
    assert env["PATH"].split(os.pathsep)[:2] == [os.path.dirname(child), os.path.dirname(parent)]


def test_an_embedding_program_is_no_python_for_workers():
    env: dict[str, str] = {}
    hook.set_pyspark_python(env, "/usr/sbin/uwsgi")
    hook.set_pyspark_python(env, "")
    assert env == {}


def test_the_wheel_installs_the_hook_in_editable_installs_too():
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]
    wheel = build["targets"]["wheel"]
    assert "kafka_eos_pyspark_python.py" in wheel["only-include"]
    assert wheel["force-include"] == {"kafka_eos_pyspark_python.pth":
                                      "kafka_eos_pyspark_python.pth"}
    assert (ROOT / "kafka_eos_pyspark_python.pth").read_text() == "import kafka_eos_pyspark_python\n"


def test_the_installed_package_sets_it_in_a_fresh_interpreter():
    """As installed here (`pip install -e .` puts the .pth in site-packages): a Python started by
    its path with PYSPARK_PYTHON unset, and a PATH that finds another Python first, has it set
    to a name that its PATH resolves to itself."""
    import shutil

    pth = Path(sysconfig.get_paths()["purelib"]) / "kafka_eos_pyspark_python.pth"
    assert pth.exists(), f"{pth} missing: reinstall the package (pip install -e .)"
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", hook.MARK)}
    env["PATH"] = "/usr/bin:/bin"
    out = subprocess.run([sys.executable, "-c", "import os; print(os.environ['PYSPARK_PYTHON']);"
                          " print(os.environ['PATH'])"],
                         env=env, capture_output=True, text=True, timeout=60)
    name, path = out.stdout.split()
    assert os.sep not in name, name
    assert os.path.samefile(shutil.which(name, path=path), sys.executable), (name, path)


# --- PySpark's bundled pyspark.zip on the workers' path ---------------------------------------


def _pip_layout(root: Path) -> tuple[Path, Path, Path]:
    """site-packages as pip lays PySpark out: the package, its bundled zips, py4j beside it."""
    sp = root / "site-packages"
    (sp / "pyspark" / "python" / "lib").mkdir(parents=True)
    (sp / "pyspark" / "__init__.py").write_text("")
    (sp / "py4j").mkdir()
    (sp / "py4j" / "__init__.py").write_text("")
    zips = sp / "pyspark" / "python" / "lib"
    return sp, zips / "pyspark.zip", zips / "py4j-0.10.9.9-src.zip"


def test_the_zips_bundled_in_the_installed_pyspark_leave_the_path(tmp_path):
    """Spark puts $SPARK_HOME/python/lib/pyspark.zip first on its Python workers' path; for a
    pip-installed PySpark that zip lies inside the installed package, the same code, which every
    worker would compile again from source (zipimport keeps no bytecode)."""
    sp, pyspark_zip, py4j_zip = _pip_layout(tmp_path)
    jar = str(sp / "pyspark" / "jars" / "spark-core_2.13-4.3.0.jar")
    path = [str(pyspark_zip), str(py4j_zip), jar, "/work/job", str(sp)]
    cache = {str(pyspark_zip): object(), jar: object(), "/work/job": None}
    hook.drop_bundled_pyspark_zips(path, cache)
    assert path == ["/work/job", str(sp)]
    assert list(cache) == ["/work/job"]  # importlib.invalidate_caches() would re-read them


def test_an_interpreter_without_that_pyspark_keeps_the_zips(tmp_path):
    """A packed environment without PySpark (spark.archives' `./environment/bin/python`) run by
    the driver, whose SPARK_HOME is its own pip-installed PySpark: that PySpark's site-packages
    are not on this interpreter's path, and the zips are the only PySpark it can import. Dropped,
    the driver's look-up worker imported no pyspark and found no format
    (`[DATA_SOURCE_NOT_FOUND] ... kafka-eos`)."""
    sp, pyspark_zip, py4j_zip = _pip_layout(tmp_path)
    path = [str(pyspark_zip), str(py4j_zip), "/work/job", str(tmp_path / "environment" / "lib")]
    hook.drop_bundled_pyspark_zips(path, {})
    assert path == [str(pyspark_zip), str(py4j_zip), "/work/job",
                    str(tmp_path / "environment" / "lib")]


def test_a_spark_home_of_its_own_keeps_its_zips(tmp_path):
    """A cluster's SPARK_HOME (no installed package around its zip), or a py4j zip without a
    py4j package beside PySpark: those zips are the only copy, and stay."""
    spark_home = tmp_path / "opt" / "spark"
    spark_home_zip = str(spark_home / "python" / "lib" / "pyspark.zip")
    spark_home_jar = str(spark_home / "jars" / "spark-core_2.13-4.3.0.jar")
    sp, pyspark_zip, py4j_zip = _pip_layout(tmp_path)
    (sp / "py4j" / "__init__.py").unlink()
    elsewhere = str(sp / "pyspark" / "mypython" / "lib" / "pyspark.zip")  # not python/lib
    path = [spark_home_zip, spark_home_jar, str(py4j_zip), elsewhere, str(pyspark_zip), str(sp)]
    hook.drop_bundled_pyspark_zips(path, {})
    assert path == [spark_home_zip, spark_home_jar, str(py4j_zip), elsewhere, str(sp)]


def test_a_spark_worker_imports_the_installed_pyspark_not_its_zip():
    """As Spark starts its Python workers here: PYTHONPATH with the installed PySpark's own
    pyspark.zip and py4j zip first. The worker's pyspark is the installed package's, with the
    bytecode pip compiled."""
    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    zips = sorted(str(p) for p in lib.glob("*.zip"))
    assert any(z.endswith("pyspark.zip") for z in zips), f"no pyspark.zip in {lib}"
    zips += [str(next((lib.parent.parent / "jars").glob("spark-core_*.jar")))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(zips)}
    out = subprocess.run(
        [sys.executable, "-c", "import sys, pyspark, py4j; print(pyspark.__file__); "
         "print(py4j.__file__); print(any(p.endswith(('.zip', '.jar')) and 'pyspark' in p for p in sys.path))"],
        env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    pyspark_file, py4j_file, zip_on_path = out.stdout.split()
    assert pyspark_file == pyspark.__file__
    assert ".zip" not in py4j_file
    assert zip_on_path == "False"
