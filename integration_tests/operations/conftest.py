"""The operations lanes' shared clusters: package-scoped, so that a cluster lives while the
modules that use it run and is stopped after (a cluster left running until the session's end
costs a fifth of a core, idle). integration_tests/support/scheduling.py hands the modules of each
group to one xdist worker together, one after the other, so each cluster starts once in the
run."""

from __future__ import annotations

import os

import pytest


def _no_given_cluster(what: str) -> None:
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip():
        pytest.skip(f"KAFKA_BOOTSTRAP_SERVERS names the cluster under test: {what} starts "
                    "Apache Kafka nodes of its own only when no cluster is given")


@pytest.fixture(scope="package")
def loopback_cluster():
    """Three Apache Kafka 4.x nodes on loopback (integration_tests/support/kafka_cluster.py), for
    test_kafka_cluster.py and test_cluster_faults.py; a test that stops nodes restarts them,
    and each module's `cluster` fixture waits for the cluster to be whole before a test."""
    from connectors.local.apache_kafka import LATEST
    from integration_tests.support.kafka_cluster import kafka_cluster

    _no_given_cluster("the cluster lane")
    with kafka_cluster(LATEST) as c:
        print(f"\n3-node Apache Kafka {c.generation.version} at {c.bootstrap_servers}, "
              f"up in {c.startup_s:.1f} s")
        yield c


@pytest.fixture(scope="package")
def network_lab():
    """Three hosts in network namespaces (integration_tests/support/netns.py), for the lab's own
    tests (test_netns.py) and the partition lanes (test_network_partitions.py); a skip naming
    what failed where no lab can be made. Every cut is healed by the test that made it."""
    from integration_tests.support import netns

    reason = netns.unavailable()
    if reason:
        pytest.skip(f"network namespaces cannot be made here: {reason}")
    entered = False
    try:
        with netns.network_lab(hosts=3) as made:
            entered = True
            yield made
    except netns.LabUnavailable as e:
        if entered:
            raise
        pytest.skip(f"no network lab here: {e}")


@pytest.fixture(scope="package")
def lab_cluster(network_lab):
    """Three Apache Kafka 4.x nodes, node i in the lab's host i, started on first use."""
    from connectors.local.apache_kafka import LATEST, KafkaUnavailable
    from integration_tests.support.kafka_cluster import kafka_cluster

    _no_given_cluster("the lab's cluster")
    entered = False
    try:
        with kafka_cluster(LATEST, hosts=network_lab.hosts, launcher=network_lab.launcher) as c:
            entered = True
            print(f"\n3-node Apache Kafka {c.generation.version} in namespaces at "
                  f"{c.bootstrap_servers}, up in {c.startup_s:.1f} s")
            yield c
    except KafkaUnavailable as e:
        if entered:
            raise
        pytest.skip(f"Apache Kafka cannot run here: {e}")
