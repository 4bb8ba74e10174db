"""sinks/delta/protocol_checks.py on real Delta tables: made with deltalake where it can make them,
else from a hand-written first commit (protocol + metaData), which is a real Delta table too.

Every allowed feature is also appended to for real (a pyarrow file added through
create_write_transaction, as the sink does): the allow-list must never let a query start on a
table deltalake then refuses to commit to."""

from __future__ import annotations

import json
import os
import time
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import CommitProperties, DeltaTable, Field, Schema, Transaction
from deltalake.exceptions import CommitFailedError
from deltalake.schema import StructType
from deltalake.transaction import AddAction

from connectors.core.options import OptionError
from sinks.delta.errors import NotNullViolation
from sinks.delta.protocol_checks import (
    check_not_null,
    check_writable,
    not_null_columns,
)

ID = {"name": "id", "type": "long", "nullable": True, "metadata": {}}
MAPPED_ID = {"name": "id", "type": "long", "nullable": True, "metadata": {
    "delta.columnMapping.id": 1, "delta.columnMapping.physicalName": "col-1"}}
#: Reader-and-writer features (listed in both lists), PROTOCOL.md, Valid Feature Names.
READER_WRITER = {"columnMapping", "deletionVectors", "timestampNtz", "v2Checkpoint",
                 "vacuumProtocolCheck", "typeWidening", "variantType", "variantShredding"}


# -- helpers -----------------------------------------------------------------------------------


def created(tmp_path, fields=None, configuration=None) -> str:
    path = str(tmp_path / "t")
    DeltaTable.create(path, Schema(fields or [Field("id", "long")]), configuration=configuration)
    return path


def hand_made(tmp_path, *, reader=1, writer=2, features=(), configuration=None,
              fields=None) -> str:
    """A table whose first commit is written here: the protocol deltalake will not create."""
    path = str(tmp_path / "t")
    os.makedirs(f"{path}/_delta_log")
    protocol: dict = {"minReaderVersion": reader, "minWriterVersion": writer}
    if reader == 3:
        protocol["readerFeatures"] = [f for f in features if f in READER_WRITER]
    if writer == 7:
        protocol["writerFeatures"] = list(features)
    now = int(time.time() * 1000)
    metadata = {
        "id": str(uuid.uuid4()),
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps({"type": "struct", "fields": fields or [ID]}),
        "partitionColumns": [],
        "configuration": configuration or {},
        "createdTime": now,
    }
    with open(f"{path}/_delta_log/00000000000000000000.json", "w") as f:
        for action in ({"commitInfo": {"timestamp": now, "operation": "CREATE TABLE"}},
                       {"protocol": protocol}, {"metaData": metadata}):
            f.write(json.dumps(action) + "\n")
    return path


def append_one_row(path: str) -> int:
    """What the sink does: a Parquet file written with pyarrow, added with a txn action."""
    table = DeltaTable(path)
    name = f"part-test-{uuid.uuid4().hex}.parquet"
    pq.write_table(pa.table({"id": pa.array([7], pa.int64())}), f"{path}/{name}")
    add = AddAction(name, os.path.getsize(f"{path}/{name}"), {}, int(time.time() * 1000), True,
                    '{"numRecords":1}')
    table.create_write_transaction(
        [add], mode="append", schema=table.schema(),
        commit_properties=CommitProperties(app_transactions=[Transaction("test", 0)]),
    )
    return DeltaTable(path).version()


def refusal(path: str) -> str:
    with pytest.raises(OptionError) as caught:
        check_writable(DeltaTable(path), path)
    assert caught.value.option == "path"
    message = str(caught.value)
    assert path in message
    return message


def assert_allowed(path: str) -> None:
    check_writable(DeltaTable(path), path)
    before = DeltaTable(path).version()
    assert append_one_row(path) == before + 1  # deltalake commits to it, too


# -- legacy protocol (writer versions 2 to 6) ----------------------------------------------------


def test_plain_table_is_allowed(tmp_path):
    path = created(tmp_path)
    assert DeltaTable(path).protocol().min_writer_version == 2
    assert_allowed(path)


def test_append_only_table_is_allowed(tmp_path):
    assert_allowed(created(tmp_path, configuration={"delta.appendOnly": "true"}))


