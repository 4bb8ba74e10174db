"""Where the suite's time goes, per test module: a pytest plugin and its report.

On with `KAFKA_EOS_SUITE_PROFILE=DIR` (off otherwise: it costs a /proc walk every half second,
about 8 ms of CPU each, 1.5-2% of a core per xdist worker: a profiled run is slower than CI's).
Each pytest process (every xdist worker) samples its own process tree, so a module is charged
with the CPU of everything its worker ran while the module ran: the worker itself, its Spark
session, its brokers, the pipelines it started and their JVMs and Python workers. Per module it
writes one JSON line to `DIR/<worker>.jsonl`: wall and CPU seconds, the JVMs started by kind
(Spark drivers, Kafka nodes, the registry, others), Python processes started, and the seconds
the worker spent in `time.sleep`: fixed waits (a call of a second or more: a fault held, a
pause) apart from polling steps (shorter calls); Popen.wait's own polling is neither. `python -m integration_tests.support.suite_profile DIR`
prints the table docs/testing.md keeps.

A process that dies between two samples loses at most its last half second of CPU; processes of
another worker are never charged to this one's module.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field

PROFILE_ENV = "KAFKA_EOS_SUITE_PROFILE"
_TICKS = os.sysconf("SC_CLK_TCK")
_INTERVAL_S = 0.5


def _stat(pid: int) -> tuple[int, float, int] | None:
    """(ppid, cpu seconds, start time in ticks) of a process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            raw = f.read()
    except OSError:
        return None
    rest = raw[raw.rindex(")") + 2:].split()
    return int(rest[1]), (int(rest[11]) + int(rest[12])) / _TICKS, int(rest[19])


