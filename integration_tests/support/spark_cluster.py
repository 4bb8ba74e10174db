"""A Spark standalone cluster of separate hosts for tests: the master in the root namespace (where
the driver runs), each worker, and so its executors, in a host of a network lab
(integration_tests/support/netns.py) and in a mount namespace of its own (docs/deploying.md).

    with network_lab(hosts=6) as lab, spark_cluster(lab, workers=[4, 5]) as cluster:
        cluster.master_url                 # spark://10.X.0.1:P
        cluster.executor_pids(4)           # CoarseGrainedExecutorBackend JVMs on host 4
        cluster.kill_worker(5); cluster.start_worker(5)

What a worker sees, as a node of a real cluster would:
* its own Python environment (`worker_environment()`): a virtual environment with the package
  installed from the wheel built from this repository, first on its PATH, its `pyspark` the
  worker's SPARK_HOME. Built once per set of dependencies and cached outside the repository;
  the wheel is reinstalled (without its dependencies) when the package's files change;
* no view of the driver: tmpfs over the repository, over the driver's site-packages (and its
  virtual environment, when it runs in one) and over /tmp, so a path the driver sends that only
  exists on the driver's host fails there as it would on another machine;
* the network of its lab host: the master, the driver and anything shared (Kafka, S3,
  PostgreSQL) at lab addresses, never on loopback.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from integration_tests.support.netns import Lab
from connectors.local.spark import QUICK_START_JAVA_OPTIONS
from integration_tests.support.processes import ROOT

CACHE = Path(os.environ.get("KAFKA_EOS_CACHE", Path.home() / ".cache" / "kafka-eos"))
#: What the wheel is built from: a change to any of these rebuilds and reinstalls it.
PACKAGE_PARTS = ("connectors", "sources", "sinks", "pyproject.toml", "pyspark_kafka_eos.py",
                 "pyspark_delta_eos.py", "pyspark_postgres_eos.py",
                 "kafka_eos_pyspark_python.py", "kafka_eos_pyspark_python.pth")
#: The extras the nodes install: every sink the lane runs.
NODE_EXTRAS = "postgres"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
#: An application's settings for short runs on the test cluster (see `spark_cluster`).
QUICK_START_CONF = {"spark.driver.extraJavaOptions": QUICK_START_JAVA_OPTIONS,
                    "spark.executor.extraJavaOptions": QUICK_START_JAVA_OPTIONS}
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def _tree_digest(root: Path, parts: tuple[str, ...]) -> str:
    """A digest of the package's source files (not their times): the wheel's cache key."""
    h = hashlib.sha256()
    for part in parts:
        path = root / part
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for f in files:
            if "__pycache__" in f.parts or f.suffix == ".pyc":
                continue
            h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build_wheel(root: Path = Path(ROOT)) -> Path:
    """The package's wheel, built from `root` once per digest of its files (cached)."""
    digest = _tree_digest(root, PACKAGE_PARTS)
    out = CACHE / "wheels" / digest
    with _locked(CACHE / "wheels" / f"{digest}.lock"):
        found = sorted(out.glob("*.whl"))
        if found:
            return found[0]
        tmp = out.with_suffix(".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp),
                        str(root)], check=True, capture_output=True, text=True)
        tmp.rename(out)
        return sorted(out.glob("*.whl"))[0]


def _dependencies(root: Path) -> str:
    import tomllib

    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    deps = sorted(project["dependencies"]) + sorted(
        project["optional-dependencies"].get(NODE_EXTRAS, []))
    return "\n".join(deps)