def test_not_null_column_is_allowed_and_reported(tmp_path):
    path = created(tmp_path, [Field("id", "long", nullable=False), Field("v", "string")])
    assert_allowed(path)
    assert not_null_columns(DeltaTable(path)) == ("id",)


def test_column_invariant_is_refused_naming_the_column(tmp_path):
    invariant = json.dumps({"expression": {"expression": "id > 3"}})
    path = created(tmp_path, [Field("id", "long", metadata={"delta.invariants": invariant})])
    message = refusal(path)
    assert "'id'" in message and "invariant" in message and "id > 3" in message


def test_nested_column_invariant_is_refused_naming_its_path(tmp_path):
    invariant = json.dumps({"expression": {"expression": "s.x > 0"}})
    path = hand_made(tmp_path, fields=[ID, {
        "name": "s", "nullable": True, "metadata": {},
        "type": {"type": "struct", "fields": [
            {"name": "x", "type": "long", "nullable": True,
             "metadata": {"delta.invariants": invariant}}]},
    }])
    assert "'s.x'" in refusal(path)


def test_check_constraint_is_refused_naming_it_and_its_expression(tmp_path):
    path = created(tmp_path)
    DeltaTable(path).alter.add_constraint({"id_positive": "id > 0"})
    assert DeltaTable(path).protocol().min_writer_version == 3
    message = refusal(path)
    assert "CHECK constraint 'id_positive'" in message and "id > 0" in message
    assert "delta-spark" in message and "DROP CONSTRAINT id_positive" in message


def test_writer_version_3_without_constraints_is_allowed(tmp_path):
    assert_allowed(created(tmp_path, configuration={"delta.minWriterVersion": "3"}))


def test_generated_column_is_refused_naming_the_column(tmp_path):
    path = created(tmp_path, [Field("id", "long"),
                              Field("twice", "long", metadata={"delta.generationExpression": "id * 2"})])
    assert DeltaTable(path).protocol().min_writer_version == 4
    message = refusal(path)
    assert "'twice'" in message and "generated column" in message and "id * 2" in message


def test_change_data_feed_is_allowed(tmp_path):
    path = created(tmp_path, configuration={"delta.enableChangeDataFeed": "true"})
    assert DeltaTable(path).protocol().min_writer_version == 4
    assert_allowed(path)


def test_column_mapping_by_name_is_refused(tmp_path):
    path = created(tmp_path, configuration={"delta.columnMapping.mode": "name"})
    message = refusal(path)
    assert "columnMapping" in message and "delta.columnMapping.mode=name" in message


def test_column_mapping_by_id_is_refused(tmp_path):
    path = hand_made(tmp_path, reader=2, writer=5,
                     configuration={"delta.columnMapping.mode": "id",
                                    "delta.columnMapping.maxColumnId": "1"},
                     fields=[MAPPED_ID])
    assert "delta.columnMapping.mode=id" in refusal(path)


def test_writer_version_5_with_column_mapping_off_is_allowed(tmp_path):
    path = created(tmp_path, configuration={"delta.minWriterVersion": "5"})
    assert DeltaTable(path).protocol().min_writer_version == 5
    assert_allowed(path)


def test_identity_column_is_refused_naming_the_column(tmp_path):
    path = hand_made(tmp_path, writer=6, fields=[{
        "name": "id", "type": "long", "nullable": True,
        "metadata": {"delta.identity.start": 1, "delta.identity.step": 1,
                     "delta.identity.allowExplicitInsert": False},
    }])
    message = refusal(path)
    assert "'id' is an identity column" in message and "identityColumns" in message


def test_writer_version_6_is_refused_as_identity_columns(tmp_path):
    """Writer version 6 implies identity columns, which deltalake cannot commit to."""
    path = created(tmp_path, configuration={"delta.minWriterVersion": "6"})
    message = refusal(path)
    assert "identityColumns" in message and "minWriterVersion=6" in message
    with pytest.raises(CommitFailedError):
        append_one_row(path)


def test_writer_version_beyond_7_is_refused(tmp_path):
    message = refusal(hand_made(tmp_path, reader=1, writer=8))
    assert "minWriterVersion=8" in message


