"""Real Apache Kafka, run from its Maven jars: one KRaft node (broker and controller) on loopback.

The demo's and `kafka-eos broker`'s broker where Java reaches Maven Central, and the suite's
(docs/testing.md; integration_tests/support/brokers.py). The jars are resolved once into a cache
outside the repository (`cache_dir()`): with `mvn` from a small generated pom where Maven is
installed, otherwise with the Ivy that PySpark ships. Two generations are pinned:

* `LATEST` (4.x): new clusters finalize `transaction.version` at 2 (KIP-890 part 2); `start()`
  checks the finalized level through ApiVersions and fails loudly if it is not the expected one;
* `GENERATION_3` (3.9.x): transaction version 1, what most managed clusters still run.

A node serves PLAINTEXT, with the StandardAuthorizer on (the PLAINTEXT principal is a super
user). A caller may add listeners (`ExtraListeners`): the test suite's secured ones (SASL_SSL,
SSL, mTLS, SASL_PLAINTEXT, with their users) are built in integration_tests/support/
secured_node.py, outside the wheel. `kill()` / `restart()` SIGKILL the JVM and start it again
on its data directory.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from connectors.local.broker_handle import wait_until_ready, free_port, port_free

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Generation:
    """One pinned Apache Kafka release and what it needs besides `kafka_2.13`."""

    version: str
    #: Maven coordinates (group:artifact:version) of its logging backend.
    logging: tuple[str, ...]
    #: The transaction.version a freshly formatted cluster of it finalizes.
    transaction_version: int

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])


LATEST = Generation(
    "4.4.0",
    ("org.apache.logging.log4j:log4j-slf4j-impl:2.25.5",),
    transaction_version=2,
)
GENERATION_3 = Generation(
    "3.9.2",
    ("org.slf4j:slf4j-reload4j:1.7.36", "ch.qos.reload4j:reload4j:1.2.25"),
    transaction_version=0,
)
GENERATIONS = {"4": LATEST, "3": GENERATION_3}


class ServerPKI(Protocol):
    """The certificates a node's TLS listeners serve (paths of PEM files)."""

    ca_pem: str
    server_cert_pem: str
    server_key_pem: str


#: Makes a PKI in the directory it is given (integration_tests/support/certs.py).
MakePKI = Callable[[str], ServerPKI]


class ExtraListeners(Protocol):
    """Listeners a node serves beyond PLAINTEXT, and what they need (the tests' secured ones:
    integration_tests/support/secured_node.py)."""

    #: Listener name -> its security protocol, e.g. {"MTLS": "SSL"}.
    protocols: Mapping[str, str]

    def server_properties(self) -> dict[str, str]:
        """What the listeners need in server.properties (TLS material, SASL, super users)."""

    def format_args(self) -> list[str]:
        """Extra arguments of the storage format (e.g. the SASL users' SCRAM credentials)."""


#: Makes a node's extra listeners, in the node's directory it is given.
MakeListeners = Callable[[Path], ExtraListeners]


class KafkaUnavailable(RuntimeError):
    """Apache Kafka cannot run here; the message says what is missing."""


class ResolutionError(RuntimeError):
    """Maven Central was reached and lacks a coordinate asked for, or the resolution's jars are
    not what they must be: a wrong pin, which fails the caller; never a reason to skip."""


#: mvn's words when Maven Central answered that an artifact is not there (against "Could not
#: transfer" when it was not reached). PySpark's Ivy says "not found" for both.
NOT_IN_CENTRAL = ("was not found in", "Could not find artifact")


def cache_dir() -> Path:
    """Where fetched jars live: $KAFKA_EOS_CACHE, else $XDG_CACHE_HOME/kafka-eos, else
    ~/.cache/kafka-eos. Outside the repository, shared by every checkout of the machine."""
    explicit = os.environ.get("KAFKA_EOS_CACHE", "").strip()
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.expanduser("~/.cache")
    return Path(base) / "kafka-eos"


