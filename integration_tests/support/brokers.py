"""The suite's Kafka broker, resolved in the order of docs/design.md#brokers:

1. `KAFKA_BOOTSTRAP_SERVERS` set: that cluster;
2. a reachable Docker engine: the official Apache Kafka image, pinned (`KAFKA_IMAGE`, the same tag
   as docker/docker-compose.yml), one KRaft node started through Testcontainers;
3. otherwise real Apache Kafka from its Maven jars (connectors/local/apache_kafka.py), with
   every secured listener (`apache_kafka_broker`: a throwaway PKI from certs.py).

The embedded broker (connectors/local/tansu.py) is the demo's offline fallback and the subject
of a smoke lane of its own, never the suite's broker.

`secured_container()` starts the same image with an additional SASL_SSL listener (SCRAM-SHA-512,
TLS from PEM files the caller gives), for secured end-to-end tests on machines with Docker.

The container's settings are built by pure functions (`kafka_container_settings`), checked by
tests/test_testcontainers_broker.py without Docker.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import shlex
import tarfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from connectors.local.apache_kafka import (
    FEW_THREADS,
    LATEST,
    Generation,
    apache_kafka,
    property_value,
)
from connectors.local.broker_handle import Broker, wait_until_ready
from integration_tests.support.broker_control import TestBroker
from integration_tests.support.secured_node import make_secured_listeners

log = logging.getLogger(__name__)


def docker_available() -> tuple[bool, str]:
    """Whether a Docker engine answers, and if not, why (for skip reasons)."""
    try:
        import docker  # installed with testcontainers

        client = docker.from_env(timeout=3)
        client.ping()
        return True, "Docker engine reachable"
    except Exception as e:  # any failure means: no engine we can use
        return False, f"no Docker engine reachable ({type(e).__name__}: {str(e)[:120]})"


# --- Real Apache Kafka in Docker, through Testcontainers --------------------------------------

#: The official image, pinned: the same tag as docker/docker-compose.yml (a test checks both).
KAFKA_IMAGE = "apache/kafka:3.9.1"
#: Any 22-character base64 UUID; one node, formatted afresh in every container.
KAFKA_CLUSTER_ID = "qN2HbL1mT3uvBwSrJX1Zyg"
#: Ports inside the container. PLAINTEXT and SECURED are published and advertised with the
#: host's mapped ports; BROKER (inter-broker, tools inside the container) and CONTROLLER are not.
PLAINTEXT_PORT, BROKER_PORT, CONTROLLER_PORT, SECURED_PORT = 9092, 9093, 9094, 9095
#: The SASL_SSL listener's name. Not "SASL_SSL": the image's configure script would then insist
#: on a JKS/PKCS12 keystore with password files and a JAAS file in KAFKA_OPTS, and a keystore
#: password is refused with PEM keystores; its checks look for "SSL://" and "SASL_" in the
#: advertised listeners only.
SECURED_LISTENER = "SECURED"
SCRAM_MECHANISM = "SCRAM-SHA-512"
_START_DIR = "/tmp/tc-kafka"
_START_SCRIPT = f"{_START_DIR}/start.sh"
_FORMAT_PROPERTIES = f"{_START_DIR}/format.properties"
#: Written after the script (tar members are extracted in order): the command waits for it.
_READY_MARKER = f"{_START_DIR}/ready"
# SCRAM names and passwords go into `kafka-storage format --add-scram 'SCRAM-SHA-512=[name=..]'`
# unquoted: keep them to characters that need no quoting there nor SASLprep/SCRAM escaping.
_SCRAM_SAFE = re.compile(r"[A-Za-z0-9._~-]+")


def env_name(prop: str) -> str:
    """The apache/kafka image's environment variable for a broker property: KAFKA_ + the name
    upper-cased with '.' -> '_', '_' -> '__', '-' -> '___' (inverse of its KafkaDockerWrapper)."""
    return "KAFKA_" + prop.replace("_", "__").replace("-", "___").replace(".", "_").upper()


@dataclass(frozen=True)
class SecuredListener:
    """The SASL_SSL listener of `secured_container`: TLS from PEM, one SCRAM-SHA-512 user."""

    server_cert_pem: str
    server_key_pem: str  # PKCS#8 ("BEGIN PRIVATE KEY"), unencrypted: what Kafka's PEM reader takes
    ca_pem: str
    user: str
    password: str = field(repr=False)
    #: ssl.client.auth of the listener: "requested" verifies a client certificate against the CA
    #: when one is presented (mutual TLS) and lets SCRAM alone authenticate otherwise.
    client_auth: str = "requested"

    def __post_init__(self) -> None:
        for what, value in (("user", self.user), ("password", self.password)):
            if not _SCRAM_SAFE.fullmatch(value):
                raise ValueError(f"SCRAM {what} must match {_SCRAM_SAFE.pattern}")
        if not all("BEGIN CERTIFICATE" in pem for pem in (self.server_cert_pem, self.ca_pem)):
            raise ValueError("server_cert_pem and ca_pem must hold PEM certificates")
        if "-----BEGIN PRIVATE KEY-----" not in self.server_key_pem:
            raise ValueError(
                "server_key_pem must be an unencrypted PKCS#8 PEM key (BEGIN PRIVATE KEY): Kafka's "
                "PEM keystore reads no other form"
            )
        if self.client_auth not in ("none", "requested", "required"):
            raise ValueError(f"client_auth {self.client_auth!r}: none, requested or required")


@dataclass(frozen=True)
class KafkaContainerSettings:
    """Everything the container is started with; pure data, so a unit test can check it."""

    image: str
    #: The container's environment: CLUSTER_ID and every broker property as the image's KAFKA_*
    #: variables, except the advertised listeners (they need the mapped ports: start_files()).
    env: dict[str, str]
    #: The broker properties those variables stand for (values already properties-escaped).
    properties: dict[str, str]
    #: Container ports to publish on the host (on free ports the engine picks).
    exposed_ports: tuple[int, ...]
    #: The container waits for the start files, then runs the start script.
    command: tuple[str, ...]
    secured: SecuredListener | None = field(default=None, repr=False)

    def advertised_listeners(self, host: str, mapped: Mapping[int, int]) -> str:
        """PLAINTEXT (and SECURED) at the host's mapped ports; BROKER at localhost inside."""
        listeners = [
            f"PLAINTEXT://{host}:{mapped[PLAINTEXT_PORT]}",
            f"BROKER://localhost:{BROKER_PORT}",
        ]
        if self.secured is not None:
            listeners.append(f"{SECURED_LISTENER}://{host}:{mapped[SECURED_PORT]}")
        return ",".join(listeners)

    def start_script(self, host: str, mapped: Mapping[int, int]) -> str:
        advertised = shlex.quote(self.advertised_listeners(host, mapped))
        lines = [
            "#!/bin/bash", "set -euo pipefail", f"export KAFKA_ADVERTISED_LISTENERS={advertised}"
        ]
        if self.secured is not None:
            # The SCRAM user goes into the bootstrap metadata at format time (KIP-900). The
            # image's own format then finds the directory formatted, which it accepts.
            scram = f"{SCRAM_MECHANISM}=[name={self.secured.user},password={self.secured.password}]"
            lines.append(
                "/opt/kafka/bin/kafka-storage.sh format --cluster-id \"$CLUSTER_ID\" "
                f"--config {_FORMAT_PROPERTIES} --add-scram {shlex.quote(scram)}"
            )
        lines.append("exec /etc/kafka/docker/run")
        return "\n".join(lines) + "\n"

    def server_properties(self, host: str, mapped: Mapping[int, int]) -> str:
        """server.properties as the image renders it from the environment (the format step of
        a secured container reads this copy; values are already escaped)."""
        props = dict(self.properties)
        props["advertised.listeners"] = self.advertised_listeners(host, mapped)
        return "".join(f"{k}={v}\n" for k, v in sorted(props.items()))

    def start_files(self, host: str, mapped: Mapping[int, int]) -> list[tuple[str, bytes, int]]:
        """(path, content, mode) to copy into the started container, the ready marker last."""
        files = []
        if self.secured is not None:
            files.append((_FORMAT_PROPERTIES, self.server_properties(host, mapped).encode(), 0o644))
        files.append((_START_SCRIPT, self.start_script(host, mapped).encode(), 0o755))
        files.append((_READY_MARKER, b"", 0o644))
        return files


