"""integration_tests/support/netns.py: each cut blocks exactly what it says, silently, and heals; a lab
leaves nothing behind. Then a 3-node Apache Kafka cluster with its nodes in the lab's hosts:
transactions through it from the root namespace, and a leader cut from its peers leaves the ISR
while clients still reach it.

Reachability is measured with real TCP connects between every pair of parties (0: the root
namespace, 1..n: the hosts), each party running an echo server on its lab address. "ok" is a
completed handshake; "timeout" means the connect saw nothing at all for the whole timeout (no
refusal, no reset, no unreachable); anything else is the errno's name.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from integration_tests.support.netns import LOCK_DIR, Lab, LabUnavailable, network_lab, unavailable

if TYPE_CHECKING:
    from integration_tests.support.kafka_cluster import KafkaCluster

#: A connect gets this long in the cut matrices: far above a handshake over a veth, and the
#: timeout a blocked pair must sit through.
PROBE_S = 1.0
#: Longer than ARP's 3 s give-up (after which an unanswered neighbour turns into EHOSTUNREACH):
#: only a connect that waits this long without an error shows the cut is silent.
SILENT_S = 4.0

_SERVER = r"""
import socket, sys, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 0))
s.listen(64)
print(s.getsockname()[1], flush=True)
def echo(c):
    with c:
        while True:
            data = c.recv(4096)
            if not data:
                return
            c.sendall(data)
while True:
    c, _ = s.accept()
    threading.Thread(target=echo, args=(c,), daemon=True).start()
"""

_PROBE = r"""
import errno, json, socket, sys, threading, time
targets, timeout = json.loads(sys.argv[1]), float(sys.argv[2])
out = [None] * len(targets)
def connect(k, host, port):
    began = time.monotonic()
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        out[k] = ["ok", time.monotonic() - began]
    except TimeoutError:
        out[k] = ["timeout", time.monotonic() - began]
    except OSError as e:
        out[k] = [errno.errorcode.get(e.errno, str(e)), time.monotonic() - began]
threads = [threading.Thread(target=connect, args=(k, h, p)) for k, (h, p) in enumerate(targets)]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps(out))
"""


@contextlib.contextmanager
def _lab_or_skip(hosts: int = 3) -> Iterator[Lab]:
    """network_lab(), or a skip naming what failed when no lab can be made here."""
    reason = unavailable()
    if reason:
        pytest.skip(f"network namespaces unavailable here: {reason}")
    entered = False
    try:
        with network_lab(hosts) as lab:
            entered = True
            yield lab
    except LabUnavailable as e:
        if entered:
            raise
        pytest.skip(f"no network lab here: {e}")


def _in(lab: Lab, party: int) -> list[str]:
    """Command prefix running in party's namespace (0: root, here)."""
    return [] if party == 0 else lab.launcher(party)


def _addr(lab: Lab, party: int) -> str:
    return lab.client if party == 0 else lab.address(party)


