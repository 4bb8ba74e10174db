"""The Docker broker's settings (integration_tests/support/brokers.py), checked without Docker: the
pinned apache/kafka image, one KRaft node whose internal topics have one replica (else every
transactional producer times out in InitProducerId), the advertised listener at the host's
mapped port, and the SASL_SSL listener of `secured_container`. The broker properties are
recovered from the environment with the image's own rule (KafkaDockerWrapper in Apache Kafka
3.9: strip KAFKA_, lower-case, '_' -> '.', '...' -> '-', '..' -> '_'), reimplemented here.

Freeze/resume: a real process is stopped and continued; the container path is only dispatched
here (no Docker engine); the tests at the end run against real containers where Docker is."""

from __future__ import annotations

import datetime
import re
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml

from connectors.local.broker_handle import Broker
from integration_tests.support.broker_control import FreezeUnsupported, TestBroker
from integration_tests.support import brokers as b

ROOT = Path(__file__).resolve().parents[1]
HOST, MAPPED = "localhost", {b.PLAINTEXT_PORT: 32771, b.SECURED_PORT: 32772}


def image_property(env_key: str) -> str:
    """KafkaDockerWrapper.getServerConfigsFromEnv's renaming, as in Apache Kafka 3.9."""
    assert env_key.startswith("KAFKA_")
    return (
        env_key[len("KAFKA_"):].lower().replace("_", ".").replace("...", "-").replace("..", "_")
    )


def rendered(env: dict[str, str]) -> dict[str, str]:
    """server.properties as the image writes it from the environment (key=value, verbatim)."""
    return {image_property(k): v for k, v in env.items() if k.startswith("KAFKA_")}


