"""Two exactly-once queries (`kafka-eos -> kafka-eos`, `kafka-eos -> delta-eos`; or the first
alone) as pipeline processes on a cluster whose brokers the tests restart, kill or cut off: input from a producer
of the test's own, the commits' times from the checkpoints, and the exactly-once verdict over both
outputs. Shared by test_cluster_faults.py and test_network_partitions.py."""

from __future__ import annotations

import collections
import contextlib
import os
import re
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

from confluent_kafka import Producer

from connectors.local.kafka_oracle import committed
from integration_tests.support.delta_oracle import assert_records_once, table_records
from integration_tests.support.kafka_cluster import KafkaCluster
from integration_tests.support.kafka_data import Record
from integration_tests.support.processes import kill_group, log_tail, start_pipeline
from integration_tests.support.streaming import wait_for

PIPELINE = "integration_tests.support.pipelines.eos_pipeline"
PARTITIONS = 4
#: Records a second the test's producer writes while brokers fail.
RATE = 100


def topics_for(cluster: KafkaCluster, scenario: str) -> tuple[str, str, str]:
    """A fresh input topic, output topic and transactional id prefix for one scenario."""
    tag = uuid.uuid4().hex[:8]
    topic, out_topic = f"{scenario}-in-{tag}", f"{scenario}-out-{tag}"
    for t in (topic, out_topic):
        cluster.create_topic(t, PARTITIONS)
    return topic, out_topic, f"{scenario}-{tag}"


class SteadyProducer:
    """Keyed records into the input topic at `rate` (RATE) a second from a thread, idempotent and
    acks=all, until stopped; what was delivered (offsets from the delivery reports) is what the
    queries must write exactly once. A delivery that failed fails the test."""

    def __init__(self, bootstrap: str, topic: str, rate: int = RATE) -> None:
        self.topic = topic
        self._per_tick = max(1, rate // 10)
        self._bootstrap = bootstrap
        self.delivered: list[Record] = []
        self.failed: list[str] = []
        #: When each key was handed to the producer (time.time()).
        self.sent_at: dict[bytes, float] = {}
        self._stop = threading.Event()
        # One request in flight: with more, librdkafka's idempotent producer spins a core
        # while a partition leader is down (measured: 10-11 CPU-s in 12 s of a node killed,
        # against 0.3 with one; docs/operations.md#a-core-busy-while-a-leader-is-down), CPU the
        # faults' pipelines need. 100 records a second need no pipelining.
        self._producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                   "linger.ms": 20, "message.timeout.ms": 600_000,
                                   "max.in.flight": 1, "log_level": 0})
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
            for _ in range(self._per_tick):
                key = f"k-{i}".encode()
                self.sent_at[key] = time.time()
                self._producer.produce(self.topic, key=key, value=f"v-{i}".encode(),
                                       on_delivery=self._on_delivery)
                i += 1
            self._producer.poll(0)
            self._stop.wait(0.1)

    def halt(self) -> None:
        """Stop producing without waiting for anything (clean-up after a failure)."""
        self._stop.set()

    def stop(self, input_after: float) -> list[Record]:
        """Stop producing; the input topic's records as the broker holds them, of which some
        must have been produced after `input_after` (the end of the last fault: a producer
        thread that died silently would leave the faults without input). A delivery
        report may come without an offset (librdkafka's idempotent producer, after a request
        that timed out while brokers were down, learns that the retry was a duplicate of what
        the broker had written), so offsets are read back from the topic, and every delivered
        record must be there exactly once."""
        self._stop.set()
        self._thread.join(30)
        left = self._producer.flush(300)
        assert left == 0 and not self.failed, f"input not delivered: {left} left, {self.failed[:3]}"
        held = [Record(r.topic, r.partition, r.offset, r.key, r.value)
                for r in committed(self._bootstrap, self.topic)]
        counts = collections.Counter((r.key, r.value) for r in held)
        sent = collections.Counter((r.key, r.value) for r in self.delivered)
        assert counts == sent, "the input topic does not hold each delivered record once"
        late = sum(1 for r in held if self.sent_at.get(r.key, 0.0) > input_after)
        assert late > 0, ("no input record was produced after the last fault "
                          f"(thread alive: {self._thread.is_alive()})")
        return sorted(held)


@dataclass
class Query:
    """One pipeline process and its checkpoint."""

    name: str
    checkpoint: str
    log: str
    args: tuple[str, ...] = ()
    proc: object = None
    #: Why earlier runs of this query stopped (the last exception line of each), in order.
    failures: list[str] = field(default_factory=list)

    def start(self) -> None:
        self.proc = start_pipeline(PIPELINE, *self.args, "--checkpoint", self.checkpoint,
                                   log_path=self.log)

    def restart_if_failed(self) -> bool:
        """Start the query again on its checkpoint if it stopped, noting why; True if so."""
        if self.proc.poll() is None:
            return False
        self.failures.append(last_error(self.log))
        self.start()
        return True

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
    #: A fault held for a while (a lost quorum): when its nodes were started again.
    restart_at: float = 0.0


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


#: The queries' trigger interval. Every fault (a broker's restart, 7-45 s; a lost quorum or a
#: cut, 40-45 s) still meets several batches being read, written and committed, and a batch
#: takes 1-2.5 s of its own on the suite's loaded cores, so one is in flight most of the time.
#: A batch costs about 0.65 s of CPU whatever its trigger: the two queries took 77 CPU-s a
#: minute at a 1 s trigger (1.3 of the 2 cores), 26.5 at 3 s (measured on one broker).
TRIGGER_MS = 2000


