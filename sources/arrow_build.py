"""Arrow arrays of the source's columns, built from Python lists through their buffers.

`pa.array`, `pa.scalar`, `pa.repeat` and pyarrow.compute called with a Python scalar first ask
pyarrow's pandas shim whether their input is a pandas object, and that imports pandas: 0.4-0.6
s of CPU in every fresh Python worker, more than a small batch's whole read task
(docs/performance.md, "Where a fresh worker's first task goes"). Nothing here goes through
that shim: lists become `array` buffers (C loops), arithmetic is numpy's, and the arrays are
assembled with `pa.Array.from_buffers`. A binary column's offsets cost about 1 us a row more
than pa.array's own C loop, so a column of more than `SMALL_ROWS` rows, or one built once pandas
is loaded anyway, is pa.array's: a long-lived worker reading big batches pays the import once
and then reads at pa.array's speed.
"""

from __future__ import annotations

import array
import itertools
import sys

import numpy as np
import pyarrow as pa

#: A binary column's 32-bit offsets end here; a longer column is left to pa.array.
_MAX_OFFSET = 2**31 - 1
#: Up to this many rows a binary column is built through its buffers while pandas is not loaded:
#: a small batch's few milliseconds against the import's 0.4-0.6 s of CPU.
SMALL_ROWS = 5_000


def _validity(present: list[bool]) -> pa.Buffer:
    return pa.py_buffer(np.packbits(np.array(present, dtype=bool), bitorder="little"))


def binary(values: list) -> pa.Array:
    """A `binary` array of bytes and None."""
    if len(values) > SMALL_ROWS or "pandas" in sys.modules:
        return pa.array(values, pa.binary())
    return binary_from_buffers(values)


def binary_from_buffers(values: list) -> pa.Array:
    n = len(values)
    nulls = values.count(None)
    if nulls == n and n:
        return pa.nulls(n, pa.binary())
    if nulls:
        present = [v is not None for v in values]
        data = b"".join(itertools.compress(values, present))
        lengths = [len(v) if ok else 0 for v, ok in zip(values, present)]
        validity = _validity(present)
    else:
        data = b"".join(values)
        lengths = list(map(len, values))
        validity = None
    if len(data) > _MAX_OFFSET:
        return pa.array(values, pa.binary())
    offsets = array.array("i", [0])
    offsets.extend(itertools.accumulate(lengths))
    return pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(offsets),
                                                  pa.py_buffer(data)], null_count=nulls)


def int64(values: list[int]) -> pa.Array:
    return pa.Array.from_buffers(pa.int64(), len(values),
                                 [None, pa.py_buffer(array.array("q", values))])


def timestamps_us(millis: list[int], arrow_type: pa.DataType) -> pa.Array:
    """Kafka's millisecond timestamps as an array of `arrow_type` (microseconds)."""
    micros = np.frombuffer(array.array("q", millis), dtype=np.int64) * 1000
    return pa.Array.from_buffers(arrow_type, len(millis), [None, pa.py_buffer(micros)])


def int32_minus_one(values: list[int]) -> pa.Array:
    """librdkafka's timestamp types (0 none, 1 CreateTime, 2 LogAppendTime) as Spark's (-1,
    0, 1)."""
    shifted = np.frombuffer(array.array("i", values), dtype=np.int32) - 1
    return pa.Array.from_buffers(pa.int32(), len(values), [None, pa.py_buffer(shifted)])


def repeated_string(text: str, n: int) -> pa.Array:
    data = text.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(data))
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(data * n)])


def repeated_int32(value: int, n: int) -> pa.Array:
    return pa.Array.from_buffers(pa.int32(), n,
                                 [None, pa.py_buffer(array.array("i", [value]) * n)])
