"""Hadoop's S3A filesystem for a PySpark session: Spark's own checkpoint on `s3a://`.

PySpark's wheel ships Hadoop's client jars (`hadoop-client-api`/`-runtime` 3.5.0) but not its
S3 connector, so `checkpointLocation=s3a://...` fails with `ClassNotFoundException:
org.apache.hadoop.fs.s3a.S3AFileSystem` (docs/design.md#production-conditions). `s3a_jars()`
fetches the connector once into the jars' cache (`apache_kafka.cache_dir()/hadoop-aws/<version>`,
under a file lock, with `mvn` where installed, else PySpark's Ivy: the broker's resolvers);
`s3a_spark_conf()` gives a session the jars and the settings that point S3A at an endpoint.

What is fetched: `org.apache.hadoop:hadoop-aws` at PySpark's Hadoop version (the connector must
match the client jars it runs on), **without** the AWS SDK `bundle` it declares (about 600 MB:
every AWS service, shaded), and instead the SDK modules it loads, at the SDK version Hadoop 3.5.0
is built with (`aws-java-sdk-v2.version` in `hadoop-project-3.5.0.pom`): `s3` (brings `auth`,
`regions`, `apache-client`, `netty-nio-client`...), `s3-transfer-manager` (S3AFileSystem's
copies and uploads) and `sts` (assumed-role and session credentials). About 19 MB resolved;
the session gets the ~13 MB of them that PySpark does not already ship (netty, httpclient,
httpcore, commons-codec, slf4j are PySpark's own). Only the bundle's shaded Apache HTTP client is
then missing, which hadoop-aws touches only to bind an OpenSSL socket factory for `https`
(`fs.s3a.ssl.channel.mode`); plain-JSSE TLS and plain HTTP do without it.
"""

from __future__ import annotations

import fcntl
import logging
import shutil
from pathlib import Path

from connectors.local.apache_kafka import KafkaUnavailable, cache_dir, resolve_into_cache
from integration_tests.support.peers import artifact_name

log = logging.getLogger(__name__)

#: Must equal PySpark's `hadoop-client-api` version (`s3a_jars()` checks).
HADOOP_VERSION = "3.5.0"
#: `aws-java-sdk-v2.version` of hadoop-project 3.5.0: what hadoop-aws 3.5.0 is compiled and
#: tested against (its `bundle` dependency's version).
AWS_SDK_VERSION = "2.35.4"
COORDINATES = (
    f"org.apache.hadoop:hadoop-aws:{HADOOP_VERSION}",
    f"software.amazon.awssdk:s3:{AWS_SDK_VERSION}",
    f"software.amazon.awssdk:s3-transfer-manager:{AWS_SDK_VERSION}",
    f"software.amazon.awssdk:sts:{AWS_SDK_VERSION}",
)
#: Left out of the resolution: the 600 MB bundle (its modules are listed above instead) and
#: commons-logging, whose classes PySpark's jcl-over-slf4j already provides.
EXCLUDE = ("software.amazon.awssdk:bundle", "commons-logging:commons-logging")


class S3AUnavailable(RuntimeError):
    """Hadoop's S3A jars cannot be had here; the message says what failed."""


def pyspark_jars_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def pyspark_hadoop_version() -> str | None:
    """The version of the `hadoop-client-api` jar PySpark ships, if it ships one."""
    found = sorted(pyspark_jars_dir().glob("hadoop-client-api-*.jar"))
    return found[-1].name.removeprefix("hadoop-client-api-").removesuffix(".jar") if found else None


def s3a_jars_dir() -> Path:
    """Every jar the resolution gave (including those PySpark ships), fetched on first use."""
    lib = cache_dir() / "hadoop-aws" / HADOOP_VERSION / "lib"
    done = lib.parent / "complete"
    if done.exists():
        return lib
    if shutil.which("java") is None:
        raise S3AUnavailable("resolving hadoop-aws's jars needs Java on PATH (java not found)")
    lib.parent.mkdir(parents=True, exist_ok=True)
    # One fetch per machine: parallel test workers on a fresh machine wait for the first.
    with open(lib.parent / ".fetch.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return lib
        try:
            return resolve_into_cache(COORDINATES, lib, done, what=", ".join(COORDINATES),
                                      exclude=EXCLUDE, forbidden=("bundle-*.jar",))
        except KafkaUnavailable as e:
            raise S3AUnavailable(str(e)) from None


def s3a_jars() -> list[Path]:
    """The jars a PySpark session needs for `s3a://`: hadoop-aws and the AWS SDK modules it
    loads, less the artifacts PySpark already ships (a second netty or httpclient on the class
    path would only be shadowed by Spark's, or clash). Fetched once (`S3AUnavailable` naming
    the resolvers' errors when Maven Central cannot be reached; a RuntimeError when this
    module's Hadoop version is not PySpark's, or Central lacks a pinned coordinate:
    connectors.local.apache_kafka.ResolutionError, which no fixture skips)."""
    shipped_hadoop = pyspark_hadoop_version()
    if shipped_hadoop != HADOOP_VERSION:
        # the project's pins out of step with PySpark: a failure to mend, never a skip
        raise RuntimeError(
            f"hadoop-aws {HADOOP_VERSION} needs PySpark's Hadoop client {HADOOP_VERSION}, and "
            f"this PySpark ships {shipped_hadoop or 'none'}: change HADOOP_VERSION and "
            "AWS_SDK_VERSION together (hadoop-project's aws-java-sdk-v2.version)")
    shipped = {artifact_name(j.name) for j in pyspark_jars_dir().glob("*.jar")}
    return sorted(j for j in s3a_jars_dir().glob("*.jar") if artifact_name(j.name) not in shipped)


def s3a_spark_conf(endpoint_url: str, access_key: str, secret_key: str,
                   region: str = "us-east-1") -> dict[str, str]:
    """Spark settings for `s3a://` on an S3-compatible endpoint (moto, MinIO, S3 itself).

    The jars go on `spark.jars`: the driver adds them to its class loader and serves them to
    executors, which add them to theirs before running tasks, so a standalone cluster's
    executors on other hosts need nothing installed (`extraClassPath` would name paths that
    must exist on every host). Hadoop settings are `spark.hadoop.`-prefixed: Spark copies them
    into every Hadoop Configuration it makes, the checkpoint's included.
    """
    plain_http = endpoint_url.startswith("http://")
    return {
        "spark.jars": ",".join(str(j) for j in s3a_jars()),
        "spark.hadoop.fs.s3a.endpoint": endpoint_url,
        # The region signs requests; without it S3A asks the SDK's default chain (env, EC2).
        "spark.hadoop.fs.s3a.endpoint.region": region,
        # Bucket in the path, not the host name: a local server has no per-bucket DNS names.
        "spark.hadoop.fs.s3a.path.style.access": "true",
        # Keys from these settings only: never the machine's profile, environment or EC2 role.
        "spark.hadoop.fs.s3a.aws.credentials.provider":
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "spark.hadoop.fs.s3a.access.key": access_key,
        "spark.hadoop.fs.s3a.secret.key": secret_key,
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false" if plain_http else "true",
    }
