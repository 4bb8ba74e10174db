"""The secured cluster of the secured tests: real Apache Kafka's own secured listeners (SASL_SSL
with SCRAM-SHA-512, SSL with client certificates, SASL_PLAINTEXT with PLAIN...), on the node the
session's `broker` already runs (no broker of their own). Where the session's broker is not such
a node (a Docker engine gave a Testcontainers broker), the `secured_kafka` fixture starts one
Apache Kafka node from its Maven jars for the whole session."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest

from connectors.local.broker_handle import Broker
from integration_tests.support.secured_listeners import SecuredBroker, secured_listener

__all__ = ["SecuredBroker", "secured_cluster", "secured_kafka_broker"]


@contextlib.contextmanager
def secured_kafka_broker(broker: Broker) -> Iterator[Broker]:
    """`broker` itself when it is an Apache Kafka node this machine runs, else one started for
    the session; a skip when KAFKA_BOOTSTRAP_SERVERS names the cluster under test."""
    if broker.node is not None:
        yield broker
        return
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip():
        pytest.skip("KAFKA_BOOTSTRAP_SERVERS names the cluster under test: the secured tests need "
                    "an Apache Kafka node of their own (its SASL_SSL, SSL, mTLS and "
                    "SASL_PLAINTEXT listeners), started only when no cluster is given")
    from integration_tests.support.brokers import apache_kafka_broker

    # A node that cannot start fails the tests (KafkaUnavailable names what is missing).
    with apache_kafka_broker() as node_broker:
        yield node_broker


def secured_cluster(broker: Broker, protocol: str, *, mechanism: str = "SCRAM-SHA-512",
                    mtls: bool = False, user: str = "alice") -> SecuredBroker:
    """A secured listener of `broker` (the `secured_kafka` fixture's node)."""
    return secured_listener(broker.node, protocol, mechanism=mechanism, mtls=mtls,  # type: ignore[arg-type]
                            user=user)
