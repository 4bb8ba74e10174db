"""Network partitions, not only dead processes: a 3-node Apache Kafka cluster whose nodes each
run in a network namespace of their own (integration_tests/support/netns.py), cut from the pipelines or
from each other while two exactly-once queries run. A cut drops packets without a reset, so
clients hang until their own timeouts, which a killed broker never shows.

Three cuts, each under fresh queries (integration_tests/support/cluster_pipelines.py): both for
the whole-cluster cut; the Kafka one alone for the two cuts of one broker, whose effect on a
query is its source's (the same in both queries) and its Kafka sink's commit (the Delta sink's
commit reaches no broker):
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

import time
from collections.abc import Callable

import pytest

from integration_tests.support.cluster_pipelines import (
    PARTITIONS,
    Query,
    Restart,
    pipelines,
    report,
    stalls,
    task_retries,
)
from integration_tests.support.kafka_cluster import KafkaCluster
from integration_tests.support.netns import Lab
from integration_tests.support.streaming import wait_for

#: The sink's transaction timeout in these tests: shorter than the whole-cluster cut, so that
#: the brokers abort what was prepared before it (the case a restart must repair).
TRANSACTION_TIMEOUT_MS = 20_000
CUT_S = 45
#: A cut whose effect is watched (`seen`) is healed this long after the effect shows (at most
#: CUT_S): the queries keep meeting the changed cluster meanwhile.
AFTER_SEEN_S = 15
KAFKA_QUERY, DELTA_QUERY = "kafka-eos -> kafka-eos", "kafka-eos -> delta-eos"


@pytest.fixture(scope="module")
def lab(network_lab: Lab) -> Lab:
    """The session's lab of three hosts (conftest.py; shared with test_netns.py)."""
    return network_lab


@pytest.fixture
def cluster(lab_cluster: KafkaCluster) -> KafkaCluster:
    """The session's cluster in the lab, node i in host i, whole."""
    lab_cluster.wait_healthy(timeout_s=180)
    return lab_cluster


def keep_going(queries: tuple[Query, ...], since: float, timeout_s: float, what: str) -> None:
    """Until each query committed a batch after `since`; a query that stopped is started
    again on its checkpoint (and why it stopped is kept)."""
    def committed() -> bool:
        for q in queries:
            q.restart_if_failed()
        return all(q.committed_since(since) >= 1 for q in queries)

    wait_for(committed, timeout_s, f"a committed batch of each query {what}")


#: A batch whose reads and writes ended before the cut may still commit just after it (the
#: Delta query's commit needs no broker): a stall is at least the cut less this.
IN_FLIGHT_S = 3


