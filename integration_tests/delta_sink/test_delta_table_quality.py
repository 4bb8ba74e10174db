"""Tables readers want: file statistics, file sizes, compaction, log checkpoints, commit
metadata and table properties, on real Delta tables (deltalake reads them back).

Most cases drive `DeltaSink` through the template's steps in this process (the same calls
Spark's tasks and driver make); one real streaming query runs them all together.
"""

from __future__ import annotations

import json
import logging
import os
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from connectors.core.options import Options
from integration_tests.support.delta_oracle import assert_exactly_once, orphan_files, txn_versions
from integration_tests.support.kafka_data import create_topic, produce, unique_topic
from integration_tests.support.streaming import run_to_end, earliest_stream
from sinks.delta import DeltaOptions, DeltaSink
from sinks.two_phase_commit import SinkSettings, TaskInfo

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("part", pa.string())])


def _sink(tmp_path, **options: str) -> DeltaSink:
    opts = Options({"path": str(tmp_path / "t"), "checkpointLocation": str(tmp_path / "ck"),
                    "appId": "quality", **options})
    settings = SinkSettings.from_options("delta-eos", opts)
    return DeltaSink(settings, DeltaOptions.parse(opts, settings), SCHEMA)


def _rows(start: int, n: int, parts: tuple[str, ...] = ("a",)) -> pa.RecordBatch:
    ids = list(range(start, start + n))
    return pa.record_batch(
        {"id": ids, "name": [f"name-{i:06d}" for i in ids], "part": [parts[i % len(parts)] for i in ids]},
        schema=SCHEMA,
    )


def _batch(sink: DeltaSink, batch_id: int, *record_batches: pa.RecordBatch) -> dict:
    """One micro-batch with one task: prepare, then the driver's commit."""
    txn = sink.beginTransaction(TaskInfo(batch_id, 0, 0))
    for rb in record_batches:
        sink.invoke(txn, rb)
    handle = sink.preCommit(txn)
    sink.commit(batch_id, {0: handle})
    return handle


def _log_actions(table: str, kind: str) -> list[dict]:
    log_dir = os.path.join(table, "_delta_log")
    found = []
    for name in sorted(os.listdir(log_dir)):
        if name.endswith(".json"):
            with open(os.path.join(log_dir, name)) as f:
                found += [a[kind] for a in map(json.loads, f) if kind in a]
    return found


def test_files_roll_over_at_max_records_per_file(tmp_path):
    sink = _sink(tmp_path, maxRecordsPerFile="10", partitionBy="part")
    handle = _batch(sink, 0, _rows(0, 25, ("a", "b")), _rows(25, 13, ("a", "b")))
    rows_per_file = sorted(a["rows"] for a in handle["adds"])
    # 19 rows of part a and 19 of b: 10 + 9 each, whichever writes they arrived in
    assert rows_per_file == [9, 9, 10, 10]
    table = DeltaTable(str(tmp_path / "t"))
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == list(range(38))
    assert max(json.loads(a["stats"])["numRecords"] for a in _log_actions(str(tmp_path / "t"), "add")) == 10


def test_files_roll_over_once_max_bytes_per_file_are_written(tmp_path):
    cap = 16 * 1024
    sink = _sink(tmp_path, maxBytesPerFile="16k")
    handle = _batch(sink, 0, *(_rows(i * 500, 500) for i in range(8)))
    sizes = [a["size"] for a in handle["adds"]]
    assert len(sizes) > 1
    # every file but the last reached the cap with its last write, and none started past it
    assert all(s >= cap for s in sizes[:-1])
    assert all(os.path.getsize(tmp_path / "t" / a["file"]) == a["size"] for a in handle["adds"])
    assert DeltaTable(str(tmp_path / "t")).to_pyarrow_table().num_rows == 4000


