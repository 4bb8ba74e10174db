"""The three sinks on a Spark standalone cluster of separate hosts, as users deploy them
(integration_tests/support/spark_cluster.py; docs/deploying.md): the master here, two workers each
in a network and mount namespace of its own with the package installed from the wheel in an
environment of their own, the driver a client-mode `python job.py` with nothing PYSPARK_* set,
Kafka a node in the same lab (broker faults are the 3-node cluster lanes'), the Delta table on
the S3 server and PostgreSQL over the network, both at the lab's address of this host.

One application runs `kafka-eos -> kafka-eos`, `-> delta-eos` and `-> postgres-eos` continuously
while records arrive, and loses, in turn: each worker's executor JVM (SIGKILL, mid-stream; the
worker starts another and Spark runs the lost tasks again), a whole worker with its executors,
and the driver, restarted on another host of the lab from the same checkpoints. Each loss must
have hit running work (the driver's log names the executor lost and its tasks), and the run ends
with every record once in each store and nothing open: no Kafka transaction, no prepared
PostgreSQL transaction, no batch pending in a sink's log. The Kafka sink's transactions time out
after 15 minutes here, so an open one at the end could only have been closed by the next
attempt's fencing, never by its timeout. The stall of each sink after each loss (the longest
time without a committed batch) is printed, not asserted: a timed bound flakes on this host.

Before the start-up hook sent `python3` (kafka_eos_pyspark_python.py), every task of this
application failed: the driver's interpreter path reached the nodes, where it is another Python
without the package (`No module named 'pyarrow'`) or none at all.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from integration_tests.support.cluster_pipelines import SteadyProducer, last_error
from integration_tests.support.crash_matrix import (
    assert_exactly_once_in_topic,
    verify_postgres,
)
from integration_tests.support.delta_oracle import assert_records_once, table_records
from integration_tests.support.processes import ROOT, kill_group, log_tail
from integration_tests.support.s3 import ACCESS_KEY_ID, SECRET_ACCESS_KEY
from integration_tests.support.s3a import s3a_spark_conf
from integration_tests.support.spark_cluster import QUICK_START_CONF
from integration_tests.support.streaming import wait_for

PIPELINE = "integration_tests.support.pipelines.eos_pipeline"
PARTITIONS = 2
#: Input records a second: batches of a few dozen records a second, every loss meets work.
RATE = 30
#: Lab hosts: the Kafka node 1, Spark workers 4 and 5, the restarted driver 6. One Kafka node:
#: this lane's faults are Spark's; a 3-node cluster here cost two thirds more of the lane's
#: Kafka CPU (182 CPU-s in a run) and proved nothing the cluster lanes do not.
KAFKA_HOSTS, WORKERS, SECOND_DRIVER = [1], [4, 5], 6
#: Every 2 s: three queries' batches (about 0.65 s of CPU each, whatever the interval) at 1 s
#: kept both cores busy; a batch takes 1-3 s on this cluster, so tasks run most of the time.
TRIGGER_MS = 2000
#: Longer than the whole run: a transaction the lost attempt left open ends only if the next
#: attempt fences it.
SINK_TRANSACTION_TIMEOUT_MS = 900_000


@dataclass
class Lane:
    lab: object
    kafka: object
    s3: object
    postgres: object
    cluster: object
    work: Path


@pytest.fixture(scope="module")
def lane(tmp_path_factory) -> Iterator[Lane]:
    from connectors.local.apache_kafka import LATEST, KafkaUnavailable
    from integration_tests.support import netns
    from integration_tests.support.kafka_cluster import kafka_cluster
    from integration_tests.support.postgres import postgres_server, unavailable_reason
    from integration_tests.support.s3 import s3_server
    from integration_tests.support.spark_cluster import spark_cluster

    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip():
        pytest.skip("KAFKA_BOOTSTRAP_SERVERS names the cluster under test: the Spark cluster "
                    "lane starts its own Kafka nodes in its lab")
    reason = netns.unavailable() or unavailable_reason()
    if reason:
        pytest.skip(f"the Spark cluster lane cannot run here: {reason}")
    work = tmp_path_factory.mktemp("spark-cluster")

    with contextlib.ExitStack() as stack:
        lab = stack.enter_context(netns.network_lab(hosts=SECOND_DRIVER))
        s3 = stack.enter_context(s3_server(host=lab.client))
        postgres = stack.enter_context(postgres_server(host=lab.client))
        started = time.monotonic()
        # The Kafka nodes start while the Spark cluster does (each takes tens of seconds).
        kafka_cm = kafka_cluster(LATEST, nodes=len(KAFKA_HOSTS),
                                 hosts=[lab.address(i) for i in KAFKA_HOSTS],
                                 launcher=lab.launcher)
        pool = stack.enter_context(ThreadPoolExecutor(1))
        kafka_up = pool.submit(kafka_cm.__enter__)
        try:
            cluster = stack.enter_context(spark_cluster(lab, WORKERS, logs=work / "logs",
                                                        cores=2))
        finally:
            try:
                kafka = kafka_up.result()
                stack.push(kafka_cm.__exit__)
            except KafkaUnavailable as e:
                pytest.skip(f"Apache Kafka cannot run here: {e}")
        print(f"\nlab 10.{lab.x}.0.0/24: Kafka on hosts {KAFKA_HOSTS}, Spark master "
              f"{cluster.master_url}, workers on hosts {WORKERS} "
              f"(up in {time.monotonic() - started:.0f} s)")
        yield Lane(lab, kafka, s3, postgres, cluster, work)


def driver_env(lane: Lane) -> dict[str, str]:
    """A user's shell: nothing PYSPARK_* set (the hook's mark neither), the stores' settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PYSPARK_") and k != "KAFKA_EOS_PYSPARK_PYTHON"}
    env.update(lane.s3.env)
    env["EOS_PG_URL"] = lane.postgres.url()
    return env


