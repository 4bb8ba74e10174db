"""Avro binary encoding of whole Arrow columns, for the schemas derived from Spark types.

The sink's Avro records were written one Python dict at a time (fastavro's writer per row),
which bounded an Avro write at a fraction of a write of ready-made bytes. Avro's binary
encoding is a concatenation of per-field encodings, so a column can be encoded field by field
with Arrow and numpy: zig-zag varints for ints, longs, lengths and union indexes, little-endian
floats, length-prefixed bytes, big-endian two's complement for decimals in `fixed`, arrays and
maps as one block of items and a 0. The per-field encodings are then joined element-wise into
one binary value per record. No Python object per value.

Only the schemas `spark_schemas.avro_schema` derives are encoded here (they follow the Arrow
types exactly); `encode_column` returns None for anything else, and the caller writes those
rows with fastavro.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_EMPTY = pa.scalar(b"", pa.large_binary())
_ZERO = pa.scalar(b"\x00", pa.large_binary())
_ONE = pa.scalar(b"\x02", pa.large_binary())  # zig-zag 1: the union's second branch


class NotColumnar(Exception):
    """A schema or type this module does not encode; the caller uses fastavro."""


def encode_column(column: pa.Array, schema: Any, prefix: bytes) -> list[bytes | None]:
    """`prefix` + the Avro encoding of each row of struct `column` under record `schema`;
    None for a null row. Raises NotColumnar for what it does not cover."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if len(column) == 0:
        return []
    live = column.is_valid() if column.null_count else None
    encoded = _encode_value(column, schema, live)
    if prefix:
        encoded = pc.binary_join_element_wise(pa.scalar(prefix, pa.large_binary()), encoded,
                                              _EMPTY)
    if column.null_count:
        encoded = pc.if_else(column.is_valid(), encoded, pa.scalar(None, pa.large_binary()))
    return encoded.to_pylist()


def _join(*parts: Any) -> pa.Array:
    return pc.binary_join_element_wise(*parts, _EMPTY)


