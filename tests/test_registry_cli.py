"""`kafka-eos registry`: its arguments, and the errors it gives before fetching or starting
anything (no Java, an old Java, a port in use). Serving is integration_tests/
test_schema_registry_server.py's."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from connectors.cli import EXIT_CANNOT_RUN, EXIT_USAGE, build_parser, main


def test_the_registry_command_defaults_to_confluents_port():
    assert build_parser().parse_args(["registry"]).port == 8081
    assert build_parser().parse_args(["registry", "--port", "0"]).port == 0


def test_a_bad_port_gets_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["registry", "--port", "70000"])
    assert exit_info.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert "argument --port: must be a TCP port" in err and err.count("\n") == 1


def _run(tmp_path: Path, *argv: str, path: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "KAFKA_EOS_CACHE": str(tmp_path / "cache")}
    if path is not None:
        env["PATH"] = path
    return subprocess.run([sys.executable, "-m", "connectors", "registry", *argv],
                          capture_output=True, text=True, timeout=60, env=env)


def test_a_port_in_use_is_one_line_naming_the_way_out(tmp_path: Path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _run(tmp_path, "--port", str(port))
    assert proc.returncode == EXIT_CANNOT_RUN
    assert proc.stderr.strip() == (f"kafka-eos registry: error: port {port} is in use on "
                                   "127.0.0.1 (another registry?): choose another with --port, "
                                   "or --port 0 for any free one")
    assert not (tmp_path / "cache").exists()  # nothing fetched


def test_without_java_it_says_so_and_fetches_nothing(tmp_path: Path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    proc = _run(tmp_path, "--port", "0", path=str(bin_dir))
    assert proc.returncode == EXIT_CANNOT_RUN
    assert proc.stderr.strip() == ("kafka-eos registry: error: Apicurio Registry needs Java 17+ "
                                   "on PATH (java not found)")
    assert not (tmp_path / "cache").exists()


def test_an_old_java_is_named(tmp_path: Path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    java = bin_dir / "java"
    java.write_text('#!/bin/sh\necho \'openjdk version "1.8.0_392"\' >&2\n')
    java.chmod(0o755)
    proc = _run(tmp_path, "--port", "0", path=str(bin_dir))
    assert proc.returncode == EXIT_CANNOT_RUN
    assert proc.stderr.strip() == ("kafka-eos registry: error: Apicurio Registry 3.0.9 needs "
                                   "Java 17+; the java on PATH is 8")
