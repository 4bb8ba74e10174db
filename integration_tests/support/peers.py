"""The JVM peers users run today, beside this package: Spark's own Kafka connector
(`format("kafka")`) and delta-spark (`format("delta")`), in one PySpark 4.2 session.

Maven Central serves Spark's `*_2.13` jars only up to 4.2.0 and no delta-spark release supports
Spark 4.3 (delta-spark 4.4: Spark 4.0.1, 4.1.0, 4.2.0), so a session that runs both peers and
this package is a PySpark 4.2.0 session, while the suite itself runs on PySpark 4.3.
Two things are made once into the cache the test broker's jars live in
(`connectors.local.apache_kafka.cache_dir()`: `$KAFKA_EOS_CACHE`, else `~/.cache/kafka-eos`),
each under a file lock, so parallel test workers on a fresh machine build them once:

* `peers_python()`: a virtual environment with `pyspark==4.2.0`, `delta-spark==4.4.0` (its Python
  package; it pins `pyspark<=4.2.0`, so installing both checks they can live together) and this
  checkout installed editable with its runtime dependencies only (no test extra). It is keyed by
  the Python version and the project's dependency list; its runs put the running checkout first
  on `PYTHONPATH` (`peer_environment()`), so one environment serves every checkout;
* `peers_jars()`: `org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0` and
  `io.delta:delta-spark_4.2_2.13:4.4.0` with their runtime dependencies, resolved by `mvn` from a
  generated pom where Maven is installed, else by the Ivy jar PySpark ships (the broker's
  resolvers). A session gets them through `spark.jars`, less the jars PySpark already has
  (`session_jars()`): no Ivy resolution at each session start.

Without network (or PyPI, or Maven Central) the first use fails with `PeersUnavailable`, naming
what could not be had and the command's own error. `peer_spark()` starts the session inside the
environment (`python -m ...` run by `peers_python()`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from connectors.local.apache_kafka import (
    KafkaUnavailable,
    cache_dir,
    resolve_into_cache,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

PYSPARK_VERSION = "4.2.0"
#: delta-spark 4.4.1 is on PyPI but Maven Central serves no `delta-spark_4.2_2.13:4.4.1` (nor
#: `_4.1_2.13`, nor `_2.13`; checked 2026-11-26), so the lane pins 4.4.0, whose Python package
#: and jar agree (what `configure_spark_with_delta_pip` would ask for) and which also pins
#: `pyspark>=4.0.1,<=4.2.0`.
DELTA_SPARK_VERSION = "4.4.0"
#: The peers' jars (Maven coordinates); their runtime dependencies come with them.
PACKAGES = (
    f"org.apache.spark:spark-sql-kafka-0-10_2.13:{PYSPARK_VERSION}",
    f"io.delta:delta-spark_4.2_2.13:{DELTA_SPARK_VERSION}",
)
#: What delta-spark's `configure_spark_with_delta_pip` and its docs set besides the jars.
DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
#: Set in the environment of a process `peer_environment()` prepares: the jars' directory.
JARS_ENV = "KAFKA_EOS_PEERS_JARS"


class PeersUnavailable(RuntimeError):
    """The peers' environment or jars cannot be had here; the message says what is missing."""