def test_add_actions_carry_statistics_that_match_the_data(tmp_path):
    sink = _sink(tmp_path, maxRecordsPerFile="100")
    _batch(sink, 0, _rows(0, 250))
    table = DeltaTable(str(tmp_path / "t"))
    adds = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    assert len(adds) == 3
    data = table.to_pyarrow_table()
    for add in adds:
        uri = os.path.join(str(tmp_path / "t"), add["path"])
        ids = pq.read_table(uri).column("id")
        assert (add["min.id"], add["max.id"]) == (pc.min(ids).as_py(), pc.max(ids).as_py())
        assert add["null_count.id"] == 0
    assert data.num_rows == 250


def test_values_too_long_for_the_footer_keep_the_files_statistics(tmp_path):
    """A Kafka value over 4 KiB makes pyarrow leave a write's min/max out of the footer; the
    file still gets bounds for every column (the long column's from the writer itself)."""
    sink = _sink(tmp_path)
    short = _rows(0, 50)
    long_names = [("m" if i % 2 else "c") * 5000 + str(i) for i in range(50, 60)]
    long = pa.record_batch({"id": list(range(50, 60)), "name": long_names,
                            "part": ["a"] * 10}, schema=SCHEMA)
    _batch(sink, 0, short, long, _rows(60, 5))
    table = DeltaTable(str(tmp_path / "t"))
    (add,) = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    assert (add["min.id"], add["max.id"]) == (0, 64)
    names = table.to_pyarrow_table().column("name")
    low, high = pc.min(names).as_py(), pc.max(names).as_py()
    assert low.startswith(add["min.name"]) and len(add["min.name"]) == 32
    assert add["max.name"] >= high and add["max.name"][:31] == high[:31]
    # and a reader skipping on it still finds the long rows
    found = table.to_pyarrow_table(filters=[("name", "=", long_names[3])])
    assert found.column("id").to_pylist() == [53]


def test_commit_metadata_and_table_properties(tmp_path):
    sink = _sink(tmp_path, userMetadata="nightly backfill", **{
        "delta.appendOnly": "true", "delta.logRetentionDuration": "interval 7 days"})
    _batch(sink, 0, _rows(0, 3))
    _batch(sink, 1, _rows(3, 3))
    table = DeltaTable(str(tmp_path / "t"))
    config = table.metadata().configuration
    assert config["delta.appendOnly"] == "true"
    assert config["delta.logRetentionDuration"] == "interval 7 days"
    assert [h.get("userMetadata") for h in table.history()] == ["nightly backfill"] * 2
    # properties are set at creation only: a later query with others is told, not obeyed
    other = _sink(tmp_path, appId="other", **{"delta.appendOnly": "false"})
    seen: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: seen.append(record.getMessage())  # the sink's logger may not propagate
    logger = logging.getLogger("kafka_eos.sink.delta")
    logger.addHandler(handler)
    try:
        other.open()
    finally:
        logger.removeHandler(handler)
    assert any("delta.appendOnly" in m and "only when delta-eos creates" in m for m in seen), seen
    assert DeltaTable(str(tmp_path / "t")).metadata().configuration["delta.appendOnly"] == "true"


def test_log_checkpoints_follow_the_checkpoint_interval_and_keep_the_txn(tmp_path):
    sink = _sink(tmp_path, **{"delta.checkpointInterval": "3"})
    for b in range(7):
        _batch(sink, b, _rows(b * 2, 2))
    log_dir = tmp_path / "t" / "_delta_log"
    checkpoints = sorted(p.name for p in log_dir.glob("*.checkpoint.parquet"))
    assert len(checkpoints) == 2, checkpoints
    assert (log_dir / "_last_checkpoint").exists()
    # a reader starting from the checkpoint still finds the sink's last batch
    for p in log_dir.glob("0000000000000000000[0-4].json"):
        p.unlink()  # what log retention removes once a checkpoint covers it
    table = DeltaTable(str(tmp_path / "t"))
    assert table.transaction_version("quality") == 6
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == list(range(14))


