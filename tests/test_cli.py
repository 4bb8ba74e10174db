"""The command line's argument handling, and the demo's verdict logic (pure, no Spark)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from connectors.cli import EXIT_USAGE, build_parser, main
from connectors.demo.events import Event, sample_events
from connectors.demo.verify import check


def parse(*argv: str):
    return build_parser().parse_args(["demo", *argv])


def test_defaults_are_a_runnable_demo():
    args = parse()
    assert args.bootstrap_servers is None  # the embedded broker
    assert args.chaos == 0 and args.records > 0 and args.rate > 0 and args.partitions > 0


def test_options_parse():
    args = parse("--records", "1_000", "--rate", "0", "--chaos", "3", "--partitions", "2",
                 "--bootstrap-servers", "a:9092, b:9093", "--output-dir", "/tmp/x", "--seed", "5")
    assert (args.records, args.rate, args.chaos, args.partitions) == (1000, 0.0, 3, 2)
    assert args.bootstrap_servers == "a:9092,b:9093"
    assert (args.output_dir, args.seed) == ("/tmp/x", 5)


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--records", "0"], "argument --records: must be at least 1"),
        (["--records", "many"], "argument --records: expected a whole number, got 'many'"),
        (["--rate", "-5"], "argument --rate: must be 0 (as fast as possible) or more"),
        (["--chaos", "-1"], "argument --chaos: must be 0 or more"),
        (["--bootstrap-servers", "localhost"], "expected host:port[,host:port...]"),
        (["--records", "2", "--partitions", "4"], "--records: must be at least --partitions (4)"),
        (["--no-such-option"], "unrecognized arguments: --no-such-option"),
    ],
)
def test_bad_arguments_get_one_line_and_exit_2(argv, fragment, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", *argv])
    assert exit_info.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert fragment in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_bad_arguments_from_the_shell_print_no_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "connectors", "demo", "--chaos", "lots"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == EXIT_USAGE
    assert proc.stderr.strip().splitlines() == [
        "kafka-eos demo: error: argument --chaos: expected a whole number, got 'lots' (see --help)"
    ]


def test_help_explains_every_option():
    proc = subprocess.run([sys.executable, "-m", "connectors", "demo", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    for option in ["--records", "--rate", "--partitions", "--chaos", "--bootstrap-servers",
                   "--kafka-config", "--output-dir", "--seed", "--trigger-ms", "--timeout"]:
        assert option in text
    assert "Exit status: 0 verified, 1 duplicates or missing records" in text
    assert "(default: None)" not in text


# -- --kafka-config -------------------------------------------------------------------------------

PASSWORD = "pa55=word-never-shown"


def _properties(tmp_path, text: str) -> str:
    path = tmp_path / "client.properties"
    path.write_text(text)
    return str(path)


def test_kafka_config_is_read_once_into_librdkafka_names(tmp_path):
    path = _properties(tmp_path, (
        "bootstrap.servers=file-broker:9094\n"
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="u" password="{PASSWORD}";\n'))
    from connectors.cli import _kafka_config

    parser = build_parser()
    args = parser.parse_args(["demo", "--kafka-config", path])
    conf = _kafka_config(parser, args)
    assert conf == {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "SCRAM-SHA-256",
                    "sasl.username": "u", "sasl.password": PASSWORD}
    assert args.bootstrap_servers == "file-broker:9094"  # the file's, as no flag gave one
    # --bootstrap-servers wins over the file's bootstrap.servers, as in Kafka's tools
    args = parser.parse_args(["demo", "--kafka-config", path, "--bootstrap-servers", "flag:1"])
    assert _kafka_config(parser, args) == conf and args.bootstrap_servers == "flag:1"


def test_the_demo_config_never_shows_the_settings():
    from connectors.demo.run import DemoConfig

    cfg = DemoConfig(bootstrap_servers="b:1", kafka_config={"sasl.password": PASSWORD})
    assert PASSWORD not in repr(cfg) and PASSWORD not in str(cfg)


@pytest.mark.parametrize(
    "text, fragment",
    [
        (None, "argument --kafka-config: {path}: no such file"),
        ("security.protocol=SASL_SSL\nsasl.password\n",
         "argument --kafka-config: {path}, line 2: expected key=value"),
        ("security.protocol=SSL\n", "argument --kafka-config: needs --bootstrap-servers "
                                        "(or bootstrap.servers in the file)"),
        ("bootstrap.servers=localhost\nsecurity.protocol=SSL\n",
         "argument --kafka-config: {path}: bootstrap.servers: expected host:port"),
        ("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
         f"sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
         f'username="u" password="{PASSWORD}";\n',
         "argument --kafka-config: {path}: sasl.jaas.config: its login module is for PLAIN but "
         "sasl.mechanism is SCRAM-SHA-512"),
        ("security.protocol=SSL\nssl.keystore.location=/no/such/store.p12\n"
         f"ssl.keystore.password={PASSWORD}\n",
         "argument --kafka-config: {path}: ssl.keystore.location: cannot read "
         "'/no/such/store.p12'"),
    ],
)
def test_a_bad_kafka_config_is_one_line_exit_2_and_never_shows_a_secret(tmp_path, capsys, text,
                                                                         fragment):
    path = str(tmp_path / "missing.properties") if text is None else _properties(tmp_path, text)
    argv = ["demo", "--kafka-config", path, "--output-dir", str(tmp_path / "out")]
    if "bootstrap.servers" not in (text or "") and "needs --bootstrap" not in fragment:
        argv += ["--bootstrap-servers", "127.0.0.1:1"]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert fragment.format(path=path) in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert PASSWORD not in err
    assert not (tmp_path / "out").exists()  # refused before any run started


def test_kafka_config_from_the_shell_keeps_secrets_out_of_stderr(tmp_path):
    path = _properties(tmp_path, f"sasl.password={PASSWORD}\nsasl.password2 {PASSWORD}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "connectors", "demo", "--bootstrap-servers", "127.0.0.1:1",
         "--kafka-config", path],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == EXIT_USAGE
    assert proc.stderr.strip().splitlines() == [
        f"kafka-eos demo: error: argument --kafka-config: {path}, line 2: expected key=value "
        "(or key: value), found a line with no '=' or ':' (a value spanning several lines "
        "needs a backslash at the end of each line but the last) (see --help)"
    ]


# -- the verdict ---------------------------------------------------------------------------------

EVENTS = {e.event_id: e for e in sample_events(6, users=3, seed=1)}
# (partition, offset) -> event id, as the producer's delivery reports said
DELIVERED = {(0, 0): 0, (0, 1): 1, (1, 0): 2, (1, 1): 3, (2, 0): 4, (2, 1): 5}


def rows_for(keys):
    out = []
    for p, o in keys:
        e: Event = EVENTS[DELIVERED[(p, o)]]
        out.append((p, o, e.event_id, round(e.amount * 100)))
    return out


def test_every_record_once_is_ok():
    c = check("s", rows_for(DELIVERED), DELIVERED, EVENTS, batches=2)
    assert (c.rows, c.duplicates, c.missing, c.unexpected, c.ok) == (6, 0, 0, 0, True)


def test_duplicates_and_missing_are_counted():
    keys = list(DELIVERED)
    rows = rows_for(keys[:4] + [keys[0], keys[0], keys[1]])  # (2,0) and (2,1) lost
    c = check("s", rows, DELIVERED, EVENTS, batches=2)
    assert (c.rows, c.duplicates, c.missing, c.ok) == (7, 3, 2, False)


def test_altered_or_foreign_rows_are_unexpected():
    good = rows_for(DELIVERED)
    p, o, eid, cents = good[0]
    rows = [*good[1:], (p, o, eid, cents + 1), (9, 9, 99, 0)]
    c = check("s", rows, DELIVERED, EVENTS, batches=1)
    assert (c.unexpected, c.missing, c.ok) == (2, 1, False)
