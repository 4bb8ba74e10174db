"""The peers' environment (integration_tests/support/peers.py): which resolved jars a PySpark
session gets, where the environment lives, and the error when the jars cannot be had. The
environment itself is built and used by integration_tests/peers/test_peers_interop.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from integration_tests.support import peers


@pytest.mark.parametrize("jar, name", [
    ("kafka-clients-3.9.2.jar", "kafka-clients"),
    ("spark-sql-kafka-0-10_2.13-4.2.0.jar", "spark-sql-kafka-0-10_2.13"),
    ("delta-spark_4.2_2.13-4.4.0.jar", "delta-spark_4.2_2.13"),
    ("zstd-jni-1.5.7-3.jar", "zstd-jni"),
    ("antlr4-runtime-4.13.1.jar", "antlr4-runtime"),
    ("netty-handler-4.1.118.Final.jar", "netty-handler"),
    ("jsr305-3.0.0.jar", "jsr305"),
])
def test_artifact_names_drop_the_version(jar, name):
    assert peers.artifact_name(jar) == name


def test_a_session_gets_only_the_jars_pyspark_lacks(tmp_path):
    lib, shipped = tmp_path / "lib", tmp_path / "pyspark-jars"
    lib.mkdir()
    shipped.mkdir()
    for jar in ("spark-sql-kafka-0-10_2.13-4.2.0.jar", "kafka-clients-3.9.2.jar",
                "zstd-jni-1.5.6-9.jar", "hadoop-client-runtime-3.4.1.jar", "slf4j-api-1.7.36.jar"):
        (lib / jar).touch()
    # PySpark's own, at other versions: they win, no second copy on the classpath
    for jar in ("zstd-jni-1.5.7-6.jar", "hadoop-client-runtime-3.4.2.jar", "slf4j-api-2.0.17.jar",
                "spark-sql_2.13-4.2.0.jar"):
        (shipped / jar).touch()
    assert [j.name for j in peers.session_jars(lib, shipped)] == [
        "kafka-clients-3.9.2.jar", "spark-sql-kafka-0-10_2.13-4.2.0.jar"]


def test_the_environment_lives_in_the_jar_cache_keyed_by_python_and_dependencies(monkeypatch,
                                                                                  tmp_path):
    monkeypatch.setenv("KAFKA_EOS_CACHE", str(tmp_path))
    venv = peers.venv_dir()
    assert venv.parent == tmp_path / "peers"
    assert venv.name.startswith(
        f"venv-pyspark-{peers.PYSPARK_VERSION}-py{sys.version_info.major}.{sys.version_info.minor}-")
    assert peers.jars_dir().is_relative_to(tmp_path / "peers")
    assert not Path(peers.__file__).resolve().parents[2] in venv.parents  # not in the checkout


def test_without_maven_or_network_the_jars_error_names_what_is_missing(tmp_path):
    """No `mvn` on PATH and no network: PySpark's Ivy reaches Maven Central through a proxy
    nobody listens on, with an empty cache (a child process: the real cache stays untouched)."""
    import shutil

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "java").symlink_to(shutil.which("java"))
    cache = tmp_path / "cache"
    env = {**os.environ, "KAFKA_EOS_CACHE": str(cache), "PATH": str(bin_dir),
           "JAVA_TOOL_OPTIONS": "-Dhttps.proxyHost=127.0.0.1 -Dhttps.proxyPort=9 "
                                "-Dhttp.proxyHost=127.0.0.1 -Dhttp.proxyPort=9",
           "HOME": str(tmp_path)}  # no ~/.ivy2 or ~/.m2 holding earlier downloads
    code = ("from integration_tests.support.peers import peers_jars, PeersUnavailable\n"
            "try:\n    print('resolved', peers_jars())\n"
            "except PeersUnavailable as e:\n    print(e)\n")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=300, cwd=Path(peers.__file__).parents[2])
    assert result.returncode == 0, result.stderr[-2000:]
    message = result.stdout
    assert message.startswith(
        "cannot fetch org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0, "
        "io.delta:delta-spark_4.2_2.13:4.4.0 from Maven Central (mvn is not installed; tried "
        "PySpark's Ivy): PySpark's Ivy could not resolve"), message[:2000]
    assert not any(cache.glob("peers/jars-*/complete"))  # the next run tries again
