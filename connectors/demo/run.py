"""The demo's conductor: a broker, an input topic, the producer, the pipeline process, the chaos
and the verdict.

The pipeline (`connectors.demo.pipeline`) runs in a process group of its own, so a chaos kill is
a SIGKILL of the whole group: the driver's Python, its JVM, everything, with no clean-up
anywhere; the restart runs on the same checkpoints. Progress comes from the sinks' one-line JSON
records per committed batch (`KAFKA_EOS_METRICS_FILE`); the verdict does not trust them.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TextIO

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from connectors import kafka_config_file
from connectors.demo import verify
from connectors.demo.avro import to_env as demo_avro_env
from connectors.demo.changes import sample_changes
from connectors.demo.events import EventProducer, sample_events
from connectors.core.kafka_format import FORMAT_NAME as KAFKA_EOS
from connectors.core.cloud_tokens import librdkafka_client_conf
from connectors.core.kafka_python_security import connection_hint
from sinks.delta.options import FORMAT_NAME as DELTA_EOS
from sinks.two_phase_commit import METRICS_ENV

# After a (re)start, a kill waits until the pipeline says its queries run (the ready file),
# then a random delay in this range: the first batch after a restart (the replay of the one
# killed, or the backlog) starts at once, so the kill lands while batches are in flight: early
# in one, in its commit, or after some batches have committed.
KILL_DELAY_S = (1.0, 12.0)


class DemoError(Exception):
    """The demo could not run (not a failed verification): shown as one line."""


@dataclass(frozen=True)
class DemoConfig:
    bootstrap_servers: str | None = None  # None: start the embedded broker
    #: --kafka-config's client settings (librdkafka names, no bootstrap.servers): TLS, SASL...
    #: Used by every Kafka client of the demo; secrets among them, so never in the repr.
    kafka_config: Mapping[str, str] = field(default_factory=dict, repr=False)
    records: int = 20_000
    rate: float = 500.0
    partitions: int = 4
    chaos: int = 0
    output_dir: str = "kafka-eos-demo"
    seed: int | None = None
    trigger_ms: int = 1000
    max_offsets_per_trigger: int = 5000
    timeout_s: float = 900.0
    #: Without bootstrap_servers: "auto" (Apache Kafka from its Maven jars where it can run,
    #: else the embedded broker), "apache-kafka" or "embedded" (connectors/local/local_broker.py).
    local_broker: str = "auto"
    #: `--upsert`: a change stream (Debezium envelopes) into delta-eos in upsert mode, verified
    #: against the fold of the changes (connectors.demo.changes), instead of the two sinks.
    upsert: bool = False
    #: `--upsert`'s keys (rows of the simulated table); None: records / 20, at least 50.
    keys: int | None = None
    #: `--format`: "json" (JSON values, read as Spark's binary row) or "avro" (Confluent wire
    #: format Avro in and out, schemas in a Schema Registry: connectors.demo.avro).
    format: str = "json"
    #: With "avro": the registry's URL (may hold user:password@); None: start a local one.
    schema_registry_url: str | None = field(default=None, repr=False)

    @property
    def sinks(self) -> tuple[str, ...]:
        return (DELTA_EOS,) if self.upsert else (DELTA_EOS, KAFKA_EOS)

    @property
    def queries(self) -> tuple[str, ...]:
        """The pipeline's queries, by their checkpoint directory's name."""
        return ("delta",) if self.upsert else ("delta", "kafka")

    @property
    def upsert_keys(self) -> int:
        return self.keys if self.keys is not None else max(50, self.records // 20)


@dataclass
class Progress:
    """Rows and batches per sink, from the metrics file, read incrementally."""

    path: str
    sinks: tuple[str, ...] = (DELTA_EOS, KAFKA_EOS)
    rows: dict[str, int] = field(default_factory=dict)
    batches: dict[str, int] = field(default_factory=dict)
    _pos: int = 0

    def __post_init__(self) -> None:
        for sink in self.sinks:
            self.rows.setdefault(sink, 0)
            self.batches.setdefault(sink, 0)

    def poll(self) -> None:
        if not os.path.exists(self.path):
            return
        with open(self.path) as f:
            f.seek(self._pos)
            for line in f:
                if not line.endswith("\n"):
                    break  # a line still being written: read it next time
                self._pos += len(line)
                record = json.loads(line)
                for sink in self.rows:
                    if record["sink"].startswith(sink):
                        self.rows[sink] += record["rows"]
                        self.batches[sink] += 1


class Pipeline:
    """The Spark job as a process group of its own."""

    def __init__(self, args: list[str], log_path: str, env: dict[str, str]) -> None:
        self.args, self.log_path, self.env = args, log_path, env
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "connectors.demo.pipeline", *self.args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,  # its own process group: killpg reaches the JVM too
            )

    def kill(self) -> None:
        """SIGKILL the whole process group: no clean-up runs anywhere."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def poll(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def failure(self, rc: int) -> DemoError:
        return DemoError(
            f"the pipeline exited with status {rc}: {_last_error_line(self.log_path)} "
            f"(full log: {self.log_path})"
        )