def worker_environment(root: Path = Path(ROOT)) -> Path:
    """A virtual environment with the package's dependencies (cached per dependency set) and the
    wheel of this checkout (reinstalled without dependencies when the package changed): what a
    cluster image's Python holds. Its base interpreter is this one (its standard library only:
    `include-system-site-packages = false`)."""
    deps = _dependencies(root)
    key = hashlib.sha256(f"{sys.version}\n{deps}".encode()).hexdigest()[:12]
    env = CACHE / "cluster-env" / f"py{sys.version_info[0]}{sys.version_info[1]}-{key}"
    wheel = build_wheel(root)
    with _locked(env.with_suffix(".lock")):
        python = env / "bin" / "python"
        if not (env / ".deps-installed").exists():
            shutil.rmtree(env, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
            subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                            f"{wheel}[{NODE_EXTRAS}]"], check=True, capture_output=True,
                           text=True)
            (env / ".deps-installed").write_text(deps)
            (env / ".wheel").write_text(wheel.parent.name)
        elif _read(env / ".wheel") != wheel.parent.name:
            subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                            "--no-deps", "--force-reinstall", str(wheel)], check=True,
                           capture_output=True, text=True)
            (env / ".wheel").write_text(wheel.parent.name)
    return env


def bare_node_environment() -> Path:
    """A node with Spark and no package: a virtual environment holding this PySpark alone
    (cached per PySpark version), for the shipping modes that bring the package along
    (`spark.archives`)."""
    import pyspark

    env = CACHE / "cluster-env" / f"bare-py{sys.version_info[0]}{sys.version_info[1]}-pyspark-{pyspark.__version__}"
    with _locked(env.parent / f"{env.name}.lock"):
        if not (env / ".installed").exists():
            shutil.rmtree(env, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
            subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "-q",
                            "--disable-pip-version-check", f"pyspark=={pyspark.__version__}"],
                           check=True, capture_output=True, text=True)
            (env / ".installed").write_text(pyspark.__version__)
    return env


def packed_environment(root: Path = Path(ROOT)) -> tuple[Path, Path]:
    """(the environment, its `venv-pack` archive): the package from this checkout's wheel with
    its dependencies but PySpark (the executors' Spark brings its own pyspark.zip), packed as
    a `.tar.gz` at gzip level 1, for `spark.archives`: Spark unpacks a plain `.tar` with its own
    Java code, which drops the files' modes (`Cannot run program "./environment/bin/python":
    error=13, Permission denied`), a `.tar.gz` with Hadoop's, which keeps them. Cached
    per wheel. Its interpreter is a copy of this one's binary (its standard library stays at the
    base interpreter's path, which the nodes share, as a cluster image's Python would)."""
    import tomllib

    wheel = build_wheel(root)
    deps = [d for d in tomllib.loads((root / "pyproject.toml").read_text())["project"]
            ["dependencies"] if not d.lower().startswith("pyspark")]
    deps += tomllib.loads((root / "pyproject.toml").read_text())["project"][
        "optional-dependencies"].get(NODE_EXTRAS, [])
    key = hashlib.sha256(f"{sys.version}\n{sorted(deps)}\ncopies".encode()).hexdigest()[:12]
    env = CACHE / "cluster-env" / f"packed-py{sys.version_info[0]}{sys.version_info[1]}-{key}"
    archive = env.with_name(f"{env.name}-{wheel.parent.name}.tar.gz")
    with _locked(env.parent / f"{env.name}.lock"):
        python = env / "bin" / "python"
        if not (env / ".deps-installed").exists():
            shutil.rmtree(env, ignore_errors=True)
            # --copies: Spark refuses to unpack an archive whose bin/python links outside it
            # ("expanding bin/python would create entry outside of ...")
            subprocess.run([sys.executable, "-m", "venv", "--copies", str(env)], check=True)
            subprocess.run([str(python), "-m", "pip", "install", "-q",
                            "--disable-pip-version-check", *deps], check=True,
                           capture_output=True, text=True)
            (env / ".deps-installed").write_text("\n".join(deps))
        if not archive.exists():
            subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                            "--no-deps", "--force-reinstall", str(wheel)], check=True,
                           capture_output=True, text=True)
            for old in env.parent.glob(f"{env.name}-*.tar*"):
                old.unlink()
            tmp = archive.with_name(f"{archive.name}.tmp.tar.gz")
            subprocess.run([sys.executable, "-m", "venv_pack", "-p", str(env), "-o", str(tmp),
                            "--format", "tar.gz", "--compress-level", "1", "--force"],
                           check=True, capture_output=True, text=True)
            tmp.rename(archive)
    return env, archive


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def hidden_from_nodes(root: Path = Path(ROOT)) -> list[str]:
    """What a node must not see of the driver's host: the repository, the driver's installed
    packages (and virtual environment), and /tmp."""
    hidden = {str(root), sysconfig.get_paths()["purelib"], "/tmp"}
    if sys.prefix != sys.base_prefix:
        hidden.add(sys.prefix)
    return sorted(hidden)


