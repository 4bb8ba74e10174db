"""The main job against a secured cluster, as a user runs it: `python -m connectors demo
--bootstrap-servers <SASL_SSL listener> --kafka-config <file>`, with the file in the Java
client's names (as for Kafka's own tools' --command-config). Real Apache Kafka (the session's
node, its own SASL_SSL listener with SCRAM-SHA-512), real Spark, the demo's own exactly-once
verification; the password must appear nowhere the demo writes or prints, nor in any process's
argv."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from integration_tests.support.secured_listeners import SecuredBroker
from integration_tests.support.secured import secured_cluster
from integration_tests.demo.test_demo import assert_every_sink_exactly_once


def _java_properties(tmp_path: Path, user: str, password: str, ca_pem: str) -> Path:
    path = tmp_path / "client.properties"
    path.write_text(
        "# the cluster's SASL_SSL listener, as Kafka's tools take it (--command-config)\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism = SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        f'    username="{user}" password="{password}";\n'
        "\n"
        f"ssl.ca.location={ca_pem}\n"
    )
    return path


def _argv_of_all_processes() -> list[bytes]:
    """Every process's command line, from /proc (Linux)."""
    seen = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            seen.append(cmdline.read_bytes())
        except OSError:  # gone meanwhile, or not ours to read
            pass
    return seen


@pytest.fixture
def sasl_ssl(secured_kafka) -> SecuredBroker:
    return secured_cluster(secured_kafka, "SASL_SSL", mechanism="SCRAM-SHA-512")


def test_demo_on_a_sasl_ssl_cluster_verifies_exactly_once_and_never_shows_the_password(
        tmp_path: Path, sasl_ssl: SecuredBroker):
    broker = sasl_ssl
    (user, password), = broker.users.items()
    config = _java_properties(tmp_path, user, password, broker.pki.ca_pem)
    out_dir = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "connectors", "demo",
         "--bootstrap-servers", broker.bootstrap_servers, "--kafka-config", str(config),
         "--records", "1200", "--rate", "0", "--partitions", "2", "--trigger-ms", "500",
         "--seed", "7", "--output-dir", str(out_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    # While the demo runs, no process (the demo, the pipeline, Spark's JVM, its workers)
    # carries the password in its command line.
    argv_leaks: list[bytes] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.5):
            argv_leaks.extend(a for a in _argv_of_all_processes() if password.encode() in a)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        stop.set()
        watcher.join()
        if proc.poll() is None:
            proc.kill()

    runs = list(out_dir.glob("run-*"))
    log = (runs[0] / "pipeline.log").read_text(errors="replace") if runs else ""
    assert proc.returncode == 0, f"{stdout[-3000:]}\n{stderr[-2000:]}\n{log[-3000:]}"
    assert "PASSED: every record exactly once in both sinks." in stdout
    assert f"Kafka: {broker.bootstrap_servers}" in stdout
    assert "security.protocol=SASL_SSL" in stdout and "sasl.password=***" in stdout
    assert "sasl.mechanisms=SCRAM-SHA-512" in stdout and f"sasl.username={user}" in stdout

    (run,) = runs
    assert_every_sink_exactly_once(run, produced=1200, kills=0)

    # The password appears nowhere: not in the output, not in anything the run wrote.
    assert password not in stdout and password not in stderr
    for path in run.rglob("*"):
        if path.is_file():
            assert password.encode() not in path.read_bytes(), f"the password is in {path}"
    assert not argv_leaks, "the password was in a process's command line"


def test_demo_refuses_a_wrong_password_in_one_line_naming_the_settings(
        tmp_path: Path, sasl_ssl: SecuredBroker):
    broker = sasl_ssl
    (user, _), = broker.users.items()
    wrong = "not-the-password-0123456789"
    config = _java_properties(tmp_path, user, wrong, broker.pki.ca_pem)
    proc = subprocess.run(
        [sys.executable, "-m", "connectors", "demo",
         "--bootstrap-servers", broker.bootstrap_servers, "--kafka-config", str(config),
         "--output-dir", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 3, f"{proc.stdout}\n{proc.stderr}"
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"kafka-eos demo: error: cannot reach Kafka at {broker.bootstrap_servers}: "), proc.stderr
    assert "sasl.username" in lines[0] and "sasl.password" in lines[0]
    assert wrong not in proc.stdout + proc.stderr
