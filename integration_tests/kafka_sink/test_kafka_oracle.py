"""The oracle is proved on a topic holding known committed and aborted transactions."""

from __future__ import annotations

from confluent_kafka import Producer

from integration_tests.support.kafka_data import create_topic, unique_topic
from connectors.local.kafka_oracle import committed, read_partition


def test_oracle_applies_commit_and_abort_markers(bootstrap):
    topic = unique_topic("oracle")
    create_topic(bootstrap, topic, 1)
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, key=b"plain", value=b"p0", partition=0)
    plain.flush(10)
    txp = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-tx"})
    txp.init_transactions(30)
    expected_committed, expected_aborted = [b"p0"], []
    for i, outcome in enumerate(["commit", "abort", "commit", "abort"]):
        txp.begin_transaction()
        values = [f"t{i}-{j}".encode() for j in range(3)]
        for v in values:
            txp.produce(topic, value=v, partition=0)
        txp.flush(10)
        if outcome == "commit":
            txp.commit_transaction(30)
            expected_committed += values
        else:
            txp.abort_transaction(30)
            expected_aborted += values
    txp.begin_transaction()  # left open: neither committed nor aborted
    txp.produce(topic, value=b"open", partition=0)
    txp.flush(10)

    log = read_partition(bootstrap, topic, 0)
    assert [r.value for r in log.committed] == expected_committed
    assert [r.value for r in log.aborted] == expected_aborted
    assert [r.value for r in log.open] == [b"open"]
    assert [m[2] for m in log.markers] == ["COMMIT", "ABORT", "COMMIT", "ABORT"]
    assert [r.value for r in committed(bootstrap, topic)] == expected_committed