def test_compaction_rewrites_small_files_without_touching_the_txn(tmp_path):
    sink = _sink(tmp_path, compactEvery="4", orphanFileRetention="0s")
    for b in range(4):
        _batch(sink, b, _rows(b * 5, 5))
    before = DeltaTable(str(tmp_path / "t"))
    assert len(before.file_uris()) == 4
    sink._maybe_compact(before)  # what open() does before a batch's tasks
    table = DeltaTable(str(tmp_path / "t"))
    assert table.history(limit=1)[0]["operation"] == "OPTIMIZE"
    assert len(table.file_uris()) == 1
    assert table.transaction_version("quality") == 3
    _batch(sink, 4, _rows(20, 5))  # the sink goes on committing after the compaction
    sink._maybe_compact(DeltaTable(str(tmp_path / "t")))  # one commit since: not yet
    table = DeltaTable(str(tmp_path / "t"))
    assert table.history(limit=1)[0]["operation"] == "WRITE"
    assert table.transaction_version("quality") == 4
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == list(range(25))
    # the compacted-away files are tombstones, not orphans: time travel still reads them
    sink.cleanupAbandoned()
    old = DeltaTable(str(tmp_path / "t"), version=before.version())
    assert sorted(old.to_pyarrow_table().column("id").to_pylist()) == list(range(20))


def test_a_streaming_query_writes_capped_statistically_described_compacted_files(spark, bootstrap, tmp_path):
    """All of it through a real query: 80 records, 10 per trigger (8 batches) into a table
    partitioned by source partition, at most 3 rows per file, compacted every 4 commits, a
    log checkpoint every 2, commit metadata on each batch."""
    topic = unique_topic("quality")
    create_topic(bootstrap, topic, 2)
    expected = produce(bootstrap, topic, 2, 40)
    table = str(tmp_path / "t")
    query = (
        earliest_stream(spark, bootstrap, topic, "10")
        .selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value",
                    "partition", "offset")
        .writeStream.format("delta-eos")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .option("path", table)
        .option("partitionBy", "partition")
        .option("maxRecordsPerFile", "3")
        .option("compactEvery", "4")
        .option("delta.checkpointInterval", "2")
        .option("userMetadata", "quality-run")
        .trigger(availableNow=True)
        .start()
    )
    run_to_end(query, 300)
    assert_exactly_once(table, expected)
    (version,) = txn_versions(table).values()
    assert version == query.lastProgress["batchId"]
    writes = [h for h in DeltaTable(table).history() if h["operation"] == "WRITE"]
    assert writes and all(h.get("userMetadata") == "quality-run" for h in writes)
    assert any(h["operation"] == "OPTIMIZE" for h in DeltaTable(table).history())
    sink_adds = [a for a in _log_actions(table, "add") if a["dataChange"]]
    assert max(json.loads(a["stats"])["numRecords"] for a in sink_adds) <= 3
    assert all("minValues" in json.loads(a["stats"]) for a in sink_adds)
    assert list((tmp_path / "t" / "_delta_log").glob("*.checkpoint.parquet"))
    # files no longer in the snapshot are the compacted-away ones (tombstones), not orphans
    removed = {os.path.normpath(os.path.join(table, unquote(r["path"])))
               for r in _log_actions(table, "remove")}
    assert removed and set(orphan_files(table)) == removed


def test_the_orphan_sweep_takes_tombstones_from_the_log_checkpoint(tmp_path):
    """With compaction, the files it replaced stay on storage as tombstones: the sweep must
    keep them, and finds them in the last log checkpoint and the commits after it, not by
    reading the whole log (which log clean-up may have shortened, as here)."""
    sink = _sink(tmp_path, compactEvery="3", orphanFileRetention="0s",
                 **{"delta.checkpointInterval": "2"})
    for b in range(3):
        _batch(sink, b, _rows(b * 4, 4))
    sink._maybe_compact(DeltaTable(str(tmp_path / "t")))
    for b in range(3, 6):
        _batch(sink, b, _rows(b * 4, 4))
    table = DeltaTable(str(tmp_path / "t"))
    tombstones = {r["path"] for r in _log_actions(str(tmp_path / "t"), "remove")}
    assert len(tombstones) == 3
    log_dir = tmp_path / "t" / "_delta_log"
    last = json.loads((log_dir / "_last_checkpoint").read_text())["version"]
    assert last > table.history()[-4]["version"]  # a checkpoint after the compaction
    for p in log_dir.glob("*.json"):
        if int(p.name[:20]) <= last:
            p.unlink()  # what log clean-up does once a checkpoint covers them
    txn = sink.beginTransaction(TaskInfo(6, 0, 0))  # a task killed before its handle was logged
    sink.invoke(txn, _rows(100, 2))
    orphan = sink.preCommit(txn)["adds"][0]["file"]

    sink.cleanupAbandoned()
    on_disk = {p.name for p in (tmp_path / "t").glob("*.parquet")}
    assert orphan not in on_disk
    assert tombstones <= on_disk
    assert {os.path.basename(u) for u in DeltaTable(str(tmp_path / "t")).file_uris()} <= on_disk
    assert sorted(DeltaTable(str(tmp_path / "t")).to_pyarrow_table().column("id").to_pylist()) == list(range(24))