def _last_error_line(log_path: str) -> str:
    try:
        with open(log_path, errors="replace") as f:
            lines = [ln.strip() for ln in f if ln.strip()]
    except OSError:
        return "no log"
    for line in reversed(lines):
        if "Error" in line or "Exception" in line:
            return line[:300]
    return lines[-1][:300] if lines else "no output"


@contextlib.contextmanager
def _broker(cfg: DemoConfig, out: TextIO) -> Iterator[str]:
    if cfg.bootstrap_servers:
        _check_reachable(cfg)
        print(f"Kafka: {cfg.bootstrap_servers}", file=out)
        if cfg.kafka_config:
            print(f"Kafka client settings (--kafka-config): "
                  f"{kafka_config_file.describe(cfg.kafka_config)}", file=out)
        yield cfg.bootstrap_servers
        return
    from connectors.local.tansu import TANSU_LACKS
    from connectors.local.local_broker import LocalBrokerError, local_broker

    def progress(text: str) -> None:
        print(f"Kafka: {text}...", file=out, flush=True)

    with contextlib.ExitStack() as stack:
        try:
            local = stack.enter_context(local_broker(cfg.local_broker, progress=progress))
        except LocalBrokerError as exc:
            raise DemoError(f"no local broker: {exc}") from None
        if local.fallback_reason:
            print(f"Kafka: Apache Kafka cannot run here ({local.fallback_reason}); using the "
                  "embedded Kafka-compatible broker instead", file=out)
        if local.embedded:
            # The verification reads with the marker-aware oracle, right on it; a user's own
            # checks against it are not: say what it lacks.
            print("Kafka: the embedded broker is not Kafka; it lacks:", file=out)
            for lack in TANSU_LACKS:
                print(f"    - {lack}", file=out)
        print(f"Kafka: {local.description} at {local.bootstrap_servers}; use "
              "--bootstrap-servers for a real cluster", file=out, flush=True)
        yield local.bootstrap_servers


@contextlib.contextmanager
def _registry(cfg: DemoConfig, out: TextIO) -> Iterator[str | None]:
    """With `--format avro`, the Schema Registry's URL: the user's (checked), or a local
    Apicurio Registry started for the run; None for JSON."""
    if cfg.format != "avro":
        yield None
        return
    from connectors.demo import avro

    if cfg.schema_registry_url:
        try:
            avro.check_reachable(cfg.schema_registry_url)
        except avro.RegistryUnreachable as exc:
            raise DemoError(str(exc)) from None
        print(f"Schema Registry: {avro.safe_url(cfg.schema_registry_url)}", file=out)
        yield cfg.schema_registry_url
        return
    from connectors.local.schema_registry import VERSION, RegistryUnavailable, schema_registry

    def progress(text: str) -> None:
        print(f"Schema Registry: {text}...", file=out, flush=True)

    with contextlib.ExitStack() as stack:
        try:
            local = stack.enter_context(schema_registry(progress=progress))
        except RegistryUnavailable as exc:
            raise DemoError(f"no local Schema Registry: {exc}; give --schema-registry-url "
                            "for one of yours") from None
        print(f"Schema Registry: Apicurio Registry {VERSION} at {local.url}; use "
              "--schema-registry-url for yours", file=out, flush=True)
        yield local.url


