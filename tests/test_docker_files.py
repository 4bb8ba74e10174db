"""docker/: no Docker engine runs here, so the files are checked for what would break a run:
the compose file's demo command must be one the CLI accepts, pointed at the Kafka service's
own listener, and the image must be Python 3.11 with Java 17 running `python -m connectors`."""

from __future__ import annotations

import json
import re
import shlex
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