def java_properties(text: str) -> dict[str, str]:
    """Enough of java.util.Properties.load for these files: key=value lines, \\n and \\\\."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, raw = line.partition("=")
        out[key] = re.sub(r"\\(.)", lambda m: {"n": "\n", "\\": "\\"}.get(m[1], m[1]), raw)
    return out


def listeners(spec: str) -> dict[str, tuple[str, int]]:
    found = re.findall(r"(\w+)://([^:,]*):(\d+)", spec)
    return {name: (host, int(port)) for name, host, port in found}


# --- the plain broker ---------------------------------------------------------------------------


def test_image_is_the_official_apache_kafka_pinned_and_the_same_as_compose():
    assert re.fullmatch(r"apache/kafka:\d+\.\d+\.\d+", b.KAFKA_IMAGE), b.KAFKA_IMAGE
    compose = yaml.safe_load((ROOT / "docker" / "docker-compose.yml").read_text())
    assert compose["services"]["kafka"]["image"] == b.KAFKA_IMAGE
    assert b.kafka_container_settings().image == b.KAFKA_IMAGE


def test_one_kraft_node_holds_transaction_state_and_offsets_with_one_replica():
    s = b.kafka_container_settings()
    assert s.env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "1"
    assert s.env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "1"
    assert s.env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1"
    props = rendered(s.env)
    assert props["transaction.state.log.replication.factor"] == "1"
    assert props["transaction.state.log.min.isr"] == "1"
    assert props["offsets.topic.replication.factor"] == "1"
    assert set(props["process.roles"].split(",")) == {"broker", "controller"}
    assert props["controller.quorum.voters"] == f"1@localhost:{b.CONTROLLER_PORT}"
    assert props["node.id"] == "1"
    assert "zookeeper.connect" not in props
    # Kafka's Uuid.fromString: URL-safe base64 of exactly 16 bytes.
    import base64

    raw = base64.urlsafe_b64decode(s.env["CLUSTER_ID"] + "==")
    assert len(raw) == 16 and any(raw)
    assert base64.urlsafe_b64encode(raw).decode().rstrip("=") == s.env["CLUSTER_ID"]
    # Every variable the settings set means the property they were built from.
    assert props == s.properties


def test_listeners_are_consistent_and_the_host_listener_is_advertised_at_the_mapped_port():
    s = b.kafka_container_settings()
    props = rendered(s.env)
    bound = listeners(props["listeners"])
    protocols = dict(p.split(":") for p in props["listener.security.protocol.map"].split(","))
    assert set(bound) == set(protocols) == {"PLAINTEXT", "BROKER", "CONTROLLER"}
    assert set(protocols.values()) == {"PLAINTEXT"}
    assert props["controller.listener.names"] == "CONTROLLER"
    assert props["inter.broker.listener.name"] == "BROKER"
    assert s.exposed_ports == (b.PLAINTEXT_PORT,)
    assert bound["PLAINTEXT"] == ("0.0.0.0", b.PLAINTEXT_PORT)

    # Not known before the container runs: set by the start script, not in the environment.
    assert "KAFKA_ADVERTISED_LISTENERS" not in s.env
    script = s.start_script(HOST, MAPPED)
    exported = re.search(r"^export KAFKA_ADVERTISED_LISTENERS=(\S+)$", script, re.M)
    advertised = listeners(exported[1])
    assert advertised["PLAINTEXT"] == (HOST, MAPPED[b.PLAINTEXT_PORT])
    assert advertised["BROKER"] == ("localhost", b.BROKER_PORT)
    assert "CONTROLLER" not in advertised  # a broker must not advertise the controller listener
    assert script.rstrip().endswith("exec /etc/kafka/docker/run")  # the image's own start-up
    assert "kafka-storage.sh format" not in script  # the image formats the plain broker itself


def test_the_container_waits_for_the_start_files_written_after_the_ports_are_known():
    s = b.kafka_container_settings()
    files = s.start_files(HOST, MAPPED)
    paths = [p for p, _, _ in files]
    assert paths[-1] == b._READY_MARKER  # tar members are extracted in order: marker last
    assert b._START_SCRIPT in paths
    assert s.command[:2] == ("bash", "-c")
    assert f"[ ! -f {b._READY_MARKER} ]" in s.command[2]
    assert s.command[2].endswith(f"exec bash {b._START_SCRIPT}")
    script = dict((p, c) for p, c, _ in files)[b._START_SCRIPT].decode()
    assert script == s.start_script(HOST, MAPPED)
    # The files go in as a tar archive at "/": relative member names, the script executable.
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(b._tar(files))) as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == [p.lstrip("/") for p in paths]
        assert members[paths.index(b._START_SCRIPT)].mode & 0o755 == 0o755


def test_env_names_round_trip_through_the_image_rule():
    for prop in (
        "transaction.state.log.min.isr",
        "listener.name.secured.scram-sha-512.sasl.jaas.config",
        "listener.name.sasl_ssl.ssl.keystore.type",
    ):
        assert image_property(b.env_name(prop)) == prop


# --- freeze / resume ---------------------------------------------------------------------------


def _state(pid: int) -> str:
    # /proc/PID/stat: "pid (comm) S ..."; T = stopped by a signal.
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


#: States of a process that is not stopped: resumed, `sleep` may be running (R), sleeping (S)
#: or, for a moment on a loaded host, in an uninterruptible wait (D: CI saw one right after the
#: resume). Only T (stopped by a signal) and t (stopped by a tracer) mean frozen.
_STOPPED = ("T", "t")


def test_freeze_and_resume_stop_and_continue_a_local_broker_process():
    proc = subprocess.Popen(["sleep", "60"])
    try:
        # the embedded broker as the wheel starts it, seen by the tests
        broker = TestBroker.of(Broker("127.0.0.1:1", "tansu", pid=proc.pid))
        assert broker.supports("freeze") and not hasattr(Broker, "freeze")
        broker.freeze()
        deadline = time.monotonic() + 5
        while _state(proc.pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _state(proc.pid) == "T" and broker.frozen
        broker.resume()
        deadline = time.monotonic() + 5
        while _state(proc.pid) in _STOPPED and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _state(proc.pid) not in _STOPPED and not broker.frozen
    finally:
        proc.kill()
        proc.wait()


def test_an_external_cluster_cannot_be_frozen():
    broker = TestBroker("kafka.example:9092", "external")
    assert not broker.supports("freeze")
    with pytest.raises(FreezeUnsupported, match="cannot be frozen"):
        broker.freeze()
    with pytest.raises(FreezeUnsupported):
        broker.resume()


def test_a_container_broker_is_paused_and_unpaused_dispatch_only():
    """Only which Docker call is made; the pause itself runs in the Docker tests below."""
    calls = []

    class Wrapped:
        def pause(self):
            calls.append("pause")

        def unpause(self):
            calls.append("unpause")

    class Container:
        def get_wrapped_container(self):
            return Wrapped()

    broker = TestBroker("localhost:32771", "testcontainers", container=Container())
    assert broker.supports("freeze")
    broker.freeze()
    broker.resume()
    assert calls == ["pause", "unpause"]


# --- the secured container ---------------------------------------------------------------------


def _pki(tmp_path: Path) -> dict[str, str]:
    """A CA and a server certificate for localhost / 127.0.0.1, PEM files."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    name = lambda cn: x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])  # noqa: E731

    def cert(subject, issuer, key, signer, ca):
        builder = (
            x509.CertificateBuilder().subject_name(name(subject)).issuer_name(name(issuer))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            builder = builder.add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            ]), critical=False)
        return builder.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = cert("test CA", "test CA", ca_key, ca_key, True)
    server = cert("localhost", "test CA", key, ca_key, False)
    pem = lambda c: c.public_bytes(serialization.Encoding.PEM).decode()  # noqa: E731
    files = {
        "ca": pem(ca),
        "cert": pem(server),
        "key": key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode(),
    }
    paths = {}
    for k, v in files.items():
        (tmp_path / f"{k}.pem").write_text(v)
        paths[k] = str(tmp_path / f"{k}.pem")
    return {**files, **{f"{k}_path": p for k, p in paths.items()}}