@dataclass
class Application:
    """The driver of one Spark application of the three queries, on a lab host or here."""

    lane: Lane
    args: list[str]
    log: Path
    host: int = 0  # 0: this (the root) namespace
    proc: subprocess.Popen | None = None
    failures: list[str] = field(default_factory=list)

    def start(self, host: int = 0) -> None:
        self.host = host
        address = self.lane.lab.client if host == 0 else self.lane.lab.address(host)
        prefix = [] if host == 0 else self.lane.lab.launcher(host)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [*prefix, sys.executable, "-m", PIPELINE, "--master",
                 self.lane.cluster.master_url, "--driver-host", address, *self.args],
                stdout=log, stderr=subprocess.STDOUT, env=driver_env(self.lane), cwd=ROOT,
                start_new_session=True)

    def assert_running(self, where: str) -> None:
        rc = self.proc.poll()
        assert rc is None, f"the application exited ({rc}) {where}: {last_error(str(self.log))}" \
                           f"\n{log_tail(str(self.log), 6000)}"

    def text(self) -> str:
        return self.log.read_text(errors="replace")


def commit_times(checkpoint: str) -> list[float]:
    """When Spark committed each batch: the times of `<checkpoint>/commits/<n>` in the bucket."""
    import pyarrow.fs as pafs

    from connectors.core.paths import resolve_location

    loc = resolve_location("checkpointLocation", checkpoint)
    infos = loc.fs.get_file_info(pafs.FileSelector(f"{loc.path}/commits", allow_not_found=True))
    return sorted(i.mtime.timestamp() for i in infos if i.base_name.isdigit() and i.mtime)


def stall_after(checkpoint: str, at: float, until: float) -> float:
    """The longest time without a committed batch from `at` to `until`."""
    points = [at] + [t for t in commit_times(checkpoint) if at < t <= until] + [until]
    return max(b - a for a, b in zip(points, points[1:]))