#: librdkafka errors that say the cluster refused our settings (TLS, SASL): no use waiting.
_REFUSALS = {KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError.SASL_AUTHENTICATION_FAILED}


def _check_reachable(cfg: DemoConfig, timeout_s: float = 15.0) -> None:
    """List the cluster's topics with the demo's settings; a refusal of the TLS or SASL
    settings fails at once, naming the settings to check (never their values)."""
    assert cfg.bootstrap_servers
    errors: list[KafkaError] = []
    admin = AdminClient({**_quiet(cfg.bootstrap_servers, cfg.kafka_config),
                         "error_cb": errors.append})
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            admin.list_topics(timeout=1)
            return
        except Exception as exc:
            admin.poll(0.1)  # serves error_cb
            refused = [e for e in errors if e.code() in _REFUSALS or (
                e.code() == KafkaError._TRANSPORT and "security.protocol" in e.str())]
            if not refused and time.monotonic() < deadline:
                continue
            detail = refused[-1].str() if refused else _error_text(exc)
            hint = ""
            if cfg.kafka_config or refused:
                conf = {"bootstrap.servers": cfg.bootstrap_servers, **cfg.kafka_config}
                # the hint names the connectors' kafka.* options: the file's keys lack the prefix
                hint = "; " + kafka_config_file.unprefixed(connection_hint(conf, detail))
            raise DemoError(
                f"cannot reach Kafka at {cfg.bootstrap_servers}: {detail}{hint}") from None


def _create_topics(bootstrap: str, conf: Mapping[str, str], topics: list[str], partitions: int,
                   embedded: bool) -> None:
    admin = AdminClient(_quiet(bootstrap, conf))
    # A real cluster picks its own default replication factor (-1); the embedded one has one node.
    new = [NewTopic(t, partitions, 1 if embedded else -1) for t in topics]
    for topic, future in admin.create_topics(new).items():
        try:
            future.result(timeout=30)
        except Exception as exc:
            raise DemoError(f"cannot create topic {topic!r}: {_error_text(exc)}") from None


def _error_text(exc: Exception) -> str:
    """A KafkaException's own message, without the KafkaError{code=...} wrapping."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0].str()
    return str(exc)


def _quiet(bootstrap: str, conf: Mapping[str, str]) -> dict[str, object]:
    """Admin calls report their own errors; librdkafka's log lines would garble the progress."""
    return librdkafka_client_conf({**conf, "bootstrap.servers": bootstrap, "log_level": 0})


def _check_java() -> None:
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        raise DemoError("Java not found: Spark needs Java 17 on PATH or in JAVA_HOME")


def run_demo(cfg: DemoConfig, out: TextIO = sys.stdout) -> int:
    """Run the demo; 0 when both sinks hold every produced record exactly once, 1 otherwise."""
    _check_java()
    started = time.monotonic()
    run_id = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = os.path.abspath(os.path.join(cfg.output_dir, f"run-{run_id}"))
    run_dir = base
    for n in range(2, 100):  # two runs in one second get their own directories
        try:
            os.makedirs(run_dir)
            break
        except FileExistsError:
            run_dir = f"{base}-{n}"
        except OSError as exc:
            raise DemoError(f"cannot create the output directory {run_dir}: {exc.strerror}") from None
    try:
        return _run(cfg, run_dir, started, out)
    except BaseException:
        with contextlib.suppress(OSError):
            os.rmdir(run_dir)  # only if nothing was written: a failed run keeps its logs
        raise


