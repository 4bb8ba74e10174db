"""The demo's settings (`kafka-eos demo`'s flags) and the error that says it could not run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from connectors.core.kafka.format import FORMAT_NAME as KAFKA_EOS
from sinks.delta.options import FORMAT_NAME as DELTA_EOS


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
