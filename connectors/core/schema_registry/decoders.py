"""A column decoder per format, built once per process and reader schema.

The decoders of the three formats build on decoding.py's base; this module picks one by the
reader schema's format (`new_decoder`) and keeps it for every task and batch the worker runs
(`decoder_for`), with the writer schemas it has met.
"""

from __future__ import annotations

import threading
from typing import Any

from connectors.core.schema_registry.client import RegistryClient
from connectors.core.schema_registry.decoding import ColumnDecoder, ReaderSchema
from connectors.core.schema_registry.options import RegistryOptions, side_option

_DECODERS: dict[Any, ColumnDecoder] = {}
_LOCK = threading.Lock()


def new_decoder(opts: RegistryOptions, reader: ReaderSchema,
                client: RegistryClient | None = None) -> ColumnDecoder:
    if reader.format == "avro":
        from connectors.core.schema_registry.avro_decoding import AvroDecoder
        return AvroDecoder(opts, reader, client)
    if reader.format == "protobuf":
        from connectors.core.schema_registry.protobuf_decoding import ProtobufDecoder
        return ProtobufDecoder(opts, reader, client)
    if reader.format == "json-schema":
        from connectors.core.schema_registry.json_schema_decoding import JsonSchemaDecoder
        return JsonSchemaDecoder(opts, reader, client)
    raise ValueError(f"{side_option(opts.side, 'format')}={reader.format} has no decoder")


def decoder_for(opts: RegistryOptions, reader: ReaderSchema) -> ColumnDecoder:
    """This process's decoder for (options, reader schema): built once, reused by every task
    and batch the worker runs, with its writer schemas."""
    key = (repr(opts), tuple(sorted((k, str(v)) for k, v in opts.client_conf.items())), reader)
    decoder = _DECODERS.get(key)
    if decoder is None:
        with _LOCK:
            decoder = _DECODERS.get(key)
            if decoder is None:
                decoder = new_decoder(opts, reader)
                _DECODERS[key] = decoder
    return decoder