# -- jars ----------------------------------------------------------------------------------


def _pom(coordinates: list[str], exclude: Sequence[str] = ()) -> str:
    """`exclude`: `group:artifact` names left out of every coordinate's dependencies."""
    exclusions = "".join(
        f"<exclusion><groupId>{g}</groupId><artifactId>{a}</artifactId></exclusion>"
        for g, a in (e.split(":") for e in exclude)
    )
    exclusions = f"<exclusions>{exclusions}</exclusions>" if exclusions else ""
    deps = "".join(
        f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version>"
        f"{exclusions}</dependency>"
        for g, a, v in (c.split(":") for c in coordinates)
    )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>kafka-eos</groupId><artifactId>jars</artifactId><version>1</version>"
        f"<dependencies>{deps}</dependencies></project>\n"
    )


def resolve_with_maven(coordinates: list[str], work: Path, lib: Path, *,
                       exclude: Sequence[str] = ()) -> None:
    """`coordinates` and their runtime dependencies into `lib`, less the `group:artifact` names
    in `exclude` (a dependency too large to ship, whose parts are listed instead)."""
    (work / "pom.xml").write_text(_pom(coordinates, exclude))
    cmd = ["mvn", "-q", "-B", "-f", str(work / "pom.xml"), "dependency:copy-dependencies",
           "-DincludeScope=runtime", f"-DoutputDirectory={lib}"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise KafkaUnavailable(
            f"mvn could not resolve {', '.join(coordinates)} from Maven Central (exit "
            f"{result.returncode}): {(result.stdout + result.stderr)[-1500:]}")


def ivy_jar() -> Path | None:
    try:
        import pyspark
    except ImportError:
        return None
    jars = Path(pyspark.__file__).parent / "jars"
    found = sorted(jars.glob("ivy-*.jar"))
    return found[-1] if found else None


def resolve_with_ivy(coordinates: list[str], work: Path, lib: Path, *,
                     exclude: Sequence[str] = ()) -> None:
    """PySpark's own Ivy, standalone: no Maven needed, Maven Central reached directly.
    `exclude` as `resolve_with_maven`'s."""
    ivy = ivy_jar()
    if ivy is None:
        raise KafkaUnavailable("neither mvn nor PySpark's Ivy jar is available")
    deps = "".join(
        f'<dependency org="{g}" name="{a}" rev="{v}" conf="default->default"/>'
        for g, a, v in (c.split(":") for c in coordinates)
    ) + "".join(f'<exclude org="{g}" module="{a}"/>' for g, a in (e.split(":") for e in exclude))
    (work / "ivy.xml").write_text(
        '<ivy-module version="2.0"><info organisation="kafka-eos" module="jars"/>'
        f'<dependencies>{deps}</dependencies></ivy-module>\n')
    cmd = ["java", "-jar", str(ivy), "-ivy", str(work / "ivy.xml"), "-cache",
           str(work / "ivy-cache"), "-retrieve", f"{lib}/[artifact]-[revision](-[classifier]).[ext]",
           "-confs", "default"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise KafkaUnavailable(
            f"PySpark's Ivy could not resolve {', '.join(coordinates)} from Maven Central: "
            f"{(result.stdout + result.stderr)[-1500:]}")


def kafka_jars(generation: Generation = LATEST) -> Path:
    """The directory holding the broker's classpath, fetched on first use (about 80 MB)."""
    lib = cache_dir() / "apache-kafka" / generation.version / "lib"
    done = lib.parent / "complete"
    if done.exists():
        return lib
    if shutil.which("java") is None:
        raise KafkaUnavailable("Apache Kafka needs Java 17 on PATH (java not found)")
    lib.parent.mkdir(parents=True, exist_ok=True)
    # One fetch at a time per version: parallel test workers (pytest -n) on a fresh machine
    # all want the jars at once; the first fetches them, the others find them complete.
    with open(lib.parent / ".fetch.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return lib
        return _fetch_jars(generation, lib, done)


def _fetch_jars(generation: Generation, lib: Path, done: Path) -> Path:
    coordinates = [f"org.apache.kafka:kafka_2.13:{generation.version}", *generation.logging]
    return resolve_into_cache(coordinates, lib, done, what=f"Apache Kafka {generation.version}",
                              required=coordinates[:1])


def resolve_into_cache(coordinates: Sequence[str], lib: Path, done: Path, *, what: str,
                       exclude: Sequence[str] = (), required: Sequence[str] | None = None,
                       forbidden: Sequence[str] = ()) -> Path:
    """Resolve `coordinates` with their dependencies (less `exclude`) from Maven Central into
    `lib`, for a caller that holds the fetch's lock: staged beside it with `mvn` where it is
    installed, else PySpark's Ivy; the `required` coordinates' own jars (all, by default) must
    be there and no jar matching a `forbidden` glob; then renamed into place and `done` written
    last, so that a fetch that died half way is never taken for a complete one.
    KafkaUnavailable names what failed (each resolver's error) when Central could not be had;
    ResolutionError when it answered that a coordinate is not there, or the jars are wrong."""
    work = Path(tempfile.mkdtemp(prefix="resolve-", dir=lib.parent))
    staging = work / "lib"
    try:
        log.warning("fetching %s from Maven Central into %s (once)", what, lib)
        errors = []
        mvn = shutil.which("mvn") is not None
        for resolve in ([resolve_with_maven] if mvn else []) + [resolve_with_ivy]:
            try:
                resolve(list(coordinates), work, staging, exclude=exclude)
                break
            except (KafkaUnavailable, subprocess.TimeoutExpired, OSError) as e:
                if any(words in str(e) for words in NOT_IN_CENTRAL):
                    raise ResolutionError(f"cannot fetch {what}: {e}") from None
                errors.append(str(e))
                shutil.rmtree(staging, ignore_errors=True)
        else:
            raise KafkaUnavailable(
                f"cannot fetch {what} from Maven Central"
                + ("" if mvn else " (mvn is not installed; tried PySpark's Ivy)")
                + ": " + " | ".join(errors))
        for item in coordinates if required is None else required:
            _group, artifact, version = item.split(":")[:3]
            if not (staging / f"{artifact}-{version}.jar").is_file():
                raise ResolutionError(f"the resolved jars lack {artifact}-{version}.jar")
        for pattern in forbidden:
            if any(staging.glob(pattern)):
                raise ResolutionError(f"the resolution brought {pattern}, which it must not")
        shutil.rmtree(lib, ignore_errors=True)
        staging.rename(lib)
        done.write_text(" ".join(coordinates) + "\n")
        return lib
    finally:
        shutil.rmtree(work, ignore_errors=True)


# -- configuration ---------------------------------------------------------------------------


def property_value(value: str) -> str:
    """A value as the image writes it, verbatim after `key=`, into server.properties, which Java's
    Properties.load reads: backslashes and line breaks (PEM) escaped."""
    return value.replace("\\", "\\\\").replace("\r", "").replace("\n", "\\n")


#: Fewer request threads than Kafka's defaults (8 I/O threads, 3 network threads a listener,
#: 10 background threads), for nodes that serve a handful of clients: the test suite's. Each
#: idle thread wakes every 300 ms; a node with the suite's five listeners idles at 1.7% of a
#: core instead of 2.2%, and a run keeps some nine nodes up for half an hour. Not the default
#: of `apache_kafka()`, whose `kafka-eos broker` the benchmarks measure clients against.
FEW_THREADS = {
    "num.io.threads": "2",
    "num.network.threads": "1",
    "background.threads": "2",
    "num.recovery.threads.per.data.dir": "1",
}


def server_properties(
    generation: Generation, ports: dict[str, int], data_dir: str,
    extra: ExtraListeners | None = None, overrides: dict[str, str] | None = None,
) -> dict[str, str]:
    """server.properties of the single node (values unescaped): PLAINTEXT, and `extra`'s
    listeners with their settings."""
    protocols = {"PLAINTEXT": "PLAINTEXT", **(extra.protocols if extra else {})}
    listeners = [*protocols, "CONTROLLER"]
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{ports['CONTROLLER']}",
        "controller.listener.names": "CONTROLLER",
        "listeners": ",".join(f"{n}://127.0.0.1:{ports[n]}" for n in listeners),
        "advertised.listeners": ",".join(f"{n}://127.0.0.1:{ports[n]}" for n in protocols),
        "listener.security.protocol.map": ",".join(
            f"{n}:{p}" for n, p in {**protocols, "CONTROLLER": "PLAINTEXT"}.items()),
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": data_dir,
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "min.insync.replicas": "1",
        "group.initial.rebalance.delay.ms": "0",
        # A transaction past its timeout is aborted within a second, not ten (the tests of the
        # broker's own timeout abort wait for it).
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        "log.flush.interval.messages": "9223372036854775807",
        # The active controller writes a no-op record to the metadata log when idle, every
        # 500 ms by default: a broker that sits idle in a test run or on a laptop burns CPU.
        "metadata.max.idle.interval.ms": "5000",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",
    }
    if extra is not None:
        props.update(extra.server_properties())
    if generation.major >= 4:
        props.update({
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
        })
    props.update(overrides or {})
    return props


def properties_text(props: dict[str, str]) -> str:
    return "".join(f"{k}={property_value(v)}\n" for k, v in sorted(props.items()))


LOG4J2 = """status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = WARN
"""
LOG4J1 = """log4j.rootLogger=WARN, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={log}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
"""


def new_cluster_id() -> str:
    # May start with "-": pass it as --cluster-id=ID, never as a separate argument.
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


#: A folder of class-data-sharing archives of Kafka's JVMs, `<version>-<main class>.jsa`,
#: named by the test suite (integration_tests/support/class_sharing.py), which starts Kafka
#: nodes a hundred times: a node maps the archive instead of loading its classes from the jars
#: (measured: 4.6 -> 3.2 s of CPU to ready, the storage format 1.7 -> 1.1 s). Unset, or without
#: the archive, a JVM loads its classes as usual; one whose JVM or jars differ from the
#: archive's ignores it (-Xshare:auto).
KAFKA_CDS_ENV = "KAFKA_EOS_KAFKA_CDS"


def class_sharing_archive(generation: Generation, main: str) -> Path | None:
    """The archive for `main` of `generation` in the folder KAFKA_CDS_ENV names, if dumped."""
    folder = os.environ.get(KAFKA_CDS_ENV)
    if not folder:
        return None
    archive = Path(folder) / f"{generation.version}-{main}.jsa"
    return archive if archive.is_file() else None


def java_command(generation: Generation, workdir: Path, main: str, *args: str,
                 heap: tuple[str, str] = ("256m", "768m"),
                 jvm_options: tuple[str, ...] = ()) -> list[str]:
    """The JVM command running `main` of `generation`'s jars, logging as the log4j files in
    `workdir` say (log4j2 from 4.x, log4j 1 before)."""
    lib = kafka_jars(generation)
    archive = class_sharing_archive(generation, main)
    if archive is not None and not any("ArchiveClassesAtExit" in o for o in jvm_options):
        jvm_options = (f"-XX:SharedArchiveFile={archive}", "-Xshare:auto", "-Xlog:cds=off",
                       "-Xlog:cds+dynamic=off", *jvm_options)
    if generation.major >= 4:
        logging_opt = f"-Dlog4j2.configurationFile={workdir / 'log4j2.properties'}"
    else:
        logging_opt = f"-Dlog4j.configuration=file:{workdir / 'log4j.properties'}"
    return ["java", f"-Xms{heap[0]}", f"-Xmx{heap[1]}", "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true", logging_opt, *jvm_options,
            "-cp", f"{lib}/*", main, *args]


@dataclass
class ApacheKafka:
    """A single-node Apache Kafka the caller started (`apache_kafka()`)."""

    generation: Generation
    workdir: Path
    ports: dict[str, int]
    #: The listeners beyond PLAINTEXT; None: PLAINTEXT only.
    extra: ExtraListeners | None = field(default=None, repr=False)
    jvm_options: tuple[str, ...] = ()
    process: subprocess.Popen | None = field(default=None, repr=False)
    #: The finalized transaction.version, read at start.
    transaction_version: int | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.ports['PLAINTEXT']}"

    def address(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    @property
    def log_file(self) -> Path:
        return self.workdir / "server.log"

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_file.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def _java(self, main: str, *args: str) -> list[str]:
        return java_command(self.generation, self.workdir, main, *args,
                            jvm_options=self.jvm_options)

    def format(self, overrides: dict[str, str] | None = None) -> None:
        props = server_properties(self.generation, self.ports, str(self.workdir / "data"),
                                  self.extra, overrides)
        (self.workdir / "server.properties").write_text(properties_text(props))
        log_name = str(self.log_file)
        (self.workdir / "log4j2.properties").write_text(LOG4J2.format(log=log_name))
        (self.workdir / "log4j.properties").write_text(LOG4J1.format(log=log_name))
        scram = self.extra.format_args() if self.extra is not None else []
        result = subprocess.run(
            self._java("kafka.tools.StorageTool", "format", f"--cluster-id={new_cluster_id()}",
                       "-c", str(self.workdir / "server.properties"), *scram),
            capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise KafkaUnavailable(
                f"formatting Apache Kafka {self.generation.version}'s storage failed: "
                f"{(result.stdout + result.stderr)[-2000:]}")

    def start(self, timeout_s: float = 90) -> None:
        """Start the JVM on the formatted data directory; wait until it serves metadata."""
        out = open(self.workdir / "stdout.log", "ab")
        self.process = subprocess.Popen(
            self._java("kafka.Kafka", str(self.workdir / "server.properties")),
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=die_with_parent)
        out.close()
        try:
            wait_until_ready(self.bootstrap_servers, self.process, timeout_s)
            self._wait_for_transactions(timeout_s)
        except Exception as e:  # noqa: BLE001  librdkafka's KafkaException is no RuntimeError
            exited = self.process.poll()  # whether the JVM still ran, and its own words, below
            state = "still running" if exited is None else f"exited with status {exited}"
            stdout = (self.workdir / "stdout.log").read_text(errors="replace")[-2000:]
            self.stop()
            raise KafkaUnavailable(f"Apache Kafka {self.generation.version} did not start (its "
                                   f"JVM {state}): {e}\n{stdout}\n{self.log_tail()}") from None
        self.transaction_version = finalized_feature(self.bootstrap_servers,
                                                     "transaction.version")
        log.info("Apache Kafka %s at %s (pid %d, transaction.version %s)",
                 self.generation.version, self.bootstrap_servers, self.process.pid,
                 self.transaction_version)

    def _wait_for_transactions(self, timeout_s: float) -> None:
        """Until a transactional producer can init: the transaction state log exists and has a
        leader (a first InitProducerId on a fresh node otherwise waits for its creation)."""
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap_servers,
                             "transactional.id": f"kafka-eos-warmup-{uuid.uuid4().hex[:8]}",
                             "log_level": 0})
        producer.init_transactions(timeout_s)

    def stop(self) -> None:
        if self.process is None:
            return
        stop_process(self.process)
        self.process = None

    def kill(self) -> None:
        """SIGKILL the broker (no clean shutdown): what a crashed machine leaves."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None

    def restart(self, timeout_s: float = 90) -> None:
        """Start again on the same data directory and ports (after kill() or stop())."""
        if self.process is not None:
            self.kill()
        self.start(timeout_s)


def stop_process(process: subprocess.Popen) -> None:
    """SIGTERM (after SIGCONT, so that a frozen process can take it), then SIGKILL after 20 s:
    the clean stop of a JVM this module or its neighbours started."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGCONT)
    process.terminate()
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


def die_with_parent() -> None:
    """In the child before exec: SIGTERM when the process that started the broker dies (a test
    run killed without its teardown leaves no broker behind). Its own session, so the
    pipelines' process-group kills never reach it."""
    import ctypes

    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def finalized_feature(bootstrap: str, name: str, timeout_s: float = 10.0) -> int:
    """The cluster's finalized level of feature `name` (0 when not finalized), from ApiVersions
    v3 as kafka-python's admin client reads it."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kafka-eos",
                             request_timeout_ms=int(timeout_s * 1000))
    try:
        features = admin.describe_features()
    finally:
        admin.close()
    return int(features.get(name, {}).get("finalized", (0, 0))[1])


def distinct_free_ports(names, pick=free_port) -> dict[str, int]:
    """A free port per name, no two alike: two `free_port()` calls can return the same port
    (each binds port 0 and lets it go), and Kafka refuses two listeners on one port."""
    ports: dict[str, int] = {}
    for name in names:
        port = pick()
        while port in ports.values():
            port = pick()
        ports[name] = port
    return ports


@contextlib.contextmanager
def apache_kafka(
    generation: Generation = LATEST, *, overrides: dict[str, str] | None = None,
    check_transaction_version: bool = True, plaintext_port: int | None = None,
    listeners: MakeListeners | None = None, jvm_options: tuple[str, ...] = (),
) -> Iterator[ApacheKafka]:
    """Fetch (once), format and start one node; stop it and delete its data on exit.
    `plaintext_port`: the PLAINTEXT listener's port (`kafka-eos broker --port`), else a free
    one; the other listeners always take free ports. `listeners`: makes the node's extra
    listeners (in its directory), e.g. the tests' secured ones or an OAUTHBEARER listener
    (integration_tests/secured/test_oauth_lane.py). `jvm_options`: e.g. the JVM property that
    allows that listener's JWKS URL."""
    kafka_jars(generation)
    workdir = Path(tempfile.mkdtemp(prefix=f"apache-kafka-{generation.version}-"))
    try:
        extra = listeners(workdir) if listeners is not None else None
        for attempt in range(3):
            # Free ports are picked before the JVM binds them: another process may take one
            # in between (a busy test machine). Then the node is formatted afresh on new ones.
            ports = distinct_free_ports(("PLAINTEXT", *(extra.protocols if extra else ()),
                                         "CONTROLLER"))
            if plaintext_port:
                ports["PLAINTEXT"] = plaintext_port
            shutil.rmtree(workdir / "data", ignore_errors=True)
            kafka = ApacheKafka(generation, workdir, ports, extra,
                                jvm_options=tuple(jvm_options))
            kafka.format(overrides)
            try:
                kafka.start()
                break
            except KafkaUnavailable as e:
                if attempt == 2 or "Address already in use" not in str(e) or (
                        plaintext_port and not port_free(plaintext_port)):
                    raise
                log.warning("Apache Kafka %s: a port was taken meanwhile; starting again",
                            generation.version)
        try:
            if check_transaction_version and \
                    kafka.transaction_version != generation.transaction_version:
                raise KafkaUnavailable(
                    f"Apache Kafka {generation.version} finalized transaction.version "
                    f"{kafka.transaction_version}, expected {generation.transaction_version}: "
                    "the transaction tests would not test what they claim")
            yield kafka
        finally:
            kafka.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
