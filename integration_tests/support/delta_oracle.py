"""Reading a Delta table back independently of the sink: rows through deltalake (and polars),
and the `txn` actions straight from the JSON commit files of `_delta_log`."""

from __future__ import annotations

import collections
import json
import os

from deltalake import DeltaTable


def table_records(path: str) -> list[tuple[int, int, str, str]]:
    """(partition, offset, key, value) of every row, duplicates kept."""
    t = DeltaTable(path).to_pyarrow_table(columns=["partition", "offset", "key", "value"])
    return sorted(zip(*(t.column(c).to_pylist() for c in ["partition", "offset", "key", "value"])))


def txn_versions(path: str) -> dict[str, int]:
    """appId -> highest version of the `txn` actions in the log, read from the JSON files."""
    versions: dict[str, int] = {}
    log_dir = os.path.join(path, "_delta_log")
    for name in sorted(os.listdir(log_dir)):
        if not name.endswith(".json"):
            continue
        with open(os.path.join(log_dir, name)) as f:
            for line in f:
                action = json.loads(line)
                if "txn" in action:
                    app, version = action["txn"]["appId"], action["txn"]["version"]
                    versions[app] = max(version, versions.get(app, -1))
    return versions


def last_spark_batch(checkpoint: str) -> int:
    """The last batch id Spark logged as committed in the checkpoint."""
    commits = [int(n) for n in os.listdir(os.path.join(checkpoint, "commits")) if n.isdigit()]
    return max(commits)


def assert_exactly_once(path: str, expected) -> None:
    """`expected`: the input Records; each must be in the table once, by partition and offset."""
    assert_records_once(table_records(path), expected)


def assert_records_once(got: list[tuple], expected, context: str = "") -> None:
    """`got`: (partition, offset, key, value) rows read from a table; `expected`: the input
    Records. No row twice, none missing; `context` (e.g. a log tail) ends each message."""
    counts = collections.Counter((p, o) for p, o, _, _ in got)
    dupes = [k for k, n in counts.items() if n > 1]
    assert not dupes, f"{len(dupes)} records written more than once, e.g. {dupes[:5]}\n{context}"
    want = sorted((r.partition, r.offset, r.key.decode(), r.value.decode()) for r in expected)
    missing = sorted(set(want) - set(got))
    assert not missing, f"{len(missing)} records missing, e.g. {missing[:5]}\n{context}"
    assert sorted(got) == want


def orphan_files(path: str) -> list[str]:
    """Parquet files in the table directory that the table does not reference."""
    referenced = {os.path.normpath(u.replace("file://", "")) for u in DeltaTable(path).file_uris()}
    found = []
    for dirpath, _, names in os.walk(path):
        if "_delta_log" in dirpath:
            continue
        found += [os.path.normpath(os.path.join(dirpath, n)) for n in names if n.endswith(".parquet")]
    return sorted(set(found) - referenced)
