"""Decoding a column of Confluent wire-format records (magic byte 0, a 4-byte schema id, the
payload) into one Arrow struct column of the reader schema, inside the task that read them.

The reader schema is fixed when the query starts (`ReaderSchema`, resolved on the driver and
pickled to tasks). A task builds its decoder once per process and schema (`decoder_for`, in
decoders.py), and asks the registry once per process for each writer schema id it meets. A
record that cannot be decoded (no magic byte, unknown id, a payload that does not decode, a
writer schema the reader schema cannot resolve, a value that does not fit its column) fails the
task under `mode=FAILFAST`, naming topic, partition, offset, schema id and field; under
`PERMISSIVE` it becomes a null struct (its bytes stay in `rawValue` with `includeRawValue=true`).
A registry that cannot be reached is never a bad record: it fails the task after the client's
retries.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from connectors.core.schema_registry.client import RegistryClient, UnknownSchemaId, registry_client
from connectors.core.schema_registry.options import RegistryOptions

log = logging.getLogger(__name__)

MAGIC_BYTE = 0
HEADER_SIZE = 5
#: The registry's names for the formats (Schema.schema_type); Avro is the default (None).
SCHEMA_TYPES = {"avro": "AVRO", "protobuf": "PROTOBUF", "json-schema": "JSON"}


@dataclass(frozen=True)
class ReaderSchema:
    """The registered schema rows are read into, as the driver found it at query start."""

    format: str
    subject: str
    schema_id: int
    version: int | None
    schema_str: str
    #: Protobuf: the message (full name) of the file that rows are read as.
    message_name: str | None = None


class BadRecord(Exception):
    """One record that cannot become a row of the reader schema."""

    def __init__(self, reason: str, *, schema_id: int | None = None, field: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.schema_id = schema_id
        self.field = field


class MalformedRecordError(RuntimeError):
    """A bad record under mode=FAILFAST: the query fails, naming where it is."""


def schema_type_of(schema: Any) -> str:
    return (getattr(schema, "schema_type", None) or "AVRO").upper()


def split_header(data: bytes) -> tuple[int, memoryview]:
    """The schema id and the payload of a wire-format record; BadRecord if it is not one."""
    if len(data) < HEADER_SIZE or data[0] != MAGIC_BYTE:
        first = f"0x{data[0]:02x}" if data else "nothing"
        raise BadRecord(f"not in the Schema Registry wire format: {len(data)} bytes starting "
                        f"with {first}, not magic byte 0 and a 4-byte schema id")
    return int.from_bytes(data[1:5], "big"), memoryview(data)[HEADER_SIZE:]


class ColumnDecoder:
    """Decodes one side's column. Subclasses (one per format) give `_decode_one` (bytes to a
    Python value shaped like `build_type`) and the types; this class owns the loop, the bad
    record policy and the Arrow building."""

    build_type: pa.DataType
    spark_type: pa.DataType

    def __init__(self, opts: RegistryOptions, reader: ReaderSchema,
                 client: RegistryClient | None = None) -> None:
        self.opts = opts
        self.reader = reader
        self._client = client
        self._writer_errors: dict[int, BadRecord] = {}

    @property
    def client(self) -> RegistryClient:
        if self._client is None:
            self._client = registry_client(self.opts)
        return self._client

    def writer_schema(self, schema_id: int, fmt: str | None = None) -> Any:
        """The registered schema of `schema_id`, checked to be of this format."""
        if schema_id in self._writer_errors:
            raise self._writer_errors[schema_id]
        try:
            schema = self.client.schema_by_id(schema_id, fmt)
        except UnknownSchemaId as e:
            # Remembered: ids are never reused, and a topic full of them under PERMISSIVE must
            # not ask the registry once per record.
            error = BadRecord(f"unknown schema id ({e})", schema_id=schema_id)
            self._writer_errors[schema_id] = error
            raise error from None
        kind = schema_type_of(schema)
        if kind != SCHEMA_TYPES[self.reader.format]:
            error = BadRecord(
                f"the writer schema is {kind}, not {SCHEMA_TYPES[self.reader.format]} as "
                f"{self.opts.format_option}={self.reader.format} reads", schema_id=schema_id)
            self._writer_errors[schema_id] = error
            raise error
        return schema

    def _decode_one(self, data: bytes) -> Any:
        raise NotImplementedError

    def decode(self, values: pa.Array, where: Callable[[int], tuple[str, int, int]]) -> pa.Array:
        """`values` (binary) decoded into an array of `spark_type`. `where(i)` gives the
        topic, partition and offset of row i, for messages only."""
        decode_one = self._decode_one
        out: list[Any] = []
        append = out.append
        bad: list[tuple[int, BadRecord]] = []
        for i, data in enumerate(values.to_pylist()):
            if data is None:  # a tombstone: a null value, as from_avro(null) gives
                append(None)
                continue
            try:
                append(decode_one(data))
            except BadRecord as e:
                bad.append((i, e))
                self._bad(e, where, i)
                append(None)
        try:
            result = self._build_many(out)
        except (pa.ArrowException, OverflowError, ValueError, TypeError):
            result = self._one_by_one(out, values, where, bad)
        if bad:
            self._report_permissive(sorted(bad, key=lambda b: b[0]), where)
        return result

    def _one_by_one(self, out: list[Any], values: pa.Array,
                    where: Callable[[int], tuple[str, int, int]],
                    bad: list[tuple[int, BadRecord]]) -> pa.Array:
        """The slow path, after a batch failed to build: each row alone, to find the rows whose
        values do not fit their column (and the field)."""
        for i, value in enumerate(out):
            if value is None:
                continue
            try:
                self._build_one(value)
            except (pa.ArrowException, OverflowError, ValueError, TypeError) as e:
                field = _failing_field(value, self.build_type, self.spark_type)
                error = BadRecord(f"a value does not fit its column ({e})",
                                  schema_id=_schema_id_of(values[i].as_py()), field=field)
                bad.append((i, error))
                self._bad(error, where, i)
                out[i] = None
        return self._build_many(out)

    def _build_one(self, value: Any) -> pa.Array:
        return self._build_many([value])

    def _build_many(self, values: list[Any]) -> pa.Array:
        built = pa.array(values, self.build_type)
        return built if self.build_type == self.spark_type else cast(built, self.spark_type)

    def _bad(self, error: BadRecord, where: Callable[[int], tuple[str, int, int]], i: int) -> None:
        if self.opts.permissive:
            return
        topic, partition, offset = where(i)
        raise MalformedRecordError(describe_bad(self.opts, error, topic, partition, offset)
                                   + f". With {MODE_HINT}") from None

    def _report_permissive(self, bad: list[tuple[int, BadRecord]],
                           where: Callable[[int], tuple[str, int, int]]) -> None:
        i, first = bad[0]
        topic, partition, offset = where(i)
        log.warning("kafka-eos: %d record(s) of this batch could not be decoded and have a null "
                    "%s (mode=PERMISSIVE%s); the first: %s", len(bad), self.opts.side,
                    f", bytes kept in {self.opts.raw_column}" if self.opts.include_raw else "",
                    describe_bad(self.opts, first, topic, partition, offset))


MODE_HINT = ("mode=PERMISSIVE such records get a null struct instead (add includeRawValue=true "
             "to keep their bytes)")


def describe_bad(opts: RegistryOptions, error: BadRecord, topic: str, partition: int,
                 offset: int) -> str:
    schema = f"schema id {error.schema_id}" if error.schema_id is not None else "no schema id"
    field = f", field {error.field!r}" if error.field else ""
    return (f"kafka-eos: cannot decode the {opts.side} of the record at topic {topic}, partition "
            f"{partition}, offset {offset} ({opts.format_option}={opts.format}, {schema}{field}):"
            f" {error.reason}")


def cast(array: pa.Array, target: pa.DataType) -> pa.Array:
    """`array` cast to `target`, with the children of null structs (and list items) null
    first: Arrow fills them with zero values ('' for a string), which a cast of strings to
    dates or timestamps would refuse although no row holds them."""
    if array.type == target:
        return array
    if pa.types.is_struct(target) and isinstance(array, pa.StructArray):
        valid = array.is_valid()
        has_nulls = array.null_count > 0
        children = []
        for i in range(target.num_fields):
            child = array.field(i)
            if has_nulls:
                child = pc.if_else(valid, child, pa.scalar(None, child.type))
            children.append(cast(child, target.field(i).type))
        return pa.StructArray.from_arrays(children, fields=list(target),
                                          mask=array.is_null() if has_nulls else None)
    if pa.types.is_list(target) and isinstance(array, pa.ListArray):
        values = cast(array.values, target.value_type)
        return pa.ListArray.from_arrays(array.offsets, values, type=target,
                                        mask=array.is_null() if array.null_count else None)
    return array.cast(target)


def _schema_id_of(data: bytes | None) -> int | None:
    if data and len(data) >= HEADER_SIZE and data[0] == MAGIC_BYTE:
        return int.from_bytes(data[1:5], "big")
    return None


def _failing_field(value: Any, build_type: pa.DataType, spark_type: pa.DataType,
                   path: str = "") -> str | None:
    """The dotted path of the first field whose value does not build (or cast)."""
    if not (pa.types.is_struct(build_type) and isinstance(value, dict)):
        return path or None
    for i in range(build_type.num_fields):
        f, target = build_type.field(i), spark_type.field(i)
        name = f"{path}.{f.name}" if path else f.name
        try:
            built = pa.array([value.get(f.name)], f.type)
            if f.type != target.type:
                cast(built, target.type)
        except (pa.ArrowException, OverflowError, ValueError, TypeError):
            return _failing_field(value.get(f.name), f.type, target.type, name)
    return path or None


def resolve_reader_schema(opts: RegistryOptions, topic: str | None) -> ReaderSchema:
    """The reader schema of one side at query start: the subject's `schemaVersion`, else its
    latest version, checked to be of the configured format."""
    client = registry_client(opts)
    fmt = "serialized" if opts.format == "protobuf" else None
    registered = client.reader_schema(topic, fmt=fmt)
    kind = schema_type_of(registered.schema)
    if kind != SCHEMA_TYPES[opts.format]:
        from connectors.core.options import OptionError
        raise OptionError(opts.format_option,
                          f"is {opts.format}, but subject {registered.subject!r} holds a {kind} "
                          f"schema (version {registered.version}, id {registered.schema_id})")
    message = opts.record_name if opts.format == "protobuf" else None
    return ReaderSchema(format=opts.format, subject=registered.subject,
                        schema_id=registered.schema_id, version=registered.version,
                        schema_str=registered.schema.schema_str, message_name=message)
