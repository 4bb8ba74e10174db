"""Network partitions for tests: broker hosts in network namespaces of their own, joined by a
bridge, and cut from each other or from the root namespace (Spark, the driver, pytest) at will.

    with network_lab(hosts=3) as lab:                      # lab.hosts: 10.X.0.11, .12, .13
        with kafka_cluster(hosts=lab.hosts, launcher=lab.launcher) as cluster:
            with lab.cut_from_peers(1):                    # or cut = lab.cut_from_peers(1) ...
                ...                                        # ... cut.heal() / lab.heal_all()

Layout (no host forwarding: ip_forward stays 0, hosts talk through the hub's bridge at layer 2):

    root namespace:  keos<X>  10.X.0.1/24         --veth--  r0  ┐
    keos-<pid>-<X>-h<i>:  eth0  10.X.0.(10+i)/24  --veth--  h<i> ┴ br0 in keos-<pid>-<X>-hub

plus a guard in root, `blackhole 10.X.0.0/16 metric 4000`, so that a packet for a test address
that loses its route still never leaves this machine (docs: DESIGN s.12). X is claimed per run
under a lock (`/run/keos-netns/<X>.lock`, 200 <= X <= 250, only if root routes nothing in 10.X):
two pytest workers each get their own. What a run creates is written into its lock file before it
is created, so the next run removes what a killed one left behind.

Every cut is silent, as a real partition is: packets vanish, nobody is refused or reset, and the
senders wait for their own timeouts. Three measured facts on this kernel shape how:
* a kernel `blackhole` route is not silent for the namespace's own sockets: connect() fails at
  once with EINVAL. A cut route here sends the /32 into a *dead end* instead: a NOARP veth whose
  far end is down and joined to nothing (DESIGN s.12's "far end down", as a route), in whichever
  namespace sends; the packets die on it;
* a neighbour that stops answering ARP turns into EHOSTUNREACH after about 3 s (also the fate of
  DESIGN s.12's own "far end down" without more). So every neighbour entry on the lab's bridge is
  static (`nud permanent`, fixed MACs): a cut host is never *known* to be gone;
* `isolate` takes the hub's end of the host's veth down, not the host's `eth0`: `eth0` down would
  delete the host's own connected route, and its processes would get ENETUNREACH at once. With
  the hub end down both ends keep their routes; the host's packets die on its carrierless `eth0`,
  and frames for it are flooded on the bridge and dropped by everybody else.
Cuts are reference counted per route and per link, so overlapping cuts heal independently.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: The second octet of a lab's addresses is taken from here (10.X.0.0/24).
X_RANGE = range(200, 251)
LOCK_DIR = Path("/run/keos-netns")
PREFIX = "keos"  # namespaces keos-<pid>-<X>-hub / -h<i>; root links keos<X> / keos<X>z
GUARD_METRIC = 4000


class LabUnavailable(RuntimeError):
    """Network namespaces cannot be made here; the message names what failed."""


def _run(cmd: Sequence[str], check: bool = True,
         timeout: float = 30) -> subprocess.CompletedProcess:
    result = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` failed ({result.returncode}): "
                           f"{(result.stderr or result.stdout).strip()}")
    return result


def _ip(ns: str | None, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`ip` in namespace `ns` (None: root); `-n` switches namespace without a new mount
    namespace, so it is much cheaper than `ip netns exec`."""
    return _run(["ip", *(["-n", ns] if ns else []), *args], check=check)


def _mac(x: int, octet: int) -> str:
    """A fixed, locally administered MAC per lab address: the neighbour entries are static."""
    return f"02:6b:65:{x:02x}:00:{octet:02x}"


_probe_result: list[str | None] = []


def unavailable() -> str | None:
    """Why a lab cannot be made here (None: it can), naming what failed; tried once per
    process by making a namespace with a bridge and a veth pair to the root namespace."""
    if _probe_result:
        return _probe_result[0]
    reason: str | None = None
    if os.geteuid() != 0:
        reason = f"network namespaces need root (euid is {os.geteuid()})"
    elif shutil.which("ip") is None:
        reason = "`ip` (iproute2) is not on PATH"
    else:
        ns, link = f"{PREFIX}-{os.getpid()}-probe", f"{PREFIX}p{os.getpid()}"
        _remove_namespaces([ns])
        try:
            for cmd in (["ip", "netns", "add", ns],
                        ["ip", "-n", ns, "link", "add", "br0", "type", "bridge"],
                        ["ip", "link", "add", link, "type", "veth", "peer", "name", "p0",
                         "netns", ns]):
                result = _run(cmd, check=False)
                if result.returncode != 0:
                    reason = (f"`{' '.join(cmd)}` failed: "
                              f"{(result.stderr or result.stdout).strip()}")
                    break
        finally:
            _ip(None, "link", "del", link, check=False)
            _remove_namespaces([ns])
    _probe_result.append(reason)
    return reason


