"""Exactly once on clusters that demand TLS and SASL: real Apache Kafka's own secured listeners
(SASL_SSL with SCRAM-SHA-512; SSL with a required client certificate), on the session's node
(integration_tests/support/secured.py).

Every connection of a pipeline goes through the secured listener: the source's metadata
look-ups and task consumers, the sink's task producers and the driver's commit client, and the
oracle that checks the output, and the test's own set-up (metadata asked on a listener names
that listener only, so a client that follows metadata cannot leave it).

One killed-and-restarted sequence per scenario (a Spark start per row), as the crash matrices
do: `kafka-eos` -> `kafka-eos` over SASL_SSL with SCRAM-SHA-512 and over SSL with client
certificates. `kafka-eos` -> `delta-eos` and `kafka-eos` reading over SASL_SSL is the demo's
secured test (integration_tests/demo/test_demo_secured.py).
"""

from __future__ import annotations

import collections
import json

import pytest

from connectors.local.kafka_oracle import committed, read_partition
from integration_tests.support.secured_listeners import SecuredBroker
from integration_tests.support.kafka_data import create_topic, produce, unique_topic
from integration_tests.support.processes import log_tail, run_kill_sequence
from integration_tests.support.secured import secured_cluster

PIPELINE = "integration_tests.support.pipelines.eos_pipeline"
PARTITIONS, PER_PARTITION = 2, 60


@pytest.fixture(scope="module")
def sasl_ssl(secured_kafka):
    return secured_cluster(secured_kafka, "SASL_SSL", mechanism="SCRAM-SHA-512")


@pytest.fixture(scope="module")
def mtls(secured_kafka):
    return secured_cluster(secured_kafka, "SSL", mtls=True)


def _input(b: SecuredBroker, tmp_path, name: str):
    topic = unique_topic(name)
    create_topic(b.bootstrap_servers, topic, PARTITIONS, b.client_options)
    expected = produce(b.bootstrap_servers, topic, PARTITIONS, PER_PARTITION,
                       conf=b.client_options)
    paths = {"checkpoint": str(tmp_path / "ckpt"), "log": str(tmp_path / "pipeline.log")}
    env = {"EOS_KAFKA_OPTIONS": json.dumps(b.options())}
    return topic, expected, paths, env


def _no_secret_in(text: str, b: SecuredBroker) -> None:
    for password in b.users.values():
        assert password not in text, "a SASL password reached the pipeline's log"
    with open(b.pki.client_key_pem) as f:
        key_body = f.read().splitlines()[1]
    assert key_body not in text, "a private key reached the pipeline's log"


def _kafka_to_kafka(b: SecuredBroker, tmp_path, name: str, points: list[str]) -> None:
    topic, expected, paths, env = _input(b, tmp_path, name)
    out = unique_topic(f"{name}-out")
    create_topic(b.bootstrap_servers, out, PARTITIONS, b.client_options)
    args = ["--bootstrap", b.bootstrap_servers, "--topic", topic,
            "--checkpoint", paths["checkpoint"], "--out-topic", out, "--max-per-trigger", "20"]
    run_kill_sequence(PIPELINE, *args, log_path=paths["log"], points=points, env=env)

    # the oracle reads through the secured listener too
    got = collections.Counter((r.key, r.value) for r in committed(b.bootstrap_servers, out,
                                                                  b.client_options))
    want = collections.Counter((r.key, r.value) for r in expected)
    assert not [k for k, n in got.items() if n > 1], "a record committed twice"
    assert got == want, f"{len(set(want) - set(got))} records missing"
    for p in range(PARTITIONS):
        assert read_partition(b.bootstrap_servers, out, p, b.client_options).open == []
    text = log_tail(paths["log"], 10**8)
    assert "without having recovered" not in text
    _no_secret_in(text, b)


def test_kafka_to_kafka_exactly_once_over_sasl_ssl_scram(sasl_ssl, tmp_path):
    """Killed after the tasks prepared and between two partitions' commits: each restart's
    recovery fences (InitProducerId) or commits (FindCoordinator + EndTxn) through the secured
    listener, by kafka-python over TLS with SCRAM. (after_decision, a commit of every
    partition, is the mutual-TLS test's point.)"""
    _kafka_to_kafka(sasl_ssl, tmp_path, "scram", ["after_precommit", "after_some_commits"])


def test_kafka_to_kafka_exactly_once_over_mutual_tls(mtls, tmp_path):
    _kafka_to_kafka(mtls, tmp_path, "mtls", ["after_decision"])