def node_command(cmd: list[str], *, hide: list[str]) -> list[str]:
    """`cmd` in a mount namespace of its own with tmpfs over every path of `hide` (the mounts
    die with the namespace)."""
    mounts = " && ".join(f"mount -t tmpfs -o size=2g tmpfs {shlex.quote(p)}" for p in hide
                         if os.path.isdir(p))
    # `cd /`: a working directory under a hidden path would still show its old contents
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            f"{mounts} && cd / && exec \"$@\"", "node", *cmd]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@dataclass
class SparkCluster:
    """A running cluster (`spark_cluster()`): the master in the root namespace, workers in lab
    hosts."""

    lab: Lab
    env: Path
    master_url: str
    master: subprocess.Popen
    logs: Path
    cores: int
    memory: str
    workers: dict[int, subprocess.Popen] = field(default_factory=dict)

    def node_env(self, host: int, python_env: Path | None = None) -> dict[str, str]:
        """A node's environment: its own Python first on PATH, nothing of the driver's."""
        python_env = python_env or self.env
        spark_home = next((python_env / "lib").glob("python3*/site-packages/pyspark"))
        keep = ("JAVA_HOME", "LANG", "LC_ALL", "HOME", "USER")
        env = {k: os.environ[k] for k in keep if k in os.environ}
        env.update(PATH=f"{python_env / 'bin'}:/usr/local/bin:/usr/bin:/bin",
                   SPARK_HOME=str(spark_home), SPARK_LOCAL_IP=self.lab.address(host),
                   SPARK_LOG_DIR="/tmp/spark-logs", SPARK_WORKER_DIR="/tmp/spark-work",
                   SPARK_NO_DAEMONIZE="1", SPARK_DAEMON_JAVA_OPTS=QUICK_START_JAVA_OPTIONS)
        return env

    def start_worker(self, host: int, timeout_s: float = 90, env: Path | None = None) -> None:
        """Start host's worker and wait until the master lists it as alive; `env`: the node's
        Python environment, if not the cluster's (`bare_node_environment()`)."""
        self.launch_worker(host, env)
        self.wait_workers([host], timeout_s)

    def launch_worker(self, host: int, env: Path | None = None) -> None:
        env = env or self.env
        cmd = [str(env / "bin" / "spark-class"), WORKER_CLASS, self.master_url,
               "--host", self.lab.address(host), "--cores", str(self.cores), "--memory",
               self.memory, "--work-dir", "/tmp/spark-work", "--webui-port", "0"]
        log = open(self.logs / f"worker-h{host}.log", "ab")
        self.workers[host] = subprocess.Popen(
            [*self.lab.launcher(host), *node_command(cmd, hide=hidden_from_nodes())],
            stdout=log, stderr=subprocess.STDOUT, env=self.node_env(host, env),
            start_new_session=True)

    def wait_workers(self, hosts: list[int], timeout_s: float = 90) -> None:
        deadline = time.monotonic() + timeout_s
        for host in hosts:
            proc = self.workers[host]
            while self.lab.address(host) not in self.alive_workers():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"worker on host {host} did not register (exit {proc.poll()}):\n"
                        f"{self.log_tail(f'worker-h{host}')}")
                time.sleep(0.5)

    def alive_workers(self) -> set[str]:
        """Hosts of the workers the master has ALIVE, from its log (no web UI here)."""
        text = (self.logs / "master.log").read_text(errors="replace")
        alive: set[str] = set()
        for line in text.splitlines():
            if "Registering worker" in line:
                alive.add(line.split("Registering worker ", 1)[1].split(":", 1)[0])
            elif "Removing worker" in line or "is now DEAD" in line:
                for host in list(alive):
                    if host in line:
                        alive.discard(host)
        return alive

    def pids_in(self, host: int, cls: str) -> list[int]:
        """PIDs of the JVMs of main class `cls` running inside host's namespace."""
        out = subprocess.run(["ip", "netns", "pids", self.lab.namespace(host)],
                             capture_output=True, text=True).stdout.split()
        return [int(p) for p in out if cls in _cmdline(int(p))]

    def executor_pids(self, host: int) -> list[int]:
        return self.pids_in(host, EXECUTOR_CLASS)

    def kill_executors(self, host: int) -> list[int]:
        """SIGKILL every executor JVM on host (its worker lives on and starts another)."""
        pids = self.executor_pids(host)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return pids

    def kill_worker(self, host: int) -> None:
        """SIGKILL host's worker and everything it started (its executors, their Python
        workers): the node is gone."""
        proc = self.workers.pop(host)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in subprocess.run(["ip", "netns", "pids", self.lab.namespace(host)],
                                  capture_output=True, text=True).stdout.split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        proc.wait(30)

    def log_tail(self, name: str, chars: int = 3000) -> str:
        with contextlib.suppress(OSError):
            return (self.logs / f"{name}.log").read_text(errors="replace")[-chars:]
        return ""

    def stop(self) -> None:
        for host in list(self.workers):
            self.kill_worker(host)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.master.pid, signal.SIGKILL)
        self.master.wait(30)