def test_set_transaction_retention_is_refused_saying_why(tmp_path):
    path = created(tmp_path, configuration={"delta.setTransactionRetentionDuration": "interval 1 days"})
    message = refusal(path)
    assert "delta.setTransactionRetentionDuration" in message
    assert "txn" in message and "duplicates" in message


def test_every_problem_is_named(tmp_path):
    path = created(tmp_path, [Field("id", "long"),
                              Field("g", "long", metadata={"delta.generationExpression": "id"})],
                   configuration={"delta.setTransactionRetentionDuration": "interval 1 days"})
    DeltaTable(path).alter.add_constraint({"c1": "id > 0"})
    message = refusal(path)
    assert "'g'" in message and "'c1'" in message and "setTransactionRetentionDuration" in message


# -- table features (writer version 7) -----------------------------------------------------------


def test_deletion_vectors_are_allowed(tmp_path):
    path = created(tmp_path, configuration={"delta.enableDeletionVectors": "true"})
    assert "deletionVectors" in DeltaTable(path).protocol().writer_features
    assert_allowed(path)


def test_deltalake_default_features_are_allowed(tmp_path):
    """deltalake's own v7 tables list invariants, appendOnly and variantType, unused."""
    path = created(tmp_path, configuration={"delta.minReaderVersion": "3",
                                            "delta.minWriterVersion": "7"})
    assert {"invariants", "variantType"} <= set(DeltaTable(path).protocol().writer_features)
    assert_allowed(path)


def test_timestamp_ntz_is_allowed(tmp_path):
    path = created(tmp_path, [Field("id", "long"), Field("at", "timestamp_ntz")])
    assert "timestampNtz" in DeltaTable(path).protocol().writer_features
    assert_allowed(path)


@pytest.mark.parametrize("feature", [
    "appendOnly", "changeDataFeed", "deletionVectors", "timestampNtz", "v2Checkpoint",
    # listed but inactive: no metadata uses them
    "invariants", "checkConstraints", "generatedColumns", "columnMapping", "variantType",
])
def test_listed_feature_is_allowed(tmp_path, feature):
    assert_allowed(hand_made(tmp_path, reader=3, writer=7, features=[feature]))


def test_append_only_feature_active_is_allowed(tmp_path):
    assert_allowed(hand_made(tmp_path, reader=3, writer=7, features=["appendOnly"],
                             configuration={"delta.appendOnly": "true"}))


@pytest.mark.parametrize("feature", [
    "identityColumns", "rowTracking", "domainMetadata", "clustering", "icebergCompatV1",
    "icebergCompatV2", "inCommitTimestamp", "typeWidening", "vacuumProtocolCheck",
    "allowColumnDefaults", "variantShredding", "someFutureFeature",
])
def test_listed_feature_is_refused_naming_it(tmp_path, feature):
    message = refusal(hand_made(tmp_path, reader=3, writer=7, features=[feature]))
    assert f"'{feature}'" in message
    assert "delta-spark" in message


@pytest.mark.parametrize("feature", ["domainMetadata", "typeWidening", "vacuumProtocolCheck"])
def test_deltalake_itself_cannot_commit_to(tmp_path, feature):
    """Harmless for appends by the protocol, refused because deltalake 1.6.6 refuses the
    commit: if this starts to fail, deltalake learnt the feature and it may be allowed."""
    with pytest.raises(CommitFailedError):
        append_one_row(hand_made(tmp_path, reader=3, writer=7, features=[feature]))


def test_row_tracking_with_its_domain_metadata_is_refused(tmp_path):
    path = hand_made(tmp_path, reader=3, writer=7, features=["domainMetadata", "rowTracking"],
                     configuration={"delta.enableRowTracking": "true"})
    message = refusal(path)
    assert "'rowTracking'" in message and "baseRowId" in message


def test_in_commit_timestamps_enabled_is_refused(tmp_path):
    path = hand_made(tmp_path, reader=3, writer=7, features=["inCommitTimestamp"],
                     configuration={"delta.enableInCommitTimestamps": "true"})
    assert "'inCommitTimestamp'" in refusal(path)


def test_check_constraints_feature_with_a_constraint_is_refused(tmp_path):
    path = hand_made(tmp_path, reader=3, writer=7, features=["checkConstraints"],
                     configuration={"delta.constraints.small": "id < 100"})
    message = refusal(path)
    assert "'small'" in message and "id < 100" in message and "checkConstraints" in message


