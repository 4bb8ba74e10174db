"""The source's columns built through buffers (sources/arrow_build.py) equal what pa.array
builds, and a read task's batch no longer imports pandas into its worker."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pyarrow as pa
import pytest

from sources import arrow_build
from sources.range_reader import TIMESTAMP_TYPE


def _bytes_or_none(rng: random.Random, nulls: float) -> bytes | None:
    return None if rng.random() < nulls else rng.randbytes(rng.randint(0, 12))


@pytest.mark.parametrize("n", [0, 1, 7, 1000])
@pytest.mark.parametrize("nulls", [0.0, 0.3, 1.0])
def test_a_binary_column_equals_pa_array(n, nulls):
    rng = random.Random(n * 10 + int(nulls * 10))
    values = [_bytes_or_none(rng, nulls) for _ in range(n)]
    built = arrow_build.binary_from_buffers(values)
    assert built.equals(pa.array(values, pa.binary()))
    assert built.null_count == values.count(None)
    built.validate(full=True)


def test_numeric_and_repeated_columns_equal_pa_arrays():
    stamps = [1_700_000_000_123, -1, 0]
    assert arrow_build.int64([5, -3, 2**40]).equals(pa.array([5, -3, 2**40], pa.int64()))
    assert arrow_build.timestamps_us(stamps, TIMESTAMP_TYPE).equals(
        pa.array([s * 1000 for s in stamps], pa.int64()).cast(TIMESTAMP_TYPE))
    assert arrow_build.int32_minus_one([0, 1, 2]).equals(pa.array([-1, 0, 1], pa.int32()))
    for text, n in (("orders", 3), ("", 2), ("ü-topic", 0)):
        column = arrow_build.repeated_string(text, n)
        column.validate(full=True)
        assert column.equals(pa.array([text] * n, pa.string()))
    assert arrow_build.repeated_int32(7, 4).equals(pa.array([7] * 4, pa.int32()))


#: A fresh Python, as a forked worker is: the batch of one range and of two packed ranges,
#: then which of pandas and pyarrow.compute the building imported.
FRESH_WORKER = """
import json, sys
from sources import packed_reader, range_reader
from sources.offsets import OffsetRange
one = range_reader._Columns(include_headers=False)
mixed = packed_reader._MixedColumns(include_headers=False)
for columns in (one, mixed):
    columns.keys, columns.values = [None, b"k"], [b"v1", None]
    columns.offsets, columns.stamps, columns.ts_types = [4, 5], [1000, 2000], [1, 1]
mixed.runs = [("a", 0, 1), ("b", 1, 1)]
batches = [one.to_batch(OffsetRange("t", 3, 4, 6)), mixed.batch()]
imported = sorted(m for m in ("pandas", "pyarrow.compute") if m in sys.modules)
print(json.dumps({"rows": [b.to_pylist() for b in batches], "imported": imported}, default=str))
"""


def test_a_read_tasks_batch_imports_neither_pandas_nor_pyarrow_compute():
    out = subprocess.run([sys.executable, "-c", FRESH_WORKER], capture_output=True, text=True,
                         timeout=120, check=True)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["imported"] == [], "building a batch imported " + ", ".join(seen["imported"])
    one, mixed = seen["rows"]
    assert [(r["topic"], r["partition"], r["offset"], r["timestampType"]) for r in one] == [
        ("t", 3, 4, 0), ("t", 3, 5, 0)]
    assert [(r["topic"], r["partition"]) for r in mixed] == [("a", 0), ("b", 1)]
    assert [r["key"] for r in one] == [None, "b'k'"] and [r["value"] for r in one][1] is None