def _run(cfg: DemoConfig, run_dir: str, started: float, out: TextIO) -> int:
    seed = cfg.seed if cfg.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    paths = {
        "table": os.path.join(run_dir, "events-delta"),
        "checkpoints": os.path.join(run_dir, "checkpoints"),
        "metrics": os.path.join(run_dir, "batches.jsonl"),
        "log": os.path.join(run_dir, "pipeline.log"),
        "stop": os.path.join(run_dir, "STOP"),
        "ready": os.path.join(run_dir, "RUNNING"),
    }
    run_id = os.path.basename(run_dir).removeprefix("run-")
    if cfg.upsert:
        paths["table"] = os.path.join(run_dir, "customers-delta")
        return _run_upsert(cfg, paths, f"eos-demo-{run_id}-changes", seed, rng, started, run_dir,
                           out)
    input_topic, output_topic = f"eos-demo-{run_id}-events", f"eos-demo-{run_id}-enriched"
    print(f"Output: {run_dir} (seed {seed})", file=out)

    with _broker(cfg, out) as bootstrap, _registry(cfg, out) as registry_url:
        _create_topics(bootstrap, cfg.kafka_config, [input_topic, output_topic], cfg.partitions,
                       embedded=not cfg.bootstrap_servers)
        events = sample_events(cfg.records, users=max(100, cfg.partitions * 25), seed=seed)
        decode, avro_facts = json.loads, {}
        if registry_url:
            from connectors.demo import avro

            try:
                schema_id = avro.register_input_schema(registry_url, input_topic)
            except avro.RegistryUnreachable as exc:
                raise DemoError(str(exc)) from None
            print(f"Schema Registry: the events' Avro schema is {avro.value_subject(input_topic)} "
                  f"(id {schema_id}); the pipeline registers {avro.value_subject(output_topic)}",
                  file=out)
            decode = avro.output_deserializer(registry_url, output_topic)
        producer, processing_s, kills = _produce_and_run(
            cfg, bootstrap, input_topic, events, paths, ["--output-topic", output_topic],
            f"{cfg.records:,} {'Avro' if registry_url else 'JSON'} events to {input_topic} "
            f"({cfg.partitions} partitions, {_rate(cfg)}); "
            f"pipeline -> delta-eos {paths['table']} and kafka-eos topic {output_topic}",
            rng, started, out, registry_url=registry_url)
        if registry_url:
            try:
                avro_facts = {"schema_ids": avro.latest_schema_ids(
                    registry_url, [input_topic, output_topic])}
            except avro.RegistryUnreachable as exc:
                raise DemoError(str(exc)) from None

        print("Verifying: reading both outputs back independently of the sinks...", file=out)
        by_id = {e.event_id: e for e in events}
        ckpt = paths["checkpoints"]
        checks = [
            verify.check(DELTA_EOS, verify.delta_rows(paths["table"]), producer.delivered, by_id,
                         verify.spark_batches(os.path.join(ckpt, "delta"))),
            verify.check(KAFKA_EOS,
                         verify.kafka_rows(bootstrap, output_topic, cfg.kafka_config, decode),
                         producer.delivered, by_id,
                         verify.spark_batches(os.path.join(ckpt, "kafka"))),
        ]
    elapsed = time.monotonic() - started
    produced = len(producer.delivered)
    print(file=out)
    print(verify.render(produced, checks, kills=kills, elapsed_s=elapsed,
                        processing_s=processing_s), file=out)
    with open(os.path.join(run_dir, "verification.json"), "w") as f:
        f.write(verify.as_json(produced, checks, kills=kills, elapsed_s=round(elapsed, 1),
                               seed=seed, input_topic=input_topic, output_topic=output_topic,
                               format=cfg.format, **avro_facts))
    ok = all(c.ok for c in checks)
    print(file=out)
    print(
        "PASSED: every record exactly once in both sinks." if ok
        else "FAILED: duplicates or missing records; see verification.json and pipeline.log.",
        file=out,
    )
    return 0 if ok else 1


