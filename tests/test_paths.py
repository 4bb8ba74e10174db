"""Locations as Spark users write them: mapped once, or refused at query start naming the option."""

from __future__ import annotations

import os

import pyarrow.fs as pafs
import pytest

from connectors.core.options import OptionError, Options
from connectors.core.paths import normalise, resolve_location
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
    import connectors.core.paths as paths

    monkeypatch.setattr(paths, "DBFS_MOUNT", str(tmp_path))
    assert normalise("path", "dbfs:/tables/t") == f"{tmp_path}/tables/t"


def test_hdfs_without_libhdfs_fails_naming_the_option():
    with pytest.raises(OptionError, match="checkpointLocation.*libhdfs"):
        resolve_location("checkpointLocation", "hdfs://127.0.0.1:1/ck")


def test_s3a_checkpoint_log_on_a_real_s3_server():
    """s3a:// (what Hadoop-based Spark users write) on moto's S3 server: records are written
    in place (no move on an object store), a second decision is detected, GC removes all."""
    from integration_tests.support.s3 import s3_server

    with s3_server() as s3:
        bucket = s3.create_bucket()
        loc = resolve_location("checkpointLocation", f"s3a://{bucket}/ck")
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


# -- storage options: one set for pyarrow (data files) and delta-rs (the log) --------------------


def _s3_args(loc) -> dict:
    """What pyarrow's S3FileSystem was built with (its pickling arguments)."""
    assert isinstance(loc.fs, pafs.S3FileSystem)
    return loc.fs.__reduce__()[1][0]


@pytest.fixture
def no_aws_env(monkeypatch):
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)


@pytest.mark.parametrize("spelling", [str.upper, str.lower])
def test_s3_storage_options_reach_pyarrow(no_aws_env, spelling):
    """delta-rs's keys, as written (`storage.AWS_...`) or as Spark passes them (lower-cased)."""
    options = {spelling(k): v for k, v in {
        "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE", "AWS_SECRET_ACCESS_KEY": "s3cret-Key-7f3a",
        "AWS_SESSION_TOKEN": "tok-123", "AWS_REGION": "eu-west-3",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_ALLOW_HTTP": "true",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "true",
    }.items()}
    loc = resolve_location("path", "s3a://bucket/t/", options)
    assert (loc.uri, loc.path) == ("s3://bucket/t", "bucket/t")
    args = _s3_args(loc)
    assert (args["access_key"], args["secret_key"], args["session_token"]) == ("AKIAEXAMPLE", "s3cret-Key-7f3a", "tok-123")
    assert (args["region"], args["endpoint_override"], args["scheme"]) == ("eu-west-3", "127.0.0.1:9000", "http")
    assert args["force_virtual_addressing"] and args["allow_delayed_open"]
    assert "s3cret-Key-7f3a" not in repr(loc)


@pytest.mark.parametrize(
    "options, endpoint, scheme",
    [
        ({"aws_endpoint": "https://minio.local:9000"}, "minio.local:9000", "https"),  # object_store's alias
        ({"endpoint": "minio.local:9000", "allow_http": "true"}, "minio.local:9000", "http"),
        ({"endpoint": "minio.local:9000"}, "minio.local:9000", "https"),
    ],
)
def test_s3_endpoint_spellings(no_aws_env, options, endpoint, scheme):
    args = _s3_args(resolve_location("path", "s3://bucket/t",
                                     {"AWS_REGION": "us-east-1", **options}))
    assert (args["endpoint_override"], args["scheme"]) == (endpoint, scheme)


def test_s3_options_fall_back_to_the_environment(monkeypatch, no_aws_env):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9001")
    monkeypatch.setenv("AWS_REGION", "us-west-2")
    args = _s3_args(resolve_location("path", "s3://bucket/t",
                                     {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}))
    assert (args["endpoint_override"], args["scheme"], args["region"]) == ("127.0.0.1:9001", "http", "us-west-2")
    args = _s3_args(resolve_location("path", "s3://bucket/t",
                                     {"aws_endpoint_url": "http://127.0.0.1:9002"}))
    assert args["endpoint_override"] == "127.0.0.1:9002"  # an option beats the environment
    assert not args["access_key"]  # no keys given: pyarrow's own credential chain


def test_half_a_key_pair_is_refused_without_showing_the_secret(no_aws_env):
    with pytest.raises(OptionError) as e:
        resolve_location("path", "s3://bucket/t",
                         {"aws_secret_access_key": "s3cret-Key-7f3a", "aws_region": "us-east-1"})
    assert e.value.option == "storage.AWS_SECRET_ACCESS_KEY"
    assert "storage.AWS_ACCESS_KEY_ID" in str(e.value) and "s3cret-Key-7f3a" not in str(e.value)


def test_a_profile_pyarrow_cannot_take_is_refused(no_aws_env, monkeypatch):
    with pytest.raises(OptionError, match=r"storage.AWS_PROFILE.*AWS_PROFILE in the environment"):
        resolve_location("path", "s3://bucket/t", {"AWS_PROFILE": "prod", "AWS_REGION": "us-east-1"})
    monkeypatch.setenv("AWS_PROFILE", "prod")  # the same profile for both writers: fine
    resolve_location("path", "s3://bucket/t", {"AWS_PROFILE": "prod", "AWS_REGION": "us-east-1"})


def test_azure_storage_options_reach_pyarrow():
    loc = resolve_location("path", "abfss://data@acct.dfs.core.windows.net/tables/t",
                  {"azure_storage_sas_token": "?sv=2024&sig=s3cret", "AZURE_STORAGE_ACCOUNT_NAME": "acct"})
    assert isinstance(loc.fs, pafs.AzureFileSystem) and loc.path == "data/tables/t"
    args = loc.fs.__reduce__()[1][0]
    assert (args["account_name"], args["sas_token"], args["account_key"]) == ("acct", "sv=2024&sig=s3cret", "")
    with pytest.raises(OptionError, match="one of the account key and the SAS token"):
        resolve_location("path", "abfss://data@acct.dfs.core.windows.net/t",
                {"account_key": "a2V5", "sas_token": "sv=1"})


def test_gcs_service_account_pyarrow_cannot_take_is_refused(monkeypatch):
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    with pytest.raises(OptionError, match=r"storage.GOOGLE_SERVICE_ACCOUNT.*GOOGLE_APPLICATION_CREDENTIALS"):
        resolve_location("path", "gs://bucket/t", {"google_service_account": "/keys/sa.json"})


def test_storage_options_alone_reach_a_real_s3_server(no_aws_env):
    """No AWS environment at all: pyarrow writes and reads through the options only, and
    delta-rs reads what pyarrow wrote with the same options."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import DeltaTable, write_deltalake

    from integration_tests.support.s3 import s3_server

    with s3_server(set_env=False) as s3:
        assert not [n for n in os.environ if n.startswith("AWS_")]
        bucket = s3.create_bucket()
        options = {k.lower(): v for k, v in s3.storage_options.items()}  # as Spark passes them
        loc = resolve_location("path", f"s3a://{bucket}/t", options)
        pq.write_table(pa.table({"x": [1, 2]}), f"{loc.path}/f.parquet", filesystem=loc.fs)
        assert pq.read_table(f"{loc.path}/f.parquet", filesystem=loc.fs)["x"].to_pylist() == [1, 2]
        write_deltalake(loc.uri, pa.table({"x": [3]}), storage_options=options)
        assert DeltaTable(loc.uri, storage_options=options).to_pyarrow_table()["x"].to_pylist() == [3]
        assert s3.list_keys(bucket, "t/f.parquet") == ["t/f.parquet"]