def source_root() -> Path:
    """The checkout this module belongs to (the peers' environment installs it)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / "pyproject.toml").is_file():
        raise PeersUnavailable(
            f"the peers' environment installs this package from its source checkout, and "
            f"{root} has no pyproject.toml (run from a checkout, not an installed wheel)")
    return root


def peers_dir() -> Path:
    return cache_dir() / "peers"



@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    """One builder at a time per machine (parallel test workers, two checkouts)."""
    peers_dir().mkdir(parents=True, exist_ok=True)
    with open(peers_dir() / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


# -- the virtual environment ------------------------------------------------------------------


def _dependencies_key(root: Path) -> str:
    """What the environment's contents depend on: the project's runtime dependencies and the
    pinned peers (a change to either makes a new environment, the old one stays until removed)."""
    with open(root / "pyproject.toml", "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    text = "\n".join([PYSPARK_VERSION, DELTA_SPARK_VERSION, *sorted(deps)])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def venv_dir() -> Path:
    root = source_root()
    py = f"py{sys.version_info.major}.{sys.version_info.minor}"
    return peers_dir() / f"venv-pyspark-{PYSPARK_VERSION}-{py}-{_dependencies_key(root)}"


def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def peers_python() -> Path:
    """The peers' environment's interpreter, the environment made on first use (a few minutes:
    PySpark's 450 MB source archive is built once into pip's cache)."""
    venv = venv_dir()
    done = venv / "kafka-eos-complete"
    if done.exists():
        return _venv_python(venv)
    with _locked("venv"):
        if done.exists():
            return _venv_python(venv)
        _create_venv(venv)
        done.write_text(f"pyspark=={PYSPARK_VERSION} delta-spark=={DELTA_SPARK_VERSION} "
                        f"-e {source_root()}\n")
    return _venv_python(venv)


def _run(cmd: list[str], what: str, timeout: float) -> str:
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise PeersUnavailable(f"{what}: no answer within {timeout:.0f} s ({' '.join(cmd)})") \
            from None
    except OSError as e:
        raise PeersUnavailable(f"{what}: {e}") from None
    if result.returncode != 0:
        raise PeersUnavailable(
            f"{what} (exit {result.returncode}; {' '.join(cmd)}): "
            f"{(result.stdout + result.stderr).strip()[-2000:]}")
    return result.stdout


def _create_venv(venv: Path) -> None:
    root = source_root()
    shutil.rmtree(venv, ignore_errors=True)  # a half-made one from an interrupted run
    log.warning("creating the peers' environment (PySpark %s, delta-spark %s, this package) in "
                "%s (once)", PYSPARK_VERSION, DELTA_SPARK_VERSION, venv)
    try:
        _run([sys.executable, "-m", "venv", str(venv)],
             f"cannot create a virtual environment with {sys.executable}", 300)
        python = str(_venv_python(venv))
        _run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
              f"pyspark=={PYSPARK_VERSION}", f"delta-spark=={DELTA_SPARK_VERSION}",
              "-e", str(root)],
             f"cannot install PySpark {PYSPARK_VERSION}, delta-spark {DELTA_SPARK_VERSION} and "
             f"this package into the peers' environment {venv} (PyPI unreachable, or the "
             "versions' constraints conflict)", 2400)
        version = _run([python, "-c", "import pyspark, connectors; print(pyspark.__version__)"],
                       f"the peers' environment {venv} cannot import pyspark and connectors",
                       300).strip().splitlines()[-1]
        if version != PYSPARK_VERSION:
            raise PeersUnavailable(f"the peers' environment {venv} holds PySpark {version}, "
                                   f"not {PYSPARK_VERSION}")
    except BaseException:
        shutil.rmtree(venv, ignore_errors=True)
        raise


# -- the jars ---------------------------------------------------------------------------------


def jars_dir() -> Path:
    key = hashlib.sha256(" ".join(PACKAGES).encode()).hexdigest()[:12]
    return peers_dir() / f"jars-{key}" / "lib"


def peers_jars() -> Path:
    """The directory holding the peers' jars and their runtime dependencies, fetched on first
    use (about 10 MB besides what PySpark ships)."""
    lib = jars_dir()
    done = lib.parent / "complete"
    if done.exists():
        return lib
    if shutil.which("java") is None:
        raise PeersUnavailable("resolving the peers' jars needs Java 17 on PATH (java not found)")
    with _locked("jars"):
        if done.exists():
            return lib
        lib.parent.mkdir(parents=True, exist_ok=True)
        try:
            return resolve_into_cache(PACKAGES, lib, done, what=", ".join(PACKAGES))
        except KafkaUnavailable as e:
            raise PeersUnavailable(str(e)) from None


_VERSION_TOKEN = re.compile(r"\d+(\.\d+)+")


def artifact_name(jar: str) -> str:
    """`kafka-clients-4.1.0.jar` -> `kafka-clients`; `spark-sql-kafka-0-10_2.13-4.2.0.jar` ->
    `spark-sql-kafka-0-10_2.13`; `zstd-jni-1.5.6-9.jar` -> `zstd-jni`: the name before the
    first dash-separated token that starts like a dotted version."""
    stem = jar[:-4] if jar.endswith(".jar") else jar
    tokens = stem.split("-")
    for i, token in enumerate(tokens[1:], start=1):
        if _VERSION_TOKEN.match(token):
            return "-".join(tokens[:i])
    return stem


def session_jars(lib: Path, pyspark_jars: Path) -> list[Path]:
    """The peers' jars a PySpark session lacks: the jars of `lib` whose artifact PySpark's own
    `jars/` does not ship (Spark's and delta-spark's builds were compiled against the very
    Spark jars PySpark 4.2.0 ships; a second copy of hadoop-client or zstd-jni could clash)."""
    shipped = {artifact_name(j.name) for j in pyspark_jars.glob("*.jar")}
    return sorted(j for j in lib.glob("*.jar") if artifact_name(j.name) not in shipped)


# -- running in the environment ---------------------------------------------------------------


def peer_environment(extra: dict[str, str] | None = None) -> tuple[Path, dict[str, str]]:
    """The peers' interpreter and an environment for it: this checkout first on PYTHONPATH,
    Spark's Python workers on the same interpreter, the jars' directory in `JARS_ENV`. Builds
    the environment and fetches the jars on first use (`PeersUnavailable` if it cannot)."""
    python = peers_python()
    lib = peers_jars()
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "KAFKA_EOS_PYSPARK_PYTHON",
                        "VIRTUAL_ENV", "PYTHONHOME", "SPARK_HOME")}
    root = str(source_root())
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH", "")]))
    env["PYSPARK_PYTHON"] = str(python)
    env["PYSPARK_DRIVER_PYTHON"] = str(python)
    env[JARS_ENV] = str(lib)
    env.update(extra or {})
    return python, env


def peer_spark(app_name: str = "kafka-eos-peers", *, master: str = "local[2]",
               conf: dict[str, str] | None = None, quick_start: bool = True) -> "SparkSession":
    """Inside the peers' environment: a local session with Spark's Kafka connector, delta-spark
    and this package's formats (`connectors.local.spark.local_spark` and its settings)."""
    import pyspark

    from connectors.local.spark import local_spark

    if pyspark.__version__ != PYSPARK_VERSION:
        raise PeersUnavailable(
            f"peer_spark() runs in the peers' environment (PySpark {PYSPARK_VERSION}), not "
            f"under PySpark {pyspark.__version__} ({sys.executable}): start it with "
            "integration_tests.support.peers.peer_environment()")
    lib = Path(os.environ.get(JARS_ENV) or peers_jars())
    jars = session_jars(lib, Path(pyspark.__file__).parent / "jars")
    settings = {"spark.jars": ",".join(str(j) for j in jars), **DELTA_CONF, **(conf or {})}
    return local_spark(app_name, master=master, conf=settings, quick_start=quick_start)