def _pipeline(cfg: DemoConfig, bootstrap: str, input_topic: str, paths: dict[str, str],
              mode_args: list[str], registry_url: str | None = None) -> Pipeline:
    """The demo's pipeline process, in append mode (`--output-topic`) or upsert mode
    (`--upsert`): the same topic, table, checkpoints, control files and triggers either way."""
    return Pipeline(
        [
            "--bootstrap-servers", bootstrap,
            "--input-topic", input_topic,
            *mode_args,
            "--table", paths["table"],
            "--checkpoints", paths["checkpoints"],
            "--stop-file", paths["stop"],
            "--ready-file", paths["ready"],
            "--trigger-ms", str(cfg.trigger_ms),
            "--max-offsets-per-trigger", str(cfg.max_offsets_per_trigger),
            *(["--value-format", "avro"] if registry_url else []),
        ],
        paths["log"],
        # the client settings go in the environment, never in argv (ps shows argv)
        {**os.environ, METRICS_ENV: paths["metrics"],
         **kafka_config_file.to_env(cfg.kafka_config), **demo_avro_env(registry_url)},
    )


def _run_upsert(cfg: DemoConfig, paths: dict[str, str], input_topic: str, seed: int,
                rng: random.Random, started: float, run_dir: str, out: TextIO) -> int:
    """`demo --upsert`: Debezium-style change events of a `customers` table (inserts, updates,
    deletes, late changes, updates older than their key's delete delivered batches later,
    re-created keys) -> kafka-eos -> delta-eos in upsert mode, with the same chaos; then the
    table read back with deltalake and compared with the fold of the delivered changes,
    computed without the sink's code (connectors.demo.changes.fold)."""
    print(f"Output: {run_dir} (seed {seed})", file=out)
    with _broker(cfg, out) as bootstrap:
        _create_topics(bootstrap, cfg.kafka_config, [input_topic], cfg.partitions,
                       embedded=not cfg.bootstrap_servers)
        changes = sample_changes(cfg.records, keys=cfg.upsert_keys, seed=seed)
        producer, processing_s, kills = _produce_and_run(
            cfg, bootstrap, input_topic, changes, paths, ["--upsert"],
            f"{cfg.records:,} Debezium-style changes of {cfg.upsert_keys:,} keys to "
            f"{input_topic} ({cfg.partitions} partitions, {_rate(cfg)}; late and out-of-order "
            f"changes, deletes, late updates after a delete); pipeline -> delta-eos upsert mode "
            f"{paths['table']}",
            rng, started, out)
    print("Verifying: reading the table back with deltalake and comparing it with the fold of "
          "the changes...", file=out)
    checkpoint = os.path.join(paths["checkpoints"], "delta")
    txns = verify.txn_versions(paths["table"])
    result = verify.check_upsert(
        "delta-eos upsert", verify.upsert_rows(paths["table"]), producer.delivered,
        {c.event_id: c for c in changes}, verify.spark_batch_ids(checkpoint),
        [v for versions in txns.values() for v in versions])
    elapsed = time.monotonic() - started
    print(file=out)
    print(verify.render_upsert(result, kills=kills, elapsed_s=elapsed, processing_s=processing_s),
          file=out)
    with open(os.path.join(run_dir, "verification.json"), "w") as f:
        f.write(json.dumps({
            "mode": "upsert", "produced": len(producer.delivered),
            "sinks": [asdict(result) | {"ok": result.ok}], "kills": kills,
            "elapsed_s": round(elapsed, 1), "seed": seed, "input_topic": input_topic,
            "keys": cfg.upsert_keys, "app_ids": sorted(txns),
        }, indent=2))
    print(file=out)
    print("PASSED: the table is exactly the fold of the change stream." if result.ok
          else "FAILED: the table differs from the fold of the changes; see verification.json "
               "and pipeline.log.", file=out)
    return 0 if result.ok else 1


