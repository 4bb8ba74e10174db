"""docker/: no Docker engine runs here, so the files are checked for what would break a run:
the compose file's demo command must be one the CLI accepts, pointed at the Kafka service's
own listener, and the image must be Python 3.11 with Java 17 running `python -m connectors`."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import tomllib
from pathlib import Path

import pytest
import yaml

from connectors.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((ROOT / "docker" / "docker-compose.yml").read_text())
DOCKERFILE = (ROOT / "docker" / "Dockerfile").read_text()


def instruction(name: str) -> list[str]:
    return [ln.split(None, 1)[1] for ln in DOCKERFILE.splitlines() if ln.startswith(name + " ")]


def test_kafka_service_is_apache_kafka_in_kraft_mode():
    kafka = COMPOSE["services"]["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    env = kafka["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert "KAFKA_ZOOKEEPER_CONNECT" not in env
    # A one-node cluster cannot hold transaction state with the default replication of 3.
    assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == 1
    assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == 1
    assert "healthcheck" in kafka


def test_demo_command_is_accepted_by_the_cli_and_targets_the_kafka_service():
    demo = COMPOSE["services"]["demo"]
    entrypoint = json.loads(instruction("ENTRYPOINT")[-1])
    assert entrypoint == ["python", "-m", "connectors"]
    command = demo["command"] if isinstance(demo["command"], list) else shlex.split(demo["command"])
    args = build_parser().parse_args(command)  # exits 2 on an option the CLI does not have
    assert args.command == "demo"
    advertised = COMPOSE["services"]["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    listeners = dict(re.findall(r"(\w+)://([^,]+)", advertised))
    assert args.bootstrap_servers == listeners["PLAINTEXT"]
    assert demo["depends_on"]["kafka"]["condition"] == "service_healthy"
    volume_targets = [v.split(":")[1] for v in demo.get("volumes", [])]
    assert args.output_dir in volume_targets


def test_demo_image_builds_from_the_repository_root():
    build = COMPOSE["services"]["demo"]["build"]
    context = (ROOT / "docker" / build["context"]).resolve()
    assert context == ROOT
    assert (context / build["dockerfile"]).resolve() == ROOT / "docker" / "Dockerfile"
    for src in (s.split()[:-1] for s in instruction("COPY")):
        for path in src:
            assert (ROOT / path).exists(), f"COPY {path}: not in the repository"


def test_image_has_python_311_and_java_17():
    assert re.match(r"python:3\.11[.-]", instruction("FROM")[0])
    assert "openjdk-17-jre-headless" in DOCKERFILE
    assert any("pip install" in run and "." in run.split() for run in instruction("RUN"))


WHEEL = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]


@pytest.mark.parametrize("path", WHEEL["wheel"]["only-include"])
def test_image_copies_every_path_the_wheel_holds(path):
    assert any(path in copy.split()[:-1] for copy in instruction("COPY"))


# --- the SASL_SSL listener of the compose broker --------------------------------------------------

KAFKA = COMPOSE["services"]["kafka"]
INIT = COMPOSE["services"]["kafka-init"]
INIT_SCRIPT = (ROOT / "docker" / "kafka-init.sh").read_text()


def _listeners(spec: str) -> dict[str, str]:
    return dict(re.findall(r"(\w+)://([^,]*)", spec))


def _mounts(service: dict) -> dict[str, str]:
    """container path -> source (named volume or host path)"""
    return {v.split(":")[1]: v.split(":")[0] for v in service.get("volumes", [])}


def test_broker_has_a_sasl_ssl_listener_published_on_the_host():
    env = KAFKA["environment"]
    bound = _listeners(env["KAFKA_LISTENERS"])
    advertised = _listeners(env["KAFKA_ADVERTISED_LISTENERS"])
    protocols = dict(p.split(":") for p in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert protocols["SASL_SSL"] == "SASL_SSL"
    assert bound["SASL_SSL"] == ":29094"
    assert advertised["SASL_SSL"] == "localhost:29094"
    assert "29094:29094" in KAFKA["ports"]
    assert env["KAFKA_SASL_ENABLED_MECHANISMS"] == "SCRAM-SHA-512"
    # The demo's plaintext path is unchanged, and the brokers' own traffic stays plaintext.
    assert protocols["PLAINTEXT"] == protocols["CONTROLLER"] == protocols["HOST"] == "PLAINTEXT"
    assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] == "PLAINTEXT"
    assert set(advertised) == set(bound) - {"CONTROLLER"}


def test_broker_meets_what_the_images_configure_script_demands_of_ssl_and_sasl():
    """apache/kafka's configure script (3.9): "SSL://" advertised -> KAFKA_SSL_KEYSTORE_FILENAME,
    KAFKA_SSL_KEY_CREDENTIALS and KAFKA_SSL_KEYSTORE_CREDENTIALS, files in /etc/kafka/secrets;
    client auth requested or required -> the truststore's too; "SASL_" advertised -> KAFKA_OPTS.
    Every such file must be one kafka-init.sh writes into the volume mounted there."""
    env = KAFKA["environment"]
    assert "SSL://" in env["KAFKA_ADVERTISED_LISTENERS"]
    needed = [
        "KAFKA_SSL_KEYSTORE_FILENAME",
        "KAFKA_SSL_KEY_CREDENTIALS",
        "KAFKA_SSL_KEYSTORE_CREDENTIALS",
    ]
    if env.get("KAFKA_SSL_CLIENT_AUTH") in ("requested", "required"):
        needed += ["KAFKA_SSL_TRUSTSTORE_FILENAME", "KAFKA_SSL_TRUSTSTORE_CREDENTIALS"]
    moved = re.search(r"for f in (ca\.pem.*?); do", INIT_SCRIPT, re.S)[1]
    written = set(moved.replace("\\", " ").split())
    for var in needed:
        assert env[var] in written, f"{var}={env[var]}: kafka-init.sh does not write it"
    jaas = re.fullmatch(
        r"-Djava\.security\.auth\.login\.config=/etc/kafka/secrets/(\S+)", env["KAFKA_OPTS"]
    )
    assert jaas and jaas[1] in written
    assert "ScramLoginModule required" in INIT_SCRIPT
    secrets = "/etc/kafka/secrets"
    assert _mounts(KAFKA)[secrets] == _mounts(INIT)[secrets] in COMPOSE["volumes"]


def test_scram_user_is_added_when_kafka_init_formats_the_brokers_storage():
    assert INIT["image"] == KAFKA["image"]  # the same Kafka formats the storage it runs on
    assert KAFKA["depends_on"]["kafka-init"]["condition"] == "service_completed_successfully"
    assert INIT["attach"] is False  # its exit must not end `up --exit-code-from demo`
    assert INIT["entrypoint"] == ["bash", "/kafka-init.sh"]
    assert _mounts(INIT)["/kafka-init.sh"] == "./kafka-init.sh"
    assert (ROOT / "docker" / "kafka-init.sh").exists()
    # What formatting and the broker must agree on is one block merged into both.
    for key in ("CLUSTER_ID", "KAFKA_NODE_ID", "KAFKA_LOG_DIRS", "KAFKA_CONTROLLER_QUORUM_VOTERS"):
        assert INIT["environment"][key] == KAFKA["environment"][key], key
    data = KAFKA["environment"]["KAFKA_LOG_DIRS"]
    assert _mounts(KAFKA)[data] == _mounts(INIT)[data] in COMPOSE["volumes"]
    assert re.search(
        r'format --cluster-id "\$CLUSTER_ID" --config "\$config" \\\s*'
        r'--add-scram "SCRAM-SHA-512=\[name=\$SCRAM_USER,password=\$SCRAM_PASSWORD\]"',
        INIT_SCRIPT,
    )
    assert INIT["environment"]["SCRAM_USER"] and INIT["environment"]["SCRAM_PASSWORD"]
    assert KAFKA["environment"]["KAFKA_SASL_ENABLED_MECHANISMS"] == "SCRAM-SHA-512"


@pytest.mark.skipif(not shutil.which("keytool"), reason="no keytool (Java) on this machine")
def test_kafka_init_makes_a_keystore_that_serves_tls_for_localhost(tmp_path):
    """docker/kafka-init.sh run for real with this machine's keytool; only Kafka's storage tool
    is a stand-in that records how it was called (the image's real one runs in CI's compose job)."""
    import socket
    import ssl
    import subprocess
    import threading

    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import (
        Encoding, NoEncryption, PrivateFormat, pkcs12,
    )

    stub = tmp_path / "kafka-storage.sh"
    stub.write_text('#!/bin/bash\nprintf "%s\\n" "$@" > "$STUB_ARGS"\n'
                    'touch "$KAFKA_LOG_DIRS/meta.properties"\n')
    stub.chmod(0o755)
    secrets, data = tmp_path / "secrets", tmp_path / "data"
    env = {
        **{k: str(v) for k, v in INIT["environment"].items()},
        "KAFKA_LOG_DIRS": str(data), "SECRETS_DIR": str(secrets),
        "KAFKA_STORAGE_SH": str(stub), "STUB_ARGS": str(tmp_path / "args"),
        "PATH": os.environ["PATH"],
    }
    subprocess.run(["bash", str(ROOT / "docker" / "kafka-init.sh")], env=env, check=True,
                   capture_output=True, timeout=240)
    args = (tmp_path / "args").read_text().splitlines()
    assert args[:3] == ["format", "--cluster-id", INIT["environment"]["CLUSTER_ID"]]
    assert args[-2:] == ["--add-scram", "SCRAM-SHA-512=[name=eos-test,password=eos-test-secret]"]

    kenv = KAFKA["environment"]
    password = (secrets / kenv["KAFKA_SSL_KEYSTORE_CREDENTIALS"]).read_bytes()
    assert (secrets / kenv["KAFKA_SSL_KEY_CREDENTIALS"]).read_bytes() == password
    key, cert, chain = pkcs12.load_key_and_certificates(
        (secrets / kenv["KAFKA_SSL_KEYSTORE_FILENAME"]).read_bytes(), password
    )
    trust = pkcs12.load_pkcs12(
        (secrets / kenv["KAFKA_SSL_TRUSTSTORE_FILENAME"]).read_bytes(),
        (secrets / kenv["KAFKA_SSL_TRUSTSTORE_CREDENTIALS"]).read_bytes(),
    )
    # The CA, in both: as the truststore's one certificate and in the keystore (its entry, and
    # completing the server certificate's chain).
    assert len(trust.additional_certs) == 1
    ca_pem = x509.load_pem_x509_certificate((secrets / "ca.pem").read_bytes())
    assert {c.public_bytes(Encoding.PEM) for c in chain} == {
        trust.additional_certs[0].certificate.public_bytes(Encoding.PEM),
        ca_pem.public_bytes(Encoding.PEM),
    }
    chain = chain[:1]
    pems = b"".join(c.public_bytes(Encoding.PEM) for c in [cert, *chain])
    (tmp_path / "chain.pem").write_bytes(pems)
    pkcs8 = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    (tmp_path / "key.pem").write_bytes(pkcs8)

    # A TLS handshake with that identity, verified by a client that trusts only ca.pem and
    # dials "localhost" (what the advertised SASL_SSL listener names).
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(tmp_path / "chain.pem", tmp_path / "key.pem")
    with socket.create_server(("127.0.0.1", 0)) as listener:
        def serve():
            conn, _ = listener.accept()
            with server.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(b"ok")

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        client = ssl.create_default_context(cafile=str(secrets / "ca.pem"))
        with socket.create_connection(listener.getsockname(), timeout=10) as raw:
            with client.wrap_socket(raw, server_hostname="localhost") as tls:
                assert tls.recv(2) == b"ok"
        t.join(10)


def test_ci_checks_the_demo_containers_own_exit_code():
    ci = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())
    steps = ci["jobs"]["compose"]["steps"]
    runs = [s.get("run", "") for s in steps]
    up = next(i for i, r in enumerate(runs) if "--exit-code-from demo" in r)
    check = next(i for i, r in enumerate(runs) if "State.ExitCode" in r)
    assert up < check
    assert "ps -a -q demo" in runs[check]
    assert any("localhost:29094" in r and "SCRAM-SHA-512" in r for r in runs[check:])