def kafka_container_settings(secured: SecuredListener | None = None) -> KafkaContainerSettings:
    """One KRaft node (broker and controller) of the pinned apache/kafka image. A one-node
    cluster must hold its internal topics with one replica: Kafka's defaults (transaction state
    log replication 3, min ISR 2) would make every transactional producer time out in
    InitProducerId, which is why testcontainers' KafkaContainer (7.6 cp-kafka, no such
    settings) is not used."""
    listeners = {
        "PLAINTEXT": PLAINTEXT_PORT, "BROKER": BROKER_PORT, "CONTROLLER": CONTROLLER_PORT,
    }
    protocols = {"PLAINTEXT": "PLAINTEXT", "BROKER": "PLAINTEXT", "CONTROLLER": "PLAINTEXT"}
    if secured is not None:
        listeners[SECURED_LISTENER] = SECURED_PORT
        protocols[SECURED_LISTENER] = "SASL_SSL"
    props = {
        "node.id": "1",
        "process.roles": "broker,controller",
        "controller.quorum.voters": f"1@localhost:{CONTROLLER_PORT}",
        "controller.listener.names": "CONTROLLER",
        "listeners": ",".join(f"{name}://0.0.0.0:{port}" for name, port in listeners.items()),
        "listener.security.protocol.map": ",".join(f"{n}:{p}" for n, p in protocols.items()),
        "inter.broker.listener.name": "BROKER",
        "log.dirs": "/var/lib/kafka/data",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "min.insync.replicas": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    ports = [PLAINTEXT_PORT]
    if secured is not None:
        prefix = f"listener.name.{SECURED_LISTENER.lower()}."
        chain = secured.server_cert_pem.strip() + "\n" + secured.ca_pem.strip() + "\n"
        props.update({
            "sasl.enabled.mechanisms": SCRAM_MECHANISM,
            f"{prefix}{SCRAM_MECHANISM.lower()}.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            f"{prefix}ssl.keystore.type": "PEM",
            f"{prefix}ssl.keystore.certificate.chain": chain,
            f"{prefix}ssl.keystore.key": secured.server_key_pem.strip() + "\n",
            f"{prefix}ssl.truststore.type": "PEM",
            f"{prefix}ssl.truststore.certificates": secured.ca_pem.strip() + "\n",
            f"{prefix}ssl.client.auth": secured.client_auth,
        })
        ports.append(SECURED_PORT)
    props = {k: property_value(v) for k, v in props.items()}
    env = {"CLUSTER_ID": KAFKA_CLUSTER_ID, **{env_name(k): v for k, v in props.items()}}
    command = (
        "bash", "-c",
        f"while [ ! -f {_READY_MARKER} ]; do sleep 0.1; done; exec bash {_START_SCRIPT}",
    )
    return KafkaContainerSettings(KAFKA_IMAGE, env, props, tuple(ports), command, secured)


def _tar(files: list[tuple[str, bytes, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, content, mode in files:
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.mtime = len(content), mode, int(time.time())
            tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()


@contextlib.contextmanager
def _kafka_container(
    settings: KafkaContainerSettings, timeout_s: float = 180
) -> Iterator[tuple[Any, str, dict[int, int]]]:
    """Start the container, copy in the start files once the mapped ports are known, wait until
    the PLAINTEXT listener answers from this machine. Yields (container, host, mapped ports)."""
    from testcontainers.core.container import DockerContainer

    container = DockerContainer(
        settings.image, command=list(settings.command), env=dict(settings.env)
    )
    container.with_exposed_ports(*settings.exposed_ports)
    with container:
        host = container.get_container_host_ip()
        mapped = {p: int(container.get_exposed_port(p)) for p in settings.exposed_ports}
        wrapped = container.get_wrapped_container()
        if not wrapped.put_archive("/", _tar(settings.start_files(host, mapped))):
            raise RuntimeError("could not copy the start script into the Kafka container")

        def logs() -> str:
            return wrapped.logs().decode(errors="replace")[-4000:]

        def alive() -> None:
            wrapped.reload()
            if wrapped.status in ("exited", "dead"):
                raise RuntimeError(f"the Kafka container exited during start-up:\n{logs()}")

        bootstrap = f"{host}:{mapped[PLAINTEXT_PORT]}"
        try:
            wait_until_ready(bootstrap, None, timeout_s, alive=alive)
        except RuntimeError as e:
            raise RuntimeError(f"{e}\nthe Kafka container's log ends:\n{logs()}") from None
        log.info("Apache Kafka (%s) in Docker at %s", settings.image, bootstrap)
        try:
            yield container, host, mapped
        finally:
            with contextlib.suppress(Exception):  # a paused container is not always removable
                wrapped.reload()
                if wrapped.status == "paused":
                    wrapped.unpause()


@contextlib.contextmanager
def testcontainers_broker() -> Iterator[Broker]:
    """Real Apache Kafka: the pinned apache/kafka image, one KRaft node, in Docker."""
    with _kafka_container(kafka_container_settings()) as (container, host, mapped):
        yield TestBroker(f"{host}:{mapped[PLAINTEXT_PORT]}", "testcontainers", container=container)


def _pem(value: str) -> str:
    """PEM text given either as such or as the path of a file holding it."""
    if "-----BEGIN " in value:
        return value
    with open(value) as f:
        return f.read()


@contextlib.contextmanager
def secured_container(
    server_cert_pem: str,
    server_key_pem: str,
    ca_pem: str,
    user: str,
    password: str,
    *,
    client_auth: str = "requested",
) -> Iterator[tuple[str, Broker]]:
    """The pinned apache/kafka container with an additional SASL_SSL listener: TLS with the
    given server certificate and key (PEM text or paths of PEM files; the certificate must name
    the host clients dial, normally "localhost"), trusting `ca_pem` for client certificates;
    one SCRAM-SHA-512 user created when the storage is formatted. Needs a Docker engine.

    Yields (bootstrap servers of the SASL_SSL listener, Broker); the Broker's own
    bootstrap_servers is the PLAINTEXT listener (for set-up and checks behind the client's
    back) and it can be frozen like the unsecured one."""
    secured = SecuredListener(
        _pem(server_cert_pem), _pem(server_key_pem), _pem(ca_pem), user, password, client_auth
    )
    with _kafka_container(kafka_container_settings(secured)) as (container, host, mapped):
        sasl_bootstrap = f"{host}:{mapped[SECURED_PORT]}"
        # The secured listener must work too, or the caller's tests would fail less clearly.
        try:
            wait_until_ready(sasl_bootstrap, None, 60, client_config={
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": SCRAM_MECHANISM,
                "sasl.username": user,
                "sasl.password": password,
                "ssl.ca.pem": secured.ca_pem,
            })
        except RuntimeError as e:
            tail = container.get_wrapped_container().logs().decode(errors="replace")[-4000:]
            raise RuntimeError(
                f"SASL_SSL listener: {e}\nthe Kafka container's log ends:\n{tail}"
            ) from None
        broker = TestBroker(f"{host}:{mapped[PLAINTEXT_PORT]}", "testcontainers",
                            container=container)
        yield sasl_bootstrap, broker


@contextlib.contextmanager
def apache_kafka_broker(generation: Generation = LATEST) -> Iterator[Broker]:
    """Apache Kafka from its Maven jars as the suite's `Broker` (kind "apache-kafka"), with
    every secured listener (a throwaway PKI): freeze() stops the JVM, `broker.node` is the node
    itself (kill, restart, listeners)."""
    with apache_kafka(generation, listeners=make_secured_listeners,
                      overrides=FEW_THREADS) as kafka:
        yield TestBroker(kafka.bootstrap_servers, "apache-kafka", node=kafka)


def broker_choice() -> str:
    """Which broker `kafka_broker()` will start, and why: printed in the test run's header."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if external:
        return f"the cluster at {external} (KAFKA_BOOTSTRAP_SERVERS)"
    ok, reason = docker_available()
    if ok:
        return f"real Apache Kafka ({KAFKA_IMAGE}) through Testcontainers (Docker engine reachable)"
    return (f"real Apache Kafka {LATEST.version} from its Maven jars, one KRaft node on loopback "
            f"({reason})")


@contextlib.contextmanager
def kafka_broker() -> Iterator[Broker]:
    """The broker tests use, per the resolution order above: `KAFKA_BOOTSTRAP_SERVERS`, else
    Testcontainers, else Apache Kafka from its Maven jars. Never the embedded broker: it lacks
    what the suite proves (fencing, timeouts, read_committed); `tansu_broker()` is the demo's."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if external:
        wait_until_ready(external, None)
        yield TestBroker(external, "external")
        return
    ok, reason = docker_available()
    if ok:
        with testcontainers_broker() as broker:
            yield broker
        return
    log.info("starting Apache Kafka from its Maven jars: %s", reason)
    with apache_kafka_broker() as broker:
        yield broker
