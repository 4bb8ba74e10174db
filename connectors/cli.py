"""The command line: `python -m connectors demo|broker|registry|inspect|resolve ...`, also installed as
`kafka-eos ...`.

Bad arguments get one line on stderr and exit status 2, never a traceback. Exit status 1 means
the demo ran and its verification found a duplicate or a missing record; 3 that a command could
not run (no Java, an unreachable cluster, a failed pipeline, a path that is not a checkpoint,
a store resolve cannot reach); 4 that resolve refused because the query may be running.
"""

from __future__ import annotations

import argparse
import sys

from connectors.cli_args import (
    EXIT_USAGE,
    bootstrap_servers,
    HelpFormat,
    non_negative_int,
    Parser,
    tcp_port,
    positive_int,
    events_per_second,
    registry_url,
)
from connectors.core.logs import enable_structured_logs

EXIT_OK, EXIT_VERIFICATION_FAILED, EXIT_CANNOT_RUN = 0, 1, 3
EXIT_QUERY_MAY_BE_RUNNING = 4
PROG = "kafka-eos"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog=PROG,
        description="Exactly-once Kafka and Delta Lake connectors for Spark Structured Streaming.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    _add_demo_command(commands)
    _add_broker_command(commands)
    _add_registry_command(commands)
    _add_inspect_command(commands)
    _add_resolve_command(commands)
    return parser


