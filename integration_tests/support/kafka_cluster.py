"""A 3-node Apache Kafka KRaft cluster from the Maven jars, for tests of broker failures.

Test plumbing, kept out of the wheel (connectors/local/apache_kafka.py runs the single node the
suite's broker is). The recipe is docs' DESIGN s.12: three combined `broker,controller` nodes with
node ids 1..3, each with its own data directory and a PLAINTEXT and a CONTROLLER listener, the same
static `controller.quorum.voters` on all, formatted with one cluster id (no `--standalone`),
replication factor 3 and min ISR 2 everywhere, unclean leader election off.

The nodes start together: a voter opens its broker port only once it sees a quorum. Each JVM runs
in a session of its own with PR_SET_PDEATHSIG (nothing outlives the test run) and writes
`stdout.log` and `server.log` into its node's folder of the cluster's workdir.

Two things are left to the caller for tests of network faults: `hosts[i]`, the address node i+1
binds and advertises, and `launcher(node_id)`, a command prefix put before `java` (e.g.
`["ip", "netns", "exec", "ns1"]`). Distinct non-loopback hosts get the fixed ports 19092
(PLAINTEXT) and 19093 (CONTROLLER) on each, since a free port on this namespace's loopback says
nothing about another namespace; otherwise every listener takes a free port.

Start nodes from the main thread (or one that outlives them): PR_SET_PDEATHSIG fires when the
*thread* that forked the JVM exits, so a node started from a ThreadPoolExecutor worker gets
SIGTERM as soon as the pool's threads end.

Cluster state (leaders, ISRs, live brokers) is read with one raw Metadata request per node
(`_ask`), not a client that picks a broker itself: "node 2 serves" has to mean node 2 answered,
and a partition's state counts only once every serving node reports it.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from connectors.local.apache_kafka import (
    FEW_THREADS,
    LATEST,
    LOG4J1,
    LOG4J2,
    Generation,
    KafkaUnavailable,
    die_with_parent,
    java_command,
    kafka_jars,
    new_cluster_id,
    properties_text,
)
from connectors.local.broker_handle import free_port

log = logging.getLogger(__name__)

INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")
#: The ports of each node when every node has an address of its own (network namespaces).
FIXED_PORTS = (19092, 19093)

_COORDINATOR_NOT_AVAILABLE = 15
_NOT_COORDINATOR = 16
_COORDINATOR_LOAD_IN_PROGRESS = 14


# -- one request to one node ----------------------------------------------------------------


def _ask(address: str, request: Any, timeout_s: float = 5.0) -> Any:
    """The answer of the node at `address` to one Kafka request, on a connection of its own.
    Raises OSError (refused, reset, timed out) when the node does not answer."""
    from kafka.protocol.parser import KafkaProtocol

    host, port = address.rsplit(":", 1)
    protocol = KafkaProtocol(client_id="kafka-eos-cluster")
    deadline = time.monotonic() + timeout_s
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        protocol.send_request(request)
        sock.sendall(protocol.send_bytes())
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{address}: no answer to {request.name} in {timeout_s} s")
            sock.settimeout(left)
            data = sock.recv(1 << 16)
            if not data:
                raise ConnectionResetError(f"{address} closed the connection")
            responses = protocol.receive_bytes(data)
            if responses:
                return responses[0][1]


@dataclass(frozen=True)
class PartitionState:
    """One partition as one node's metadata reports it."""

    leader: int  # -1: no leader
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    @property
    def fully_replicated(self) -> bool:
        return self.leader >= 0 and set(self.replicas) <= set(self.isr)


@dataclass(frozen=True)
class Metadata:
    """One node's view of the cluster: its live (registered, unfenced) brokers and topics."""

    brokers: frozenset[int]
    #: Under KRaft a random live broker, not the active controller (which clients never see).
    controller: int
    #: topic -> partition -> state; topics the node reported with an error are left out.
    topics: dict[str, dict[int, PartitionState]]


def _metadata(address: str, timeout_s: float = 5.0) -> Metadata:
    from kafka.protocol.metadata import MetadataRequest

    response = _ask(address, MetadataRequest(
        topics=None, allow_auto_topic_creation=False,
        include_topic_authorized_operations=False, version=12), timeout_s)
    topics: dict[str, dict[int, PartitionState]] = {}
    for topic in response.topics:
        if topic.error_code:
            continue
        topics[topic.name] = {
            p.partition_index: PartitionState(p.leader_id, p.leader_epoch,
                                              tuple(p.replica_nodes), tuple(p.isr_nodes))
            for p in topic.partitions}
    return Metadata(frozenset(b.node_id for b in response.brokers), response.controller_id,
                    topics)


