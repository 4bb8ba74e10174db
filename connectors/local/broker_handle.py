"""A running Kafka broker as the CLI and the demo see it, and the loopback ports they use.

`Broker.capabilities` says what the broker can do (the embedded broker lacks some of Kafka's).
What only the tests do with a broker (freeze and resume it, pause its container) is theirs:
integration_tests/support/broker_control.py.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Broker:
    bootstrap_servers: str
    kind: str  # "external" | "testcontainers" | "apache-kafka" | "tansu"
    #: Features a test may depend on; False means "known missing" on this broker.
    capabilities: dict[str, bool] = field(default_factory=dict)
    #: The broker's process when this machine runs it, else None.
    pid: int | None = None
    #: The Apache Kafka node this machine runs (connectors.local.apache_kafka.ApacheKafka):
    #: its process, kill(), restart(). None for other kinds.
    node: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.node is not None:
            self.pid = None  # the node's current process, which restart() replaces

    def process_id(self) -> int | None:
        """The broker's process now (a restarted node's is a new one); None if not ours."""
        if self.node is not None and self.node.process is not None:
            return self.node.process.pid
        return self.pid

    def supports(self, feature: str) -> bool:
        return self.capabilities.get(feature, True)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_free(port: int) -> bool:
    """Whether a listener could bind 127.0.0.1:`port` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def wait_until_ready(
    bootstrap: str,
    proc: subprocess.Popen | None,
    timeout_s: float = 30,
    *,
    client_config: Mapping[str, str] | None = None,
    alive: Any = None,
) -> None:
    """Until an admin client lists the topics. `client_config`: extra librdkafka settings (e.g.
    SASL_SSL); `alive`: a callable raising when the broker is gone (a container that exited)."""
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"local broker exited with status {proc.returncode}")
        if alive is not None:
            alive()
        try:
            # log_level 0: "connection refused" while the broker starts is expected, not news.
            config = {"bootstrap.servers": bootstrap, "log_level": 0, **(client_config or {})}
            AdminClient(config).list_topics(timeout=2)
            return
        except Exception as e:
            last = e
            time.sleep(0.2)
    raise RuntimeError(f"broker at {bootstrap} not ready after {timeout_s}s: {last}")
