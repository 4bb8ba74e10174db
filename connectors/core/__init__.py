"""The base every format stands on: what the source (sources/) and the sinks (sinks/) share.

At the root, what every format uses: options and their errors, checkpoint and table paths,
redaction of secrets, the package's structured log lines, its pip extras, short digests. Two
sub-packages hold what only the Kafka side uses:

    kafka/            the Kafka clients' configuration (librdkafka's, the Java dialect
                      translated, kafka-python's TLS and SASL, OIDC and the clouds' tokens) and
                      admin calls
    schema_registry/  the Schema Registry formats (Avro, Protobuf, JSON Schema)

Nothing here imports `sources`, `sinks` or the rest of `connectors` (the contracts in pyproject.toml's
[tool.importlinter] hold it so).
"""
