"""`python -m benchmarks --only cluster`: the source and both sinks on a Spark standalone cluster
of separate hosts (integration_tests/support/spark_cluster.py: workers in network and mount
namespaces of their own, the package from the wheel in the nodes' own environment), with one
worker and then two, one executor core each. Per sink it reports records a second and records a
second per executor core, so a reader can see whether the cost per record grows with executors.

Kafka is a 3-node Apache Kafka cluster in the same lab, the Delta table and every checkpoint on
the S3 server (moto) at the lab's address of this host. The driver is a client-mode job
(benchmarks/cluster_job.py) with nothing PYSPARK_* set. Merged into DIR/results.json as
`cluster`. Needs root (network namespaces): refused with the reason otherwise.

On a machine with fewer cores than workers, executors, brokers and the driver share them, and
the second worker cannot add throughput: the per-core figure then falls for that reason, which
the section's `machine` and `load_average` let a reader judge.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import existing_results, load_average, section_header, write_json

SINKS = ("noop", "delta-eos", "kafka-eos")
PARTITIONS = 4
VALUE_BYTES = 100


def _job(lab, cluster, kafka, s3, topic: str, rows: int, bucket: str, log: Path) -> dict:
    from integration_tests.support.s3 import ACCESS_KEY_ID, SECRET_ACCESS_KEY
    from integration_tests.support.s3a import s3a_spark_conf
    from benchmarks.cluster_job import MARK

    conf = {"spark.executor.memory": "1g", "spark.task.maxFailures": "1",
            **{f"spark.executorEnv.{k}": v for k, v in s3.env.items()},
            **s3a_spark_conf(s3.endpoint, ACCESS_KEY_ID, SECRET_ACCESS_KEY)}
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PYSPARK_") and k != "KAFKA_EOS_PYSPARK_PYTHON"}
    env.update(s3.env)
    cmd = [sys.executable, "-m", "benchmarks.cluster_job", "--master", cluster.master_url,
           "--driver-host", lab.client, "--bootstrap", kafka.bootstrap_servers, "--topic", topic,
           "--rows", str(rows), "--max-per-trigger", str(max(rows // 8, 1)),
           "--work", f"s3a://{bucket}/run-{len(cluster.workers)}w",
           *(x for k, v in conf.items() for x in ("--spark-conf", f"{k}={v}"))]
    with open(log, "ab") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                              timeout=3600)
    text = log.read_text(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"the cluster job failed ({proc.returncode}):\n{text[-4000:]}")
    found = [json.loads(line.split(MARK, 1)[1]) for line in re.split(r"[\r\n]", text)
             if MARK in line]
    missing = set(SINKS) - {r["sink"] for r in found}
    if missing:
        raise RuntimeError(f"the cluster job reported no figures for {sorted(missing)}:\n"
                           f"{text[-4000:]}")
    return {r["sink"]: r for r in found}


def measure(records: int, work: Path) -> dict:
    """The section's figures: per worker count, per sink."""
    from connectors.local.apache_kafka import LATEST
    from integration_tests.support import netns
    from integration_tests.support.kafka_cluster import kafka_cluster
    from integration_tests.support.kafka_data import produce_backlog
    from integration_tests.support.s3 import s3_server
    from integration_tests.support.spark_cluster import spark_cluster

    reason = netns.unavailable()
    if reason:
        raise SystemExit(f"python -m benchmarks --only cluster: network namespaces cannot be "
                         f"made here: {reason}")
    per_partition = records // PARTITIONS
    rows = per_partition * PARTITIONS
    out: dict = {"records": rows, "partitions": PARTITIONS, "value_bytes": VALUE_BYTES,
                 "cores_per_worker": 1, "by_workers": {}}
    with netns.network_lab(hosts=5) as lab, s3_server(host=lab.client) as s3, \
            kafka_cluster(LATEST, hosts=lab.hosts[:3], launcher=lab.launcher) as kafka, \
            spark_cluster(lab, [4], logs=work / "logs", cores=1, memory="2g") as cluster:
        topic = f"bench-cluster-{int(time.time())}"
        kafka.create_topic(topic, PARTITIONS)
        kafka.create_topic(f"{topic}-out", PARTITIONS)
        produce_backlog(kafka.bootstrap_servers, topic, PARTITIONS, per_partition,
                        b"v" * VALUE_BYTES)
        bucket = s3.create_bucket()
        for workers in (1, 2):
            if workers == 2:
                cluster.start_worker(5)
            res = _job(lab, cluster, kafka, s3, topic, rows, bucket,
                       work / f"driver-{workers}w.log")
            for r in res.values():
                r["rows_per_s_per_core"] = round(r["rows_per_s"] / workers, 1)
            out["by_workers"][str(workers)] = res
    one, two = out["by_workers"]["1"], out["by_workers"]["2"]
    out["per_core_two_vs_one"] = {
        s: round(two[s]["rows_per_s_per_core"] / one[s]["rows_per_s_per_core"], 2)
        for s in SINKS if s in one and s in two}
    return out


def table(section: dict) -> str:
    lines = ["| sink | 1 worker: rows/s | per core | 2 workers: rows/s | per core | per core, 2 vs 1 |",
             "|---|---|---|---|---|---|"]
    one, two = section["by_workers"]["1"], section["by_workers"]["2"]
    for s in SINKS:
        lines.append(f"| {s} | {one[s]['rows_per_s']:,.0f} | {one[s]['rows_per_s_per_core']:,.0f} "
                     f"| {two[s]['rows_per_s']:,.0f} | {two[s]['rows_per_s_per_core']:,.0f} "
                     f"| {section['per_core_two_vs_one'][s]} |")
    return "\n".join(lines)


def run_section(args, argv: list[str] | None) -> int:
    """Merged into DIR/results.json as `cluster`, its other sections kept."""
    import tempfile

    json_path, results = existing_results(args.output_dir)
    started = time.time()
    records = 4_000 if args.quick else args.records
    section = section_header(argv)
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as work:
        section.update(measure(records, Path(work)))
    section["load_average"]["end"] = load_average()
    results["cluster"] = section
    write_json(results, json_path)
    print(table(section))
    print(f"wrote {json_path} in {round(time.time() - started)} s", file=sys.stderr)
    return 0
