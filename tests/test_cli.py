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
                   "--output-dir", "--seed", "--trigger-ms", "--timeout"]:
        assert option in text
    assert "Exit status: 0 verified, 1 duplicates or missing records" in text
    assert "(default: None)" not in text


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
