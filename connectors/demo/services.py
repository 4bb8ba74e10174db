"""What the demo runs against: its Kafka cluster (yours, checked, or a local broker started for
the run), its Schema Registry (`--format avro`), and its topics. Each failure is a DemoError
of one line, naming what to check (never a secret)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from typing import TextIO

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from connectors import kafka_config_file
from connectors.core.kafka.cloud_tokens import librdkafka_client_conf
from connectors.core.kafka.python_security import connection_hint
from connectors.demo.config import DemoConfig, DemoError


@contextlib.contextmanager
def broker(cfg: DemoConfig, out: TextIO) -> Iterator[str]:
    if cfg.bootstrap_servers:
        check_reachable(cfg)
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
def registry(cfg: DemoConfig, out: TextIO) -> Iterator[str | None]:
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
REFUSALS = {KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError.SASL_AUTHENTICATION_FAILED}


def check_reachable(cfg: DemoConfig, timeout_s: float = 15.0) -> None:
    """List the cluster's topics with the demo's settings; a refusal of the TLS or SASL
    settings fails at once, naming the settings to check (never their values)."""
    assert cfg.bootstrap_servers
    errors: list[KafkaError] = []
    admin = AdminClient({**quiet_conf(cfg.bootstrap_servers, cfg.kafka_config),
                         "error_cb": errors.append})
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            admin.list_topics(timeout=1)
            return
        except Exception as exc:
            admin.poll(0.1)  # serves error_cb
            refused = [e for e in errors if e.code() in REFUSALS or (
                e.code() == KafkaError._TRANSPORT and "security.protocol" in e.str())]
            if not refused and time.monotonic() < deadline:
                continue
            detail = refused[-1].str() if refused else error_text(exc)
            hint = ""
            if cfg.kafka_config or refused:
                conf = {"bootstrap.servers": cfg.bootstrap_servers, **cfg.kafka_config}
                # the hint names the connectors' kafka.* options: the file's keys lack the prefix
                hint = "; " + kafka_config_file.unprefixed(connection_hint(conf, detail))
            raise DemoError(
                f"cannot reach Kafka at {cfg.bootstrap_servers}: {detail}{hint}") from None


def create_topics(bootstrap: str, conf: Mapping[str, str], topics: list[str], partitions: int,
                   embedded: bool) -> None:
    admin = AdminClient(quiet_conf(bootstrap, conf))
    # A real cluster picks its own default replication factor (-1); the embedded one has one node.
    new = [NewTopic(t, partitions, 1 if embedded else -1) for t in topics]
    for topic, future in admin.create_topics(new).items():
        try:
            future.result(timeout=30)
        except Exception as exc:
            raise DemoError(f"cannot create topic {topic!r}: {error_text(exc)}") from None


def error_text(exc: Exception) -> str:
    """A KafkaException's own message, without the KafkaError{code=...} wrapping."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0].str()
    return str(exc)


def quiet_conf(bootstrap: str, conf: Mapping[str, str]) -> dict[str, object]:
    """Admin calls report their own errors; librdkafka's log lines would garble the progress."""
    return librdkafka_client_conf({**conf, "bootstrap.servers": bootstrap, "log_level": 0})
