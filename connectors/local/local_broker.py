"""A local broker for users: `kafka-eos broker` and the demo.

Real Apache Kafka from its Maven jars where Java and the jars can be had (connectors/local/
apache_kafka.py), else the embedded broker (connectors/local/tansu.py), which misleads a user's
own checks in ways it says (`TANSU_LACKS`).
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from connectors.core import extras
from connectors.local.broker_handle import Broker, port_free
from connectors.local.tansu import tansu_broker

#: `kafka-eos broker --broker` / `demo --broker`: which local broker to start.
LOCAL_BROKER_KINDS = ("auto", "apache-kafka", "embedded")


@dataclass
class LocalBroker:
    """A local broker started for a user (`local_broker()`)."""

    broker: Broker
    #: e.g. "Apache Kafka 4.4.0 (one KRaft node, from its Maven jars)"
    description: str
    #: Why the embedded broker runs instead of Apache Kafka (None: Apache Kafka runs, or the
    #: embedded one was asked for).
    fallback_reason: str | None = None

    @property
    def bootstrap_servers(self) -> str:
        return self.broker.bootstrap_servers

    @property
    def embedded(self) -> bool:
        return self.broker.kind == "tansu"

    def alive(self) -> bool:
        """False once the broker's process has exited."""
        node = self.broker.node
        if node is not None:
            return node.process is not None and node.process.poll() is None
        if self.broker.pid is not None:
            try:  # a child that exited stays a zombie until reaped: read its state
                with open(f"/proc/{self.broker.pid}/stat") as f:
                    return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
            except OSError:
                return False
        return True


class LocalBrokerError(RuntimeError):
    """The local broker could not start; the message says why and what to do."""


@contextlib.contextmanager
def local_broker(kind: str = "auto", *, port: int | None = None,
                 progress: Any = None) -> Iterator[LocalBroker]:
    """Start a local broker for a user's own pipelines (`kafka-eos broker`, the demo):

    * "auto": real Apache Kafka from its Maven jars (the test suite's broker: the same jars,
      fetched once into the same cache, by `mvn` or PySpark's Ivy) whenever Java and the jars
      (cached, or Maven Central) are there, because the embedded broker misleads a user's own
      checks (TANSU_LACKS); the embedded broker only when Apache Kafka cannot be had here
      (`fallback_reason` says why);
    * "apache-kafka": Apache Kafka or an error; "embedded": the embedded broker.

    `port`: the PLAINTEXT listener's port (else a free one). `progress(text)` is told what is
    being done while it starts (fetching the jars the first time takes a minute)."""
    if kind not in LOCAL_BROKER_KINDS:
        raise ValueError(f"kind must be one of {', '.join(LOCAL_BROKER_KINDS)}, not {kind!r}")
    if port and not port_free(port):
        raise LocalBrokerError(
            f"port {port} is in use on 127.0.0.1 (another broker?): choose another with --port, "
            "or --port 0 for any free one")
    say = progress or (lambda text: None)
    fallback = None
    if kind != "embedded":
        from connectors.local.apache_kafka import (
            LATEST,
            KafkaUnavailable,
            apache_kafka,
            cache_dir,
            kafka_jars,
        )

        description = f"Apache Kafka {LATEST.version} (one KRaft node, from its Maven jars)"
        try:
            if shutil.which("java") is None:  # the jars may be cached: Java is needed anyway
                raise KafkaUnavailable("Apache Kafka needs Java 17 on PATH (java not found)")
            if not (cache_dir() / "apache-kafka" / LATEST.version / "complete").exists():
                say(f"fetching Apache Kafka {LATEST.version}'s jars from Maven Central into "
                    f"{cache_dir()} (once, about 80 MB)")
            kafka_jars(LATEST)
        except KafkaUnavailable as e:
            if kind == "apache-kafka":
                raise LocalBrokerError(f"Apache Kafka cannot run here: {e}") from None
            fallback = str(e).splitlines()[0][:300]
        else:
            say(f"starting {description}")
            with contextlib.ExitStack() as stack:
                try:  # the start only: errors of the caller's block pass through untouched
                    node = stack.enter_context(apache_kafka(LATEST, plaintext_port=port))
                except KafkaUnavailable as e:
                    raise LocalBrokerError(str(e)) from None
                yield LocalBroker(Broker(node.bootstrap_servers, "apache-kafka", node=node),
                                  description)
            return
    try:
        extras.require("local")
    except extras.MissingExtra as e:
        why = f"Apache Kafka cannot run here ({fallback}), and " if fallback else ""
        raise LocalBrokerError(f"{why}{e}") from None
    say("starting the embedded Kafka-compatible broker (Tansu)")
    with contextlib.ExitStack() as stack:
        try:
            broker = stack.enter_context(tansu_broker(port))
        except (FileNotFoundError, RuntimeError) as e:
            raise LocalBrokerError(f"the embedded broker could not start: {e}") from None
        yield LocalBroker(broker, "the embedded Kafka-compatible broker (Tansu 0.6.0)", fallback)
