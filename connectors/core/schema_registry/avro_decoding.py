"""Avro records to Arrow: fastavro decodes each payload with its writer schema (fetched once
per process and id) resolved to the reader schema, by Avro's rules: a field the writer did not
have gets the reader's default, a field the reader dropped is skipped, ints widen to longs. A
writer schema the reader schema cannot resolve (a new field without a default, a type that
does not promote) is a bad record, named by its schema id and the field.

Records written with the reader schema itself (most of a topic, usually) are decoded a batch
at a time in native code first (avro_fast.py), with exactly the result fastavro gives; a batch
that path refuses is decoded here record by record.
"""

from __future__ import annotations

import io
import logging
import json
from collections.abc import Callable
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
from fastavro.read import SchemaResolutionError

from connectors.core.schema_registry.avro_fast import (
    FastAvroReader,
    FastPathRefused,
    ResolvingReader,
)

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
    cast,
    split_header,
)
from connectors.core.schema_registry.options import RegistryOptions

log = logging.getLogger(__name__)
#: refusals after which a schema id's batches skip the fast path (when most tries were refused)
REFUSALS_TO_STOP = 5


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
        self.fast = _fast_reader(self._reader_json) if self._fixup is None else None
        self._fast_by_id: dict[int, FastAvroReader | ResolvingReader | None] = {
            reader.schema_id: self.fast}
        self._tries: dict[int, int] = {}
        self._refusals: dict[int, int] = {}

    def decode(self, values: pa.Array, where: Callable[[int], tuple[str, int, int]]) -> pa.Array:
        """Each schema id's records through the fast path where it takes them (the reader
        schema's own, or a writer schema that resolves trivially), the others (and any group
        the fast path refuses) record by record, all put back in order."""
        if self.fast is None or len(values) == 0:
            return super().decode(values, where)
        ids = _schema_ids(values)
        pieces, done = [], []
        for schema_id in np.unique(ids[ids >= 0]).tolist():
            reader = self._fast_for(schema_id)
            if reader is None:
                continue
            rows = np.nonzero(ids == schema_id)[0]
            whole = len(rows) == len(values)
            try:
                built = reader.decode(values if whole else values.take(rows))
            except FastPathRefused as e:
                self._refused(schema_id, e)
                continue
            self._tries[schema_id] = self._tries.get(schema_id, 0) + 1
            if whole:
                return self._spark(built)
            pieces.append(built)
            done.append(rows)
        if not pieces:
            return super().decode(values, where)
        fast_rows = np.concatenate(done)
        rest = np.ones(len(values), bool)
        rest[fast_rows] = False
        slow_rows = np.nonzero(rest)[0]
        parts = [self._spark(pa.concat_arrays(pieces))]
        if len(slow_rows):
            parts.append(super().decode(values.take(slow_rows),
                                        lambda i: where(int(slow_rows[i]))))
        order = np.empty(len(values), np.int64)
        order[np.concatenate([fast_rows, slow_rows])] = np.arange(len(values))
        return pa.concat_arrays(parts).take(pa.array(order))

    def _refused(self, schema_id: int, error: FastPathRefused) -> None:
        """A batch the fast path refused. Corrupt records do that now and then; a writer
        whose encoding it never takes (blocked arrays, non-canonical varints) every time, and
        each batch would pay for both paths: after REFUSALS_TO_STOP refusals, most of the
        tries, that id stays with fastavro."""
        tries = self._tries[schema_id] = self._tries.get(schema_id, 0) + 1
        refused = self._refusals[schema_id] = self._refusals.get(schema_id, 0) + 1
        if refused >= REFUSALS_TO_STOP and refused * 2 > tries:
            self._fast_by_id[schema_id] = None
            log.info("kafka-eos: Avro records of schema id %d are decoded record by record "
                     "from now on: the batch path refused %d of %d batches (the last: %s)",
                     schema_id, refused, tries, error)

    def _fast_for(self, schema_id: int) -> FastAvroReader | ResolvingReader | None:
        """The fast path for records of `schema_id`, once per id; None where it takes none."""
        if schema_id in self._fast_by_id:
            return self._fast_by_id[schema_id]
        found: FastAvroReader | ResolvingReader | None = None
        try:
            schema = self.writer_schema(schema_id)
            found = ResolvingReader(json.loads(schema.schema_str), self._reader_json)
        except (BadRecord, FastPathRefused, ValueError, KeyError, TypeError):
            found = None  # the record-by-record path says what is wrong, per record
        self._fast_by_id[schema_id] = found
        return found

    def _spark(self, built: pa.Array) -> pa.Array:
        return built if self.build_type == self.spark_type else cast(built, self.spark_type)

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


def _schema_ids(values: pa.Array) -> np.ndarray:
    """Each record's schema id from its wire header; -1 for a null or a record without one."""
    n = len(values)
    raw = np.frombuffer(values.buffers()[1], np.int64 if pa.types.is_large_binary(values.type)
                        else np.int32)
    offsets = raw[values.offset: values.offset + n + 1].astype(np.int64)
    data = values.buffers()[2]
    data = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    ok = np.diff(offsets) >= 5
    if values.null_count:
        ok &= np.asarray(values.is_valid())
    starts = offsets[:-1][ok]
    ok[ok] = data[starts] == 0
    starts = offsets[:-1][ok]
    ids = np.full(n, -1, np.int64)
    ids[ok] = ((data[starts + 1].astype(np.int64) << 24) | (data[starts + 2].astype(np.int64) << 16)
               | (data[starts + 3].astype(np.int64) << 8) | data[starts + 4])
    return ids


def _fast_reader(reader_json: Any) -> FastAvroReader | None:
    """The fast path for this reader schema, or None where it cannot represent the schema (or
    polars, from the registry extra, is not installed): fastavro decodes everything then."""
    try:
        return FastAvroReader(reader_json)
    except (FastPathRefused, ImportError):
        return None
