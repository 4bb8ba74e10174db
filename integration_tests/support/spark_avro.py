"""Spark's own `from_avro` (the spark-avro module), for tests that compare the source's Avro rows
with what Spark itself decodes from the same bytes.

PySpark's wheel does not ship spark-avro, and Maven Central serves Spark's `*_2.13` jars only up
to 4.2.0 (docs/design.md, the peers): `org.apache.spark:spark-avro_2.13:4.2.0` is fetched once
into the jars' cache (`apache_kafka.cache_dir()`). Checked here: that jar's `from_avro` runs in a
PySpark 4.3 session (the Avro library itself, avro-1.12, is in PySpark's jars). It is one jar
with nothing else needed, so `mvn dependency:copy` fetches it; without Maven, PySpark's Ivy.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import tempfile
from pathlib import Path

from connectors.local.apache_kafka import KafkaUnavailable, cache_dir, resolve_with_ivy

SPARK_AVRO = "org.apache.spark:spark-avro_2.13:4.2.0"
JAR_NAME = "spark-avro_2.13-4.2.0.jar"


class SparkAvroUnavailable(RuntimeError):
    """spark-avro could not be had here; the message says why."""


def spark_avro_jar() -> Path:
    """The spark-avro jar, fetched on first use (about 90 kB)."""
    home = cache_dir() / "spark-avro" / "4.2.0"
    jar = home / JAR_NAME
    if jar.is_file():
        return jar
    if shutil.which("java") is None:
        raise SparkAvroUnavailable("fetching spark-avro needs Java on PATH")
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".fetch.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if jar.is_file():
            return jar
        work = Path(tempfile.mkdtemp(prefix="fetch-", dir=home))
        errors = []
        try:
            if shutil.which("mvn"):
                result = subprocess.run(
                    ["mvn", "-q", "-B", "dependency:copy", f"-Dartifact={SPARK_AVRO}",
                     f"-DoutputDirectory={work}"], capture_output=True, text=True, timeout=600)
                if result.returncode != 0:
                    errors.append(f"mvn: {(result.stdout + result.stderr)[-800:]}")
            if not (work / JAR_NAME).is_file():
                try:
                    (work / "ivy").mkdir(exist_ok=True)
                    resolve_with_ivy([SPARK_AVRO], work / "ivy", work)
                except (KafkaUnavailable, subprocess.TimeoutExpired, OSError) as e:
                    errors.append(f"ivy: {e}")
            if not (work / JAR_NAME).is_file():
                raise SparkAvroUnavailable(f"cannot fetch {SPARK_AVRO} from Maven Central: "
                                           + " | ".join(errors or ["no jar downloaded"]))
            (work / JAR_NAME).rename(jar)
            return jar
        finally:
            shutil.rmtree(work, ignore_errors=True)