# -- what a run owns, and removing it ------------------------------------------------------


def _namespace_exists(name: str) -> bool:
    return Path("/run/netns", name).exists()


def _remove_namespaces(names: Sequence[str]) -> None:
    """Kill what still runs inside (a namespace with a live process outlives `ip netns del`,
    links and all), then delete. Only ever called on this module's own `keos-` namespaces."""
    for name in names:
        if not _namespace_exists(name):
            continue
        pids = _run(["ip", "netns", "pids", name], check=False).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        if pids:
            deadline = time.monotonic() + 10
            while (_run(["ip", "netns", "pids", name], check=False).stdout.split()
                   and time.monotonic() < deadline):
                time.sleep(0.05)
        _run(["ip", "netns", "del", name], check=False)


def _remove(record: dict) -> None:
    """Remove what `record` (a lock file's content) says a run created: root links first (a
    deleted veth takes its peer along at once; a namespace's own clean-up is asynchronous),
    then namespaces, the guard route last."""
    x = int(record["x"])
    for link in record.get("links", []):
        _ip(None, "link", "del", link, check=False)
    _remove_namespaces(record.get("namespaces", []))
    _ip(None, "route", "del", "blackhole", f"10.{x}.0.0/16", "metric", str(GUARD_METRIC),
        check=False)


def _routed(x: int) -> bool:
    """Whether the root namespace has any address or route in 10.x.0.0/16."""
    text = (_ip(None, "-4", "-o", "addr", "show").stdout
            + _ip(None, "-4", "route", "show", "table", "all").stdout)
    return re.search(rf"(?<![\d.])10\.{x}\.", text) is not None


