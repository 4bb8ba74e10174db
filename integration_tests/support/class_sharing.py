"""A class-data-sharing archive of Spark's driver classes, for the test suite's many Spark starts.

A Spark start spends most of its JVM CPU loading, parsing and verifying some 15,000 classes
from Spark's jars (measured here: 19.9 s of JVM CPU for a session and one Python data-source
query; 11.3 s with the archive). The suite starts Spark some hundred times (every killed and
restarted pipeline is a new JVM), so it dumps those classes once per machine into a dynamic
CDS archive (JDK 13+, `-XX:ArchiveClassesAtExit`), kept in the jars' cache outside the
repository, and every driver JVM of the suite maps it (`-XX:SharedArchiveFile`).

It changes how classes are loaded, nothing else: a JVM whose class path or build differs from
the archive's ignores it (`-Xshare:auto`) and loads classes as usual. Users' jobs never see it:
only `local_spark(quick_start=True)` adds it (connectors/local/spark.py:
`class_sharing_options()`), and only when `SPARK_CDS_ENV` names an archive, which the suite's
conftest sets.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from connectors.local.apache_kafka import cache_dir
from connectors.local.spark import SPARK_CDS_ENV, local_spark

log = logging.getLogger("kafka_eos.testing")


def _key() -> str:
    """What the archive depends on: the JVM that dumps it and the jars on the driver's class
    path (PySpark's own jars directory)."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    names = sorted(p.name for p in jars.glob("*.jar")) if jars.is_dir() else []
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=60)
    digest = hashlib.sha256("\n".join([pyspark.__version__, str(jars), java.stderr, *names])
                            .encode()).hexdigest()
    return digest[:16]


def ensure_archive(timeout_s: float = 600) -> Path | None:
    """The archive for this machine's Spark and JVM, dumped once (under a file lock, so two
    test processes dump it once) by a short Spark run of its own; None, with a warning, when it
    cannot be made: the suite then runs without it, only slower."""
    try:
        root = cache_dir() / "spark-cds"
        root.mkdir(parents=True, exist_ok=True)
        archive = root / f"driver-{_key()}.jsa"
    except (OSError, subprocess.SubprocessError) as e:
        log.warning("no class-data-sharing archive for Spark: %s", e)
        return None
    if archive.is_file():
        return archive
    with open(root / ".dump.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if archive.is_file():
            return archive
        partial = root / f".{archive.name}.{os.getpid()}.partial"
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "integration_tests.support.class_sharing",
                               str(partial)], capture_output=True, text=True, timeout=timeout_s,
                              env={**os.environ, SPARK_CDS_ENV: ""})
        if proc.returncode != 0 or not partial.is_file():
            partial.unlink(missing_ok=True)
            log.warning("no class-data-sharing archive for Spark (the dump run exited with %s): "
                        "%s", proc.returncode, proc.stderr[-2000:])
            return None
        partial.rename(archive)
        log.info("dumped %s in %.0f s", archive, time.monotonic() - started)
        return archive