#: The jars of Spark's Kafka connector among the peers' (no delta-spark: no delta-spark release
#: loads in a PySpark 4.3 session).
KAFKA_ARTIFACTS = frozenset({"commons-pool2", "kafka-clients", "spark-sql-kafka-0-10_2.13",
                             "spark-token-provider-kafka-0-10_2.13"})


def kafka_connector_spark(app_name: str, *, master: str = "local[2]",
                          conf: dict[str, str] | None = None,
                          quick_start: bool = True) -> "SparkSession":
    """Outside the peers' environment (the main one, PySpark 4.3): a local session with Spark's
    4.2.0 Kafka connector from the peers' jar cache on `spark.jars` (Maven Central has no 4.3
    build; Spark 4.3 loads the 4.2.0 connector) beside this package's formats."""
    import pyspark

    from connectors.local.spark import local_spark

    jars = [j for j in session_jars(peers_jars(), Path(pyspark.__file__).parent / "jars")
            if artifact_name(j.name) in KAFKA_ARTIFACTS]
    if len(jars) != len(KAFKA_ARTIFACTS):
        raise PeersUnavailable(f"the peers' jar cache lacks some of {sorted(KAFKA_ARTIFACTS)}: "
                               f"{[j.name for j in jars]}")
    return local_spark(app_name, master=master, quick_start=quick_start,
                       conf={"spark.jars": ",".join(str(j) for j in jars), **(conf or {})})