class Servers:
    """An echo server per party, on its lab address."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self.procs: list[subprocess.Popen] = []
        self.ports: dict[int, int] = {}
        for party in range(lab.n + 1):
            proc = subprocess.Popen([*_in(lab, party), sys.executable, "-c", _SERVER,
                                     _addr(lab, party)], stdout=subprocess.PIPE, text=True)
            self.procs.append(proc)
        for party, proc in enumerate(self.procs):
            self.ports[party] = int(proc.stdout.readline())

    def target(self, party: int) -> tuple[str, int]:
        return _addr(self.lab, party), self.ports[party]

    def stop(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait(10)
            proc.stdout.close()


def probe(lab: Lab, src: int, targets: list[tuple[str, int]],
          timeout_s: float = PROBE_S) -> list[tuple[str, float]]:
    """(outcome, seconds) of a TCP connect from party `src` to each target, concurrently."""
    out = subprocess.run([*_in(lab, src), sys.executable, "-c", _PROBE, json.dumps(targets),
                          str(timeout_s)], capture_output=True, text=True, check=True,
                         timeout=timeout_s + 30).stdout
    return [(o, s) for o, s in json.loads(out)]


def matrix(lab: Lab, servers: Servers, timeout_s: float = PROBE_S
           ) -> dict[tuple[int, int], str]:
    """(src, dst) -> outcome, for every ordered pair of parties, all probes at once."""
    parties = range(lab.n + 1)
    procs = {src: subprocess.Popen(
        [*_in(lab, src), sys.executable, "-c", _PROBE,
         json.dumps([servers.target(d) for d in parties if d != src]), str(timeout_s)],
        stdout=subprocess.PIPE, text=True) for src in parties}
    found = {}
    for src, proc in procs.items():
        out, _ = proc.communicate(timeout=timeout_s + 30)
        dsts = [d for d in parties if d != src]
        for dst, (outcome, seconds) in zip(dsts, json.loads(out)):
            if outcome == "timeout":
                assert seconds >= timeout_s * 0.95, (src, dst, seconds)
            found[(src, dst)] = outcome
    return found


def expected(lab: Lab, blocked: set[frozenset[int]]) -> dict[tuple[int, int], str]:
    parties = range(lab.n + 1)
    return {(a, b): "timeout" if frozenset((a, b)) in blocked else "ok"
            for a in parties for b in parties if a != b}


def pairs(*ps: tuple[int, int]) -> set[frozenset[int]]:
    return {frozenset(p) for p in ps}


def _root_state(x: int) -> str:
    """Everything of 10.x in root's addresses, routes and links, for leftover checks."""
    text = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout
    text += subprocess.run(["ip", "route", "show", "table", "all"], capture_output=True,
                           text=True).stdout
    lines = [ln for ln in text.splitlines() if re.search(rf"(?<![\d.])10\.{x}\.", ln)]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    lines += [ln for ln in links.splitlines() if re.search(rf": keos{x}z?[@:]", ln)]
    return "\n".join(lines)


def _assert_removed(lab: Lab) -> None:
    for ns in (lab.hub, *lab.namespaces):
        assert not Path("/run/netns", ns).exists(), ns
    assert _root_state(lab.x) == ""
    assert (LOCK_DIR / f"{lab.x}.lock").read_text() == ""


# -- the lab itself ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lab(network_lab: Lab) -> Lab:
    """The session's lab of three hosts (conftest.py; shared with test_network_partitions.py)."""
    return network_lab


@pytest.fixture(scope="module")
def module_servers(lab: Lab) -> Iterator[Servers]:
    s = Servers(lab)
    yield s
    s.stop()


@pytest.fixture
def servers(lab: Lab, module_servers: Servers) -> Iterator[Servers]:
    """The module's echo servers; every cut a test leaves is healed after it."""
    yield module_servers
    lab.heal_all()


def test_layout(lab: Lab, servers: Servers) -> None:
    """Addresses, lo, the guard, static neighbours; every party reaches every other."""
    x = lab.x
    assert 200 <= x <= 250
    assert lab.hosts == [f"10.{x}.0.11", f"10.{x}.0.12", f"10.{x}.0.13"]
    assert lab.launcher(2) == ["ip", "netns", "exec", lab.namespace(2)]
    assert re.fullmatch(rf"keos-{os.getpid()}-{x}-h2", lab.namespace(2))
    routes = subprocess.run(["ip", "route"], capture_output=True, text=True).stdout
    assert f"blackhole 10.{x}.0.0/16 metric 4000" in routes
    for i in range(1, lab.n + 1):
        addr = lab.exec(i, ["ip", "-4", "addr", "show", "eth0"]).stdout
        assert f"inet {lab.address(i)}/24" in addr
        assert "UP" in lab.exec(i, ["ip", "-br", "link", "show", "lo"]).stdout
        neigh = lab.exec(i, ["ip", "neigh", "show", "dev", "eth0"]).stdout
        assert neigh.count("PERMANENT") == lab.n, neigh
    with pytest.raises(ValueError):
        lab.launcher(0)
    assert matrix(lab, servers) == expected(lab, set())


