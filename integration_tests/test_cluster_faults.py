"""A 3-node Apache Kafka cluster restarted broker by broker, and with its quorum lost, under two
running exactly-once queries (`kafka-eos -> kafka-eos` and `kafka-eos -> delta-eos`): neither
query fails through a rolling restart, both keep committing, and both end exactly once.

One cluster per generation (4.x with transaction version 2, and 3.9) for the whole module, one
pair of pipelines per scenario. Input keeps arriving from a producer of the test's own while the
brokers restart, so every restart meets batches being read, written and committed. The stall a
restart causes (seconds without a committed batch, from the checkpoint's `commits/` files) is
printed for the closing note and docs/operations.md; it is measured, never asserted.
"""

from __future__ import annotations

import collections
import os
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Producer

from connectors.testing.apache_kafka import GENERATION_3, LATEST
from connectors.testing.kafka_oracle import committed
from integration_tests.delta_oracle import assert_records_once, table_records
from integration_tests.kafka_cluster import KafkaCluster, kafka_cluster
from integration_tests.kafka_data import Record
from integration_tests.processes import kill_group, log_tail, start_pipeline
from integration_tests.streaming import wait_for

PIPELINE = "integration_tests.pipelines.eos_pipeline"
PARTITIONS = 4
#: Records a second the test's producer writes while brokers restart.
RATE = 100


@pytest.fixture(scope="module", params=["kafka-4", "kafka-3.9"])
def cluster(request: pytest.FixtureRequest) -> KafkaCluster:
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip():
        pytest.skip("KAFKA_BOOTSTRAP_SERVERS names the cluster under test: the cluster lane "
                    "starts three Apache Kafka nodes of its own only when no cluster is given")
    generation = LATEST if request.param == "kafka-4" else GENERATION_3
    with kafka_cluster(generation) as c:
        print(f"\n3-node Apache Kafka {c.generation.version} at {c.bootstrap_servers}, "
              f"up in {c.startup_s:.1f} s")
        yield c