def start_queries(bootstrap: str, tmp_path, topic: str, out_topic: str, prefix: str,
                  extra: tuple[str, ...] = (), kafka_sink: tuple[str, ...] = (),
                  delta: bool = True) -> tuple[Query, ...]:
    """`extra`: arguments of both pipelines; `kafka_sink`: of the Kafka one only (its sink's
    options: the Delta sink refuses options it does not know). `delta=False`: the Kafka query
    alone."""
    common = ("--bootstrap", bootstrap, "--topic", topic, "--mode", "continuous",
              "--trigger-ms", str(TRIGGER_MS),
              "--max-per-trigger", "1000", "--poll-timeout-ms", "120000", "--commit-timeout", "",
              *extra)
    queries = [Query("kafka-eos -> kafka-eos", str(tmp_path / "ck-kafka"), str(tmp_path / "kafka.log"),
                     (*common, "--out-topic", out_topic, "--transactional-id-prefix", prefix, *kafka_sink))]
    if delta:
        queries.append(Query("kafka-eos -> delta-eos", str(tmp_path / "ck-delta"),
                             str(tmp_path / "delta.log"),
                             (*common, "--table", str(tmp_path / "table"))))
    for q in queries:
        q.start()
    return tuple(queries)


def last_error(log: str) -> str:
    """What stopped a pipeline: the last exception a Python traceback in its log ends with
    (`module.Class: message`), not the Spark exceptions wrapped around it."""
    pattern = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Lost|Exhausted)): ")
    wrappers = ("pyspark.", "org.apache.spark.", "py4j.")
    with open(log, errors="replace") as f:
        lines = [line.strip() for line in f]
    causes = [line for line in lines if pattern.match(line) and not line.startswith(wrappers)]
    return causes[-1][:400] if causes else "no exception in the log"


def wait_for_commits(queries: tuple[Query, ...], since: float, timeout_s: float, what: str) -> None:
    def both() -> bool:
        for q in queries:
            q.assert_running(what)
        return all(q.committed_since(since) >= 1 for q in queries)

    wait_for(both, timeout_s, f"a committed batch of each query {what}")


def assert_exactly_once(bootstrap: str, tmp_path, out_topic: str,
                        expected: list[Record], queries: tuple[Query, ...]) -> None:
    """Both outputs hold every input record once: the Kafka output by (key, value) among its
    committed records, the Delta table by source (partition, offset)."""
    want = collections.Counter((r.key, r.value) for r in expected)

    def kafka_out() -> collections.Counter:
        return collections.Counter((r.key, r.value) for r in committed(bootstrap, out_topic))

    delta = len(queries) > 1

    def drained() -> bool:
        for q in queries:
            q.assert_running("while draining the input")
        table = str(tmp_path / "table")
        rows = len(table_records(table)) if os.path.exists(os.path.join(table, "_delta_log")) else 0
        return (rows >= len(expected) or not delta) and sum(kafka_out().values()) >= len(expected)

    wait_for(drained, 300, f"the outputs to hold the {len(expected)} input records")
    got = kafka_out()
    twice = [k for k, n in got.items() if n > 1]
    assert not twice, f"{len(twice)} records written twice to {out_topic}, e.g. {twice[:3]}"
    assert got == want, f"missing from {out_topic}: {list((want - got).items())[:3]}"
    if delta:
        assert_records_once(table_records(str(tmp_path / "table")), expected)


def task_retries(log: str) -> int:
    with open(log, errors="replace") as f:
        return sum(1 for line in f if "Lost task" in line)


def report(title: str, lines: list[str]) -> None:
    print(f"\n== {title}\n" + "\n".join(lines))


@dataclass
class Run:
    """Input arriving and both queries running on one scenario's topics (`pipelines()`)."""

    bootstrap: str
    tmp_path: object
    topic: str
    out_topic: str
    prefix: str
    producer: SteadyProducer
    queries: tuple[Query, ...]
    #: When the outputs were found complete (the end of the last stall window).
    until: float = 0.0

    @property
    def sink_ids(self) -> list[str]:
        """The Kafka sink's transactional ids of attempt 0, one per Spark partition."""
        return [f"{self.prefix}-{p}-0" for p in range(PARTITIONS)]

    def end_exactly_once(self, *, input_after: float, restart_failed: bool = False) -> list[Record]:
        """Stop the input, wait for both outputs to hold it, and check they hold it once
        each; input must have kept arriving after `input_after` (the last fault's end).
        `restart_failed`: start a query that stopped again first (else it fails)."""
        expected = self.producer.stop(input_after)
        if restart_failed:
            for q in self.queries:
                q.restart_if_failed()
        assert_exactly_once(self.bootstrap, self.tmp_path, self.out_topic, expected, self.queries)
        self.until = time.time()
        return expected


@contextlib.contextmanager
def pipelines(cluster: KafkaCluster, tmp_path, scenario: str,
              kafka_sink: tuple[str, ...] = (), delta: bool = True) -> Iterator[Run]:
    """Fresh topics, a producer and both queries (`delta=False`: the Kafka one alone) for one
    scenario; stopped (the pipelines killed whole) on the way out, whatever happened."""
    topic, out_topic, prefix = topics_for(cluster, scenario)
    producer = SteadyProducer(cluster.bootstrap_servers, topic)
    queries = start_queries(cluster.bootstrap_servers, tmp_path, topic, out_topic, prefix,
                            kafka_sink=kafka_sink, delta=delta)
    try:
        yield Run(cluster.bootstrap_servers, tmp_path, topic, out_topic, prefix, producer, queries)
    finally:
        producer.halt()
        for q in queries:
            kill_group(q.proc)
