"""Network partitions, not only dead processes: a 3-node Apache Kafka cluster whose nodes each
run in a network namespace of their own (integration_tests/support/netns.py), cut from the pipelines or
from each other while two exactly-once queries run. A cut drops packets without a reset, so
clients hang until their own timeouts, which a killed broker never shows.

Three cuts, each under a fresh pair of queries (integration_tests/support/cluster_pipelines.py):
* the whole pipeline from the whole cluster, for longer than librdkafka's `request.timeout.ms`
  (30 s) and the sink's `kafka.transaction.timeout.ms` (20 s here);
* the Spark side from the one broker that is the transaction coordinator of the sink's ids,
  while batches commit;
* one partition leader from the other brokers (it falls out of the ISR and loses its leadership
  while the clients still reach it).

After each the queries end exactly once. A query either waits under `kafkaRetryTimeout` and goes
on, or stops with an error naming what was lost (TransactionLost, when the brokers aborted a
prepared transaction on its timeout during the cut) and, restarted on its checkpoint, writes the
lost partitions again. Which of the two each query did is printed with the stall it saw.
"""

from __future__ import annotations

import os
import time

import pytest

from connectors.local.apache_kafka import LATEST
from integration_tests.support.cluster_pipelines import (
    PARTITIONS,
    Query,
    Restart,
    pipelines,
    report,
    stalls,
    task_retries,
)
from integration_tests.support.kafka_cluster import KafkaCluster, kafka_cluster
from integration_tests.support.netns import Lab, network_lab, unavailable
from integration_tests.support.streaming import wait_for

#: The sink's transaction timeout in these tests: shorter than the whole-cluster cut, so that
#: the brokers abort what was prepared before it (the case a restart must repair).
TRANSACTION_TIMEOUT_MS = 20_000
CUT_S = 45


@pytest.fixture(scope="module")
def lab() -> Lab:
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip():
        pytest.skip("KAFKA_BOOTSTRAP_SERVERS names the cluster under test: the partition lane "
                    "runs a cluster of its own in network namespaces only when none is given")
    reason = unavailable()
    if reason:
        pytest.skip(f"network namespaces cannot be made here: {reason}")
    with network_lab(hosts=3) as made:
        yield made


@pytest.fixture(scope="module")
def cluster(lab: Lab) -> KafkaCluster:
    with kafka_cluster(LATEST, hosts=lab.hosts, launcher=lab.launcher) as c:
        print(f"\n3-node Apache Kafka {c.generation.version} in namespaces at "
              f"{c.bootstrap_servers}, up in {c.startup_s:.1f} s")
        yield c


def keep_going(queries: tuple[Query, ...], since: float, timeout_s: float, what: str) -> None:
    """Until each query committed a batch after `since`; a query that stopped is started
    again on its checkpoint (and why it stopped is kept)."""
    def committed() -> bool:
        for q in queries:
            q.restart_if_failed()
        return all(q.committed_since(since) >= 1 for q in queries)

    wait_for(committed, timeout_s, f"a committed batch of each query {what}")


def run_cut(cluster: KafkaCluster, tmp_path, scenario: str, cut, describe: str) -> None:
    """Two queries running, `cut()` for CUT_S seconds, healed, then both exactly once."""
    with pipelines(cluster, tmp_path, scenario, kafka_sink=(
            "--sink-option", f"kafka.transaction.timeout.ms={TRANSACTION_TIMEOUT_MS}")) as run:
        queries = run.queries
        keep_going(queries, 0, 240, "at the start")
        handle, where = cut(cluster, run.topic, run.out_topic, run.sink_ids)
        down_at = time.time()
        time.sleep(CUT_S)
        handle.heal()
        healed_at = time.time()
        keep_going(queries, healed_at, 420, f"after the cut ({describe}) healed")
        expected = run.end_exactly_once(restart_failed=True)
    lines = [f"{len(expected)} records; {describe}: {where}; cut {healed_at - down_at:.0f} s"]
    for q in queries:
        (s,) = stalls(q, [Restart(0, scenario, down_at)], run.until)
        outcome = (f"stopped {len(q.failures)}x, restarted: {q.failures}" if q.failures
                   else "rode through")
        lines.append(f"{q.name}: stall {s:.1f} s; {outcome}; task attempts retried "
                     f"{task_retries(q.log)}")
    report(f"network partition: {describe}", lines)
    # The one way a query may stop (docs/operations.md#network-partitions): the brokers aborted
    # a prepared transaction on its timeout during the cut. Before kafkaRetryTimeout both
    # queries stopped at such cuts on "Failed to get watermark offsets: Local: Timed out".
    for q in queries:
        others = [f for f in q.failures if "TransactionLost" not in f]
        assert not others, f"the {q.name} query stopped on something a wait would have healed: {others}"


def test_the_whole_pipeline_cut_from_the_whole_cluster(lab: Lab, cluster: KafkaCluster, tmp_path):
    def cut(cluster, topic, out_topic, tids):
        return lab.cut_all_clients(), "every broker unreachable from Spark, the brokers still in touch"

    run_cut(cluster, tmp_path, "cutall", cut, "the pipeline cut from the cluster")


def test_the_spark_side_cut_from_the_transaction_coordinator(lab: Lab, cluster: KafkaCluster,
                                                             tmp_path):
    def cut(cluster, topic, out_topic, tids):
        coordinators = [cluster.transaction_coordinator(t) for t in tids]
        node = max(set(coordinators), key=coordinators.count)
        return (lab.cut_client_side(node),
                f"node {node}, coordinator of {coordinators.count(node)} of the sink's "
                f"{len(tids)} ids, unreachable from Spark")

    run_cut(cluster, tmp_path, "cutcoord", cut, "Spark cut from the transaction coordinator")


def test_a_partition_leader_cut_from_the_other_brokers(lab: Lab, cluster: KafkaCluster, tmp_path):
    def cut(cluster, topic, out_topic, tids):
        node = cluster.leader_of(out_topic, 0)
        led = [p for p in range(PARTITIONS) if cluster.leader_of(topic, p) == node]
        return (lab.cut_from_peers(node),
                f"node {node}, leader of output partition 0 and input partitions {led}, cut "
                "from the other brokers (Spark still reaches it)")

    run_cut(cluster, tmp_path, "cutpeers", cut, "a leader cut from its peers")
