"""Network partitions, not only dead processes: a 3-node Apache Kafka cluster whose nodes each
run in a network namespace of their own (integration_tests/support/netns.py), cut from the pipelines or
from each other while two exactly-once queries run. A cut drops packets without a reset, so
clients hang until their own timeouts, which a killed broker never shows.

Three cuts in turn, under one pair of running queries (integration_tests/support/
cluster_pipelines.py), each healed and followed by committed batches before the next:
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
from dataclasses import dataclass

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


@dataclass
class Cut:
    """One fault of the run: `cut(cluster, topic, out_topic, sink_ids)` makes it and returns
    (its handle, where it is); `stalled`: the queries it must stop committing for the whole
    cut; `seen`: its effect, which must show while it holds (the cut is healed AFTER_SEEN_S
    later)."""

    name: str
    describe: str
    cut: Callable
    stalled: tuple[str, ...] = ()
    seen: Callable[[], bool] | None = None
    where: str = ""
    down_at: float = 0.0
    healed_at: float = 0.0
    seen_after: float | None = None


def hold(cut: Cut, cluster: KafkaCluster, run, queries: tuple[Query, ...]) -> None:
    """Make the cut, hold it CUT_S seconds (or until AFTER_SEEN_S after its effect showed),
    heal it, and wait until each query committed again."""
    handle, cut.where = cut.cut(cluster, run.topic, run.out_topic, run.sink_ids)
    cut.down_at = time.time()
    while time.time() < cut.down_at + CUT_S:
        if cut.seen is not None and cut.seen_after is None and cut.seen():
            cut.seen_after = time.time() - cut.down_at
        if cut.seen_after is not None and time.time() > cut.down_at + cut.seen_after + AFTER_SEEN_S:
            break  # the cut did what it is for; the clients have met it since
        time.sleep(0.5)
    handle.heal()
    cut.healed_at = time.time()
    keep_going(queries, cut.healed_at, 420, f"after the cut ({cut.describe}) healed")


def test_the_pipeline_cut_from_the_cluster_then_from_the_coordinator_then_a_leader_from_its_peers(
        lab: Lab, cluster: KafkaCluster, tmp_path):
    """The three cuts in turn under one pair of running queries (one Spark start for the three,
    not three: the suite's budget), each healed and followed by committed batches of both
    queries before the next, and both exactly once at the end. Each cut must have had its
    effect, or a cut that silently stopped cutting would pass: the queries named in `stalled`
    committed nothing for (about) the whole cut, and `seen` became true while the cut held."""
    cut_leader: dict[str, object] = {}

    def cut_all(cluster, topic, out_topic, tids):
        return lab.cut_all_clients(), "every broker unreachable from Spark, the brokers still in touch"

    def cut_coordinator(cluster, topic, out_topic, tids):
        # every batch ends each of its partitions' transactions, some at the cut coordinator
        coordinators = [cluster.transaction_coordinator(t) for t in tids]
        node = max(set(coordinators), key=coordinators.count)
        return (lab.cut_client_side(node),
                f"node {node}, coordinator of {coordinators.count(node)} of the sink's "
                f"{len(tids)} ids, unreachable from Spark")

    def cut_from_peers(cluster, topic, out_topic, tids):
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

    cuts = [
        Cut("cutall", "the pipeline cut from the cluster", cut_all,
            stalled=(KAFKA_QUERY, DELTA_QUERY)),
        Cut("cutcoord", "Spark cut from the transaction coordinator", cut_coordinator,
            stalled=(KAFKA_QUERY,)),
        Cut("cutpeers", "a leader cut from its peers", cut_from_peers, seen=leader_lost),
    ]
    with pipelines(cluster, tmp_path, "cuts", kafka_sink=(
            "--sink-option", f"kafka.transaction.timeout.ms={TRANSACTION_TIMEOUT_MS}")) as run:
        queries = run.queries
        keep_going(queries, 0, 240, "at the start")
        for cut in cuts:
            hold(cut, cluster, run, queries)
        expected = run.end_exactly_once(input_after=cuts[-1].healed_at, restart_failed=True)
    windows = [Restart(0, cut.name, cut.down_at) for cut in cuts]
    stall = {q.name: stalls(q, windows, run.until) for q in queries}
    lines = [f"{len(expected)} records"]
    for i, cut in enumerate(cuts):
        lines.append(f"{cut.describe}: {cut.where}; cut {cut.healed_at - cut.down_at:.0f} s")
        if cut.seen is not None:
            lines.append(f"  the cut's effect seen {cut.seen_after:.1f} s in"
                         if cut.seen_after is not None else "  the cut's effect never seen")
        lines += [f"  {name}: stall {values[i]:.1f} s" for name, values in stall.items()]
    for q in queries:
        outcome = (f"stopped {len(q.failures)}x, restarted: {q.failures}" if q.failures
                   else "rode through")
        lines.append(f"{q.name}: {outcome}; task attempts retried {task_retries(q.log)}")
    report("network partitions", lines)
    for i, cut in enumerate(cuts):
        assert cut.seen is None or cut.seen_after is not None, \
            f"{cut.describe}: the cut had no effect"
        for name in cut.stalled:
            assert stall[name][i] >= CUT_S - IN_FLIGHT_S, \
                f"{cut.describe}: the {name} query committed during the cut " \
                f"(stall {stall[name][i]:.1f} s)"
    # The one way a query may stop (docs/operations.md#network-partitions): the brokers aborted
    # a prepared transaction on its timeout during a cut. Before kafkaRetryTimeout both
    # queries stopped at such cuts on "Failed to get watermark offsets: Local: Timed out".
    for q in queries:
        others = [f for f in q.failures if "TransactionLost" not in f]
        assert not others, f"the {q.name} query stopped on something a wait would have healed: {others}"
