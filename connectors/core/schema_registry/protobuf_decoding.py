"""Protobuf records to Arrow. After the 5-byte header, Confluent's Protobuf framing carries the
message's indexes in its schema file (zig-zag varints; a single 0 byte for the first message).
The writer schema (fetched once per process and id, as a FileDescriptorProto) says which message
was written; the payload is parsed as the reader message (`valueRecordName`, else the file's first), which
must be the message of the same full name: a record of another message is a bad record. Protobuf's evolution is by field number: fields the reader does not know are
skipped, fields the writer did not send read as their defaults (null where they have presence).
"""

from __future__ import annotations

from typing import Any

from confluent_kafka.schema_registry.common.protobuf import _init_pool, _is_builtin, _str_to_proto
from google.protobuf.descriptor import Descriptor, FileDescriptor
from google.protobuf.descriptor_pool import DescriptorPool
from google.protobuf.message import DecodeError
from google.protobuf.message_factory import GetMessageClass

from connectors.core.schema_registry.client import RegistryClient
from connectors.core.schema_registry.decoding import (
    BadRecord,
    ColumnDecoder,
    ReaderSchema,
    split_header,
)
from connectors.core.schema_registry.options import RegistryOptions
from connectors.core.schema_registry.protobuf_types import arrow_type, converter

FMT = "serialized"


def read_indexes(payload: memoryview) -> tuple[tuple[int, ...], int]:
    """The message indexes at the start of `payload` and how many bytes they took."""
    pos = 0

    def varint() -> int:
        nonlocal pos
        shift = result = 0
        while True:
            if pos >= len(payload) or shift > 63:
                raise BadRecord("the Protobuf message indexes after the schema id are truncated")
            b = payload[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
        return (result >> 1) ^ -(result & 1)  # zig-zag

    count = varint()
    if count == 0:
        return (0,), pos
    if count < 0 or count > 100:
        raise BadRecord(f"implausible Protobuf message index count {count}")
    return tuple(varint() for _ in range(count)), pos


def message_by_indexes(fd: FileDescriptor, indexes: tuple[int, ...]) -> Descriptor:
    """The message that `indexes` name in file `fd` (top-level, then nested)."""
    try:
        desc = fd.message_types_by_name[list(fd.message_types_by_name)[indexes[0]]]
        for i in indexes[1:]:
            desc = desc.nested_types[i]
    except (IndexError, KeyError):
        raise BadRecord(f"message indexes {list(indexes)} name no message of the writer "
                        "schema") from None
    return desc


class ProtobufDecoder(ColumnDecoder):
    def __init__(self, opts: RegistryOptions, reader: ReaderSchema,
                 client: RegistryClient | None = None) -> None:
        super().__init__(opts, reader, client)
        self._file = self._load_file(reader.schema_str, reader.schema_id, None)
        self._default = self._reader_message(reader.message_name)
        self.spark_type = self.build_type = arrow_type(self._default)
        self._classes: dict[str, tuple[Any, Any]] = {}
        # (writer id, indexes) -> (message class, converter)
        self._by_writer: dict[tuple[int, tuple[int, ...]], tuple[Any, Any]] = {}

    def _load_file(self, schema_str: str, schema_id: int, raw_schema: Any) -> FileDescriptor:
        """A schema's file descriptor, in a pool of its own with the well-known types and
        whatever the schema references (fetched from the registry)."""
        pool = DescriptorPool()
        _init_pool(pool)
        proto = _str_to_proto(f"schema-{schema_id}", schema_str)
        if raw_schema is None and any(not _is_builtin(d) for d in proto.dependency):
            raw_schema = self.client.schema_by_id(schema_id, FMT)
        if raw_schema is not None and raw_schema.references:
            from confluent_kafka.schema_registry._sync.protobuf import _resolve_named_schema

            self.client.call(f"the references of schema id {schema_id}",
                             lambda: _resolve_named_schema(raw_schema, self.client.raw, pool))
        pool.Add(proto)
        return pool.FindFileByName(proto.name)

    def _reader_message(self, name: str | None) -> Descriptor:
        if name:
            for desc in _all_messages(self._file):
                if desc.full_name == name or desc.name == name:
                    return desc
            from connectors.core.options import OptionError
            raise OptionError(self.opts.format_option.replace("Format", "RecordName"),
                              f"names no message of subject {self.reader.subject!r}: {name!r} "
                              f"(it has {', '.join(d.full_name for d in _all_messages(self._file))})")
        if not self._file.message_types_by_name:
            raise ValueError(f"subject {self.reader.subject!r} holds no Protobuf message")
        return next(iter(self._file.message_types_by_name.values()))

    def _class_of(self, desc: Descriptor) -> tuple[Any, Any]:
        found = self._classes.get(desc.full_name)
        if found is None:
            found = (GetMessageClass(desc), converter(desc))
            self._classes[desc.full_name] = found
        return found

    def _for_writer(self, schema_id: int, indexes: tuple[int, ...]) -> tuple[Any, Any]:
        key = (schema_id, indexes)
        found = self._by_writer.get(key)
        if found is not None:
            return found
        if schema_id == self.reader.schema_id:
            written = message_by_indexes(self._file, indexes)
        else:
            schema = self.writer_schema(schema_id, FMT)
            try:
                writer_file = self._load_file(schema.schema_str, schema_id, schema)
            except Exception as e:
                raise BadRecord(f"the writer schema does not load as Protobuf ({e})",
                                schema_id=schema_id) from None
            written = message_by_indexes(writer_file, indexes)
        if written.full_name != self._default.full_name:
            # One column has one shape: a record of another message cannot become its row.
            error = BadRecord(
                f"written as message {written.full_name}, but rows are read as "
                f"{self._default.full_name} (set "
                f"{self.opts.format_option.replace('Format', 'RecordName')} to the message to "
                "read)", schema_id=schema_id)
            raise error
        target = self._default
        found = self._class_of(target)
        self._by_writer[key] = found
        return found

    def _decode_one(self, data: bytes) -> Any:
        schema_id, payload = split_header(data)
        try:
            indexes, used = read_indexes(payload)
        except BadRecord as e:
            e.schema_id = schema_id
            raise
        try:
            cls, convert = self._for_writer(schema_id, indexes)
        except BadRecord as e:
            e.schema_id = schema_id
            raise
        message = cls()
        try:
            message.ParseFromString(payload[used:])
        except (DecodeError, RuntimeError, ValueError) as e:
            raise BadRecord(f"the payload does not parse as {cls.DESCRIPTOR.full_name} ({e})",
                            schema_id=schema_id) from None
        return convert(message)


def _all_messages(fd: FileDescriptor) -> list[Descriptor]:
    out: list[Descriptor] = []

    def walk(desc: Descriptor) -> None:
        out.append(desc)
        for nested in desc.nested_types:
            walk(nested)
    for desc in fd.message_types_by_name.values():
        walk(desc)
    return out
