"""`demo --format avro`: its arguments, the registry URL kept out of what is shown and out of
the pipeline's argv, and the events' Avro schema against the demo's events (no broker, no
registry: the run itself is integration_tests/demo/test_demo.py's)."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import fastavro
import pytest

from connectors.cli import EXIT_USAGE, build_parser, main
from connectors.demo import avro
from connectors.demo.events import sample_events

SECRET = "s3cret-never-shown"


def parse(*argv: str):
    return build_parser().parse_args(["demo", *argv])


def test_the_default_stays_json_without_a_registry():
    args = parse()
    assert (args.format, args.schema_registry_url) == ("json", None)


def test_avro_with_and_without_a_registry_url():
    assert parse("--format", "avro").schema_registry_url is None  # a local one is started
    args = parse("--format", "avro", "--schema-registry-url",
                 " https://u:p@reg.example:8081/apis/ccompat/v7 , http://reg2:8081 ")
    assert args.format == "avro"
    assert args.schema_registry_url == (
        "https://u:p@reg.example:8081/apis/ccompat/v7,http://reg2:8081")


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--format", "xml"], "argument --format: invalid choice: 'xml'"),
        (["--schema-registry-url", "http://reg:8081"],
         "argument --schema-registry-url: only with --format avro"),
        (["--format", "avro", "--upsert"],
         "argument --format: avro is for the events demo; --upsert's change stream is "
         "Debezium JSON"),
        (["--format", "avro", "--schema-registry-url", "reg:8081"],
         "argument --schema-registry-url: expected http(s)://host[:port][/path], got 'reg:8081'"),
        (["--format", "avro", "--schema-registry-url", "ftp://reg:8081"],
         "expected http(s)://host[:port][/path], got 'ftp://reg:8081'"),
        (["--format", "avro", "--schema-registry-url", ","], "got ''"),
    ],
)
def test_bad_format_arguments_get_one_line_and_exit_2(argv, fragment, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", *argv])
    assert exit_info.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert fragment in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_bad_registry_url_never_shows_its_password(capsys):
    with pytest.raises(SystemExit):
        main(["demo", "--format", "avro", "--schema-registry-url",
              f"http://user:{SECRET}@reg:notaport"])
    err = capsys.readouterr().err
    assert "argument --schema-registry-url: expected http(s)://" in err
    assert SECRET not in err


def test_the_cli_hands_format_and_url_to_the_demo(monkeypatch):
    import connectors.demo.run as run

    seen = []
    monkeypatch.setattr(run, "run_demo", lambda cfg: seen.append(cfg) or 0)
    url = f"http://user:{SECRET}@reg:8081"
    assert main(["demo", "--format", "avro", "--schema-registry-url", url]) == 0
    (cfg,) = seen
    assert (cfg.format, cfg.schema_registry_url) == ("avro", url)
    assert SECRET not in repr(cfg)


def test_the_registry_url_is_shown_without_credentials():
    shown = avro.safe_url(f"https://user:{SECRET}@reg:8081/apis/ccompat/v7,http://b:{SECRET}@r2:1")
    assert shown == "https://reg:8081/apis/ccompat/v7,http://r2:1"


def test_the_url_goes_to_the_pipeline_in_its_environment_and_leaves_it():
    url = f"http://user:{SECRET}@reg:8081"
    env = {"OTHER": "x", **avro.to_env(url)}
    assert avro.from_env(env) == url
    assert env == {"OTHER": "x"}  # Spark's processes do not inherit it
    assert avro.to_env(None) == {} and avro.from_env({}) is None


def test_the_pipeline_refuses_avro_without_the_registry_url():
    env = {k: v for k, v in os.environ.items() if k != avro.ENV}
    proc = subprocess.run(
        [sys.executable, "-m", "connectors.demo.pipeline", "--bootstrap-servers", "b:1",
         "--input-topic", "t", "--output-topic", "o", "--table", "x", "--checkpoints", "c",
         "--stop-file", "s", "--ready-file", "r", "--value-format", "avro"],
        capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2
    assert f"--value-format avro needs the registry's URL in {avro.ENV}" in proc.stderr


def test_the_events_schema_holds_every_demo_event():
    """The schema the producer registers round-trips the demo's events: every action is a
    symbol of its enum and the ISO event time a timestamp-millis."""
    from datetime import datetime

    schema = fastavro.parse_schema(__import__("json").loads(avro.EVENT_SCHEMA))
    events = sample_events(500, users=50, seed=3)
    buf = io.BytesIO()
    for e in events:
        fastavro.schemaless_writer(
            buf, schema, dict(e.__dict__, event_time=datetime.fromisoformat(e.event_time)))
    buf.seek(0)
    back = [fastavro.schemaless_reader(buf, schema, schema) for _ in events]
    assert {b["action"] for b in back} == {e.action for e in events}
    assert [(b["event_id"], b["user_id"], b["amount"]) for b in back] == [
        (e.event_id, e.user_id, e.amount) for e in events]
    assert [b["event_time"].isoformat() for b in back] == [e.event_time for e in events]


def test_an_output_value_that_does_not_decode_counts_as_unexpected():
    from connectors.demo.verify import UNDECODABLE, check

    events = sample_events(2, users=2, seed=1)
    delivered = {(0, 0): 0, (0, 1): 1}
    good = (0, 0, 0, round(events[0].amount * 100))
    result = check("kafka-eos", [good, UNDECODABLE], delivered, {e.event_id: e for e in events}, 1)
    assert (result.rows, result.unexpected, result.missing, result.ok) == (2, 1, 1, False)