def test_isolate(lab: Lab, servers: Servers) -> None:
    with lab.isolate(1) as cut:
        assert matrix(lab, servers) == expected(lab, pairs((0, 1), (1, 2), (1, 3)))
    assert cut.healed and not lab.cuts
    assert matrix(lab, servers) == expected(lab, set())


def test_cut_client_side(lab: Lab, servers: Servers) -> None:
    lab.cut_client_side(2)
    assert matrix(lab, servers) == expected(lab, pairs((0, 2)))
    lab.heal_client_side(2)
    assert matrix(lab, servers) == expected(lab, set())


def test_cut_from_peers(lab: Lab, servers: Servers) -> None:
    with lab.cut_from_peers(3):
        assert matrix(lab, servers) == expected(lab, pairs((3, 1), (3, 2)))
    assert matrix(lab, servers) == expected(lab, set())


def test_cut_all_clients(lab: Lab, servers: Servers) -> None:
    with lab.cut_all_clients():
        assert matrix(lab, servers) == expected(lab, pairs((0, 1), (0, 2), (0, 3)))
    assert matrix(lab, servers) == expected(lab, set())


def test_overlapping_cuts_heal_independently(lab: Lab, servers: Servers) -> None:
    """A route or a link two cuts share stays cut until both are healed."""
    client_side = lab.cut_client_side(1)
    isolated = lab.isolate(1)
    lab.cut_all_clients()
    lab.heal_all_clients()
    isolated.heal()
    assert matrix(lab, servers) == expected(lab, pairs((0, 1)))
    client_side.heal()
    client_side.heal()  # idempotent
    with pytest.raises(ValueError, match="nothing to heal"):
        lab.heal_from_peers(2)
    assert matrix(lab, servers) == expected(lab, set())


def test_cuts_are_silent(lab: Lab, servers: Servers) -> None:
    """Blocked connects wait out their whole timeout, past ARP's 3 s, without an error: no
    refusal (even on a port nobody listens on), no reset, no unreachable, no EINVAL (what a
    kernel blackhole route gives). All three mechanisms at once: the hub link down (isolate),
    dead-end routes in root (client side) and in a host (peers)."""
    closed = 9  # nobody listens there in the lab's namespaces: refused, unless cut
    [(outcome, seconds)] = probe(lab, 0, [(lab.address(3), closed)])
    assert outcome == "ECONNREFUSED", (outcome, seconds)  # refused, not left waiting
    print(f"\nan uncut connect to a closed port refused in {seconds:.3f} s")
    lab.isolate(1)
    lab.cut_client_side(2)
    lab.cut_from_peers(3)
    with ThreadPoolExecutor(1) as pool:  # alongside the matrix: both wait SILENT_S
        to_closed = pool.submit(probe, lab, 0, [(lab.address(1), closed),
                                                (lab.address(2), closed)], SILENT_S)
        found = matrix(lab, servers, SILENT_S)
        outcomes = to_closed.result()
    assert found == expected(lab, pairs((0, 1), (1, 2), (1, 3), (0, 2), (2, 3)))
    assert [o for o, _ in outcomes] == ["timeout", "timeout"]
    assert min(s for _, s in outcomes) >= SILENT_S * 0.95
    for i in range(1, lab.n + 1):  # nobody was ever found missing
        neigh = lab.exec(i, ["ip", "neigh", "show", "dev", "eth0"]).stdout
        assert neigh.count("PERMANENT") == lab.n, neigh


def test_open_connection_stalls_and_resumes(lab: Lab, servers: Servers) -> None:
    """A cut is a partition, not a reset: an established connection just stops delivering,
    and delivers what was sent meanwhile once healed."""
    with socket.create_connection(servers.target(2), timeout=5) as conn:
        conn.sendall(b"a")
        assert conn.recv(10) == b"a"
        with lab.cut_client_side(2):
            conn.sendall(b"b")
            conn.settimeout(PROBE_S)
            with pytest.raises(TimeoutError):
                conn.recv(10)
        healed = time.monotonic()
        conn.settimeout(30)
        assert conn.recv(10) == b"b"
        print(f"\nthe held byte arrived {time.monotonic() - healed:.2f} s after the heal")


