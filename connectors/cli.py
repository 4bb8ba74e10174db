"""The command line: `python -m connectors demo ...`, also installed as `kafka-eos demo ...`.

Bad arguments get one line on stderr and exit status 2, never a traceback. Exit status 1 means
the demo ran and its verification found a duplicate or a missing record; 3 that it could not
run (no Java, an unreachable cluster, a failed pipeline).
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import NoReturn

EXIT_OK, EXIT_VERIFICATION_FAILED, EXIT_USAGE, EXIT_CANNOT_RUN = 0, 1, 2, 3
PROG = "kafka-eos"
_HOST_PORT = re.compile(r"^[A-Za-z0-9._\-\[\]:]+:\d{1,5}$")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Shows defaults, except where there is none to show (the help says what happens)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None:
            return action.help
        return super()._get_help_string(action)


def _whole_number(minimum: int):
    """An argparse type: an int of at least `minimum` (underscores allowed: 1_000_000)."""

    def parse(text: str) -> int:
        try:
            value = int(text.replace("_", ""))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            bound = "0 or more" if minimum == 0 else f"at least {minimum}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return value

    return parse


_positive_int, _non_negative_int = _whole_number(1), _whole_number(0)


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected events per second, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 (as fast as possible) or more, got {text}")
    return value


def _bootstrap(text: str) -> str:
    servers = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in servers if not _HOST_PORT.match(s)]
    if not servers or bad:
        raise argparse.ArgumentTypeError(
            f"expected host:port[,host:port...], got {text!r}"
        )
    return ",".join(servers)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Exactly-once Kafka and Delta Lake connectors for Spark Structured Streaming.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    demo = commands.add_parser(
        "demo",
        help="run the exactly-once pipeline end to end and verify its output",
        description=(
            "Produce a stream of keyed JSON events to Kafka, run a Spark pipeline that reads them "
            "with kafka-eos, enriches them and writes them exactly once to a delta-eos table and "
            "a kafka-eos topic, optionally SIGKILLing it at random moments, then read both "
            "outputs back and check every event is there exactly once. With no "
            "--bootstrap-servers an embedded local broker is started. Exit status: 0 verified, "
            "1 duplicates or missing records, 2 bad arguments, 3 could not run."
        ),
        formatter_class=_Help,
    )
    demo.add_argument("--records", type=_positive_int, default=20_000,
                      help="events to produce")
    demo.add_argument("--rate", type=_rate, default=500.0,
                      help="events per second to produce; 0 produces as fast as possible")
    demo.add_argument("--partitions", type=_positive_int, default=4,
                      help="partitions of the input and output topics")
    demo.add_argument("--chaos", type=_non_negative_int, default=0, metavar="N",
                      help="SIGKILL the pipeline's whole process group N times at random "
                           "moments, restarting it each time from its checkpoints")
    demo.add_argument("--bootstrap-servers", type=_bootstrap, default=None, metavar="HOST:PORT",
                      help="a real Kafka cluster instead of the embedded broker (plaintext, "
                           "or as --kafka-config says); the demo creates two topics named "
                           "eos-demo-<run>-*")
    demo.add_argument("--kafka-config", default=None, metavar="PATH",
                      help="Kafka client settings for a secured cluster, in a Java-style "
                           "properties file as Kafka's --command-config takes (key=value lines: "
                           "security.protocol, sasl.mechanism, sasl.jaas.config, "
                           "ssl.truststore.location or ssl.ca.location...; the Java client's "
                           "names or librdkafka's), used by every Kafka client of the demo; "
                           "secrets stay out of the command line and are never printed. Its "
                           "bootstrap.servers is used when --bootstrap-servers is not given")
    demo.add_argument("--output-dir", default="kafka-eos-demo",
                      help="where each run writes run-<time>/: the Delta table, checkpoints, "
                           "pipeline.log, batches.jsonl and verification.json")
    demo.add_argument("--seed", type=int, default=None,
                      help="random seed for the events and the kill moments (default: a random "
                           "one, printed at start)")
    demo.add_argument("--trigger-ms", type=_positive_int, default=1000,
                      help="the pipeline's processing-time trigger interval, in milliseconds")
    demo.set_defaults(command_parser=demo)  # its errors read "kafka-eos demo: error: ..."
    demo.add_argument("--timeout", type=_positive_int, default=900, metavar="SECONDS",
                      help="give up after this long")
    return parser


def _kafka_config(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, str]:
    """--kafka-config's settings in librdkafka's names, without bootstrap.servers (which fills
    in args.bootstrap_servers when the flag did not give it: the flag wins, as in Kafka's
    tools). Errors are usage errors: one line, naming the file and the line or setting."""
    from connectors.demo.kafka_config import KafkaConfigError, load_kafka_config

    try:
        conf = load_kafka_config(args.kafka_config)
    except KafkaConfigError as exc:
        parser.error(f"argument --kafka-config: {exc}")
    from_file = conf.pop("bootstrap.servers", None)
    if args.bootstrap_servers is None and from_file is not None:
        try:
            args.bootstrap_servers = _bootstrap(from_file)
        except argparse.ArgumentTypeError as exc:
            parser.error(f"argument --kafka-config: {args.kafka_config}: bootstrap.servers: {exc}")
    if args.bootstrap_servers is None:
        parser.error("argument --kafka-config: needs --bootstrap-servers (or bootstrap.servers "
                     "in the file): the embedded broker is plaintext")
    return conf


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    if args.partitions > args.records:
        parser.error(f"argument --records: must be at least --partitions ({args.partitions})")
    kafka_config: dict[str, str] = {}
    if args.kafka_config is not None:
        kafka_config = _kafka_config(args.command_parser, args)

    from connectors.demo.run import DemoConfig, DemoError, run_demo

    config = DemoConfig(
        bootstrap_servers=args.bootstrap_servers,
        kafka_config=kafka_config,
        records=args.records,
        rate=args.rate,
        partitions=args.partitions,
        chaos=args.chaos,
        output_dir=args.output_dir,
        seed=args.seed,
        trigger_ms=args.trigger_ms,
        timeout_s=float(args.timeout),
    )
    try:
        return run_demo(config)
    except DemoError as exc:
        print(f"{PROG} demo: error: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except KeyboardInterrupt:
        print(f"{PROG} demo: interrupted", file=sys.stderr)
        return 130
