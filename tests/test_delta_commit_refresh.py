"""A `delta-eos` append commit brings the kept table up to date once: the already-committed
check and the commit share it. Each update lists the table's log; two a batch cost the
latency row of issue 39 some 30 ms a batch (docs/performance.md). Real Delta tables, the
template driven as Spark drives it (tests/test_delta_upsert.py's way)."""

from __future__ import annotations

import os
import pickle
import uuid

import pyarrow as pa
from deltalake import DeltaTable
from pyspark.sql.types import StringType, StructField, StructType

from integration_tests.support.task_context import task  # noqa: F401  (a fixture)
from sinks.delta import DeltaEosDataSource

SCHEMA = StructType([StructField("key", StringType()), StructField("value", StringType())])


def _batch(writer, task, batch_id: int) -> list:
    shipped = pickle.loads(pickle.dumps(writer))  # as Spark ships it to the tasks
    task(batch_id, 0)
    rows = pa.RecordBatch.from_pylist([{"key": f"k{batch_id}", "value": "v"}])
    return [shipped.write(iter([rows]))]


def test_an_append_commit_brings_the_table_up_to_date_once(tmp_path, task, monkeypatch):
    checkpoint = str(tmp_path / "ck")
    os.makedirs(os.path.join(checkpoint, "commits"))
    with open(os.path.join(checkpoint, "metadata"), "w") as f:  # Spark's, at query start
        f.write('{"id":"%s"}' % uuid.uuid4())
    options = {"path": str(tmp_path / "t"), "checkpointlocation": checkpoint, "appid": "a"}
    writer = DeltaEosDataSource(options).streamWriter(SCHEMA, False)
    writer.commit(_batch(writer, task, 0), 0)  # creates the table

    updates = []
    real = DeltaTable.update_incremental

    def counted(self, *args, **kwargs):
        updates.append(self.version())
        return real(self, *args, **kwargs)

    monkeypatch.setattr(DeltaTable, "update_incremental", counted)
    messages = _batch(writer, task, 1)
    updates.clear()  # the tasks' own look-ups are theirs
    writer.commit(messages, 1)

    assert len(updates) == 1, f"the table was brought up to date {len(updates)} times"
    table = DeltaTable(options["path"])
    assert table.transaction_version("a") == 1
    assert sorted(table.to_pyarrow_table().column("key").to_pylist()) == ["k0", "k1"]