def _add_demo_command(commands) -> None:
    """`demo`: the exactly-once pipeline end to end, verified."""
    demo = commands.add_parser(
        "demo",
        help="run the exactly-once pipeline end to end and verify its output",
        description=(
            "Produce a stream of keyed JSON events (Avro with --format avro) to Kafka, run a "
            "Spark pipeline that reads them "
            "with kafka-eos, enriches them and writes them exactly once to a delta-eos table and "
            "a kafka-eos topic, optionally SIGKILLing it at random moments, then read both "
            "outputs back and check every event is there exactly once. With --upsert, produce a "
            "table's change stream (Debezium-style envelopes: inserts, updates, deletes, late "
            "changes) instead, write it with delta-eos in upsert mode and check the table is "
            "exactly the fold of the changes. With no "
            "--bootstrap-servers an embedded local broker is started. Exit status: 0 verified, "
            "1 duplicates or missing records, 2 bad arguments, 3 could not run."
        ),
        formatter_class=HelpFormat,
    )
    demo.add_argument("--records", type=positive_int, default=20_000,
                      help="events to produce")
    demo.add_argument("--rate", type=events_per_second, default=500.0,
                      help="events per second to produce; 0 produces as fast as possible")
    demo.add_argument("--partitions", type=positive_int, default=4,
                      help="partitions of the input and output topics")
    demo.add_argument("--chaos", type=non_negative_int, default=0, metavar="N",
                      help="SIGKILL the pipeline's whole process group N times at random "
                           "moments, restarting it each time from its checkpoints")
    demo.add_argument("--bootstrap-servers", type=bootstrap_servers, default=None,
                      metavar="HOST:PORT",
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
    demo.add_argument("--trigger-ms", type=positive_int, default=1000,
                      help="the pipeline's processing-time trigger interval, in milliseconds")
    demo.set_defaults(command_parser=demo)  # its errors read "kafka-eos demo: error: ..."
    demo.add_argument("--timeout", type=positive_int, default=900, metavar="SECONDS",
                      help="give up after this long")
    demo.add_argument("--upsert", action="store_true",
                      help="a change stream (Debezium-style JSON envelopes of a customers table: "
                           "inserts, updates, deletes, late and out-of-order changes, updates "
                           "older than their key's delete) into delta-eos in upsert mode; the "
                           "table is verified against the fold of the changes")
    demo.add_argument("--keys", type=positive_int, default=None,
                      help="with --upsert: the keys (rows) of the changed table (default "
                           "records / 20, at least 50)")
    demo.add_argument("--max-offsets-per-trigger", type=positive_int, default=5000,
                      metavar="N", help="the pipeline's maxOffsetsPerTrigger: at most N "
                                        "records per micro-batch (the final drain takes at "
                                        "least 50000)")
    _add_demo_broker_flags(demo)


def _add_demo_broker_flags(demo: argparse.ArgumentParser) -> None:
    """The demo's local broker, its data format and its registry."""
    demo.add_argument("--broker", choices=LOCAL_BROKER_KINDS, default="auto",
                      help="without --bootstrap-servers, the local broker to start: auto is "
                           "Apache Kafka from its Maven jars where Java and the jars (cached, "
                           "or Maven Central) are there, else the embedded broker")
    demo.add_argument("--format", choices=DEMO_FORMATS, default="json",
                      help="the events' and the Kafka output's values: json, or avro (the "
                           "Confluent wire format with its schemas in a Schema Registry, "
                           "written and read back with confluent-kafka's AvroSerializer and "
                           "AvroDeserializer; the pipeline reads with valueFormat=avro and "
                           "writes Avro)")
    demo.add_argument("--schema-registry-url", type=registry_url, default=None, metavar="URL",
                      help="with --format avro: your Schema Registry's Confluent API base URL "
                           "(a user:password@ in it is used for basic auth and never shown); "
                           "without it the demo starts a local one (Apicurio Registry, as "
                           "`kafka-eos registry` does)")


#: Same as connectors.local.local_broker.LOCAL_BROKER_KINDS (not imported: --help stays fast).
LOCAL_BROKER_KINDS = ("auto", "apache-kafka", "embedded")
#: Same as connectors.demo.avro.FORMATS.
DEMO_FORMATS = ("json", "avro")


def _add_broker_command(commands) -> None:
    """`broker`: a local Kafka broker for a user's own pipelines, until Ctrl-C."""
    broker = commands.add_parser(
        "broker",
        help="start a local Kafka broker for your own pipelines; print its bootstrap address "
             "and run until Ctrl-C",
        description=(
            "Start a local Kafka broker on 127.0.0.1, print its bootstrap address and run until "
            "Ctrl-C (or SIGTERM), then stop it and delete its data. By default it is real Apache "
            "Kafka, one KRaft node from its Maven jars (fetched once into ~/.cache/kafka-eos, "
            "the test suite's cache; needs Java 17), so read_committed, offsets and "
            "transactions behave as on a cluster. Only where Apache Kafka cannot be had (no "
            "Java, no cached jars and no Maven Central) is the embedded Kafka-compatible broker "
            "started, saying what it lacks. Exit status: 0 stopped by Ctrl-C, 3 could not run."
        ),
        formatter_class=HelpFormat,
    )
    broker.add_argument("--port", type=tcp_port, default=9092,
                        help="the PLAINTEXT listener's port on 127.0.0.1; 0 picks a free one")
    broker.add_argument("--broker", choices=LOCAL_BROKER_KINDS, default="auto",
                        help="auto: Apache Kafka where it can run, else the embedded broker; "
                             "apache-kafka: Apache Kafka or an error; embedded: the embedded "
                             "broker")
    broker.set_defaults(command_parser=broker)


def _add_registry_command(commands) -> None:
    """`registry`: a local Schema Registry for a user's own pipelines, until Ctrl-C."""
    registry = commands.add_parser(
        "registry",
        help="start a local Confluent-compatible Schema Registry; print its URL and run until "
             "Ctrl-C",
        description=(
            "Start a local Schema Registry on 127.0.0.1, print its URL (the Confluent API: "
            "schema.registry.url, SchemaRegistryClient's url) and run until Ctrl-C (or SIGTERM), "
            "then stop it; its schemas live in memory and go with it. It is the test suite's "
            "registry: Apicurio Registry from Maven Central (fetched once into "
            "~/.cache/kafka-eos, about 110 MB; needs Java 17), global compatibility BACKWARD as "
            "Confluent's. Exit status: 0 stopped by Ctrl-C, 3 could not run."
        ),
        formatter_class=HelpFormat,
    )
    registry.add_argument("--port", type=tcp_port, default=8081,
                          help="its HTTP port on 127.0.0.1; 0 picks a free one")
    registry.set_defaults(command_parser=registry)


def _add_inspect_command(commands) -> None:
    """`inspect`: a stopped query's checkpoint, read without Spark (docs/operations.md)."""
    from connectors.inspection import DEFAULT_BATCHES

    inspect = commands.add_parser(
        "inspect",
        help="show a query's checkpoint: offsets, commits, the sink's transactions, and what "
             "a restart would do",
        description=(
            "Read a Structured Streaming checkpoint without Spark (local, file://, s3://, gs://, "
            "abfss://...) and print, per recent batch: the source's offsets, whether Spark "
            "committed it, the exactly-once sink's transaction log (prepared, decided, "
            "committed, done) with its handles, the age of open Kafka transactions against "
            "their timeout, and what a restart's recovery would do. Writes nothing, contacts "
            "no store; secrets are never shown."
        ),
        formatter_class=HelpFormat,
    )
    inspect.add_argument("checkpoint", metavar="CHECKPOINT", help="the query's checkpointLocation")
    window = inspect.add_mutually_exclusive_group()
    window.add_argument("--batches", type=non_negative_int, default=DEFAULT_BATCHES, metavar="N",
                        help="show the last N batches (batches the sink has not settled are "
                             "always shown)")
    window.add_argument("--all", action="store_true", help="show every batch")
    window.add_argument("--batch", type=non_negative_int, default=None, metavar="ID",
                        help="show this batch only")
    inspect.add_argument("--json", action="store_true", help="print JSON, for scripts")
    inspect.add_argument("--summary", action="store_true",
                         help="print the summary only, no batch detail")
    inspect.set_defaults(command_parser=inspect)


def _add_resolve_command(commands) -> None:
    """`resolve`: a stopped query's pending batches settled without Spark (docs/operations.md)."""
    from connectors.resolution import DEFAULT_COMMIT_TIMEOUT_MS, DEFAULT_MIN_IDLE_S

    resolve = commands.add_parser(
        "resolve",
        help="do what a restart's recovery would do (commit decided, abort undecided "
             "transactions) without starting the query",
        description=(
            "Settle the batches a stopped query left pending in its exactly-once sink's "
            "transaction log, with the sink's own recovery: decided transactions are "
            "committed, undecided ones aborted, exactly as a restart would. Dry run unless "
            "--apply. Idempotent. Refuses while the checkpoint was written to within "
            "--min-idle seconds (the query may be running) unless --force. The checkpoint does "
            "not record the sink's options: name the store with the flags below; secrets go in "
            "the environment or a properties file, never on the command line."
        ),
        formatter_class=HelpFormat,
    )
    resolve.add_argument("checkpoint", metavar="CHECKPOINT", help="the query's checkpointLocation")
    resolve.add_argument("--apply", action="store_true",
                         help="act (default: print the plan only)")
    resolve.add_argument("--force", action="store_true",
                         help="act even though the checkpoint was written to recently (only "
                              "when you know the query is stopped)")
    resolve.add_argument("--min-idle", type=non_negative_int, default=DEFAULT_MIN_IDLE_S,
                         metavar="SECONDS",
                         help="refuse to act if anything in the checkpoint is younger than this")
    resolve.add_argument("--json", action="store_true", help="print JSON, for scripts")
    _add_store_flags(resolve)
    resolve.add_argument("--commit-timeout", type=positive_int,
                         default=DEFAULT_COMMIT_TIMEOUT_MS // 1000, metavar="SECONDS",
                         help="give up a commit (with its retries) after this long")
    resolve.set_defaults(command_parser=resolve)


def _add_store_flags(resolve: argparse.ArgumentParser) -> None:
    """What resolve needs to reach each sink's store: the checkpoint records none of it."""
    kafka = resolve.add_argument_group("kafka-eos sink")
    kafka.add_argument("--bootstrap", type=bootstrap_servers, default=None, metavar="HOST:PORT",
                       help="the output cluster's bootstrap servers")
    kafka.add_argument("--kafka-config", default=None, metavar="PATH",
                       help="Kafka client settings (Java-style properties file: "
                            "security.protocol, sasl.*, ssl.*...), secrets included")
    kafka.add_argument("--kafka-option", action="append", default=[], metavar="KEY=VALUE",
                       help="a non-secret Kafka client setting (repeatable)")
    pg = resolve.add_argument_group("postgres-eos sink")
    pg.add_argument("--pg-url-env", default=None, metavar="VAR",
                    help="the environment variable holding the libpq URL (with its password)")
    pg.add_argument("--pg-table", default=None, metavar="NAME", help="the table (for messages)")
    delta = resolve.add_argument_group("delta-eos sink")
    delta.add_argument("--table", default=None, metavar="PATH", help="the Delta table's path")
    delta.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                       help="a non-secret storage option (repeatable; credentials from the "
                            "standard environment, e.g. AWS_*)")
    delta.add_argument("--app-id", default=None,
                       help="the sink's appId option, if the query set one")
    own = resolve.add_argument_group("your own sink kind (docs/writing-a-sink.md)")
    own.add_argument("--kind-module", action="append", default=[], metavar="MODULE",
                     help="import MODULE first: it registers your sink kind (repeatable)")
    own.add_argument("--store-option", action="append", default=[], metavar="KIND:NAME=VALUE",
                     help="a setting your sink kind declares in store_settings (repeatable)")