class SteadyProducer:
    """Keyed records into the input topic at RATE a second from a thread, idempotent and
    acks=all, until stopped; what was delivered (offsets from the delivery reports) is what the
    queries must write exactly once. A delivery that failed fails the test."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.delivered: list[Record] = []
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                   "linger.ms": 20, "message.timeout.ms": 600_000,
                                   "log_level": 0})
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self.failed.append(str(err))
            return
        self.delivered.append(Record(msg.topic(), msg.partition(), msg.offset(), msg.key(),
                                     msg.value()))

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            for _ in range(RATE // 10):
                self._producer.produce(self.topic, key=f"k-{i}".encode(),
                                       value=f"v-{i}".encode(), on_delivery=self._on_delivery)
                i += 1
            self._producer.poll(0)
            self._stop.wait(0.1)

    def stop(self) -> list[Record]:
        self._stop.set()
        self._thread.join(30)
        left = self._producer.flush(300)
        assert left == 0 and not self.failed, f"input not delivered: {left} left, {self.failed[:3]}"
        return sorted(self.delivered)


@dataclass
class Query:
    """One pipeline process and its checkpoint."""

    name: str
    checkpoint: str
    log: str
    proc: object = None

    def commit_times(self) -> list[float]:
        """When each batch was committed (mtime of the checkpoint's commits/<n>)."""
        folder = os.path.join(self.checkpoint, "commits")
        try:
            names = [n for n in os.listdir(folder) if n.isdigit()]
        except FileNotFoundError:
            return []
        return sorted(os.path.getmtime(os.path.join(folder, n)) for n in names)

    def committed_since(self, t: float) -> int:
        return sum(1 for c in self.commit_times() if c > t)

    def assert_running(self, where: str) -> None:
        rc = self.proc.poll()
        assert rc is None, f"the {self.name} query exited ({rc}) {where}:\n{log_tail(self.log, 6000)}"


@dataclass
class Restart:
    node: int
    how: str
    down_at: float
    back_at: float = 0.0
    roles: list[str] = field(default_factory=list)


def roles_of(cluster: KafkaCluster, node: int, topics: dict[str, str], tids: list[str]) -> list[str]:
    """What the node holds: the leaders of the input and output partitions and the
    transaction coordinator of the sink's ids."""
    roles = []
    for label, topic in topics.items():
        led = [p for p in range(PARTITIONS) if cluster.leader_of(topic, p) == node]
        if led:
            roles.append(f"leader of {label} {led}")
    coordinated = [t.rsplit("-", 2)[-2] for t in tids if cluster.transaction_coordinator(t) == node]
    if coordinated:
        roles.append(f"coordinator of the sink's ids of partitions {coordinated}")
    return roles


def stalls(query: Query, restarts: list[Restart], until: float) -> list[float]:
    """Per restart: the longest time without a committed batch from the node going down to the
    next restart (or `until`)."""
    times = query.commit_times()
    out = []
    for i, r in enumerate(restarts):
        end = restarts[i + 1].down_at if i + 1 < len(restarts) else until
        points = [r.down_at] + [t for t in times if r.down_at < t <= end]
        gaps = [b - a for a, b in zip(points, points[1:])]
        out.append(max(gaps, default=end - r.down_at))
    return out


def start_queries(cluster: KafkaCluster, tmp_path, topic: str, out_topic: str, prefix: str,
                  extra: tuple[str, ...] = ()) -> tuple[Query, Query]:
    common = ("--bootstrap", cluster.bootstrap_servers, "--topic", topic, "--mode", "continuous",
              "--max-per-trigger", "1000", "--poll-timeout-ms", "120000", "--commit-timeout", "",
              *extra)
    kafka_q = Query("kafka-eos -> kafka-eos", str(tmp_path / "ck-kafka"), str(tmp_path / "kafka.log"))
    delta_q = Query("kafka-eos -> delta-eos", str(tmp_path / "ck-delta"), str(tmp_path / "delta.log"))
    kafka_q.proc = start_pipeline(PIPELINE, *common, "--checkpoint", kafka_q.checkpoint,
                                  "--out-topic", out_topic, "--transactional-id-prefix", prefix,
                                  log_path=kafka_q.log)
    delta_q.proc = start_pipeline(PIPELINE, *common, "--checkpoint", delta_q.checkpoint,
                                  "--table", str(tmp_path / "table"), log_path=delta_q.log)
    return kafka_q, delta_q


def wait_for_commits(queries: tuple[Query, ...], since: float, timeout_s: float, what: str) -> None:
    def both() -> bool:
        for q in queries:
            q.assert_running(what)
        return all(q.committed_since(since) >= 1 for q in queries)

    wait_for(both, timeout_s, f"a committed batch of each query {what}")


def assert_exactly_once(cluster: KafkaCluster, tmp_path, out_topic: str,
                        expected: list[Record], queries: tuple[Query, ...]) -> None:
    """Both outputs hold every input record once: the Kafka output by (key, value) among its
    committed records, the Delta table by source (partition, offset)."""
    want = collections.Counter((r.key, r.value) for r in expected)

    def kafka_out() -> collections.Counter:
        return collections.Counter((r.key, r.value) for r in committed(cluster.bootstrap_servers,
                                                                        out_topic))

    def drained() -> bool:
        for q in queries:
            q.assert_running("while draining the input")
        table = str(tmp_path / "table")
        rows = len(table_records(table)) if os.path.exists(os.path.join(table, "_delta_log")) else 0
        return rows >= len(expected) and sum(kafka_out().values()) >= len(expected)

    wait_for(drained, 300, f"both outputs to hold the {len(expected)} input records")
    got = kafka_out()
    twice = [k for k, n in got.items() if n > 1]
    assert not twice, f"{len(twice)} records written twice to {out_topic}, e.g. {twice[:3]}"
    assert got == want, f"missing from {out_topic}: {list((want - got).items())[:3]}"
    assert_records_once(table_records(str(tmp_path / "table")), expected)


def task_retries(log: str) -> int:
    with open(log, errors="replace") as f:
        return sum(1 for line in f if "Lost task" in line)


def report(title: str, lines: list[str]) -> None:
    print(f"\n== {title}\n" + "\n".join(lines))


def test_rolling_restarts_never_fail_a_query_and_end_exactly_once(cluster: KafkaCluster, tmp_path):
    """Every broker in turn, once with SIGTERM (a controlled shutdown, as an upgrade does) and
    once with SIGKILL, each restarted on its data and back in every ISR before the next, while
    both queries read, write and commit. Before kafkaRetryTimeout the source's latestOffset
    failed with _UNKNOWN_PARTITION or _DESTROY_BROKER and tasks with _TRANSPORT from
    init_transactions (two runs in three died on SIGKILLed brokers)."""
    topic, out_topic = f"roll-in-{uuid.uuid4().hex[:8]}", f"roll-out-{uuid.uuid4().hex[:8]}"
    prefix = f"roll-{uuid.uuid4().hex[:8]}"
    for t in (topic, out_topic):
        cluster.create_topic(t, PARTITIONS)
    topics = {"input": topic, "output": out_topic}
    tids = [f"{prefix}-{p}-0" for p in range(PARTITIONS)]
    producer = SteadyProducer(cluster.bootstrap_servers, topic)
    queries = start_queries(cluster, tmp_path, topic, out_topic, prefix)
    restarts: list[Restart] = []
    try:
        wait_for_commits(queries, 0, 240, "at the start")
        for how in ("SIGTERM", "SIGKILL"):
            for node in cluster.nodes:
                roles = roles_of(cluster, node.node_id, topics, tids)
                r = Restart(node.node_id, how, time.time(), roles=roles)
                restarts.append(r)
                if how == "SIGTERM":
                    node.terminate()
                else:
                    node.kill()
                node.start()
                cluster.wait_in_sync(node.node_id, [topic, out_topic])
                r.back_at = time.time()
                # the operator's next step waits for the cluster; the test also waits for
                # both queries to commit again, so every restart meets running queries
                wait_for_commits(queries, r.back_at, 240,
                                 f"after node {node.node_id}'s {how} restart")
        expected = producer.stop()
        assert_exactly_once(cluster, tmp_path, out_topic, expected, queries)
        until = time.time()
    finally:
        producer._stop.set()
        for q in queries:
            kill_group(q.proc)
    held = [role for r in restarts for role in r.roles]
    assert any("coordinator" in x for x in held), "no restart hit the sink's coordinator"
    assert any("leader of input" in x for x in held) and any("leader of output" in x for x in held)
    lines = [f"{len(expected)} records; Apache Kafka {cluster.generation.version}"]
    for q in queries:
        s = stalls(q, restarts, until)
        for how in ("SIGTERM", "SIGKILL"):
            these = [v for v, r in zip(s, restarts) if r.how == how]
            lines.append(f"{q.name}, {how}: stall p50 {statistics.median(these):.1f} s, max "
                         f"{max(these):.1f} s ({', '.join(f'{v:.1f}' for v in these)}); "
                         f"task attempts retried {task_retries(q.log)}")
    lines += [f"node {r.node} {r.how}: back in {r.back_at - r.down_at:.1f} s; "
              f"{'; '.join(r.roles) or 'no role'}" for r in restarts]
    report(f"rolling restarts on {cluster.generation.version}", lines)


def test_two_of_three_nodes_down_then_back_ends_exactly_once(cluster: KafkaCluster, tmp_path):
    """The quorum and every ISR lost for 40 s: the queries wait under kafkaRetryTimeout
    (default 5 minutes) and go on once the nodes are back, and end exactly once. A produce that
    NOT_ENOUGH_REPLICAS refused inside a task's transaction is retried by librdkafka, or fails
    the task, whose transaction is then aborted: no part of a batch becomes visible alone."""
    topic, out_topic = f"quorum-in-{uuid.uuid4().hex[:8]}", f"quorum-out-{uuid.uuid4().hex[:8]}"
    prefix = f"quorum-{uuid.uuid4().hex[:8]}"
    for t in (topic, out_topic):
        cluster.create_topic(t, PARTITIONS)
    producer = SteadyProducer(cluster.bootstrap_servers, topic)
    queries = start_queries(cluster, tmp_path, topic, out_topic, prefix)
    try:
        wait_for_commits(queries, 0, 240, "at the start")
        down = cluster.nodes[1:]
        down_at = time.time()
        for node in down:
            node.kill()
        time.sleep(40)
        for q in queries:
            q.assert_running("while two of three nodes were down")
        for node in down:
            node.start()
        for node in down:
            cluster.wait_in_sync(node.node_id, [topic, out_topic])
        back_at = time.time()
        wait_for_commits(queries, back_at, 300, "after the quorum came back")
        expected = producer.stop()
        assert_exactly_once(cluster, tmp_path, out_topic, expected, queries)
        until = time.time()
    finally:
        producer._stop.set()
        for q in queries:
            kill_group(q.proc)
    lines = [f"{len(expected)} records; Apache Kafka {cluster.generation.version}; nodes 2 and 3 "
             f"down {back_at - down_at:.1f} s (40 s killed, then restarted and back in sync)"]
    outage = Restart(2, "two down", down_at)
    for q in queries:
        (s,) = stalls(q, [outage], until)
        lines.append(f"{q.name}: stall {s:.1f} s; task attempts retried {task_retries(q.log)}")
    report(f"quorum lost on {cluster.generation.version}", lines)
