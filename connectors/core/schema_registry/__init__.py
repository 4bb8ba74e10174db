"""Confluent Schema Registry formats (Avro, Protobuf, JSON Schema) shared by the `kafka-eos`
source and sink: option parsing, the registry client and its per-process schema cache.

Nothing is imported here: `options` (what the source and sink parse for every query) must not
pull in confluent-kafka's registry client, which only the `[registry]` extra installs.
"""