def _sweep() -> None:
    """Remove what every dead run left (its lock file unlocked but not empty)."""
    for path in sorted(LOCK_DIR.glob("*.lock")):
        with contextlib.suppress(OSError):
            fd = os.open(path, os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                text = os.pread(fd, 1 << 16, 0).decode(errors="replace").strip()
                if text:
                    with contextlib.suppress(ValueError, KeyError):
                        _remove(json.loads(text))
                    os.ftruncate(fd, 0)
            except BlockingIOError:
                pass  # a live run's
            finally:
                os.close(fd)


def _claim(record_for: Callable[[int], dict]) -> tuple[int, int]:
    """Lock a free X: (X, the lock file's descriptor, held for the lab's life). Leftovers of
    dead runs (their lock released by the kernel when they died) are removed on the way."""
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    _sweep()
    for x in X_RANGE:
        fd = os.open(LOCK_DIR / f"{x}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        text = os.pread(fd, 1 << 16, 0).decode(errors="replace").strip()
        if text:
            with contextlib.suppress(ValueError, KeyError):
                _remove(json.loads(text))
            os.ftruncate(fd, 0)
        if _routed(x):
            os.close(fd)  # someone else's addresses: not ours to touch
            continue
        data = json.dumps(record_for(x)).encode()
        os.pwrite(fd, data, 0)
        os.fsync(fd)
        return x, fd
    raise LabUnavailable(f"no free 10.X.0.0/16 for a network lab (X in {X_RANGE.start}.."
                         f"{X_RANGE.stop - 1}: all locked by other runs or routed here)")


# -- the lab -------------------------------------------------------------------------------


@dataclass
class Cut:
    """One cut in place; `heal()` (idempotent) or leaving the `with` block undoes it."""

    description: str
    _undo: Callable[[], None] = field(repr=False)
    _lab: Lab = field(repr=False)
    healed: bool = False

    def heal(self) -> None:
        if not self.healed:
            self.healed = True
            self._undo()
            self._lab.cuts.remove(self)

    def __enter__(self) -> Cut:
        return self

    def __exit__(self, *exc: object) -> None:
        self.heal()


@dataclass
class Lab:
    """A running lab (`network_lab()`). Hosts are numbered 1..n, like a cluster's node ids:
    `hosts[i - 1]` is host i's address, `launcher(i)` runs a command inside host i."""

    x: int
    hub: str
    namespaces: list[str]  # host i's is namespaces[i - 1]
    root_link: str
    root_dead_end: str
    cuts: list[Cut] = field(default_factory=list)
    _down: Counter = field(default_factory=Counter, repr=False)  # host -> isolations
    _routes: Counter = field(default_factory=Counter, repr=False)  # (ns, addr) -> cuts

    @property
    def n(self) -> int:
        return len(self.namespaces)

    @property
    def subnet(self) -> str:
        return f"10.{self.x}.0.0/24"

    @property
    def client(self) -> str:
        """The root namespace's address on the bridge (where Spark and the driver are)."""
        return f"10.{self.x}.0.1"

    def address(self, i: int) -> str:
        self._check(i)
        return f"10.{self.x}.0.{10 + i}"

    @property
    def hosts(self) -> list[str]:
        return [self.address(i) for i in range(1, self.n + 1)]

    def namespace(self, i: int) -> str:
        self._check(i)
        return self.namespaces[i - 1]

    def launcher(self, i: int) -> list[str]:
        """The command prefix that runs a process inside host i's namespace."""
        return ["ip", "netns", "exec", self.namespace(i)]

    def exec(self, i: int, cmd: Sequence[str], check: bool = True,
             timeout: float = 60) -> subprocess.CompletedProcess:
        """Run `cmd` inside host i's namespace to completion (output captured, as text)."""
        return _run([*self.launcher(i), *cmd], check=check, timeout=timeout)

    def _check(self, i: int) -> None:
        if not 1 <= i <= len(self.namespaces):
            raise ValueError(f"no host {i}: hosts are 1..{len(self.namespaces)}")

    # -- primitives: a link down, a route into a dead end (both reference counted) ----------

    def _ns(self, i: int) -> str | None:
        """Namespace of party i: 0 is the root namespace (None), 1..n the hosts."""
        return None if i == 0 else self.namespace(i)

    def _addr(self, i: int) -> str:
        return self.client if i == 0 else self.address(i)

    def _route_cut(self, src: int, dst: int) -> None:
        key = (src, dst)
        self._routes[key] += 1
        if self._routes[key] == 1:
            dead = self.root_dead_end if src == 0 else "dead0"
            _ip(self._ns(src), "route", "replace", f"{self._addr(dst)}/32", "dev", dead,
                "src", self._addr(src))

    def _route_heal(self, src: int, dst: int) -> None:
        key = (src, dst)
        self._routes[key] -= 1
        if self._routes[key] == 0:
            del self._routes[key]
            _ip(self._ns(src), "route", "del", f"{self._addr(dst)}/32")

    def _pair(self, a: int, b: int, cut: bool) -> None:
        """Both directions between parties a and b (0: root)."""
        for src, dst in ((a, b), (b, a)):
            (self._route_cut if cut else self._route_heal)(src, dst)

    def _cut(self, description: str, apply: Callable[[], None],
             undo: Callable[[], None]) -> Cut:
        apply()
        cut = Cut(description, undo, self)
        self.cuts.append(cut)
        return cut

    # -- the cuts -------------------------------------------------------------------------

    def isolate(self, i: int) -> Cut:
        """Host i loses every link: cut from the root namespace and from every other host."""
        self._check(i)

        def down() -> None:
            self._down[i] += 1
            if self._down[i] == 1:
                _ip(self.hub, "link", "set", f"h{i}", "down")

        def up() -> None:
            self._down[i] -= 1
            if self._down[i] == 0:
                del self._down[i]
                _ip(self.hub, "link", "set", f"h{i}", "up")

        return self._cut(f"isolate host {i}", down, up)

    def cut_client_side(self, i: int) -> Cut:
        """The root namespace (the Spark side) and host i lose each other; the hosts still
        reach each other. Both directions: a one-way cut would still deliver host i's late
        answers on open connections."""
        self._check(i)
        return self._cut(f"cut host {i} from the client side",
                         lambda: self._pair(0, i, True), lambda: self._pair(0, i, False))

    def cut_from_peers(self, i: int) -> Cut:
        """Host i and every other host lose each other; the root namespace still reaches
        all."""
        self._check(i)
        peers = [j for j in range(1, self.n + 1) if j != i]

        def apply() -> None:
            for j in peers:
                self._pair(i, j, True)

        def undo() -> None:
            for j in peers:
                self._pair(i, j, False)

        return self._cut(f"cut host {i} from its peers", apply, undo)

    def cut_all_clients(self) -> Cut:
        """The root namespace loses every host (the whole pipeline cut from the whole
        cluster); the hosts still reach each other. One /32 per host: longest prefix wins over
        the connected /24 whatever the metrics."""
        everyone = range(1, self.n + 1)

        def apply() -> None:
            for j in everyone:
                self._pair(0, j, True)

        def undo() -> None:
            for j in everyone:
                self._pair(0, j, False)

        return self._cut("cut every host from the client side", apply, undo)

    def heal_isolate(self, i: int) -> None:
        self._heal_last(f"isolate host {i}")

    def heal_client_side(self, i: int) -> None:
        self._heal_last(f"cut host {i} from the client side")

    def heal_from_peers(self, i: int) -> None:
        self._heal_last(f"cut host {i} from its peers")

    def heal_all_clients(self) -> None:
        self._heal_last("cut every host from the client side")

    def _heal_last(self, description: str) -> None:
        for cut in reversed(self.cuts):
            if cut.description == description:
                cut.heal()
                return
        raise ValueError(f"nothing to heal: no cut '{description}' in place")

    def heal_all(self) -> None:
        for cut in reversed(list(self.cuts)):
            cut.heal()


@contextlib.contextmanager
def network_lab(hosts: int = 3) -> Iterator[Lab]:
    """Make the lab (about a second), yield it; on exit, failure or not, kill what still runs
    inside its namespaces and remove every namespace, link and route it made.
    Raises LabUnavailable (the reason inside) when namespaces cannot be made here."""
    if hosts < 1:
        raise ValueError("a lab needs at least one host")
    reason = unavailable()
    if reason:
        raise LabUnavailable(reason)

    def record(x: int) -> dict:
        tag = f"{PREFIX}-{os.getpid()}-{x}"  # unique among live labs, X being locked
        return {"pid": os.getpid(), "x": x,
                "namespaces": [f"{tag}-hub", *(f"{tag}-h{i}" for i in range(1, hosts + 1))],
                "links": [f"{PREFIX}{x}", f"{PREFIX}{x}z"]}

    x, fd = _claim(record)
    mine = record(x)
    hub, *names = mine["namespaces"]
    try:
        _remove_namespaces([hub, *names])  # same names left by a killed run of a reused pid
        _ip(None, "route", "replace", "blackhole", f"10.{x}.0.0/16", "metric", str(GUARD_METRIC))
        lab = Lab(x, hub, names, f"{PREFIX}{x}", f"{PREFIX}{x}z")
        for ns in (hub, *names):
            _run(["ip", "netns", "add", ns])
            _ip(ns, "link", "set", "lo", "up")
        _ip(hub, "link", "add", "br0", "type", "bridge", "forward_delay", "0", "stp_state", "0")
        _ip(hub, "link", "set", "br0", "up")
        # root: its link to the bridge, and its dead end (far end z0 in the hub, never up)
        _ip(None, "link", "add", lab.root_link, "address", _mac(x, 1), "type", "veth",
            "peer", "name", "r0", "netns", hub)
        _ip(None, "link", "add", lab.root_dead_end, "type", "veth", "peer", "name", "z0",
            "netns", hub)
        _ip(None, "addr", "add", f"{lab.client}/24", "dev", lab.root_link)
        _ip(None, "link", "set", lab.root_link, "up")
        _ip(None, "link", "set", lab.root_dead_end, "arp", "off", "up")
        _ip(hub, "link", "set", "r0", "master", "br0", "up")
        for i, ns in enumerate(names, start=1):
            _ip(hub, "link", "add", f"h{i}", "type", "veth", "peer", "name", "eth0",
                "netns", ns)
            _ip(hub, "link", "add", f"z{i}", "type", "veth", "peer", "name", "dead0",
                "netns", ns)
            _ip(hub, "link", "set", f"h{i}", "master", "br0", "up")
            _ip(ns, "link", "set", "eth0", "address", _mac(x, 10 + i))
            _ip(ns, "addr", "add", f"{lab.address(i)}/24", "dev", "eth0")
            _ip(ns, "link", "set", "eth0", "up")
            _ip(ns, "link", "set", "dead0", "arp", "off", "up")
        # static neighbours everywhere: a cut peer must never be found missing (EHOSTUNREACH)
        parties = range(0, hosts + 1)
        for a in parties:
            for b in parties:
                if a != b:
                    _ip(lab._ns(a), "neigh", "replace", lab._addr(b), "lladdr",
                        _mac(x, 1 if b == 0 else 10 + b), "dev",
                        lab.root_link if a == 0 else "eth0", "nud", "permanent")
        yield lab
    finally:
        try:
            _remove(mine)
        finally:
            os.ftruncate(fd, 0)
            os.close(fd)
