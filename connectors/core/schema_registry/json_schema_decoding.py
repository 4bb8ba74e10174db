"""JSON Schema records to Arrow: after the 5-byte header the payload is JSON text, parsed
(orjson where installed) and shaped by the reader schema's plan (json_schema_types). Any writer
schema id of the JSON type is accepted: JSON carries its field names, so records of older and
newer schemas read by name, and a missing property gets the reader's default.
"""

from __future__ import annotations

import json
from typing import Any

from connectors.core.schema_registry.client import RegistryClient
from connectors.core.schema_registry.decoding import (
    BadRecord,
    ColumnDecoder,
    ReaderSchema,
    split_header,
)
from connectors.core.schema_registry.json_schema_types import json_plan
from connectors.core.schema_registry.options import RegistryOptions

try:
    import orjson

    def _loads(payload: memoryview) -> Any:
        return orjson.loads(payload)
    _JSON_ERRORS: tuple[type[Exception], ...] = (orjson.JSONDecodeError, ValueError, TypeError)
except ImportError:  # pragma: no cover - orjson is optional
    def _loads(payload: memoryview) -> Any:
        return json.loads(bytes(payload))
    _JSON_ERRORS = (ValueError, TypeError)


class JsonSchemaDecoder(ColumnDecoder):
    def __init__(self, opts: RegistryOptions, reader: ReaderSchema,
                 client: RegistryClient | None = None) -> None:
        super().__init__(opts, reader, client)
        plan = json_plan(json.loads(reader.schema_str))
        self.spark_type, self.build_type, self._fixup = plan.spark_type, plan.build_type, plan.fixup
        self._known = {reader.schema_id}

    def _decode_one(self, data: bytes) -> Any:
        schema_id, payload = split_header(data)
        if schema_id not in self._known:
            self.writer_schema(schema_id)
            self._known.add(schema_id)
        try:
            value = _loads(payload)
        except _JSON_ERRORS as e:
            raise BadRecord(f"the payload is not JSON ({e})", schema_id=schema_id) from None
        if self._fixup is not None:
            value = self._fixup(value)
        return value  # a value of the wrong shape is refused by Arrow: a bad record there