def _secured(pki, **kw) -> b.SecuredListener:
    return b.SecuredListener(pki["cert"], pki["key"], pki["ca"], "alice", "s3cret-Pw_1", **kw)


def test_secured_listener_is_sasl_ssl_with_scram_and_a_pem_keystore(tmp_path):
    pki = _pki(tmp_path)
    s = b.kafka_container_settings(_secured(pki))
    props = rendered(s.env)
    bound = listeners(props["listeners"])
    protocols = dict(p.split(":") for p in props["listener.security.protocol.map"].split(","))
    assert bound[b.SECURED_LISTENER] == ("0.0.0.0", b.SECURED_PORT)
    assert protocols[b.SECURED_LISTENER] == "SASL_SSL"
    assert protocols["PLAINTEXT"] == protocols["BROKER"] == protocols["CONTROLLER"] == "PLAINTEXT"
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    prefix = "listener.name.secured."
    assert props[prefix + "scram-sha-512.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    )
    assert props[prefix + "ssl.keystore.type"] == "PEM"
    assert props[prefix + "ssl.truststore.type"] == "PEM"
    assert props[prefix + "ssl.client.auth"] == "requested"
    # Kafka refuses a keystore location or password beside PEM key/chain values.
    assert not any("keystore.location" in k or "keystore.password" in k for k in props)
    # Still one replica for the internal topics.
    assert props["transaction.state.log.replication.factor"] == "1"
    assert props["transaction.state.log.min.isr"] == "1"
    assert s.exposed_ports == (b.PLAINTEXT_PORT, b.SECURED_PORT)

    # The image's configure script checks the advertised listeners for "SSL://" and "SASL_"
    # and would then demand a JKS keystore, password files and a JAAS file: the name avoids it.
    advertised = s.advertised_listeners(HOST, MAPPED)
    assert "SSL://" not in advertised and "SASL_" not in advertised
    assert listeners(advertised)[b.SECURED_LISTENER] == (HOST, MAPPED[b.SECURED_PORT])


def test_pem_values_survive_the_properties_file(tmp_path):
    """PEM is multi-line; the image writes each value verbatim after key=, and Java reads it
    with Properties.load: the line breaks must arrive as line breaks."""
    pki = _pki(tmp_path)
    s = b.kafka_container_settings(_secured(pki))
    assert all("\n" not in v for v in s.env.values())
    loaded = java_properties("".join(f"{k}={v}\n" for k, v in rendered(s.env).items()))
    prefix = "listener.name.secured."
    assert loaded[prefix + "ssl.keystore.key"] == pki["key"]
    assert loaded[prefix + "ssl.keystore.certificate.chain"] == pki["cert"] + pki["ca"]
    assert loaded[prefix + "ssl.truststore.certificates"] == pki["ca"]
    # The chain starts with the server's own certificate, as a keystore entry must.
    from cryptography import x509

    chain = loaded[prefix + "ssl.keystore.certificate.chain"].encode()
    subjects = [c.subject.rfc4514_string() for c in x509.load_pem_x509_certificates(chain)]
    assert subjects == ["CN=localhost", "CN=test CA"]


def test_scram_user_is_created_when_the_storage_is_formatted(tmp_path):
    pki = _pki(tmp_path)
    s = b.kafka_container_settings(_secured(pki))
    script = s.start_script(HOST, MAPPED)
    lines = script.splitlines()
    fmt = next(i for i, ln in enumerate(lines) if "kafka-storage.sh format" in ln)
    run = next(i for i, ln in enumerate(lines) if "/etc/kafka/docker/run" in ln)
    export = next(i for i, ln in enumerate(lines) if "KAFKA_ADVERTISED_LISTENERS" in ln)
    assert export < fmt < run  # formatted (with the user) before the image's start-up
    assert "--add-scram 'SCRAM-SHA-512=[name=alice,password=s3cret-Pw_1]'" in lines[fmt]
    assert '--cluster-id "$CLUSTER_ID"' in lines[fmt]
    assert f"--config {b._FORMAT_PROPERTIES}" in lines[fmt]
    files = {p: c.decode() for p, c, _ in s.start_files(HOST, MAPPED)}
    # The format reads the same configuration the broker runs with: same log directory, node.
    fmt_props = java_properties(files[b._FORMAT_PROPERTIES])
    run_props = java_properties("".join(f"{k}={v}\n" for k, v in rendered(s.env).items()))
    assert {k: v for k, v in fmt_props.items() if k != "advertised.listeners"} == run_props
    assert fmt_props["advertised.listeners"] == s.advertised_listeners(HOST, MAPPED)
    assert list(files)[-1] == b._READY_MARKER


def test_secured_listener_refuses_what_kafka_or_the_format_command_would_not_take(tmp_path):
    pki = _pki(tmp_path)
    with pytest.raises(ValueError, match="password"):
        b.SecuredListener(pki["cert"], pki["key"], pki["ca"], "alice", "a,b]")
    with pytest.raises(ValueError, match="user"):
        b.SecuredListener(pki["cert"], pki["key"], pki["ca"], "al ice", "pw")
    rsa_style = pki["key"].replace("BEGIN PRIVATE KEY", "BEGIN EC PRIVATE KEY")
    with pytest.raises(ValueError, match="PKCS#8"):
        b.SecuredListener(pki["cert"], rsa_style, pki["ca"], "alice", "pw")
    with pytest.raises(ValueError, match="client_auth"):
        _secured(pki, client_auth="sometimes")


def test_pem_arguments_may_be_text_or_file_paths(tmp_path):
    pki = _pki(tmp_path)
    assert b._pem(pki["cert_path"]) == pki["cert"] == b._pem(pki["cert"])


# --- against real containers (only where a Docker engine answers: CI) --------------------------

docker_ok, docker_reason = b.docker_available()
needs_docker = pytest.mark.skipif(not docker_ok, reason=docker_reason)


def _transaction_round_trip(bootstrap: str, extra: dict[str, str] | None = None) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    extra = extra or {}
    topic = f"tc-{uuid.uuid4().hex[:8]}"
    producer = Producer({
        "bootstrap.servers": bootstrap, "transactional.id": topic, **extra,
    })
    producer.init_transactions(30)  # times out with the default transaction log replication
    producer.begin_transaction()
    producer.produce(topic, b"committed")
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"aborted")
    producer.abort_transaction(30)
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": topic, "isolation.level": "read_committed",
        "enable.auto.commit": False, **extra,
    })
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen, deadline = [], time.monotonic() + 30
    while time.monotonic() < deadline and not seen:
        msg = consumer.poll(1)
        if msg is not None and not msg.error():
            seen.append(msg.value())
    time.sleep(2)
    while (msg := consumer.poll(1)) is not None:
        if not msg.error():
            seen.append(msg.value())
    consumer.close()
    assert seen == [b"committed"]


@needs_docker
def test_docker_broker_runs_transactions_and_freezes():
    from confluent_kafka.admin import AdminClient

    with b.testcontainers_broker() as broker:
        _transaction_round_trip(broker.bootstrap_servers)
        broker.freeze()
        try:
            with pytest.raises(Exception):
                AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(timeout=3)
        finally:
            broker.resume()
        AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(timeout=10)


@needs_docker
def test_docker_secured_container_takes_scram_over_tls_only(tmp_path):
    from confluent_kafka.admin import AdminClient

    pki = _pki(tmp_path)
    with b.secured_container(
        pki["cert_path"], pki["key_path"], pki["ca_path"], "alice", "s3cret-Pw_1"
    ) as (sasl_bootstrap, broker):
        good = {
            "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice", "sasl.password": "s3cret-Pw_1", "ssl.ca.pem": pki["ca"],
        }
        _transaction_round_trip(sasl_bootstrap, good)
        bad = {**good, "sasl.password": "wrong"}
        with pytest.raises(Exception):
            AdminClient({"bootstrap.servers": sasl_bootstrap, **bad}).list_topics(timeout=10)
        assert broker.supports("freeze")