def _finalized_feature(address: str, name: str, timeout_s: float = 5.0) -> int:
    """The finalized level of feature `name` (0: not finalized), from ApiVersions v3."""
    from kafka.protocol.metadata.api_versions import ApiVersionsRequest

    response = _ask(address, ApiVersionsRequest(
        client_software_name="kafka-eos-cluster", client_software_version="1", version=3),
        timeout_s)
    for feature in response.finalized_features or []:
        if feature.name == name:
            return int(feature.max_version_level)
    return 0


def _find_coordinator(address: str, key: str, key_type: int, timeout_s: float = 5.0) -> Any:
    """FindCoordinator v1 (0: group, 1: transaction). It also creates the internal topic behind
    it on first use (__consumer_offsets, __transaction_state)."""
    from kafka.protocol.metadata import FindCoordinatorRequest

    return _ask(address, FindCoordinatorRequest(key=key, key_type=key_type, version=1),
                timeout_s)


# -- configuration ----------------------------------------------------------------------------


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _free_port_on(host: str) -> int:
    """A port free on `host` when this namespace has that address, else on loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, 0))
        except OSError:
            return free_port()
        return s.getsockname()[1]


def choose_ports(hosts: list[str]) -> list[tuple[int, int]]:
    """(PLAINTEXT, CONTROLLER) per node: FIXED_PORTS on distinct non-loopback hosts (each node
    in a network namespace of its own), else free ports, distinct across the nodes."""
    if len(set(hosts)) == len(hosts) and not any(_is_loopback(h) for h in hosts):
        return [FIXED_PORTS] * len(hosts)
    taken: set[int] = set()
    ports = []
    for host in hosts:
        pair = []
        while len(pair) < 2:
            port = _free_port_on(host)
            if port not in taken:
                taken.add(port)
                pair.append(port)
        ports.append((pair[0], pair[1]))
    return ports


def node_properties(
    generation: Generation, node_id: int, hosts: list[str], ports: list[tuple[int, int]],
    data_dir: str, overrides: dict[str, str] | None = None,
) -> dict[str, str]:
    """server.properties of node `node_id` (1-based) of the cluster (values unescaped)."""
    nodes = len(hosts)
    host, (port, controller_port) = hosts[node_id - 1], ports[node_id - 1]
    replication = str(min(3, nodes))
    min_isr = str(min(2, nodes))
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": ",".join(
            f"{i}@{h}:{c}" for i, (h, (_, c)) in enumerate(zip(hosts, ports), start=1)),
        "controller.listener.names": "CONTROLLER",
        "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": data_dir,
        "num.partitions": "1",
        "default.replication.factor": replication,
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": replication,
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": replication,
        "transaction.state.log.min.isr": min_isr,
        "transaction.state.log.num.partitions": "4",
        "unclean.leader.election.enable": "false",
        "group.initial.rebalance.delay.ms": "0",
        # A transaction past its timeout is aborted within a second, not ten.
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        # A follower cut off (killed, frozen, partitioned) leaves the ISR after 10 s, not 30.
        "replica.lag.time.max.ms": "10000",
        # Idle, a cluster's CPU goes to the controller's no-op metadata records (every 500 ms by
        # default) and the followers' fetches (500 ms). Both wait longer here: a fetch still
        # returns as soon as data arrives, and 5 s stays under replica.lag.time.max.ms. Three
        # idle nodes: 12.7 -> 7.2 CPU-s a minute (measured on this machine).
        "metadata.max.idle.interval.ms": "5000",
        "replica.fetch.wait.max.ms": "5000",
        **FEW_THREADS,
    }
    if generation.major >= 4:
        props.update({
            "share.coordinator.state.topic.replication.factor": replication,
            "share.coordinator.state.topic.min.isr": min_isr,
        })
    props.update(overrides or {})
    return props


# -- the nodes --------------------------------------------------------------------------------


@dataclass
class ClusterNode:
    """One combined broker and controller of the cluster, started and stopped at will."""

    node_id: int
    host: str
    port: int
    controller_port: int
    generation: Generation
    workdir: Path
    launcher: Callable[[int], list[str]] | None = field(default=None, repr=False)
    process: subprocess.Popen | None = field(default=None, repr=False)
    frozen: bool = False
    #: The cluster the node belongs to (set by KafkaCluster), for wait_in_sync().
    cluster: KafkaCluster | None = field(default=None, repr=False, compare=False)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def alive(self) -> bool:
        """The JVM runs (frozen or not)."""
        return self.process is not None and self.process.poll() is None

    @property
    def serving(self) -> bool:
        """Alive, not frozen, and its own port answers Metadata listing itself."""
        if not self.alive or self.frozen:
            return False
        try:
            return self.node_id in _metadata(self.address, timeout_s=3).brokers
        except OSError:
            return False

    @property
    def properties_file(self) -> Path:
        return self.workdir / "server.properties"

    @property
    def log_file(self) -> Path:
        return self.workdir / "server.log"

    @property
    def stdout_file(self) -> Path:
        return self.workdir / "stdout.log"

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the node's server.log and stdout (the JVM's own errors land there)."""
        parts = []
        for path in (self.log_file, self.stdout_file):
            with contextlib.suppress(OSError):
                text = path.read_text(errors="replace")[-chars:]
                if text.strip():
                    parts.append(f"--- node {self.node_id} {path.name} ---\n{text}")
        return "\n".join(parts)

    def java(self, main: str, *args: str) -> list[str]:
        """The JVM command (without the launcher) running `main` of this node's generation."""
        return java_command(self.generation, self.workdir, main, *args, heap=("128m", "512m"))

    def write_config(self, props: dict[str, str]) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.properties_file.write_text(properties_text(props))
        log_name = str(self.log_file)
        (self.workdir / "log4j2.properties").write_text(LOG4J2.format(log=log_name))
        (self.workdir / "log4j.properties").write_text(LOG4J1.format(log=log_name))

    def format(self, cluster_id: str) -> None:
        """StorageTool format of the data directory (run here, not through the launcher: it
        only writes files)."""
        result = subprocess.run(
            self.java("kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}",
                      "-c", str(self.properties_file)),
            capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise KafkaUnavailable(
                f"formatting node {self.node_id} of an Apache Kafka {self.generation.version} "
                f"cluster failed: {(result.stdout + result.stderr)[-2000:]}")

    def spawn(self) -> None:
        """Start the JVM on the node's data directory and ports; do not wait."""
        if self.alive:
            raise RuntimeError(f"node {self.node_id} is running already (pid {self.pid})")
        prefix = list(self.launcher(self.node_id)) if self.launcher is not None else []
        with open(self.stdout_file, "ab") as out:
            out.write(f"\n=== start {time.strftime('%H:%M:%S')} ===\n".encode())
            out.flush()
            self.process = subprocess.Popen(
                [*prefix, *self.java("kafka.Kafka", str(self.properties_file))],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, preexec_fn=die_with_parent)
        self.frozen = False

    def wait_serving(self, timeout_s: float = 90) -> None:
        """Until the node's own port answers Metadata that lists it among the live brokers."""
        deadline = time.monotonic() + timeout_s
        last: object = None
        while time.monotonic() < deadline:
            if not self.alive:
                code = self.process.returncode if self.process is not None else None
                raise KafkaUnavailable(
                    f"node {self.node_id} exited (status {code}) before serving\n"
                    f"{self.log_tail()}")
            try:
                brokers = _metadata(self.address, timeout_s=3).brokers
                if self.node_id in brokers:
                    return
                last = f"its metadata lists brokers {sorted(brokers)} only"
            except OSError as e:
                last = e
            time.sleep(0.2)
        raise TimeoutError(f"node {self.node_id} at {self.address} not serving after "
                           f"{timeout_s} s: {last}\n{self.log_tail()}")

    def start(self, timeout_s: float = 90) -> float:
        """Start on the same data directory and ports; wait until the node serves again.
        Returns the seconds it took."""
        began = time.monotonic()
        self.spawn()
        self.wait_serving(timeout_s)
        return time.monotonic() - began

    def _signal_group(self, sig: int) -> None:
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)

    def kill(self) -> None:
        """SIGKILL (no controlled shutdown): what a crashed machine leaves."""
        if self.process is None:
            return
        self._signal_group(signal.SIGKILL)
        self.process.wait(30)
        self.frozen = False

    def terminate(self, timeout_s: float = 60) -> float:
        """SIGTERM, i.e. a controlled shutdown (leaderships handed over first); wait for the
        exit. Returns the seconds it took; a node still running after `timeout_s` is killed and
        TimeoutError raised (a hung shutdown is a finding, not a detail)."""
        if not self.alive:
            return 0.0
        began = time.monotonic()
        self.resume()
        self._signal_group(signal.SIGTERM)
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise TimeoutError(f"node {self.node_id} still running {timeout_s} s after SIGTERM; "
                               f"killed\n{self.log_tail()}") from None
        return time.monotonic() - began

    def restart(self, timeout_s: float = 90) -> float:
        """Kill if running, start again; the seconds the start took."""
        self.kill()
        return self.start(timeout_s)

    def wait_in_sync(self, topics: Iterable[str] = (), timeout_s: float = 120) -> None:
        """KafkaCluster.wait_in_sync for this node: serving and back in every ISR."""
        if self.cluster is None:
            raise RuntimeError(f"node {self.node_id} belongs to no cluster")
        self.cluster.wait_in_sync(self.node_id, topics, timeout_s)

    def freeze(self) -> None:
        """SIGSTOP the node's process group: connections stay open, nothing answers."""
        if not self.alive:
            raise RuntimeError(f"node {self.node_id} is not running")
        self._signal_group(signal.SIGSTOP)
        self.frozen = True

    def resume(self) -> None:
        """SIGCONT: undo freeze()."""
        self._signal_group(signal.SIGCONT)
        self.frozen = False