def _kind(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    if "java" not in cmd.split(" ", 1)[0] and "/java " not in cmd:
        return "python" if "python" in cmd.split(" ", 1)[0] else "other"
    if "kafka.Kafka " in cmd or cmd.rstrip().endswith("kafka.Kafka"):
        return "kafka"
    if "apicurio" in cmd or "quarkus" in cmd:
        return "registry"
    if "SparkSubmit" in cmd or "spark-submit" in cmd:
        return "spark"
    return "jvm"


@dataclass
class _Module:
    name: str
    start_wall: float
    start_cpu: dict[tuple[int, int], float]
    own_cpu: float
    new: set[tuple[int, int]] = field(default_factory=set)
    held: float = 0.0
    polled: float = 0.0


class SuiteProfile:
    """Samples this process's descendants; charges their CPU to the running module."""

    def __init__(self, out_dir: str) -> None:
        self.out_path = os.path.join(
            out_dir, f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.jsonl")
        os.makedirs(out_dir, exist_ok=True)
        self.cpu: dict[tuple[int, int], float] = {}   # (pid, start) -> last CPU seen
        self.kinds: dict[tuple[int, int], str] = {}
        self.module: _Module | None = None
        self.lock = threading.Lock()
        self._sleep = time.sleep
        time.sleep = self._counted_sleep  # the worker's own polling and fixed waits
        threading.Thread(target=self._run, name="suite-profile", daemon=True).start()

    def _counted_sleep(self, seconds: float) -> None:
        """A sleep of a second or more is a fixed wait (a fault held, a pause); a shorter one a
        polling loop's step. Popen.wait(timeout)'s own polling is waiting for a process, and
        counted as neither."""
        m = self.module
        if m is not None and threading.current_thread() is threading.main_thread():
            caller = sys._getframe(1).f_code.co_filename
            if not caller.endswith("subprocess.py"):
                if seconds >= 1:
                    m.held += seconds
                else:
                    m.polled += seconds
        self._sleep(seconds)

    def _descendants(self) -> dict[tuple[int, int], float]:
        me = os.getpid()
        stats = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                s = _stat(int(entry))
                if s:
                    stats[int(entry)] = s
        children: dict[int, list[int]] = {}
        for pid, (ppid, _, _) in stats.items():
            children.setdefault(ppid, []).append(pid)
        found, todo = {}, list(children.get(me, []))
        while todo:
            pid = todo.pop()
            _, cpu, start = stats[pid]
            found[(pid, start)] = cpu
            todo.extend(children.get(pid, []))
        return found

    def _sample(self) -> None:
        seen = self._descendants()
        with self.lock:
            for key, cpu in seen.items():
                # a launcher script exec's its JVM under the same pid: look again until it has
                if self.kinds.get(key, "other") == "other":
                    self.kinds[key] = _kind(key[0])
                    if key not in self.cpu and self.module is not None:
                        self.module.new.add(key)
                        self.module.start_cpu.setdefault(key, 0.0)
                self.cpu[key] = cpu

    def _run(self) -> None:
        while True:
            try:
                self._sample()
            except Exception:  # noqa: BLE001 - a profile must never fail a test
                pass
            self._sleep(_INTERVAL_S)

    def begin(self, name: str) -> None:
        self._sample()
        t = os.times()
        with self.lock:
            self.module = _Module(name, time.monotonic(), dict(self.cpu), t.user + t.system)

    def end(self) -> None:
        self._sample()
        t = os.times()
        with self.lock:
            m, self.module = self.module, None
        if m is None:
            return
        by_kind: dict[str, float] = {}
        for key, cpu in self.cpu.items():
            if key in m.start_cpu:
                kind = self.kinds.get(key, "other")
                by_kind[kind] = by_kind.get(kind, 0.0) + cpu - m.start_cpu[key]
        children = sum(by_kind.values())
        started: dict[str, int] = {}
        for key in m.new:
            kind = self.kinds.get(key, "other")
            started[kind] = started.get(kind, 0) + 1
        record = {
            "module": m.name, "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
            "wall_s": round(time.monotonic() - m.start_wall, 1),
            "cpu_s": round(children + t.user + t.system - m.own_cpu, 1),
            "started": started, "held_s": round(m.held, 1), "polled_s": round(m.polled, 1),
            "cpu_by_kind": {k: round(v, 1) for k, v in by_kind.items() if v >= 0.05},
        }
        with open(self.out_path, "a") as f:
            f.write(json.dumps(record) + "\n")


_profile: SuiteProfile | None = None
_current: str | None = None


def pytest_configure(config) -> None:
    global _profile
    out = os.environ.get(PROFILE_ENV)
    if out and _profile is None and (os.environ.get("PYTEST_XDIST_WORKER")
                                     or config.getoption("numprocesses", 0) in (0, None)):
        _profile = SuiteProfile(out)


def pytest_runtest_protocol(item, nextitem):
    global _current
    if _profile is None:
        return None
    name = item.nodeid.split("::", 1)[0]
    if name != _current:
        if _current is not None:
            _profile.end()
        _profile.begin(name)
        _current = name
    return None


def pytest_unconfigure(config) -> None:
    if _profile is not None and _current is not None:
        _profile.end()


def report(out_dir: str) -> str:
    rows = []
    for name in sorted(os.listdir(out_dir)):
        if name.endswith(".jsonl"):
            with open(os.path.join(out_dir, name)) as f:
                rows.extend(json.loads(line) for line in f if line.strip())
    merged: dict[str, dict] = {}
    sums = ("wall_s", "cpu_s", "held_s", "polled_s")
    for r in rows:  # a module whose tests were split is merged back
        m = merged.setdefault(r["module"], {k: 0.0 for k in sums} | {"started": {}})
        for k in sums:
            m[k] += r.get(k, 0.0)
        for k, v in r["started"].items():
            m["started"][k] = m["started"].get(k, 0) + v
    lines = ["| module | wall s | CPU s | Spark JVMs | Kafka nodes | registries | other JVMs "
             "| Python procs | fixed waits s | polling s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    total = {k: 0.0 for k in sums}
    for mod, m in sorted(merged.items(), key=lambda kv: -kv[1]["wall_s"]):
        s = m["started"]
        for k in sums:
            total[k] += m[k]
        lines.append(f"| `{mod}` | {m['wall_s']:.0f} | {m['cpu_s']:.0f} | {s.get('spark', 0)} | "
                     f"{s.get('kafka', 0)} | {s.get('registry', 0)} | {s.get('jvm', 0)} | "
                     f"{s.get('python', 0)} | {m['held_s']:.0f} | {m['polled_s']:.0f} |")
    lines.append(f"| all ({len(merged)} modules) | {total['wall_s']:.0f} | {total['cpu_s']:.0f} "
                 f"| | | | | | {total['held_s']:.0f} | {total['polled_s']:.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(sys.argv[1]))
