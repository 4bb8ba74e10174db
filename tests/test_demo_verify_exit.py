"""The demo's verification reads its Delta table and then the process ends: it must end with
the verdict's exit code. deltalake 1.6's `to_pyarrow_table()` reads the files through its
Python file system handler, and a process that exits right after such a read aborted in
`std::terminate` ("terminate called without an active exception", exit -6) in most runs here
(a one-thread scan through the same handler still did in 1 of 12 in a suite run); the demo
then printed PASSED and exited -6 (seen in the suite's
`test_demo_upsert_with_chaos_ends_with_the_fold`)."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
from deltalake import write_deltalake

RUNS = 10  # through deltalake's handler, 26-39 of 40 such runs aborted; on one thread, 3 of 60


def _table(path: str) -> None:
    for batch in range(4):  # a table of several files, as a demo's is
        rows = range(batch * 50, batch * 50 + 50)
        write_deltalake(path, pa.table({
            "id": pa.array(rows, pa.int64()), "lsn": pa.array(rows, pa.int64()),
            "name": pa.array([f"n{i}" for i in rows]), "email": pa.array([f"e{i}" for i in rows]),
            "source_partition": pa.array([0] * 50, pa.int32()),
            "source_offset": pa.array(rows, pa.int64()),
            "event_id": pa.array([f"ev{i}" for i in rows]),
            "amount_cents": pa.array(rows, pa.int64()),
        }), mode="append")


def _exit_codes(code: str) -> list[int]:
    return [subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120).returncode
            for _ in range(RUNS)]


def test_a_process_that_ends_right_after_reading_the_table_exits_cleanly(tmp_path):
    path = str(tmp_path / "table")
    _table(path)
    upsert = f"from connectors.demo import verify; assert len(verify.upsert_rows({path!r})) == 200"
    append = f"from connectors.demo import verify; assert len(verify.delta_rows({path!r})) == 200"
    assert _exit_codes(upsert) == [0] * RUNS
    assert _exit_codes(append) == [0] * RUNS
