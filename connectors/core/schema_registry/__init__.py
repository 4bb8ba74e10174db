"""Confluent Schema Registry formats (Avro, Protobuf, JSON Schema) shared by the `kafka-eos`
source and sink: option parsing, the registry client and its per-process schema cache.
"""

from connectors.core.schema_registry.client import (
    RegistryClient,
    RegistryError,
    RegistryUnavailable,
    registry_client,
)
from connectors.core.schema_registry.options import (
    FORMATS,
    OPTION_PREFIX,
    RegistryOptions,
    registry_option_names,
)

__all__ = [
    "FORMATS",
    "OPTION_PREFIX",
    "RegistryClient",
    "RegistryError",
    "RegistryOptions",
    "RegistryUnavailable",
    "registry_client",
    "registry_option_names",
]