def _binary(data: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """A large_binary array whose i-th value is the next lengths[i] bytes of `data`."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return pa.Array.from_buffers(pa.large_binary(), len(lengths),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def zigzag_varints(values: np.ndarray) -> pa.Array:
    """Avro's int/long encoding of each value: zig-zag, then 7 bits a byte, low bits first."""
    v = values.astype(np.int64, copy=False)
    zz = ((v << 1) ^ (v >> 63)).view(np.uint64)
    lengths = np.ones(len(zz), dtype=np.int64)
    for k in range(1, 10):
        lengths += zz >= np.uint64(1 << (7 * k))
    width = int(lengths.max()) if len(lengths) else 1
    out = np.empty((len(zz), width), dtype=np.uint8)
    for k in range(width):
        byte = ((zz >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        out[:, k] = byte | np.where(k < lengths - 1, np.uint8(0x80), np.uint8(0))
    data = out[np.arange(width) < lengths[:, None]]
    return _binary(data, lengths)


def _fixed_width(data: np.ndarray, width: int) -> pa.Array:
    """`data`'s bytes as values of `width` bytes each."""
    raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    return _binary(raw, np.full(len(raw) // width, width, dtype=np.int64))


def _branches(schema: Any) -> tuple[bool, Any]:
    """(nullable, the non-null schema) of a field type as avro_schema derives it."""
    if isinstance(schema, list):
        if len(schema) != 2 or schema[0] != "null":
            raise NotColumnar(f"union {schema}")
        return True, schema[1]
    return False, schema


def _encode(arr: pa.Array, schema: Any, live: pa.Array | None) -> pa.Array:
    """`live`: where the enclosing structs are not null (None: everywhere). A null elsewhere
    stands for nothing (it only mirrors a null parent) and is encoded as a placeholder."""
    nullable, inner = _branches(schema)
    if inner == "null":
        return pa.array([b""] * len(arr), pa.large_binary())
    if not nullable:
        if arr.null_count:
            nulls = arr.is_null() if live is None else pc.and_(arr.is_null(), live)
            if pc.any(nulls).as_py():
                raise NotColumnar("a null in a non-nullable field")  # fastavro names it
        return _encode_value(arr, inner, live)
    body = _encode_value(arr, inner, live if not arr.null_count else (
        arr.is_valid() if live is None else pc.and_(arr.is_valid(), live)))
    if not arr.null_count:
        return _join(_ONE, body)
    return pc.if_else(arr.is_valid(), _join(_ONE, body), _ZERO)


def _encode_value(arr: pa.Array, schema: Any, live: pa.Array | None = None) -> pa.Array:
    kind = schema.get("type") if isinstance(schema, dict) else schema
    logical = schema.get("logicalType") if isinstance(schema, dict) else None
    t = arr.type
    if kind == "record":
        if not pa.types.is_struct(t):
            raise NotColumnar(f"record over {t}")
        children = arr.flatten()  # the struct's offset applied
        names = [t.field(i).name for i in range(t.num_fields)]
        fields = schema["fields"]
        if [f["name"] for f in fields] != names:
            raise NotColumnar("record fields differ from the struct's")
        if not fields:
            return pa.array([b""] * len(arr), pa.large_binary())
        parts = [_encode(child, f["type"], live) for child, f in zip(children, fields)]
        return parts[0] if len(parts) == 1 else _join(*parts)
    if kind == "boolean" and pa.types.is_boolean(t):
        values = arr.fill_null(False).to_numpy(zero_copy_only=False).astype(np.uint8)
        return _fixed_width(values, 1)
    if kind in ("int", "long") and (pa.types.is_integer(t) or pa.types.is_date32(t)
                                    or pa.types.is_timestamp(t)):
        if logical == "date" and not pa.types.is_date32(t):
            raise NotColumnar("date over a non-date")
        if logical in ("timestamp-micros", "local-timestamp-micros"):
            if not (pa.types.is_timestamp(t) and t.unit == "us"):
                raise NotColumnar("timestamp-micros over another unit")
        elif logical is not None and logical != "date":
            raise NotColumnar(f"logical type {logical}")
        if pa.types.is_date32(t):
            arr = arr.cast(pa.int32())  # days since the epoch
        ints = arr.cast(pa.int64()) if not pa.types.is_int64(arr.type) else arr
        return zigzag_varints(ints.fill_null(0).to_numpy(zero_copy_only=False))
    if kind in ("float", "double") and pa.types.is_floating(t):
        dtype = "<f4" if kind == "float" else "<f8"
        values = arr.fill_null(0).to_numpy(zero_copy_only=False).astype(dtype)
        return _fixed_width(values, 4 if kind == "float" else 8)
    if kind in ("string", "bytes") and (pa.types.is_string(t) or pa.types.is_large_string(t)
                                        or pa.types.is_binary(t) or pa.types.is_large_binary(t)):
        data = arr.cast(pa.large_binary()).fill_null(b"")
        lengths = pc.binary_length(data).to_numpy(zero_copy_only=False)
        return _join(zigzag_varints(lengths), data)
    if kind == "fixed" and logical == "decimal" and pa.types.is_decimal128(t):
        if t.scale != schema.get("scale") or t.precision > schema.get("precision", 0):
            raise NotColumnar("decimal scale or precision differs")
        size = int(schema["size"])
        filled = arr.fill_null(pa.scalar(0, t)) if arr.null_count else arr
        filled = pa.concat_arrays([filled])  # its own buffers, offset 0
        raw = np.frombuffer(filled.buffers()[1], dtype=np.uint8)[: 16 * len(filled)]
        big_endian = raw.reshape(-1, 16)[:, :size][:, ::-1]
        return _fixed_width(np.ascontiguousarray(big_endian), size)
    if kind == "array" and (pa.types.is_list(t) or pa.types.is_large_list(t)):
        return _blocks(arr, _encode(arr.flatten(), schema["items"], None))
    if kind == "map" and pa.types.is_map(t):
        # as list<struct<key, value>>: its flatten() gives the entries of the non-null maps
        as_list = arr.cast(pa.large_list(pa.struct([t.key_field, t.item_field])))
        keys, values = as_list.flatten().flatten()
        items = _join(_encode_value(keys, "string"), _encode(values, schema["values"], None))
        return _blocks(as_list, items)
    raise NotColumnar(f"Avro {kind} over {t}")


def _blocks(arr: pa.Array, items: pa.Array) -> pa.Array:
    """Avro's array/map encoding per row: one block (count, items) and the closing 0; an empty
    (or null) one is the 0 alone. `items` holds the encoded items of every row in order."""
    counts = arr.value_lengths().fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    per_row = pc.binary_join(pa.LargeListArray.from_arrays(pa.array(offsets), items), _EMPTY)
    block = _join(zigzag_varints(counts), per_row, _ZERO)
    return pc.if_else(pa.array(counts > 0), block, _ZERO)