# -- the cluster ------------------------------------------------------------------------------


@dataclass
class KafkaCluster:
    """The running cluster (`kafka_cluster()`): its nodes and what tests ask of it."""

    generation: Generation
    workdir: Path
    nodes: list[ClusterNode]
    cluster_id: str
    #: Seconds from spawning the JVMs to a healthy cluster, at start.
    startup_s: float = 0.0
    #: The finalized transaction.version, read at start (checked against the generation's).
    transaction_version: int | None = None

    def __post_init__(self) -> None:
        for n in self.nodes:
            n.cluster = self

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(n.address for n in self.nodes)

    def node(self, node_id: int) -> ClusterNode:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(f"no node {node_id} (nodes: {[n.node_id for n in self.nodes]})")

    def log_tail(self, node_id: int, chars: int = 4000) -> str:
        return self.node(node_id).log_tail(chars)

    def _log_tails(self, chars: int = 2000) -> str:
        return "\n".join(n.log_tail(chars) for n in self.nodes)

    def _reachable(self) -> list[ClusterNode]:
        return [n for n in self.nodes if n.alive and not n.frozen]

    def views(self, timeout_s: float = 3.0) -> dict[int, Metadata]:
        """node id -> that node's metadata, for every running, unfrozen node that answers."""
        found = {}
        for n in self._reachable():
            with contextlib.suppress(OSError):
                found[n.node_id] = _metadata(n.address, timeout_s)
        return found

    def partition_states(self, topic: str) -> dict[int, PartitionState]:
        """partition -> state of `topic`, each partition from the node whose view of it is the
        newest (highest leader epoch): a node that missed a change does not answer for it."""
        best: dict[int, PartitionState] = {}
        for view in self.views().values():
            for p, state in view.topics.get(topic, {}).items():
                if p not in best or state.leader_epoch > best[p].leader_epoch:
                    best[p] = state
        return best

    def leader_of(self, topic: str, partition: int) -> int:
        """The partition's leader by the newest view (-1: none, or the topic is unknown)."""
        state = self.partition_states(topic).get(partition)
        return state.leader if state is not None else -1

    def wait_for_leader_change(self, topic: str, partition: int, old: int,
                               timeout_s: float = 60) -> int:
        """Until a node other than `old` leads the partition; returns it."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            leader = self.leader_of(topic, partition)
            if leader not in (old, -1):
                return leader
            time.sleep(0.2)
        raise TimeoutError(f"{topic}-{partition} still led by {old} (or leaderless) after "
                           f"{timeout_s} s: {self.partition_states(topic)}")

    def transaction_coordinator(self, transactional_id: str, timeout_s: float = 60) -> int:
        """The node id coordinating `transactional_id` (FindCoordinator, key type 1), once a
        node names one (retried while the coordinator is unavailable or moving)."""
        deadline = time.monotonic() + timeout_s
        last: object = None
        while time.monotonic() < deadline:
            for n in self._reachable():
                try:
                    r = _find_coordinator(n.address, transactional_id, 1)
                except OSError as e:
                    last = e
                    continue
                if r.error_code == 0:
                    return r.node_id
                last = f"error {r.error_code} from node {n.node_id}"
            time.sleep(0.2)
        raise TimeoutError(f"no transaction coordinator for {transactional_id!r} after "
                           f"{timeout_s} s: {last}")

    def create_topic(self, name: str, partitions: int, replication: int | None = None,
                     config: dict[str, str] | None = None, timeout_s: float = 60) -> None:
        """Create the topic (replicated on up to 3 nodes by default) and wait until every node
        serving sees a leader for each partition."""
        if replication is None:
            replication = min(3, len(self.nodes))
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0})
        futures = admin.create_topics(
            [NewTopic(name, partitions, replication, config=config or {})],
            operation_timeout=timeout_s, request_timeout=timeout_s)
        futures[name].result(timeout_s)
        deadline = time.monotonic() + timeout_s
        while True:
            views = self.views()
            if views and all(
                    len(v.topics.get(name, {})) == partitions
                    and all(s.leader >= 0 for s in v.topics[name].values())
                    for v in views.values()):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {name}: not every partition has a leader after "
                                   f"{timeout_s} s: {self.partition_states(name)}")
            time.sleep(0.2)

    def _unhealthy(self, topics: Iterable[str], nodes: list[ClusterNode]) -> str | None:
        """Why the cluster is not healthy for `nodes` and `topics`, or None when it is."""
        views = {}
        for n in nodes:
            if not n.alive:
                raise KafkaUnavailable(f"node {n.node_id} is not running (exit status "
                                       f"{n.process.returncode if n.process else None})\n"
                                       f"{n.log_tail()}")
            if n.frozen:
                return f"node {n.node_id} is frozen"
            try:
                views[n.node_id] = _metadata(n.address, timeout_s=3)
            except OSError as e:
                return f"node {n.node_id} does not answer: {e}"
        expected = {n.node_id for n in self.nodes if n.alive and not n.frozen}
        for node_id, view in views.items():
            if not expected <= view.brokers:
                return f"node {node_id} sees live brokers {sorted(view.brokers)}"
            for topic in topics:
                states = view.topics.get(topic)
                if not states:
                    return f"node {node_id} does not know topic {topic}"
                for p, s in sorted(states.items()):
                    if not s.fully_replicated:
                        return f"node {node_id}: {topic}-{p} is {s}"
        return None

    def _ensure_internal_topics(self) -> None:
        """FindCoordinator for a group and a transactional id: each creates its internal topic
        on first use (both needed before the ISR checks mean anything)."""
        for n in self._reachable():
            with contextlib.suppress(OSError):
                _find_coordinator(n.address, "kafka-eos-cluster-check", 0)
                _find_coordinator(n.address, "kafka-eos-cluster-check", 1)
                return

    def wait_healthy(self, timeout_s: float = 120, topics: Iterable[str] = ()) -> None:
        """Until every node runs, answers and sees every node as a live broker, and every
        partition of `topics`, __consumer_offsets and __transaction_state has a leader and its
        whole replica set in the ISR, as every node reports it."""
        wanted = [*INTERNAL_TOPICS, *topics]
        deadline = time.monotonic() + timeout_s
        while True:
            reason = self._unhealthy(wanted, self.nodes)
            if reason is None:
                return
            if "does not know topic __" in reason:
                self._ensure_internal_topics()
            if time.monotonic() > deadline:
                raise TimeoutError(f"cluster not healthy after {timeout_s} s: {reason}\n"
                                   f"{self._log_tails()}")
            time.sleep(0.3)

    def wait_in_sync(self, node_id: int, topics: Iterable[str] = (),
                     timeout_s: float = 120) -> None:
        """Until node `node_id` serves and is back in the ISR of every partition it replicates
        of `topics` and the internal topics, as every serving node reports it: the step between
        two restarts of a rolling restart."""
        node = self.node(node_id)
        wanted = [*INTERNAL_TOPICS, *topics]
        deadline = time.monotonic() + timeout_s
        while True:
            reason = None
            if not node.serving:
                reason = f"node {node_id} does not serve"
            else:
                views = self.views()
                for viewer, view in views.items():
                    if node_id not in view.brokers:
                        reason = f"node {viewer} does not see node {node_id} as live"
                        break
                    for topic in wanted:
                        for p, s in sorted(view.topics.get(topic, {}).items()):
                            if node_id in s.replicas and node_id not in s.isr:
                                reason = f"node {viewer}: {topic}-{p} is {s}"
                                break
                        if reason:
                            break
                    if reason:
                        break
            if reason is None:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"node {node_id} not back in sync after {timeout_s} s: "
                                   f"{reason}\n{node.log_tail()}")
            time.sleep(0.3)

    def stop(self) -> None:
        """SIGKILL every node (the data is deleted next: a controlled shutdown would only cost
        time, and the last nodes' would wait for a quorum that is going away)."""
        for n in self.nodes:
            with contextlib.suppress(Exception):
                n.kill()


def _pool_map(fn: Callable[[ClusterNode], Any], nodes: list[ClusterNode]) -> list[Any]:
    with ThreadPoolExecutor(len(nodes)) as pool:
        return list(pool.map(fn, nodes))


@contextlib.contextmanager
def kafka_cluster(
    generation: Generation = LATEST, *, nodes: int = 3, hosts: list[str] | None = None,
    launcher: Callable[[int], list[str]] | None = None,
    overrides: dict[str, str] | None = None, ports: list[tuple[int, int]] | None = None,
    timeout_s: float = 180,
) -> Iterator[KafkaCluster]:
    """Fetch the jars (once), format `nodes` nodes with one cluster id, start them together and
    wait until the cluster is healthy; on exit kill them all and delete the data.

    `hosts[i]`: the address node i+1 binds and advertises (default 127.0.0.1 for all);
    `launcher(node_id)`: a command prefix put before `java` (a network namespace);
    `ports[i]`: node i+1's (PLAINTEXT, CONTROLLER) ports, else `choose_ports(hosts)`;
    `overrides`: server properties set on every node."""
    hosts = list(hosts) if hosts is not None else ["127.0.0.1"] * nodes
    if len(hosts) != nodes:
        raise ValueError(f"{nodes} nodes but {len(hosts)} hosts")
    kafka_jars(generation)
    workdir = Path(tempfile.mkdtemp(prefix=f"kafka-cluster-{generation.version}-"))
    cluster: KafkaCluster | None = None
    try:
        attempts = 1 if ports is not None or launcher is not None else 3
        for attempt in range(attempts):
            chosen = list(ports) if ports is not None else choose_ports(hosts)
            members = [
                ClusterNode(i, hosts[i - 1], chosen[i - 1][0], chosen[i - 1][1], generation,
                            workdir / f"node-{i}", launcher)
                for i in range(1, nodes + 1)]
            cluster = KafkaCluster(generation, workdir, members, new_cluster_id())
            for n in members:
                shutil.rmtree(n.workdir, ignore_errors=True)
                n.write_config(node_properties(generation, n.node_id, hosts, chosen,
                                               str(n.workdir / "data"), overrides))
            _pool_map(lambda n: n.format(cluster.cluster_id), members)
            began = time.monotonic()
            try:
                for n in members:
                    n.spawn()
                for n in members:
                    n.wait_serving(max(1.0, timeout_s - (time.monotonic() - began)))
                cluster.wait_healthy(max(1.0, timeout_s - (time.monotonic() - began)))
                cluster.startup_s = time.monotonic() - began
                break
            except (KafkaUnavailable, TimeoutError):
                taken = "Address already in use" in cluster._log_tails(20000)
                cluster.stop()
                if attempt == attempts - 1 or not taken:
                    raise
                log.warning("Kafka cluster: a port was taken meanwhile; starting again")
        cluster.transaction_version = _finalized_feature(members[0].address,
                                                         "transaction.version")
        if cluster.transaction_version != generation.transaction_version:
            raise KafkaUnavailable(
                f"the Apache Kafka {generation.version} cluster finalized transaction.version "
                f"{cluster.transaction_version}, expected {generation.transaction_version}: "
                "its transaction tests would not test what they claim")
        log.info("Apache Kafka %s cluster of %d nodes at %s up in %.1f s", generation.version,
                 nodes, cluster.bootstrap_servers, cluster.startup_s)
        yield cluster
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)