def _dump(path: str) -> None:
    """A Spark start that loads what the suite's starts load: the session, the registered
    formats, a Python data source read in batch and in a stream, a Python streaming sink, and
    a built-in stream; the JVM writes the classes it loaded to `path` as it exits."""
    options = f"-XX:ArchiveClassesAtExit={path}"
    spark = local_spark("kafka-eos-cds-dump", conf={"spark.driver.extraJavaOptions": options})
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceReader,
        DataSourceStreamWriter,
        SimpleDataSourceStreamReader,
        WriterCommitMessage,
    )

    class Reader(DataSourceReader):
        def read(self, partition):
            yield from ((i, f"v{i}") for i in range(10))

    class StreamReader(SimpleDataSourceStreamReader):
        def initialOffset(self):
            return {"n": 0}

        def read(self, start):
            n = start["n"]
            return iter([(n, f"v{n}")]), {"n": n + 1}

        def readBetweenOffsets(self, start, end):
            return iter([(i, f"v{i}") for i in range(start["n"], end["n"])])

    class StreamWriter(DataSourceStreamWriter):
        def write(self, iterator):
            sum(1 for _ in iterator)
            return WriterCommitMessage()

        def commit(self, messages, batch_id):
            pass

        def abort(self, messages, batch_id):
            pass

    class Tiny(DataSource):
        @classmethod
        def name(cls):
            return "cds-dump"

        def schema(self):
            return "id long, v string"

        def reader(self, schema):
            return Reader()

        def simpleStreamReader(self, schema):
            return StreamReader()

        def streamWriter(self, schema, overwrite):
            return StreamWriter()

    spark.dataSource.register(Tiny)
    spark.read.format("cds-dump").load().selectExpr("id + 1 AS id", "upper(v) AS v").collect()
    for source in ("cds-dump", "rate"):
        query = (spark.readStream.format(source).load().selectExpr("CAST(value AS STRING) AS v"
                 if source == "rate" else "v")
                 .writeStream.format("cds-dump" if source == "cds-dump" else "noop")
                 .option("checkpointLocation", f"{path}.ckpt-{source}")
                 .trigger(processingTime="200 milliseconds").start())
        deadline = time.monotonic() + 120
        while (query.lastProgress is None or query.lastProgress["batchId"] < 2) \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        query.stop()
    spark.stop()
    for source in ("cds-dump", "rate"):
        shutil.rmtree(f"{path}.ckpt-{source}", ignore_errors=True)


# -- Apache Kafka's JVMs -----------------------------------------------------------------------

#: The two JVMs the suite starts most: a node, and the storage format before each fresh one.
KAFKA_MAINS = ("kafka.Kafka", "kafka.tools.StorageTool")


def kafka_archive_dir() -> Path:
    """Where the Kafka archives of this machine's JVM live (connectors/local/apache_kafka.py's
    KAFKA_CDS_ENV names it): one folder per `java -version`."""
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=60)
    key = hashlib.sha256(java.stderr.encode()).hexdigest()[:16]
    return cache_dir() / "kafka-cds" / key


def dump_kafka_archives(folder: Path) -> None:
    """Dump, once per machine and generation, the archives of a node and of the storage format
    (a node formatted, started until it serves, and stopped with SIGTERM: the JVM writes the
    classes it loaded as it exits). Under a lock that a second process does not wait for: it
    goes on without the archives, which the JVMs started after the dump then map. A failure
    only costs the speed-up."""
    from connectors.local.apache_kafka import GENERATION_3, LATEST, ApacheKafka, kafka_jars
    from connectors.local.broker_handle import free_port

    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".dump.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return
        for generation in (LATEST, GENERATION_3):
            final = {main: folder / f"{generation.version}-{main}.jsa" for main in KAFKA_MAINS}
            if all(p.is_file() for p in final.values()):
                continue
            started = time.monotonic()
            work = Path(tempfile.mkdtemp(prefix=".dump-", dir=folder))
            try:
                kafka_jars(generation)
                partial = {main: work / f"{main}.jsa" for main in KAFKA_MAINS}
                ports = {"PLAINTEXT": free_port(), "CONTROLLER": free_port()}
                node = ApacheKafka(generation, work, ports, jvm_options=(
                    f"-XX:ArchiveClassesAtExit={partial['kafka.tools.StorageTool']}",))
                node.format()
                node.jvm_options = (f"-XX:ArchiveClassesAtExit={partial['kafka.Kafka']}",)
                node.start()
                node.stop()
                for main, path in partial.items():
                    if path.is_file():
                        path.rename(final[main])
                log.info("dumped Apache Kafka %s's class-sharing archives in %.0f s",
                         generation.version, time.monotonic() - started)
            except Exception as e:  # noqa: BLE001 - only slower without
                log.warning("no class-sharing archive for Apache Kafka %s: %s",
                            generation.version, e)
            finally:
                shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    _dump(sys.argv[1])
