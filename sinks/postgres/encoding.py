"""Arrow -> PostgreSQL: the column types `createTable` gives Arrow types, and COPY's CSV input
written by pyarrow a column at a time (no Python object per row)."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from connectors.core.options import OptionError
from sinks.postgres.options import FORMAT_NAME


def pg_type(t: pa.DataType) -> str | None:
    """The column type `createTable` gives an Arrow type, or None if the sink cannot write it."""
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_uint8(t):
        return "smallint"
    if pa.types.is_int32(t) or pa.types.is_uint16(t):
        return "integer"
    if pa.types.is_int64(t) or pa.types.is_uint32(t):
        return "bigint"
    if pa.types.is_uint64(t):
        return "numeric(20)"
    if pa.types.is_float16(t) or pa.types.is_float32(t):
        return "real"
    if pa.types.is_float64(t):
        return "double precision"
    if pa.types.is_decimal(t):
        return f"numeric({t.precision},{t.scale})"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "text"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "bytea"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "timestamp with time zone" if t.tz else "timestamp without time zone"
    if pa.types.is_time(t):
        return "time without time zone"
    return None


def check_columns(schema: pa.Schema, type_names: dict[str, str] | None = None) -> None:
    """Every column must have a PostgreSQL counterpart: fail at query start, naming it (and
    its type as the user knows it: `type_names`, e.g. Spark's, else Arrow's)."""
    for f in schema:
        if pg_type(f.type) is None:
            shown = (type_names or {}).get(f.name, str(f.type))
            raise OptionError(
                f.name,
                f"column '{f.name}' has type {shown}, which {FORMAT_NAME} does not write; it "
                "writes booleans, integers, floats, decimals, strings, binary, dates, times and "
                "timestamps (serialise nested values, e.g. to_json(), first)",
            )


_HEX = np.array([list(f"{i:02x}".encode()) for i in range(256)], dtype=np.uint8)


def bytea_hex(arr: pa.Array) -> pa.Array:
    r"""binary -> bytea's text form '\x<hex>', a column at a time (no Python object per value)."""
    arr = arr.cast(pa.large_binary())
    n = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset : arr.offset + n + 1]
    data_buf = arr.buffers()[2]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.empty(0, np.uint8)
    body = _HEX[data[offsets[0] : offsets[-1]]].reshape(-1)
    starts = np.concatenate([[0], np.cumsum(2 + 2 * np.diff(offsets))]).astype(np.int64)
    out = np.empty(int(starts[-1]), dtype=np.uint8)
    prefix = np.zeros(len(out), dtype=bool)
    prefix[starts[:-1]] = prefix[starts[:-1] + 1] = True
    out[starts[:-1]], out[starts[:-1] + 1] = ord("\\"), ord("x")
    out[~prefix] = body
    text = pa.Array.from_buffers(pa.large_string(), n, [None, pa.py_buffer(starts), pa.py_buffer(out)])
    return pc.if_else(arr.is_null(), pa.scalar(None, pa.large_string()), text)


def to_csv(batch: pa.RecordBatch) -> bytes:
    """COPY's CSV input for one Arrow batch, written by pyarrow: strings are always quoted
    (so "" is an empty string) and nulls are bare empty fields (NULL to COPY)."""
    columns = [
        bytea_hex(c) if pa.types.is_binary(c.type) or pa.types.is_large_binary(c.type) else c
        for c in batch.columns
    ]
    out = io.BytesIO()
    pacsv.write_csv(
        pa.RecordBatch.from_arrays(columns, names=batch.schema.names),
        out,
        pacsv.WriteOptions(include_header=False),
    )
    return out.getvalue()