def wait_committed_after(app: Application, checkpoints: dict[str, str], at: float,
                         what: str, timeout_s: float = 240) -> None:
    def each() -> bool:
        app.assert_running(what)
        return all(any(t > at for t in commit_times(ck)) for ck in checkpoints.values())

    wait_for(each, timeout_s, f"a committed batch of every query {what}")


def lost_executor_lines(text: str, address: str) -> list[str]:
    """The driver's lines on executors of `address` lost with tasks running on them."""
    return [line for line in text.splitlines()
            if address in line and re.search(r"Lost (executor|task)", line)]


# The module's first test also builds the nodes' environment (a minute or two, once per set of
# dependencies) and starts the lab, the Kafka node and the Spark cluster.
@pytest.mark.timeout(1500)
def test_three_sinks_on_a_cluster_of_separate_hosts_lose_executors_a_worker_and_the_driver(
        lane: Lane) -> None:
    lab, cluster, kafka = lane.lab, lane.cluster, lane.kafka
    tag = uuid.uuid4().hex[:8]
    topic, out_topic, pg_table = f"sc-in-{tag}", f"sc-out-{tag}", f"sc_{tag}"
    for t in (topic, out_topic):
        kafka.create_topic(t, PARTITIONS)
    bucket = lane.s3.create_bucket()
    table = f"s3://{bucket}/table"
    # Spark's checkpoint (Hadoop's S3A, its jars through spark.jars) and the sinks' logs (pyarrow,
    # from the driver and from every task) in the bucket every host reaches.
    checkpoints = {name: f"s3a://{bucket}/ck-{name}" for name in ("kafka", "delta", "pg")}
    common = ["--bootstrap", kafka.bootstrap_servers, "--topic", topic, "--mode", "continuous",
              "--trigger-ms", str(TRIGGER_MS), "--max-per-trigger", "1000",
              "--poll-timeout-ms", "120000", "--commit-timeout", ""]
    spark_conf = ["spark.executor.memory=512m", "spark.task.maxFailures=8",
                  *(f"{k}={v}" for k, v in QUICK_START_CONF.items()),
                  *(f"spark.executorEnv.{k}={v}" for k, v in lane.s3.env.items()),
                  *(f"{k}={v}" for k, v in s3a_spark_conf(
                      lane.s3.endpoint, ACCESS_KEY_ID, SECRET_ACCESS_KEY).items())]
    args = [*common, "--checkpoint", str(checkpoints["kafka"]), "--out-topic", out_topic,
            "--transactional-id-prefix", f"sc-{tag}",
            "--sink-option", f"kafka.transaction.timeout.ms={SINK_TRANSACTION_TIMEOUT_MS}",
            *(x for c in spark_conf for x in ("--spark-conf", c)),
            "--also", *common, "--checkpoint", str(checkpoints["delta"]), "--table", table,
            "--also", *common, "--checkpoint", str(checkpoints["pg"]), "--pg-table", pg_table]
    producer = SteadyProducer(kafka.bootstrap_servers, topic, rate=RATE)
    app = Application(lane, args, lane.work / f"driver-{tag}.log")
    app.start()
    report: list[str] = []
    try:
        wait_committed_after(app, checkpoints, 0.0, "after the start", timeout_s=300)
        text = app.text()
        assert "executors' Python: 'python3'" in text, text[-3000:]
        workers = {lab.address(h) for h in WORKERS}
        ran_on = set(re.findall(r"\b(10\.\d+\.0\.\d+)\b", text)) & workers
        # The executors are on the lab's worker hosts (each runs one from the start).
        assert all(cluster.executor_pids(h) for h in WORKERS), "an executor is missing"

        losses: list[tuple[str, float]] = []
        # 1. Each worker's executor JVM, in turn, while the driver lives.
        for host in WORKERS:
            before = len(lost_executor_lines(app.text(), lab.address(host)))
            killed = cluster.kill_executors(host)
            at = time.time()
            assert killed, f"no executor on host {host} to kill"
            losses.append((f"executor on host {host} (pid {killed})", at))
            wait_committed_after(app, checkpoints, at, f"after the executor on host {host} died")
            wait_for(lambda: len(lost_executor_lines(app.text(), lab.address(host))) > before,
                     60, f"the driver to see the executor on host {host} lost")
            wait_for(lambda: bool(cluster.executor_pids(host)), 120,
                     f"the worker on host {host} to start another executor")
        # 2. A whole worker, its executors with it: the other carries on alone; then it returns.
        host = WORKERS[-1]
        cluster.kill_worker(host)
        at = time.time()
        losses.append((f"worker on host {host}", at))
        wait_committed_after(app, checkpoints, at, f"after the worker on host {host} died")
        wait_committed_after(app, checkpoints, time.time(), "on the remaining worker")
        cluster.start_worker(host)
        # 3. The driver, restarted on another host from the same checkpoints.
        kill_group(app.proc)
        at = time.time()
        losses.append((f"driver, restarted on host {SECOND_DRIVER}", at))
        first_log = app.text()
        app.start(host=SECOND_DRIVER)
        wait_committed_after(app, checkpoints, at, f"after the driver moved to host "
                                                   f"{SECOND_DRIVER}", timeout_s=300)
        ends = time.time()
        expected = producer.stop(input_after=at)
        # The end: every record once in each store, nothing open anywhere.
        def drained() -> bool:
            app.assert_running("while draining the input")
            from integration_tests.support.crash_matrix import pg_table_rows
            from connectors.local.kafka_oracle import committed

            return (len(committed(kafka.bootstrap_servers, out_topic)) >= len(expected)
                    and len(table_records(table)) >= len(expected)
                    and len(pg_table_rows(lane.postgres, pg_table)) >= len(expected))

        wait_for(drained, 300, f"every store to hold the {len(expected)} input records")
        until = time.time()
        assert_exactly_once_in_topic(kafka.bootstrap_servers, out_topic, expected, PARTITIONS)
        assert_records_once(table_records(table), expected, "delta-eos on S3")
        verify_postgres(lane.postgres, checkpoints["pg"], str(app.log), expected, pg_table)
        for name in ("kafka", "delta"):
            from sinks.txn_log import TransactionLog

            assert TransactionLog(checkpoints[name]).pending() == [], name
        # Every executor loss hit tasks that were running (the driver lost them).
        for host in WORKERS:
            assert lost_executor_lines(first_log, lab.address(host)), \
                f"the driver never lost work on host {host}"
        for i, (what, at) in enumerate(losses):
            end = losses[i + 1][1] if i + 1 < len(losses) else until
            stalls = ", ".join(f"{name} {stall_after(ck, at, end):.1f} s"
                               for name, ck in checkpoints.items())
            report.append(f"{what}: longest time without a committed batch: {stalls}")
        report.append(f"{len(expected)} records, each once in the topic, the table and "
                      f"PostgreSQL; tasks ran on {sorted(ran_on) or 'the workers'}; "
                      f"drained {until - ends:.0f} s after the last loss")
        print("\n== Spark cluster of separate hosts\n" + "\n".join(report))
    finally:
        producer.halt()
        if app.proc is not None:
            kill_group(app.proc)


