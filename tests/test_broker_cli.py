"""`kafka-eos broker`: its arguments, and the embedded broker it falls back to where Apache Kafka
cannot run (no Java here: PATH without it), as a user runs it (a subprocess, stopped with
Ctrl-C). The embedded broker is a small native binary, no JVM; the Apache Kafka path is
integration_tests/demo/test_local_broker.py's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from connectors.cli import EXIT_CANNOT_RUN, EXIT_USAGE, build_parser, main
from connectors.local.broker_handle import free_port


def test_the_broker_command_defaults_to_kafkas_port_and_apache_kafka_where_it_can():
    args = build_parser().parse_args(["broker"])
    assert (args.port, args.broker) == (9092, "auto")
    args = build_parser().parse_args(["broker", "--port", "0", "--broker", "embedded"])
    assert (args.port, args.broker) == (0, "embedded")


@pytest.mark.parametrize("argv, fragment", [
    (["--port", "70000"], "argument --port: must be a TCP port"),
    (["--broker", "redpanda"], "argument --broker: invalid choice: 'redpanda'"),
])
def test_bad_broker_arguments_get_one_line_and_exit_2(argv, fragment, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["broker", *argv])
    assert exit_info.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1


def _start(tmp_path: Path, *argv: str, path: str | None = None) -> tuple[subprocess.Popen, list[str]]:
    env = {**os.environ, "KAFKA_EOS_CACHE": str(tmp_path / "cache")}
    if path is not None:
        env["PATH"] = path
    proc = subprocess.Popen([sys.executable, "-m", "connectors", "broker", *argv],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if line.startswith("Running until Ctrl-C"):
            return proc, lines
    proc.kill()
    raise AssertionError(f"no broker: {lines} {proc.stderr.read()[-2000:]}")


def test_without_java_the_broker_falls_back_to_the_embedded_one_and_says_what_it_lacks(
        tmp_path: Path):
    no_java = tmp_path / "bin"
    no_java.mkdir()
    (no_java / "python3").symlink_to(sys.executable)
    proc, lines = _start(tmp_path, "--port", "0", path=str(no_java))
    try:
        text = "\n".join(lines)
        assert "Apache Kafka cannot run here (Apache Kafka needs Java 17 on PATH" in text, text
        assert "read_committed does not hide aborted records" in text
        assert "connectors.local.kafka_oracle.committed()" in text
        assert "records produced in multi-record batches (linger.ms, batch.size) read short" in text
        bootstrap = next(ln for ln in lines if ln.startswith("bootstrap servers: ")).split(": ")[1]
        AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "kafka-eos broker: stopped" in out and "Traceback" not in err


def test_a_port_in_use_is_one_line_naming_the_way_out(tmp_path: Path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "connectors", "broker", "--broker",
                               "embedded", "--port", str(port)],
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode == EXIT_CANNOT_RUN
    assert proc.stderr.strip() == (f"kafka-eos broker: error: port {port} is in use on 127.0.0.1 "
                                   "(another broker?): choose another with --port, or --port 0 "
                                   "for any free one")


def test_sigterm_stops_it_cleanly(tmp_path: Path):
    port = free_port()
    proc, _ = _start(tmp_path, "--broker", "embedded", "--port", str(port))
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    with pytest.raises(Exception):
        AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "log_level": 0,
                     "socket.connection.setup.timeout.ms": 1000}).list_topics(timeout=3)


def test_the_command_exits_when_its_broker_dies(tmp_path: Path):
    proc, _ = _start(tmp_path, "--broker", "embedded", "--port", "0")
    tansu = [pid for pid in os.listdir("/proc") if pid.isdigit() and _is_child_tansu(pid, proc.pid)]
    assert len(tansu) == 1
    os.kill(int(tansu[0]), signal.SIGKILL)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == EXIT_CANNOT_RUN
    assert "kafka-eos broker: error: the broker exited on its own" in err


def _is_child_tansu(pid: str, parent: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return int(fields[1]) == parent and b"tansu" in f.read()
    except OSError:
        return False
