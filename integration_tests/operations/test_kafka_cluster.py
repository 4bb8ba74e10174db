"""The 3-node Apache Kafka cluster of integration_tests/support/kafka_cluster.py does what the tests of
broker failures will rely on: full ISRs, leadership that moves off a killed node, transactions
that commit with one node down, a node that restarts on its data and rejoins every ISR, and
freeze/resume."""

from __future__ import annotations

import os
import time
import uuid

import pytest

from integration_tests.support.kafka_cluster import KafkaCluster


@pytest.fixture
def cluster(loopback_cluster: KafkaCluster) -> KafkaCluster:
    """The session's 3-node cluster (shared with test_cluster_faults.py), whole."""
    loopback_cluster.wait_healthy(timeout_s=180)
    return loopback_cluster


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _commit_transaction(bootstrap: str, topic: str, values: list[bytes]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 0,
                         "transactional.id": _topic("cluster-txn"),
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(60)
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value, partition=0)
    producer.commit_transaction(60)


def _read_committed(bootstrap: str, topic: str, count: int, timeout_s: float = 60) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": _topic("cluster-read"),
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "log_level": 0})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                values.append(message.value())
        return values
    finally:
        consumer.close()


def test_three_brokers_and_full_isr(cluster: KafkaCluster) -> None:
    assert [n.node_id for n in cluster.nodes] == [1, 2, 3]
    assert all(n.alive and n.serving for n in cluster.nodes)
    assert all(v.brokers == {1, 2, 3} for v in cluster.views().values())
    topic = _topic("rf3")
    cluster.create_topic(topic, 3)
    states = cluster.partition_states(topic)
    assert sorted(states) == [0, 1, 2]
    for state in states.values():
        assert sorted(state.replicas) == [1, 2, 3]
        assert sorted(state.isr) == [1, 2, 3]
    assert cluster.transaction_coordinator("cluster-probe") in (1, 2, 3)


def test_leader_killed_transactions_commit_and_node_rejoins(cluster: KafkaCluster) -> None:
    topic = _topic("kill")
    cluster.create_topic(topic, 1)
    cluster.wait_healthy(topics=[topic])
    leader = cluster.leader_of(topic, 0)
    node = cluster.node(leader)

    node.kill()
    assert not node.alive
    began = time.monotonic()
    new_leader = cluster.wait_for_leader_change(topic, 0, leader, timeout_s=60)
    moved_s = time.monotonic() - began
    assert new_leader != leader

    values = [f"v{i}".encode() for i in range(10)]
    began = time.monotonic()
    _commit_transaction(cluster.bootstrap_servers, topic, values)
    committed_s = time.monotonic() - began
    assert _read_committed(cluster.bootstrap_servers, topic, len(values)) == values
    state = cluster.partition_states(topic)[0]
    assert leader not in state.isr, state

    start_s = node.start()
    began = time.monotonic()
    cluster.wait_in_sync(leader, [topic], timeout_s=120)
    in_sync_s = time.monotonic() - began
    assert sorted(cluster.partition_states(topic)[0].isr) == [1, 2, 3]
    cluster.wait_healthy(topics=[topic])
    print(f"\nleader {leader} killed: leadership moved to {new_leader} in {moved_s:.1f} s, "
          f"transaction committed in {committed_s:.1f} s, node back in {start_s:.1f} s, "
          f"in every ISR {in_sync_s:.1f} s later")


def test_controlled_shutdown_and_restart(cluster: KafkaCluster) -> None:
    topic = _topic("term")
    cluster.create_topic(topic, 3)
    node = cluster.node(2)
    stopped_s = node.terminate()
    assert not node.alive
    # A controlled shutdown hands its leaderships over before the node exits.
    assert all(s.leader not in (2, -1) for s in cluster.partition_states(topic).values())
    start_s = node.start()
    node.wait_in_sync([topic])
    cluster.wait_healthy(topics=[topic])
    print(f"\nnode 2: SIGTERM to exit {stopped_s:.1f} s, back in {start_s:.1f} s")


def test_freeze_and_resume(cluster: KafkaCluster) -> None:
    node = cluster.node(3)
    pid = node.pid
    node.freeze()
    try:
        assert node.alive and not node.serving
        time.sleep(2)
    finally:
        node.resume()
    assert node.alive and node.pid == pid
    node.wait_serving(30)
    cluster.wait_healthy()


def _request_threads(pid: int) -> int:
    """Threads of the node's JVM named data-plane-kafka-* (request handlers, network processors
    and acceptors: /proc keeps the first 15 characters of a thread's name)."""
    count = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                count += f.read().startswith("data-plane-kafk")
        except OSError:  # the thread ended meanwhile
            pass
    return count


def test_the_suites_nodes_run_few_request_threads(cluster: KafkaCluster, broker) -> None:
    """Each idle request thread wakes every 300 ms: the suite's nodes run FEW_THREADS (2 I/O
    threads for the broker's requests and 2 for the controller's, 1 network thread a listener
    beside its acceptor), not Kafka's 8, 8 and 3 a listener, so that the nine or so nodes a run
    keeps up cost less CPU while they wait (docs/testing.md)."""
    for node in cluster.nodes:
        # PLAINTEXT and CONTROLLER: 4 handlers, 2 network threads, 2 acceptors (24 before)
        assert 0 < _request_threads(node.pid) <= 4 + 2 * 2, f"node {node.node_id}"
    if broker.node is not None:
        listeners = len(broker.node.ports)
        assert 0 < _request_threads(broker.node.process.pid) <= 4 + 2 * listeners