def _produce_and_run(cfg: DemoConfig, bootstrap: str, input_topic: str, items: list,
                     paths: dict[str, str], sink_args: list[str], what: str,
                     rng: random.Random, started: float, out: TextIO,
                     registry_url: str | None = None) -> tuple[EventProducer, float, int]:
    """Produce `items` at the configured rate while the pipeline runs (with its chaos), until
    it has drained them: the producer, the processing time and the kills. `what` describes
    the run. With `registry_url`, the values are Avro (connectors.demo.avro)."""
    serialize = None
    if registry_url:
        from connectors.demo.avro import event_serializer

        serialize = event_serializer(registry_url, input_topic)
    producer = EventProducer(bootstrap, input_topic, cfg.partitions, items, cfg.rate,
                             client_config=dict(cfg.kafka_config), serialize=serialize)
    pipeline = _pipeline(cfg, bootstrap, input_topic, paths, sink_args, registry_url)
    print(f"Producing {what}"
          + (f"; {cfg.chaos} SIGKILLs at random moments" if cfg.chaos else ""), file=out)
    try:
        processing_s, kills = _conduct(cfg, producer, pipeline, paths, rng, started, out)
    finally:
        pipeline.kill()
    if producer.error:
        raise DemoError(f"producing the input failed: {producer.error}")
    return producer, processing_s, kills


def _rate(cfg: DemoConfig) -> str:
    return "as fast as possible" if cfg.rate <= 0 else f"{cfg.rate:,.0f}/s"


def _conduct(
    cfg: DemoConfig,
    producer: EventProducer,
    pipeline: Pipeline,
    paths: dict[str, str],
    rng: random.Random,
    started: float,
    out: TextIO,
) -> tuple[float, int]:
    """Run the pipeline through production and the chaos, then drain it; (running s, kills)."""
    progress = Progress(paths["metrics"], sinks=cfg.sinks)
    producer.start()
    pipeline.start()
    pipeline_started = time.monotonic()
    kill_at: float | None = None
    kills = 0
    stopping = False
    last_report = 0.0
    while True:
        now = time.monotonic()
        if now - started > cfg.timeout_s:
            raise DemoError(f"the demo did not finish within {cfg.timeout_s:.0f} s "
                            f"(see {paths['log']})")
        if producer.error:
            raise DemoError(f"producing the input failed: {producer.error}")
        progress.poll()
        rc = pipeline.poll()
        if rc is not None:
            if stopping and rc == 0:
                break
            raise pipeline.failure(rc)
        if now - last_report >= 2.0:
            last_report = now
            _report(now - started, producer, progress, kills, cfg, out,
                    running=stopping or os.path.exists(paths["ready"]))
        if kills < cfg.chaos:
            if kill_at is None and os.path.exists(paths["ready"]):
                kill_at = now + rng.uniform(*KILL_DELAY_S)
            if kill_at is not None and now >= kill_at:
                pipeline.kill()
                kills += 1
                print(f"  chaos: SIGKILL of the pipeline's process group ({kills} of {cfg.chaos}; "
                      f"in flight: {_in_flight(paths['checkpoints'])}); "
                      "restarting on the same checkpoints", file=out, flush=True)
                if kills == 1:
                    _print_inspection(paths["checkpoints"], out, cfg.queries)
                _clear_unfinished_first_offsets(paths["checkpoints"], out, cfg.queries)
                os.remove(paths["ready"])
                pipeline.start()
                kill_at = None
        elif producer.done and not stopping:
            stopping = True
            print("  all events produced; draining what is left (Trigger.AvailableNow)", file=out)
            open(paths["stop"], "w").close()
        time.sleep(0.2)
    progress.poll()
    _report(time.monotonic() - started, producer, progress, kills, cfg, out)
    for signal_file in (paths["ready"], paths["stop"]):
        with contextlib.suppress(FileNotFoundError):
            os.remove(signal_file)
    return time.monotonic() - pipeline_started, kills