def _kafka_config(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, str]:
    """--kafka-config's settings in librdkafka's names, without bootstrap.servers (which fills
    in args.bootstrap_servers when the flag did not give it: the flag wins, as in Kafka's
    tools). Errors are usage errors: one line, naming the file and the line or setting."""
    from connectors.kafka_config_file import KafkaConfigError, load_kafka_config

    try:
        conf = load_kafka_config(args.kafka_config)
    except KafkaConfigError as exc:
        parser.error(f"argument --kafka-config: {exc}")
    from_file = conf.pop("bootstrap.servers", None)
    if args.bootstrap_servers is None and from_file is not None:
        try:
            args.bootstrap_servers = bootstrap_servers(from_file)
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
    if args.command == "inspect":
        return _inspect(args)
    if args.command == "resolve":
        return _resolve(args)
    if _embedded_broker_missing(args):
        return EXIT_CANNOT_RUN
    if args.command == "broker":
        return _broker(args)
    if args.command == "registry":
        return _registry(args)
    if args.partitions > args.records:
        parser.error(f"argument --records: must be at least --partitions ({args.partitions})")
    if args.keys is not None and not args.upsert:
        parser.error("argument --keys: only with --upsert")
    if args.schema_registry_url is not None and args.format != "avro":
        parser.error("argument --schema-registry-url: only with --format avro")
    if args.format == "avro" and args.upsert:
        parser.error("argument --format: avro is for the events demo; --upsert's change "
                     "stream is Debezium JSON")
    if args.format == "avro" and _extra_missing("registry", args):
        return EXIT_CANNOT_RUN
    kafka_config: dict[str, str] = {}
    if args.kafka_config is not None:
        kafka_config = _kafka_config(args.command_parser, args)

    from connectors.demo.run import DemoConfig, DemoError, run_demo

    # The pipeline's structured lines (batch read, batch committed, recovery) go to its log,
    # pipeline.log: its Spark Python workers inherit the choice through the environment.
    enable_structured_logs()
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
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        timeout_s=float(args.timeout),
        local_broker=args.broker,
        upsert=args.upsert,
        keys=args.keys,
        format=args.format,
        schema_registry_url=args.schema_registry_url,
    )
    try:
        return run_demo(config)
    except DemoError as exc:
        print(f"{PROG} demo: error: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except KeyboardInterrupt:
        print(f"{PROG} demo: interrupted", file=sys.stderr)
        return 130


def _embedded_broker_missing(args: argparse.Namespace) -> bool:
    """`--broker embedded` without the [local] extra: said at once, in one line, before the
    command starts anything."""
    if getattr(args, "broker", None) != "embedded" or getattr(args, "bootstrap_servers", None):
        return False
    return _extra_missing("local", args)


def _extra_missing(extra: str, args: argparse.Namespace) -> bool:
    """Whether the command needs an extra that is not installed (then said in one line)."""
    from connectors.core import extras

    try:
        extras.require(extra)
    except extras.MissingExtra as exc:
        print(f"{PROG} {args.command}: error: {exc}", file=sys.stderr)
        return True
    return False


def _broker(args: argparse.Namespace) -> int:
    """Run a local broker until Ctrl-C or SIGTERM. Its address goes to stdout as
    `bootstrap servers: HOST:PORT` (a line scripts can read); progress and the embedded
    broker's shortcomings too, since the user started this to read them."""
    import signal
    import time

    from connectors.local.tansu import TANSU_LACKS
    from connectors.local.local_broker import LocalBrokerError, local_broker

    def stop(signum, frame):  # SIGTERM: the same clean stop as Ctrl-C (the broker's data goes)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    port = args.port or None
    try:
        with local_broker(args.broker, port=port,
                          progress=lambda text: print(f"{PROG} broker: {text}...", flush=True)
                          ) as local:
            if local.fallback_reason:
                print(f"{PROG} broker: Apache Kafka cannot run here ({local.fallback_reason}); "
                      "started the embedded Kafka-compatible broker instead.")
            if local.embedded:
                print("The embedded broker is not Kafka. What it lacks:")
                for lack in TANSU_LACKS:
                    print(f"  - {lack}")
            print(f"Kafka: {local.description} at {local.bootstrap_servers}; its data is "
                  "deleted when it stops")
            print(f"bootstrap servers: {local.bootstrap_servers}")
            print("Running until Ctrl-C.", flush=True)
            while local.alive():
                time.sleep(0.5)
            print(f"{PROG} broker: error: the broker exited on its own", file=sys.stderr)
            return EXIT_CANNOT_RUN
    except LocalBrokerError as exc:
        print(f"{PROG} broker: error: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except KeyboardInterrupt:
        print(f"{PROG} broker: stopped", flush=True)
        return EXIT_OK


def _registry(args: argparse.Namespace) -> int:
    """Run a local Schema Registry until Ctrl-C or SIGTERM. Its URL goes to stdout as
    `schema registry url: URL` (a line scripts can read)."""
    import signal
    import time

    from connectors.local.schema_registry import VERSION, RegistryUnavailable, schema_registry

    def stop(signum, frame):  # SIGTERM: the same clean stop as Ctrl-C
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        with schema_registry(args.port or None, progress=lambda text: print(
                f"{PROG} registry: {text}...", flush=True)) as registry:
            print(f"Schema Registry: Apicurio Registry {VERSION} (the Confluent API, global "
                  f"compatibility BACKWARD) at {registry.url}; its schemas are in memory and "
                  "go when it stops")
            print(f"schema registry url: {registry.url}")
            print("Running until Ctrl-C.", flush=True)
            while registry.alive():
                time.sleep(0.5)
            print(f"{PROG} registry: error: the registry exited on its own:\n"
                  f"{registry.log_tail(1500)}", file=sys.stderr)
            return EXIT_CANNOT_RUN
    except RegistryUnavailable as exc:
        print(f"{PROG} registry: error: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except KeyboardInterrupt:
        print(f"{PROG} registry: stopped", flush=True)
        return EXIT_OK


def _inspect(args: argparse.Namespace) -> int:
    from connectors.inspection import NoSuchBatch, inspect_checkpoint, render_json, render_text
    from connectors.checkpoint_reader import NotACheckpoint

    try:
        report = inspect_checkpoint(args.checkpoint, batches=None if args.all else args.batches,
                                    batch=args.batch)
    except (NotACheckpoint, NoSuchBatch, OSError, ValueError) as exc:
        print(f"{PROG} inspect: error: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    print(render_json(report) if args.json else render_text(report, summary_only=args.summary),
          end="" if not args.json else "\n")
    return EXIT_OK


def _resolve(args: argparse.Namespace) -> int:
    from connectors.core.options import OptionError
    from connectors.core.redaction import redact_text
    from connectors.resolution import (
        QueryMayBeRunning,
        ResolveError,
        StoreOptions,
        parse_key_values,
        render_text,
        resolve_checkpoint,
        store_from_env_var,
    )
    from connectors.checkpoint_reader import NotACheckpoint

    enable_structured_logs("WARNING")  # a store's warnings with level and logger; the report says the rest
    parser = args.command_parser
    try:
        store = StoreOptions(
            kafka_conf=_resolve_kafka_conf(parser, args),
            pg_url=store_from_env_var(args.pg_url_env),
            pg_table=args.pg_table,
            delta_table=args.table,
            storage_options=parse_key_values(args.storage_option, "--storage-option"),
            app_id=args.app_id,
            commit_timeout_ms=args.commit_timeout * 1000,
            kind_settings=_kind_settings(args),
        )
    except OptionError as exc:
        parser.error(str(exc))
    try:
        report = resolve_checkpoint(args.checkpoint, store, apply=args.apply, force=args.force,
                                    min_idle_s=args.min_idle)
    except QueryMayBeRunning as exc:
        print(f"{PROG} resolve: refused: {exc}", file=sys.stderr)
        return EXIT_QUERY_MAY_BE_RUNNING
    except (NotACheckpoint, ResolveError, OptionError) as exc:
        print(f"{PROG} resolve: error: {redact_text(str(exc))}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except Exception as exc:  # a store's failure: its message, never a traceback or a secret
        print(f"{PROG} resolve: error: {type(exc).__name__}: {redact_text(str(exc))}",
              file=sys.stderr)
        return EXIT_CANNOT_RUN
    if args.json:
        import json

        print(json.dumps(report, indent=2))
    else:
        print(render_text(report), end="")
    return EXIT_OK


def _kind_settings(args: argparse.Namespace) -> dict[str, dict[str, str]]:
    """--kind-module's modules imported (each registers a user's sink kind), and
    --store-option's KIND:NAME=VALUE settings, by kind."""
    from importlib import import_module

    from connectors.core.options import OptionError
    from connectors.resolution import parse_key_values

    for module in args.kind_module:
        try:
            import_module(module)
        except ImportError as exc:
            raise OptionError("--kind-module", f"cannot import {module}: {exc}") from None
    settings: dict[str, dict[str, str]] = {}
    for key, value in parse_key_values(args.store_option, "--store-option").items():
        kind, sep, name = key.partition(":")
        if not (sep and kind and name):
            raise OptionError("--store-option", f"expected KIND:NAME=VALUE, got {key!r}")
        settings.setdefault(kind, {})[name] = value
    return settings


def _resolve_kafka_conf(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, str]:
    """--kafka-config's settings, then --kafka-option's, then --bootstrap, in librdkafka's
    names."""
    from connectors.core.kafka.java_options import translate
    from connectors.resolution import parse_key_values

    conf: dict[str, str] = {}
    if args.kafka_config is not None:
        from connectors.kafka_config_file import KafkaConfigError, load_kafka_config

        try:
            conf.update(load_kafka_config(args.kafka_config))
        except KafkaConfigError as exc:
            parser.error(f"argument --kafka-config: {exc}")
    extra = parse_key_values(args.kafka_option, "--kafka-option")
    conf.update(translate({k.removeprefix("kafka."): v for k, v in extra.items()}) if extra else {})
    if args.bootstrap:
        conf["bootstrap.servers"] = args.bootstrap
    return conf
