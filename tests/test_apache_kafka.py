"""The local Apache Kafka's pure parts: its configuration (PLAINTEXT from the wheel; the tests'
secured listeners, integration_tests/support/secured_node.py, only when a test adds them), the
pom that fetches it, where its jars are cached, and the message when nothing can fetch them."""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors.local import apache_kafka as ak
from integration_tests.support.brokers import apache_kafka_broker
from integration_tests.support import secured_node as sn
from integration_tests.support.certs import generate_test_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return generate_test_pki(str(tmp_path_factory.mktemp("pki")))


def _props(pki, generation=ak.LATEST):
    ports = {name: 10000 + i for i, name in enumerate((*sn.LISTENERS, "CONTROLLER"))}
    listeners = sn.SecuredListeners(pki, {"alice": "pw1", "limited": "pw2"})
    return ak.server_properties(generation, ports, "/data", listeners)


def test_one_node_holds_its_internal_topics_with_one_replica(pki):
    props = _props(pki)
    assert props["process.roles"] == "broker,controller"
    for key in ("offsets.topic.replication.factor", "transaction.state.log.replication.factor",
                "transaction.state.log.min.isr", "min.insync.replicas"):
        assert props[key] == "1", key
    # every listener advertised on loopback, the controller's not
    assert "CONTROLLER" not in props["advertised.listeners"]
    assert props["advertised.listeners"].count("127.0.0.1") == len(sn.LISTENERS)


