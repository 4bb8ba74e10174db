"""Exactly once on clusters that demand TLS and SASL: real Apache Kafka's own secured listeners
(SASL_SSL with SCRAM-SHA-512; SSL with a required client certificate), on the session's node
(integration_tests/support/secured.py).

Every connection of a pipeline goes through the secured listener: the source's metadata
look-ups and task consumers, the sink's task producers and the driver's commit client, and the
oracle that checks the output, and the test's own set-up (metadata asked on a listener names
that listener only, so a client that follows metadata cannot leave it).

One killed-and-restarted sequence (a Spark start per row), as the crash matrix does, of one
pipeline with two queries: `kafka-eos` -> `kafka-eos` over SASL_SSL with SCRAM-SHA-512 and over
SSL with client certificates. `kafka-eos` -> `delta-eos` and `kafka-eos` reading over SASL_SSL is the demo's
secured test (integration_tests/demo/test_demo_secured.py).
"""

from __future__ import annotations

import collections
import json
import signal

import pytest

from connectors.local.kafka_oracle import committed, read_partition
from integration_tests.support.secured_listeners import SecuredBroker
from integration_tests.support.kafka_data import create_topic, produce, unique_topic
from integration_tests.support.processes import log_tail, run_pipeline, start_pipeline, wait_exit
from integration_tests.support.secured import secured_cluster
from sinks.faults import ENV, RENDEZVOUS_ENV

PIPELINE = "integration_tests.support.pipelines.eos_pipeline"
PARTITIONS, PER_PARTITION = 2, 60


@pytest.fixture(scope="module")
def sasl_ssl(secured_kafka):
    return secured_cluster(secured_kafka, "SASL_SSL", mechanism="SCRAM-SHA-512")


@pytest.fixture(scope="module")
def mtls(secured_kafka):
    return secured_cluster(secured_kafka, "SSL", mtls=True)


def _lane(b: SecuredBroker, tmp_path, name: str) -> dict:
    """One query of the pipeline: its input, output topic, checkpoint and options (in an
    environment variable of its own: they hold passwords, and argv is public)."""
    topic = unique_topic(name)
    create_topic(b.bootstrap_servers, topic, PARTITIONS, b.client_options)
    expected = produce(b.bootstrap_servers, topic, PARTITIONS, PER_PARTITION,
                       conf=b.client_options)
    out = unique_topic(f"{name}-out")
    create_topic(b.bootstrap_servers, out, PARTITIONS, b.client_options)
    variable = f"EOS_KAFKA_OPTIONS_{name.upper()}"
    args = ["--bootstrap", b.bootstrap_servers, "--topic", topic,
            "--checkpoint", str(tmp_path / name), "--out-topic", out, "--max-per-trigger", "20",
            "--kafka-options-env", variable,
            # a task per partition, in every run of the checkpoint: after_some_commits needs a
            # batch of several transactions, and the default plans a small batch as one task
            "--source-option", "targetTasksPerBatch=8"]
    return {"name": name, "broker": b, "expected": expected, "out": out, "args": args,
            "env": {variable: json.dumps(b.options())}}


def _no_secret_in(text: str, b: SecuredBroker) -> None:
    for password in b.users.values():
        assert password not in text, "a SASL password reached the pipeline's log"
    with open(b.pki.client_key_pem) as f:
        key_body = f.read().splitlines()[1]
    assert key_body not in text, "a private key reached the pipeline's log"


def _exactly_once(lane: dict) -> None:
    b, out = lane["broker"], lane["out"]
    # the oracle reads through the secured listener too
    got = collections.Counter((r.key, r.value) for r in committed(b.bootstrap_servers, out,
                                                                  b.client_options))
    want = collections.Counter((r.key, r.value) for r in lane["expected"])
    assert not [k for k, n in got.items() if n > 1], f"{lane['name']}: a record committed twice"
    assert got == want, f"{lane['name']}: {len(set(want) - set(got))} records missing"
    for p in range(PARTITIONS):
        assert read_partition(b.bootstrap_servers, out, p, b.client_options).open == []


#: Per run, each lane's kill point (its batch: the run's number plus one). SASL_SSL with
#: SCRAM: killed after the tasks prepared and between two partitions' commits, so each
#: restart's recovery fences (InitProducerId) or commits (FindCoordinator + EndTxn) through
#: the secured listener, by kafka-python over TLS with SCRAM; mutual TLS: after the decision
#: (a commit of every partition) and after the commit.
POINTS = {"scram": ["after_precommit", "after_some_commits"],
          "mtls": ["after_decision", "after_commit"]}


def test_kafka_to_kafka_exactly_once_over_sasl_ssl_scram_and_mutual_tls(sasl_ssl, mtls, tmp_path):
    """Both secured clusters' queries in one pipeline, killed together (each parked at its
    own point: sinks/faults.py's rendezvous) and restarted on their checkpoints."""
    lanes = [_lane(sasl_ssl, tmp_path, "scram"), _lane(mtls, tmp_path, "mtls")]
    log = str(tmp_path / "pipeline.log")
    args, env = [], {}
    for i, lane in enumerate(lanes):
        args += [*([] if i == 0 else ["--also"]), *lane["args"]]
        env.update(lane["env"])
    for run in range(len(POINTS["scram"])):
        meeting = tmp_path / f"rendezvous-{run}"
        meeting.mkdir()
        batch = run + 1
        spec = ",".join(f"{lane['name']}:{POINTS[lane['name']][run]}@{batch}" for lane in lanes)
        proc = start_pipeline(PIPELINE, *args, log_path=log, env={
            **env, ENV: spec, RENDEZVOUS_ENV: f"{meeting}:{len(lanes)}"})
        assert wait_exit(proc, log) == -signal.SIGKILL, f"run {run} should have been killed"
        parked = sorted(p.read_text().split()[1] for p in meeting.iterdir())
        assert parked == sorted(POINTS[lane["name"]][run] for lane in lanes), parked
    run_pipeline(PIPELINE, *args, log_path=log, env=env)
    text = log_tail(log, 10**8)
    assert "without having recovered" not in text and "fault rendezvous timed out" not in text
    for lane in lanes:
        _exactly_once(lane)
        _no_secret_in(text, lane["broker"])
