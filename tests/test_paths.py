"""Locations as Spark users write them: mapped once, or refused at query start naming the option."""

from __future__ import annotations

import os

import pyarrow.fs as pafs
import pytest

from connectors.options import OptionError, Options
from connectors.paths import normalise, resolve
from sinks.two_phase_commit import SinkSettings
from sinks.txn_log import TransactionLog


@pytest.mark.parametrize(
    "value, expected",
    [
        ("file:/abs/ck", "/abs/ck"),  # the Hadoop-style URI Spark itself prints
        ("file:///abs/ck", "/abs/ck"),
        ("file://localhost/abs/ck/", "/abs/ck"),
        ("/abs/ck/", "/abs/ck"),
        ("s3a://bucket/ck", "s3://bucket/ck"),
        ("s3n://bucket/ck/", "s3://bucket/ck"),
        ("S3A://bucket/ck", "s3://bucket/ck"),
        ("s3://bucket/ck", "s3://bucket/ck"),
        ("gs://bucket/ck", "gs://bucket/ck"),
        ("abfss://c@acct.dfs.core.windows.net/ck", "abfss://c@acct.dfs.core.windows.net/ck"),
        ("hdfs://nn:8020/ck", "hdfs://nn:8020/ck"),
    ],
)
def test_normalise_maps_what_spark_users_write(value, expected):
    assert normalise("checkpointLocation", value) == expected


def test_relative_paths_are_made_absolute_on_the_driver(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert normalise("path", "tables/t") == str(tmp_path / "tables" / "t")


def test_a_file_uri_is_never_taken_for_a_relative_path(tmp_path, monkeypatch):
    """`file:/x` used to become `<cwd>/file:/x`: each executor's own disk, so duplicates."""
    monkeypatch.chdir(tmp_path)
    settings = SinkSettings.from_options("s", Options({"checkpointLocation": f"file:{tmp_path}/ck"}))
    assert settings.checkpoint_location == f"{tmp_path}/ck"
    TransactionLog(settings.checkpoint_location).record_done(0)
    assert os.path.exists(tmp_path / "ck" / "eos-sink" / "0" / "done")
    assert not os.path.exists(tmp_path / "file:")


def test_file_uri_with_a_remote_host_is_refused():
    with pytest.raises(OptionError, match="checkpointLocation.*host 'nn'"):
        normalise("checkpointLocation", "file://nn/abs/ck")


def test_unknown_scheme_names_the_option_and_what_works():
    with pytest.raises(OptionError) as e:
        SinkSettings.from_options("s", Options({"checkpointLocation": "wasb://c@a/ck"}))
    msg = str(e.value)
    assert "checkpointLocation" in msg and "wasb://" in msg
    assert all(s in msg for s in ("s3://", "s3a://", "file:/", "hdfs://", "dbfs:/"))


def test_dbfs_without_the_mount_is_a_clear_error():
    assert not os.path.isdir("/dbfs")
    with pytest.raises(OptionError, match=r"path.*/dbfs mount"):
        normalise("path", "dbfs:/tables/t")


def test_dbfs_goes_through_the_mount(monkeypatch, tmp_path):
    import connectors.paths as paths

    monkeypatch.setattr(paths, "DBFS_MOUNT", str(tmp_path))
    assert normalise("path", "dbfs:/tables/t") == f"{tmp_path}/tables/t"


def test_hdfs_without_libhdfs_fails_naming_the_option():
    with pytest.raises(OptionError, match="checkpointLocation.*libhdfs"):
        resolve("checkpointLocation", "hdfs://127.0.0.1:1/ck")


def test_s3a_checkpoint_log_on_a_real_s3_server():
    """s3a:// (what Hadoop-based Spark users write) on moto's S3 server: records are written
    in place (no move on an object store), a second decision is detected, GC removes all."""
    from connectors.testing.s3 import s3_server

    with s3_server() as s3:
        bucket = s3.create_bucket()
        loc = resolve("checkpointLocation", f"s3a://{bucket}/ck")
        assert isinstance(loc.fs, pafs.S3FileSystem) and loc.path == f"{bucket}/ck"
        txlog = TransactionLog(f"s3a://{bucket}/ck")
        txlog.record_prepared(0, 0, 0, {"h": 0})
        txlog.record_decision(0, {0: {"h": 0}})
        txlog.record_committed(0, [0])
        txlog.record_done(0)
        keys = [k for k in s3.list_keys(bucket) if not k.endswith("/")]
        assert all(k.startswith("ck/eos-sink/0/") for k in keys) and len(keys) == 4
        assert not [k for k in keys if ".tmp-" in k]
        assert TransactionLog(f"s3a://{bucket}/ck").state(0).decided() == {0: {"h": 0}}
        txlog.garbage_collect(1)
        assert [k for k in s3.list_keys(bucket) if not k.endswith("/")] == []
        assert TransactionLog(f"s3a://{bucket}/ck").pending() == []
