"""Avro records to Arrow: fastavro decodes each payload with its writer schema (fetched once
per process and id) resolved to the reader schema, by Avro's rules: a field the writer did not
have gets the reader's default, a field the reader dropped is skipped, ints widen to longs. A
writer schema the reader schema cannot resolve (a new field without a default, a type that
does not promote) is a bad record, named by its schema id and the field.
"""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
from fastavro.read import SchemaResolutionError

from connectors.core.schema_registry.avro_types import (
    avro_plan,
    strip_logical_types,
    unresolvable_field,
)
from connectors.core.schema_registry.client import RegistryClient
from connectors.core.schema_registry.decoding import (
    BadRecord,
    ColumnDecoder,
    ReaderSchema,
    split_header,
)
from connectors.core.schema_registry.options import RegistryOptions


class AvroDecoder(ColumnDecoder):
    def __init__(self, opts: RegistryOptions, reader: ReaderSchema,
                 client: RegistryClient | None = None) -> None:
        super().__init__(opts, reader, client)
        self._reader_json = json.loads(reader.schema_str)
        plan = avro_plan(self._reader_json)
        self.spark_type = plan.spark_type
        self.build_type = plan.build_type
        self._fixup = plan.fixup
        self._reader = fastavro.parse_schema(plan.fastavro_schema, named_schemas={})
        # writer id -> (parsed writer schema, the reader schema to resolve to or None if same)
        self._writers: dict[int, tuple[Any, Any]] = {reader.schema_id: (self._reader, None)}
        self._writer_json: dict[int, Any] = {}

    def _writer(self, schema_id: int) -> tuple[Any, Any]:
        found = self._writers.get(schema_id)
        if found is None:
            schema = self.writer_schema(schema_id)
            try:
                self._writer_json[schema_id] = json.loads(schema.schema_str)
                parsed = fastavro.parse_schema(strip_logical_types(self._writer_json[schema_id]),
                                               named_schemas={})
            except Exception as e:
                error = BadRecord(f"the writer schema does not parse as Avro ({e})",
                                  schema_id=schema_id)
                self._writer_errors[schema_id] = error
                raise error from None
            found = (parsed, self._reader)
            self._writers[schema_id] = found
        return found

    def _decode_one(self, data: bytes) -> Any:
        schema_id, payload = split_header(data)
        writer, reader = self._writer(schema_id)
        try:
            value = fastavro.schemaless_reader(
                io.BytesIO(payload), writer, reader, return_record_name=True,
                return_record_name_override=True)
        except SchemaResolutionError as e:
            raise BadRecord(f"the writer schema cannot be resolved to the reader schema (id "
                            f"{self.reader.schema_id}, subject {self.reader.subject!r}): {e}",
                            schema_id=schema_id, field=self._unresolvable(schema_id)) from None
        except Exception as e:  # EOFError, UnicodeDecodeError, IndexError, ...
            raise BadRecord(f"the payload does not decode with the writer schema "
                            f"({type(e).__name__}: {e})", schema_id=schema_id) from None
        if self._fixup is not None:
            try:
                value = self._fixup(value)
            except ValueError as e:
                raise BadRecord(str(e), schema_id=schema_id) from None
        return value

    def _unresolvable(self, schema_id: int) -> str | None:
        """The field that fails resolution (fastavro's error does not say)."""
        writer = self._writer_json.get(schema_id)
        try:
            return unresolvable_field(writer, self._reader_json) if writer is not None else None
        except Exception:  # naming the field is a courtesy; the record is bad either way
            return None
