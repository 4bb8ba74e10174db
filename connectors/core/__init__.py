"""The base every format stands on: what the source (sources/) and the sinks (sinks/) share.

Options and their errors, checkpoint and table paths, the Kafka clients' configuration (the
Java dialect translated, kafka-python's settings, OIDC tokens), redaction of secrets, the
package's structured log lines and its pip extras, and the Schema Registry formats. Nothing
here imports `sources`, `sinks` or the rest of `connectors` (the contracts in pyproject.toml's
[tool.importlinter] hold it so).
"""