def test_generated_columns_feature_with_a_generated_column_is_refused(tmp_path):
    path = hand_made(tmp_path, reader=3, writer=7, features=["generatedColumns"], fields=[
        ID, {"name": "g", "type": "long", "nullable": True,
             "metadata": {"delta.generationExpression": "id + 1"}}])
    message = refusal(path)
    assert "'g'" in message and "generatedColumns" in message


def test_column_mapping_feature_in_name_mode_is_refused(tmp_path):
    path = hand_made(tmp_path, reader=3, writer=7, features=["columnMapping"],
                     configuration={"delta.columnMapping.mode": "name",
                                    "delta.columnMapping.maxColumnId": "1"},
                     fields=[MAPPED_ID])
    assert "'columnMapping'" in refusal(path)


def test_variant_column_is_refused(tmp_path):
    path = hand_made(tmp_path, reader=3, writer=7, features=["variantType"],
                     fields=[ID, {"name": "v", "type": "variant", "nullable": True, "metadata": {}}])
    message = refusal(path)
    assert "'v'" in message and "variantType" in message


# -- NOT NULL ------------------------------------------------------------------------------------


def test_not_null_columns_top_level_and_nested_in_structs(tmp_path):
    path = created(tmp_path, [
        Field("id", "long", nullable=False),
        Field("v", "string"),
        Field("s", StructType([Field("x", "long", nullable=False), Field("y", "long")])),
    ])
    assert not_null_columns(DeltaTable(path)) == ("id", "s.x")


def test_check_not_null_passes_clean_data():
    data = pa.record_batch({"id": pa.array([1, 2]), "v": pa.array([None, "b"])})
    check_not_null(data, ("id",), batch_id=3, partition_id=1)
    check_not_null(data, (), batch_id=3, partition_id=1)


def test_check_not_null_names_column_batch_and_partition():
    data = pa.record_batch({"id": pa.array([1, None, None]), "v": pa.array(["a", "b", "c"])})
    with pytest.raises(NotNullViolation) as caught:
        check_not_null(data, ("id",), batch_id=12, partition_id=4)
    e = caught.value
    assert (e.column, e.batch_id, e.partition_id, e.nulls) == ("id", 12, 4, 2)
    message = str(e)
    assert "'id'" in message and "micro-batch 12" in message and "partition 4" in message
    assert isinstance(e, ValueError)


def test_check_not_null_on_a_table_of_several_chunks():
    data = pa.Table.from_batches([pa.record_batch({"id": pa.array([1])}),
                                  pa.record_batch({"id": pa.array([None], pa.int64())})])
    with pytest.raises(NotNullViolation, match="'id'"):
        check_not_null(data, ("id",), batch_id=0, partition_id=0)


def test_check_not_null_nested_field():
    s = pa.struct([pa.field("x", pa.int64()), pa.field("y", pa.int64())])
    clean = pa.record_batch({"s": pa.array([{"x": 1, "y": None}], s)})
    check_not_null(clean, ("s.x",), batch_id=0, partition_id=0)
    child_null = pa.record_batch({"s": pa.array([{"x": 1, "y": 2}, {"x": None, "y": 2}], s)})
    with pytest.raises(NotNullViolation, match="'s.x'"):
        check_not_null(child_null, ("s.x",), batch_id=1, partition_id=0)
    # as in delta-spark, a null struct makes its NOT NULL field null
    parent_null = pa.record_batch({"s": pa.array([{"x": 1, "y": 2}, None], s)})
    with pytest.raises(NotNullViolation, match="'s.x'"):
        check_not_null(parent_null, ("s.x",), batch_id=1, partition_id=0)


def test_check_not_null_missing_column_is_a_violation_unless_empty():
    data = pa.record_batch({"v": pa.array(["a"])})
    with pytest.raises(NotNullViolation, match="no such column"):
        check_not_null(data, ("id",), batch_id=2, partition_id=0)
    check_not_null(data.slice(0, 0), ("id",), batch_id=2, partition_id=0)


def test_check_not_null_resolves_names_case_insensitively():
    data = pa.record_batch({"ID": pa.array([None], pa.int64())})
    with pytest.raises(NotNullViolation):
        check_not_null(data, ("id",), batch_id=0, partition_id=0)