def _drain(lane: Lane, name: str, *, checkpoint: str, table: str, records: int,
           env: dict[str, str] | None = None, cwd: str = ROOT,
           spark_conf: tuple[str, ...] = ()) -> tuple[int, str, list]:
    """A `kafka-eos -> delta-eos` application that reads a fresh topic of `records` records to
    its end and stops: (its exit status, its log, the input)."""
    from integration_tests.support.kafka_data import produce

    tag = uuid.uuid4().hex[:8]
    topic = f"sc-{name}-{tag}"
    lane.kafka.create_topic(topic, PARTITIONS)
    expected = produce(lane.kafka.bootstrap_servers, topic, PARTITIONS, records // PARTITIONS)
    log = lane.work / f"{name}-{tag}.log"
    conf = ["spark.executor.memory=512m", *(f"{k}={v}" for k, v in QUICK_START_CONF.items()),
            *(f"spark.executorEnv.{k}={v}" for k, v in lane.s3.env.items()), *spark_conf]
    args = [sys.executable, "-m", PIPELINE, "--master", lane.cluster.master_url,
            "--driver-host", lane.lab.client, "--bootstrap", lane.kafka.bootstrap_servers,
            "--topic", topic, "--checkpoint", checkpoint, "--table", table,
            *(x for c in conf for x in ("--spark-conf", c))]
    with open(log, "ab") as out:
        proc = subprocess.run(args, stdout=out, stderr=subprocess.STDOUT, cwd=cwd,
                              env={**driver_env(lane), **(env or {})}, timeout=600)
    return proc.returncode, log.read_text(errors="replace"), expected


def test_a_checkpoint_on_the_drivers_disk_is_refused_by_the_first_task(lane: Lane) -> None:
    """The common mistake: `checkpointLocation` a path on the driver's disk. The executors,
    other hosts, do not see it; the first task refuses before it writes anything, saying
    what to use, and the query stops (instead of tasks recording their prepared transactions
    on their own disks, where the driver's recovery never finds them)."""
    bucket = lane.s3.create_bucket()
    checkpoint = str(lane.work / "ck-on-the-drivers-disk")
    rc, log, _ = _drain(lane, "local-ck", checkpoint=checkpoint, table=f"s3://{bucket}/t",
                        records=20, spark_conf=("spark.task.maxFailures=1",))
    assert rc != 0, log[-3000:]
    assert (f"CheckpointNotShared: checkpointLocation {checkpoint!r} is a path on the driver's "
            "local disk, which this executor") in log, log[-3000:]
    # Nothing reached the table: the refusal came before the task's transaction.
    assert lane.s3.list_keys(bucket, "t/_delta_log/") == []


@pytest.mark.timeout(1200)  # a first run builds and packs two environments
def test_a_packed_environment_shipped_with_spark_archives_on_nodes_without_the_package(
        lane: Lane) -> None:
    """The YARN and Kubernetes way (docs/deploying.md): the nodes have Spark and no package;
    the package and its dependencies travel as a `venv-pack` archive in `spark.archives`, and
    `PYSPARK_PYTHON=./environment/bin/python` runs it. The driver's planning workers run the
    same command (docs/deploying.md, rule 2): the driver's working directory has
    `./environment`, a link to the environment the archive was packed from."""
    from integration_tests.support.spark_cluster import (
        bare_node_environment,
        hidden_from_nodes,
        node_command,
        packed_environment,
    )

    bare = bare_node_environment()
    packed, archive = packed_environment()
    for host in WORKERS:
        lane.cluster.kill_worker(host)
        lane.cluster.launch_worker(host, env=bare)
    lane.cluster.wait_workers(WORKERS)
    probe = lane.lab.exec(WORKERS[0], node_command(
        [str(bare / "bin" / "python"), "-c", "import connectors"], hide=hidden_from_nodes()),
        check=False)
    assert probe.returncode != 0, "the bare nodes' Python must lack the package"
    driver_dir = lane.work / "archives-driver"
    driver_dir.mkdir()
    (driver_dir / "environment").symlink_to(packed)
    bucket = lane.s3.create_bucket()
    table = f"s3://{bucket}/t"
    rc, log, expected = _drain(
        lane, "archives", checkpoint=f"s3a://{bucket}/ck", table=table, records=200,
        env={"PYSPARK_PYTHON": "./environment/bin/python"}, cwd=str(driver_dir),
        spark_conf=(f"spark.archives={archive}#environment",
                    *(f"{k}={v}" for k, v in s3a_spark_conf(
                        lane.s3.endpoint, ACCESS_KEY_ID, SECRET_ACCESS_KEY).items())))
    assert rc == 0, log[-4000:]
    assert "executors' Python: './environment/bin/python'" in log
    assert_records_once(table_records(table), expected, "delta-eos, package from spark.archives")