def _in_flight(checkpoints: str) -> str:
    """Batches Spark has logged offsets for but not committed: what a kill interrupts."""
    def ids(query: str, kind: str) -> set[int]:
        d = os.path.join(checkpoints, query, kind)
        return {int(n) for n in os.listdir(d) if n.isdigit()} if os.path.isdir(d) else set()

    busy = []
    for query in ("delta", "kafka"):
        pending = sorted(ids(query, "offsets") - ids(query, "commits"))
        if pending:
            busy.append(f"{query}-eos batch {pending[-1]}")
    return ", ".join(busy) or "no batch"


def _print_inspection(checkpoints: str, out: TextIO,
                      queries: tuple[str, ...] = ("delta", "kafka")) -> None:
    """After the first kill: what `kafka-eos inspect` says of each query's checkpoint (the
    batch the kill interrupted, and what the restart's recovery is about to do with it)."""
    from connectors.inspection import inspect_checkpoint, render_text

    for query in queries:
        path = os.path.join(checkpoints, query)
        try:
            text = render_text(inspect_checkpoint(path, batches=1), summary_only=True)
        except Exception as e:  # the demo goes on: inspection is a view, not a step
            text = f"(not inspected: {type(e).__name__}: {e})\n"
        print(f"    $ kafka-eos inspect {path} --summary", file=out)
        for line in text.rstrip("\n").splitlines():
            print(f"    {line}", file=out)
    out.flush()


def _clear_unfinished_first_offsets(checkpoints: str, out: TextIO,
                                    queries: tuple[str, ...]) -> None:
    """A kill while Spark wrote a query's first offsets leaves a file Spark refuses to start
    on; what `kafka-eos resolve --apply` removes, the demo removes before its restart."""
    from connectors.spark_checkpoint import NotACheckpoint, SparkCheckpoint

    for query in queries:
        path = os.path.join(checkpoints, query)
        try:
            removed = SparkCheckpoint(path).remove_unfinished_first_offsets()
        except NotACheckpoint:  # killed before Spark made the checkpoint
            continue
        if removed:
            print(f"    $ kafka-eos resolve {path} --apply   # the kill interrupted Spark's "
                  f"write of batch 0's offsets: removed {', '.join(removed)}", file=out)


def _report(t: float, producer: EventProducer, progress: Progress, kills: int,
            cfg: DemoConfig, out: TextIO, *, running: bool = True) -> None:
    """One progress line. Until the pipeline says its queries run (`running`, its ready file)
    the line says Spark is starting, and a sink with no batch yet is waiting for its first:
    "0 rows/0 batches" for the half minute a first start takes on 2 cores read as a stall."""
    if not running:
        again = " again after the kill" if kills else ""
        queries = "its query" if len(progress.rows) == 1 else "its two queries"
        sinks = f"pipeline: starting Spark and {queries}{again}"
        if any(progress.batches.values()):
            sinks += "  (" + ", ".join(
                f"{s} {progress.rows[s]:,} rows/{progress.batches[s]} batches so far"
                for s in progress.rows) + ")"
    else:
        sinks = "  ".join(
            f"{s} {progress.rows[s]:,} rows/{progress.batches[s]} batches"
            if progress.batches[s] else f"{s} waiting for its first batch"
            for s in progress.rows
        )
    chaos = f"  kills {kills}/{cfg.chaos}" if cfg.chaos else ""
    print(f"  [{t:6.1f}s] produced {producer.produced:,}/{cfg.records:,}  {sinks}{chaos}",
          file=out, flush=True)