# -- creating and removing labs -----------------------------------------------------------


def test_removed_at_exit_even_on_failure(lab: Lab) -> None:
    """A second lab alongside the module's (another X), a process left running in it, an
    exception inside: all gone at exit, the module's lab untouched."""
    began = time.monotonic()
    with pytest.raises(RuntimeError, match="boom"):
        with _lab_or_skip(2) as other:
            made = time.monotonic() - began
            assert other.x != lab.x
            sleeper = subprocess.Popen([*other.launcher(1), "sleep", "300"])
            other.cut_from_peers(1)
            raise RuntimeError("boom")
    assert sleeper.wait(10) == -signal.SIGKILL
    _assert_removed(other)
    print(f"\na second lab made in {made:.2f} s")
    assert Path("/run/netns", lab.namespace(1)).exists()


def test_leftovers_of_a_killed_run_are_removed() -> None:
    """A run SIGKILLed inside its lab leaves namespaces, links and the guard; the next lab made
    on this machine removes them."""
    if reason := unavailable():
        pytest.skip(f"network namespaces unavailable here: {reason}")
    code = ("import os, signal, sys\n"
            "from integration_tests.support.netns import network_lab\n"
            "cm = network_lab(2)\n"
            "lab = cm.__enter__()  # cm kept: a collected one would clean up\n"
            "print(os.getpid(), lab.x, lab.hub, *lab.namespaces, flush=True)\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2], timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr
    pid, x, *names = done.stdout.split()
    assert all(Path("/run/netns", n).exists() for n in names)
    assert _root_state(int(x)) != ""
    lock = LOCK_DIR / f"{x}.lock"
    dead = f'"pid": {pid},'  # in the record the dead run left in its lock file
    assert dead in lock.read_text()
    with _lab_or_skip(1):
        pass
    # Removed by this lab's sweep, or by another run's that held the lock at that moment (a
    # parallel run may even have taken X over since): wait for the record to go.
    deadline = time.monotonic() + 15
    while dead in lock.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert dead not in lock.read_text()
    assert not any(Path("/run/netns", n).exists() for n in names)
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if not lock.read_text():  # nobody's X now: nothing of 10.X may be left
            assert _root_state(int(x)) == ""
    except BlockingIOError:
        pass  # a live lab has it now
    finally:
        os.close(fd)


def test_unavailable_names_what_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The skip reason says what failed (here: no `ip` on PATH, simulated)."""
    import integration_tests.support.netns as netns

    monkeypatch.setattr(netns, "_probe_result", [])
    monkeypatch.setattr(netns.shutil, "which", lambda name: None)
    if os.geteuid() == 0:
        assert netns.unavailable() == "`ip` (iproute2) is not on PATH"
        with pytest.raises(LabUnavailable, match="iproute2"):
            with netns.network_lab(1):
                pass
    else:
        assert "root" in netns.unavailable()


# -- a 3-node Apache Kafka cluster in the lab -------------------------------------------------


@pytest.fixture
def cluster(lab_cluster: KafkaCluster) -> KafkaCluster:
    """The session's cluster in the lab (node i in host i, shared with
    test_network_partitions.py, started after the lab's own tests: a fixture is made when first
    asked for), whole."""
    lab_cluster.wait_healthy(timeout_s=180)
    return lab_cluster


def _name(prefix: str) -> str:
    import uuid

    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _transaction(bootstrap: str, topic: str, values: list[bytes], partitions: int,
                 commit: bool = True, timeout_s: float = 60) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 0,
                         "transactional.id": _name("netns-txn"),
                         "transaction.timeout.ms": int(timeout_s * 1000)})
    producer.init_transactions(timeout_s)
    producer.begin_transaction()
    for k, value in enumerate(values):
        producer.produce(topic, value, partition=k % partitions)
    if commit:
        producer.commit_transaction(timeout_s)
    else:
        producer.flush(timeout_s)
        producer.abort_transaction(timeout_s)


def _read_committed(bootstrap: str, topic: str, partitions: int, count: int,
                    timeout_s: float = 60) -> list[bytes]:
    """Everything committed, read until `count` arrived and one more second shows no more."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": _name("netns-read"),
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "log_level": 0})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        values: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        quiet_until = None
        while time.monotonic() < deadline and (quiet_until is None
                                               or time.monotonic() < quiet_until):
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
            if len(values) >= count and quiet_until is None:
                quiet_until = time.monotonic() + 1.0
        return values
    finally:
        consumer.close()