def run_cut(cluster: KafkaCluster, tmp_path, scenario: str, cut, describe: str, *,
            stalled: tuple[str, ...] = (), seen: Callable[[], bool] | None = None,
            delta: bool = True) -> None:
    """Two queries running, `cut()` for CUT_S seconds, healed, then both exactly once.

    The cut must have had its effect, or a cut that silently stopped cutting would pass: the
    queries named in `stalled` committed nothing for (about) the whole cut, and `seen`, where
    given, became true while the cut held."""
    with pipelines(cluster, tmp_path, scenario, delta=delta, kafka_sink=(
            "--sink-option", f"kafka.transaction.timeout.ms={TRANSACTION_TIMEOUT_MS}")) as run:
        queries = run.queries
        keep_going(queries, 0, 240, "at the start")
        handle, where = cut(cluster, run.topic, run.out_topic, run.sink_ids)
        down_at = time.time()
        seen_after = None
        while time.time() < down_at + CUT_S:
            if seen is not None and seen_after is None and seen():
                seen_after = time.time() - down_at
            if seen_after is not None and time.time() > down_at + seen_after + AFTER_SEEN_S:
                break  # the cut did what it is for; the clients have met it since
            time.sleep(0.5)
        handle.heal()
        healed_at = time.time()
        keep_going(queries, healed_at, 420, f"after the cut ({describe}) healed")
        expected = run.end_exactly_once(input_after=healed_at, restart_failed=True)
    lines = [f"{len(expected)} records; {describe}: {where}; cut {healed_at - down_at:.0f} s"]
    if seen is not None:
        lines.append(f"the cut's effect seen {seen_after:.1f} s in" if seen_after is not None
                     else "the cut's effect never seen")
    stall = {}
    for q in queries:
        (stall[q.name],) = stalls(q, [Restart(0, scenario, down_at)], run.until)
        outcome = (f"stopped {len(q.failures)}x, restarted: {q.failures}" if q.failures
                   else "rode through")
        lines.append(f"{q.name}: stall {stall[q.name]:.1f} s; {outcome}; task attempts retried "
                     f"{task_retries(q.log)}")
    report(f"network partition: {describe}", lines)
    assert seen is None or seen_after is not None, f"{describe}: the cut had no effect"
    for name in stalled:
        assert stall[name] >= CUT_S - IN_FLIGHT_S, \
            f"{describe}: the {name} query committed during the cut (stall {stall[name]:.1f} s)"
    # The one way a query may stop (docs/operations.md#network-partitions): the brokers aborted
    # a prepared transaction on its timeout during the cut. Before kafkaRetryTimeout both
    # queries stopped at such cuts on "Failed to get watermark offsets: Local: Timed out".
    for q in queries:
        others = [f for f in q.failures if "TransactionLost" not in f]
        assert not others, f"the {q.name} query stopped on something a wait would have healed: {others}"


def test_the_whole_pipeline_cut_from_the_whole_cluster(lab: Lab, cluster: KafkaCluster, tmp_path):
    def cut(cluster, topic, out_topic, tids):
        return lab.cut_all_clients(), "every broker unreachable from Spark, the brokers still in touch"

    run_cut(cluster, tmp_path, "cutall", cut, "the pipeline cut from the cluster",
            stalled=(KAFKA_QUERY, DELTA_QUERY))


def test_the_spark_side_cut_from_the_transaction_coordinator(lab: Lab, cluster: KafkaCluster,
                                                             tmp_path):
    def cut(cluster, topic, out_topic, tids):
        coordinators = [cluster.transaction_coordinator(t) for t in tids]
        node = max(set(coordinators), key=coordinators.count)
        return (lab.cut_client_side(node),
                f"node {node}, coordinator of {coordinators.count(node)} of the sink's "
                f"{len(tids)} ids, unreachable from Spark")

    # every batch ends each of its partitions' transactions, some at the cut coordinator
    run_cut(cluster, tmp_path, "cutcoord", cut, "Spark cut from the transaction coordinator",
            stalled=(KAFKA_QUERY,), delta=False)


def test_a_partition_leader_cut_from_the_other_brokers(lab: Lab, cluster: KafkaCluster, tmp_path):
    cut_leader: dict[str, object] = {}

    def cut(cluster, topic, out_topic, tids):
        node = cluster.leader_of(out_topic, 0)
        cut_leader.update(node=node, topic=out_topic)
        led = [p for p in range(PARTITIONS) if cluster.leader_of(topic, p) == node]
        return (lab.cut_from_peers(node),
                f"node {node}, leader of output partition 0 and input partitions {led}, cut "
                "from the other brokers (Spark still reaches it)")

    def leader_lost() -> bool:
        """The cut leader is out of the output partition's ISR, and no longer its leader."""
        try:
            state = cluster.partition_states(cut_leader["topic"])[0]
        except Exception:  # a view that timed out: ask again
            return False
        return cut_leader["node"] not in state.isr and state.leader not in (cut_leader["node"], -1)

    run_cut(cluster, tmp_path, "cutpeers", cut, "a leader cut from its peers", seen=leader_lost,
            delta=False)