def test_secured_listeners_and_the_authorizer(pki):
    props = _props(pki)
    protocols = dict(p.split(":") for p in props["listener.security.protocol.map"].split(","))
    assert protocols == {"PLAINTEXT": "PLAINTEXT", "SASL_SSL": "SASL_SSL", "SSL": "SSL",
                         "MTLS": "SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT",
                         "CONTROLLER": "PLAINTEXT"}
    assert props["listener.name.mtls.ssl.client.auth"] == "required"
    assert "StandardAuthorizer" in props["authorizer.class.name"]
    supers = props["super.users"].split(";")
    assert f"User:{sn.LIMITED_USER}" not in supers and f"User:{sn.SCRAM_USER}" in supers
    assert 'user_limited="pw2"' in props["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    assert "BEGIN PRIVATE KEY" in props["ssl.keystore.key"]


def test_without_a_pki_the_node_serves_plaintext_only():
    """What `kafka-eos broker` and the demo start: no certificate is made, no SASL user."""
    ports = {"PLAINTEXT": 10000, "CONTROLLER": 10001}
    props = ak.server_properties(ak.LATEST, ports, "/data")
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:10000,CONTROLLER://127.0.0.1:10001"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:10000"
    assert not [k for k in props if k.startswith(("ssl.", "sasl.", "listener.name."))]
    assert props["super.users"] == "User:ANONYMOUS"
    # the wheel knows no test user and no secured listener
    assert not hasattr(ak, "SCRAM_USER") and not hasattr(ak, "LIMITED_USER")


def test_the_secured_node_formats_its_sasl_users():
    listeners = sn.SecuredListeners(None, {"alice": "pw1"})
    assert listeners.format_args() == [
        "--add-scram", "SCRAM-SHA-512=[name=alice,password=pw1]",
        "--add-scram", "SCRAM-SHA-256=[name=alice,password=pw1]"]


def test_share_coordinator_settings_only_where_the_broker_knows_them(pki):
    assert "share.coordinator.state.topic.replication.factor" in _props(pki, ak.LATEST)
    assert "share.coordinator.state.topic.replication.factor" not in _props(pki, ak.GENERATION_3)


def test_pem_values_are_escaped_for_java_properties(pki):
    text = ak.properties_text(_props(pki))
    key_line = next(line for line in text.splitlines() if line.startswith("ssl.keystore.key="))
    assert "\\n" in key_line and "BEGIN PRIVATE KEY" in key_line


def test_the_pom_lists_each_coordinate():
    pom = ak._pom(["org.apache.kafka:kafka_2.13:4.4.0", "a.b:c:1.2"])
    assert "<artifactId>kafka_2.13</artifactId><version>4.4.0</version>" in pom
    assert "<groupId>a.b</groupId><artifactId>c</artifactId><version>1.2</version>" in pom


def test_the_pom_excludes_the_names_it_is_given_from_every_coordinate():
    pom = ak._pom(["a.b:c:1", "d.e:f:2"], exclude=["x.y:bundle"])
    assert pom.count("<exclusion><groupId>x.y</groupId><artifactId>bundle</artifactId>"
                     "</exclusion>") == 2
    assert "<exclusions>" not in ak._pom(["a.b:c:1"])


def test_the_cache_is_outside_the_repository(monkeypatch, tmp_path):
    monkeypatch.delenv("KAFKA_EOS_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert ak.cache_dir() == tmp_path / "kafka-eos"
    monkeypatch.setenv("KAFKA_EOS_CACHE", str(tmp_path / "mine"))
    assert ak.cache_dir() == tmp_path / "mine"
    repo = Path(__file__).resolve().parents[1]
    monkeypatch.delenv("KAFKA_EOS_CACHE")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert repo not in ak.cache_dir().resolve().parents


def test_no_maven_and_no_ivy_says_what_is_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("KAFKA_EOS_CACHE", str(tmp_path))
    real_which = ak.shutil.which
    monkeypatch.setattr(ak.shutil, "which", lambda n: None if n == "mvn" else real_which(n))
    monkeypatch.setattr(ak, "ivy_jar", lambda: None)
    with pytest.raises(ak.KafkaUnavailable) as e:
        ak.kafka_jars(ak.LATEST)
    assert "mvn is not installed" in str(e.value) and "Ivy" in str(e.value)
    assert not (tmp_path / "apache-kafka" / ak.LATEST.version / "complete").exists()


def test_no_java_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("KAFKA_EOS_CACHE", str(tmp_path))
    monkeypatch.setattr(ak.shutil, "which", lambda n: None)
    with pytest.raises(ak.KafkaUnavailable, match="Java 17"):
        ak.kafka_jars(ak.LATEST)


def test_the_brokers_are_context_managers():
    """What the suite's fixtures enter with `with`."""
    assert hasattr(ak.apache_kafka(ak.LATEST), "__enter__")
    assert hasattr(apache_kafka_broker(ak.LATEST), "__enter__")


def test_listeners_get_distinct_ports_when_free_port_repeats_itself():
    """The quick lane's first run: two free_port() calls gave SASL_PLAINTEXT and CONTROLLER the
    same port, and Kafka's storage format refused the node."""
    from connectors.local.apache_kafka import distinct_free_ports

    answers = iter([41425, 41425, 38215, 38215, 40001])
    ports = distinct_free_ports(["SASL_PLAINTEXT", "CONTROLLER", "SSL"],
                                pick=lambda: next(answers))
    assert ports == {"SASL_PLAINTEXT": 41425, "CONTROLLER": 38215, "SSL": 40001}


def test_a_coordinate_maven_central_lacks_fails_instead_of_skipping(tmp_path):
    """The Kafka, S3A and peers fixtures skip on KafkaUnavailable (Java missing, Central not
    reached). A wrong pin must fail them instead: with mvn, Central's "not found" is told
    apart from a Central that could not be reached. Maven Central for real."""
    if ak.shutil.which("mvn") is None:
        pytest.skip("mvn is not installed: PySpark's Ivy says 'not found' for an unreachable "
                    "Maven Central too, so only mvn's words tell the two apart")
    with pytest.raises((ak.ResolutionError, ak.KafkaUnavailable)) as e:
        ak.resolve_into_cache(["org.apache.kafka:kafka-eos-no-such-artifact:0.0.1"],
                              tmp_path / "lib", tmp_path / "complete", what="a missing pin")
    if e.type is ak.KafkaUnavailable and "Could not transfer" in str(e.value):
        pytest.skip("Maven Central cannot be reached from here")
    assert e.type is ak.ResolutionError, str(e.value)[:600]
    assert "kafka-eos-no-such-artifact" in str(e.value)
    assert not (tmp_path / "complete").exists()


def test_a_central_not_reached_is_still_a_reason_to_skip(monkeypatch, tmp_path):
    def unreachable(coordinates, work, lib, *, exclude=()):
        raise ak.KafkaUnavailable(
            "mvn could not resolve a:b:1 from Maven Central (exit 1): Could not transfer "
            "artifact a:b:pom:1 from/to central (https://repo.maven.apache.org/maven2)")

    monkeypatch.setattr(ak.shutil, "which", lambda n: "/usr/bin/mvn")
    monkeypatch.setattr(ak, "resolve_with_maven", unreachable)
    monkeypatch.setattr(ak, "resolve_with_ivy", unreachable)
    with pytest.raises(ak.KafkaUnavailable, match="Could not transfer"):
        ak.resolve_into_cache(["a:b:1"], tmp_path / "lib", tmp_path / "complete", what="a:b")


def test_a_node_that_fails_its_transactional_warm_up_is_stopped_and_says_why(monkeypatch,
                                                                              tmp_path):
    """librdkafka's KafkaException (an init_transactions timeout) is no RuntimeError: it left
    the JVM running and the error without the node's log or its state."""
    import subprocess
    import sys

    from confluent_kafka import KafkaException

    def timed_out(self, timeout_s):
        raise KafkaException("Timed out waiting for operation to finish")

    node = ak.ApacheKafka(ak.LATEST, tmp_path, {"PLAINTEXT": 1})
    (tmp_path / "server.log").write_text("ERROR the node's own last words\n")
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    monkeypatch.setattr(ak.ApacheKafka, "_java", lambda self, *args: sleeper)
    monkeypatch.setattr(ak, "wait_until_ready", lambda *args, **kwargs: None)
    monkeypatch.setattr(ak.ApacheKafka, "_wait_for_transactions", timed_out)
    started: list[subprocess.Popen] = []
    real_popen = subprocess.Popen
    monkeypatch.setattr(ak.subprocess, "Popen",
                        lambda *a, **k: started.append(real_popen(*a, **k)) or started[-1])
    with pytest.raises(ak.KafkaUnavailable) as e:
        node.start(timeout_s=1)
    assert "its JVM still running" in str(e.value) and "Timed out" in str(e.value)
    assert "the node's own last words" in str(e.value)
    assert node.process is None and started[0].poll() is not None, "the JVM was left running"