def test_cluster_runs_in_the_lab_and_commits_transactions(lab: Lab,
                                                          cluster: KafkaCluster) -> None:
    """Node i's JVM runs in host i's namespace on host i's address; a client in the root
    namespace commits and aborts transactions through the bridge."""
    for node in cluster.nodes:
        where = subprocess.run(["ip", "netns", "identify", str(node.pid)],
                               capture_output=True, text=True, check=True).stdout.strip()
        assert where == lab.namespace(node.node_id)
        assert node.address == f"{lab.address(node.node_id)}:19092"
    topic = _name("netns-txn")
    cluster.create_topic(topic, 3)
    committed = [f"c{i}".encode() for i in range(300)]
    _transaction(cluster.bootstrap_servers, topic, [b"aborted"] * 30, 3, commit=False)
    _transaction(cluster.bootstrap_servers, topic, committed, 3)
    assert sorted(_read_committed(cluster.bootstrap_servers, topic, 3, 300)) == sorted(committed)


def test_leader_cut_from_peers_leaves_the_isr(lab: Lab, cluster: KafkaCluster) -> None:
    """cut_from_peers(leader): the other two fence it and take the partition over, while the
    root namespace still reaches the cut node (it answers Metadata); healed, it
    rejoins the ISR, and transactions commit through the cluster again."""
    topic = _name("netns-isr")
    cluster.create_topic(topic, 1)
    cluster.wait_healthy(topics=[topic])
    before = [f"b{i}".encode() for i in range(100)]
    _transaction(cluster.bootstrap_servers, topic, before, 1)
    leader = cluster.leader_of(topic, 0)
    with lab.cut_from_peers(leader):
        began = time.monotonic()
        while True:
            state = cluster.partition_states(topic)[0]
            if leader not in state.isr and state.leader not in (leader, -1):
                break
            # a hang guard, not a timing claim (measured: out in 10-20 s; printed below)
            assert time.monotonic() - began < 300, f"{leader} still in the ISR: {state}"
            time.sleep(0.2)
        out_s = time.monotonic() - began
        views = cluster.views()
        assert leader in views, "the cut node no longer answers the root namespace"
        assert sorted(state.isr) == sorted({1, 2, 3} - {leader})
        # No transaction during the cut here (clients are not what this checks): measured,
        # init_transactions then took 0.1-0.9 s mostly, but 30 s in 3 of 22 cuts (the
        # coordinator, on a node of the majority, answering COORDINATOR_LOAD_IN_PROGRESS all
        # along), over 9 s in 2 more, and once it failed with that error.
    began = time.monotonic()
    cluster.wait_in_sync(leader, [topic], timeout_s=120)
    in_sync_s = time.monotonic() - began
    assert sorted(cluster.partition_states(topic)[0].isr) == [1, 2, 3]
    after = [f"a{i}".encode() for i in range(100)]
    _transaction(cluster.bootstrap_servers, topic, after, 1)
    got = _read_committed(cluster.bootstrap_servers, topic, 1, 200)
    assert sorted(got) == sorted(before + after)
    print(f"\nleader {leader} cut from its peers: out of the ISR after {out_s:.1f} s "
          f"(new leader {state.leader}, the cut node still answering the root namespace), "
          f"back in every ISR {in_sync_s:.1f} s after the heal")