def _free_port(host: str) -> int:
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def spark_cluster(lab: Lab, workers: list[int], *, logs: Path, cores: int = 1,
                  memory: str = "1g", timeout_s: float = 90) -> Iterator[SparkCluster]:
    """The master on the lab's root address (this machine's PySpark), a worker in each host of
    `workers` (the nodes' own environment); all killed on exit. The daemons' JVMs compile with
    C1 only and the serial collector (connectors.local.spark.QUICK_START_JAVA_OPTIONS): short
    runs on two cores; `QUICK_START_CONF` does the same for an application's driver and
    executors."""
    env = worker_environment()
    logs.mkdir(parents=True, exist_ok=True)
    port = _free_port(lab.client)
    spark_home = Path(__import__("pyspark").__file__).parent
    master_env = {**os.environ, "SPARK_HOME": str(spark_home), "SPARK_LOCAL_IP": lab.client,
                  "SPARK_NO_DAEMONIZE": "1", "SPARK_DAEMON_JAVA_OPTS": QUICK_START_JAVA_OPTIONS}
    log = open(logs / "master.log", "ab")
    master = subprocess.Popen(
        [str(spark_home / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master",
         "--host", lab.client, "--port", str(port), "--webui-port", "0"],
        stdout=log, stderr=subprocess.STDOUT, env=master_env, start_new_session=True)
    cluster = SparkCluster(lab, env, f"spark://{lab.client}:{port}", master, logs, cores,
                           memory)
    try:
        deadline = time.monotonic() + timeout_s
        while "I have been elected leader" not in cluster.log_tail("master", 100_000):
            if master.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"master did not start:\n{cluster.log_tail('master')}")
            time.sleep(0.3)
        for host in workers:
            cluster.launch_worker(host)
        cluster.wait_workers(workers, timeout_s)
        yield cluster
    finally:
        cluster.stop()