def test_the_table_kept_between_batches_sees_other_writers_and_a_table_made_anew(tmp_path):
    """The driver keeps the table it loaded and brings it up to date between batches: it sees
    another writer's commits, and a table deleted and created again under the running driver
    is loaded afresh, never extended from a version that is gone."""
    import shutil

    from deltalake import write_deltalake

    path = str(tmp_path / "t")
    sink = _sink(tmp_path)
    _batch(sink, 0, _rows(0, 2))
    write_deltalake(path, pa.Table.from_batches([_rows(100, 1)]), mode="append")  # another writer
    _batch(sink, 1, _rows(2, 2))
    table = DeltaTable(path)
    assert table.version() == 2 and table.transaction_version("quality") == 1
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == [0, 1, 2, 3, 100]

    shutil.rmtree(path)  # an operator drops the table and another job creates it again
    write_deltalake(path, pa.Table.from_batches([_rows(200, 1)]), mode="append")
    assert not sink.isCommitted(2)
    _batch(sink, 2, _rows(4, 2))
    table = DeltaTable(path)
    assert table.version() == 1 and table.transaction_version("quality") == 2
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == [4, 5, 200]


def test_expired_log_files_are_cleaned_up_with_the_checkpoint_not_at_every_commit(tmp_path):
    """delta-rs would list the whole log after every commit to look for expired files; the
    sink leaves that to the commit that writes the log checkpoint, as delta-spark does."""
    import time

    sink = _sink(tmp_path, **{"delta.checkpointInterval": "3",
                              "delta.logRetentionDuration": "interval 1 second"})
    log_dir = tmp_path / "t" / "_delta_log"

    def commits() -> list[int]:
        return sorted(int(p.name[:20]) for p in log_dir.glob("*.json"))

    for b in range(4):  # versions 0-3, a checkpoint at 2
        _batch(sink, b, _rows(b, 1))
    time.sleep(1.5)  # versions 0-3 expire
    _batch(sink, 4, _rows(4, 1))  # version 4: no checkpoint, no clean-up
    assert commits() == [0, 1, 2, 3, 4]
    _batch(sink, 5, _rows(5, 1))  # version 5: checkpoint, and the expired commits go
    assert (log_dir / f"{5:020d}.checkpoint.parquet").exists()
    assert commits()[0] > 0
    table = DeltaTable(str(tmp_path / "t"))
    assert table.transaction_version("quality") == 5
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == list(range(6))


def test_a_young_table_is_compacted_once_it_has_compact_every_commits(tmp_path):
    """A driver that starts on a table finds its last compaction in the history; a table with
    none yet counts from its first commit (not 'N commits ago')."""
    from sinks.delta import housekeeping

    sink = _sink(tmp_path, compactEvery="5")
    for b in range(2):
        _batch(sink, b, _rows(b, 1))
    housekeeping._LAST_COMPACTION.clear()  # a driver process starting on this table
    sink._maybe_compact(DeltaTable(str(tmp_path / "t")))
    assert "OPTIMIZE" not in [h["operation"] for h in DeltaTable(str(tmp_path / "t")).history()]
    for b in range(2, 5):
        _batch(sink, b, _rows(b, 1))
    sink._maybe_compact(DeltaTable(str(tmp_path / "t")))
    assert DeltaTable(str(tmp_path / "t")).history(limit=1)[0]["operation"] == "OPTIMIZE"
