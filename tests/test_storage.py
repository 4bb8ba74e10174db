"""Storage configurations that make concurrent Delta commits unsafe are refused at query start
(sinks/delta/storage.py); and, on a real S3 protocol server (moto), concurrent delta-rs
committers never lose a commit under the configuration that is accepted."""

from __future__ import annotations

import json
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connectors.core.options import OptionError
from connectors.core.paths import resolve_location
from sinks.delta.storage import check_delta_storage

TABLE = "s3://bucket/t"


@pytest.fixture(autouse=True)
def _no_aws_env(monkeypatch):
    for name in ("AWS_S3_ALLOW_UNSAFE_RENAME", "AWS_S3_LOCKING_PROVIDER", "AWS_CONDITIONAL_PUT"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    "options, named",
    [
        ({"AWS_S3_ALLOW_UNSAFE_RENAME": "true"}, "storage.AWS_S3_ALLOW_UNSAFE_RENAME"),
        ({"aws_s3_allow_unsafe_rename": "1"}, "storage.AWS_S3_ALLOW_UNSAFE_RENAME"),  # as Spark passes it
        ({"AWS_S3_LOCKING_PROVIDER": "dynamodb"}, "storage.AWS_S3_LOCKING_PROVIDER"),
        ({"AWS_CONDITIONAL_PUT": "disabled"}, "storage.AWS_CONDITIONAL_PUT"),
        ({"conditional_put": "disabled"}, "storage.CONDITIONAL_PUT"),
    ],
)
def test_unsafe_commit_configurations_are_refused_naming_the_option(options, named):
    with pytest.raises(OptionError) as e:
        check_delta_storage("path", TABLE, options)
    assert e.value.option == named
    assert named in str(e.value) and TABLE in str(e.value)


def test_the_environment_counts_as_delta_rs_reads_it_too(monkeypatch):
    monkeypatch.setenv("AWS_S3_ALLOW_UNSAFE_RENAME", "true")
    with pytest.raises(OptionError, match="storage.AWS_S3_ALLOW_UNSAFE_RENAME.*environment as AWS_S3_ALLOW_UNSAFE_RENAME"):
        check_delta_storage("path", TABLE, {})
    # An explicit option wins over the environment, as in delta-rs.
    check_delta_storage("path", TABLE, {"AWS_S3_ALLOW_UNSAFE_RENAME": "false"})


@pytest.mark.parametrize(
    "uri, options",
    [
        (TABLE, {}),
        ("s3a://bucket/t", {"AWS_S3_ALLOW_UNSAFE_RENAME": "false", "AWS_CONDITIONAL_PUT": "etag"}),
        (TABLE, {"AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "s3cret-never-shown"}),
        # Stores with native create-if-absent, and local paths: nothing to refuse.
        ("gs://bucket/t", {"AWS_S3_ALLOW_UNSAFE_RENAME": "true"}),
        ("/tmp/t", {"AWS_S3_LOCKING_PROVIDER": "dynamodb"}),
    ],
)
def test_safe_configurations_are_accepted(uri, options):
    check_delta_storage("path", uri, options)


def test_a_refusal_shows_no_secret():
    secret = "wJalrXUtnFEMI-never-shown-7f3a"
    with pytest.raises(OptionError) as e:
        check_delta_storage("path", TABLE, {"AWS_SECRET_ACCESS_KEY": secret, "AWS_ACCESS_KEY_ID": "AKIA",
                                            "AWS_S3_LOCKING_PROVIDER": "dynamodb"})
    assert secret not in str(e.value) and secret not in repr(e.value)


# -- on a real S3 protocol server ---------------------------------------------------------------


@pytest.fixture(scope="module")
def s3():
    """moto's S3 server, reached through storage options only (this process's AWS
    environment is left alone)."""
    from integration_tests.support.s3 import s3_server

    with s3_server(set_env=False) as server:
        yield server


def _table(s3, rows=(0,)):
    from deltalake import write_deltalake

    uri = f"s3://{s3.create_bucket()}/t"
    write_deltalake(uri, pa.table({"x": list(rows)}), storage_options=s3.storage_options)
    return uri


def _add(s3, uri: str, name: str, rows: list[int]):
    """A Parquet file written with pyarrow, through the same storage options (as the sink's
    tasks do), and its add action."""
    from deltalake.transaction import AddAction

    loc = resolve_location("path", uri, s3.storage_options)
    path = f"{loc.path}/{name}"
    pq.write_table(pa.table({"x": rows}), path, filesystem=loc.fs)
    size = loc.fs.get_file_info(path).size
    return AddAction(name, size, {}, int(time.time() * 1000), True, json.dumps({"numRecords": len(rows)}))


def _commit(table, add, app_id: str, version: int) -> None:
    from deltalake import CommitProperties, Transaction

    table.create_write_transaction(
        [add], mode="append", schema=table.schema(),
        commit_properties=CommitProperties(app_transactions=[Transaction(app_id, version)]),
    )


def _log(s3, uri: str) -> list[dict]:
    bucket = uri[len("s3://"):].split("/")[0]
    loc = resolve_location("path", uri, s3.storage_options)
    commits = sorted(k for k in s3.list_keys(bucket, "t/_delta_log/") if k.endswith(".json"))
    out = []
    for key in commits:
        with loc.fs.open_input_stream(f"{bucket}/{key}") as f:
            out.append([json.loads(line) for line in f.read().decode().splitlines() if line])
    return out


def test_moto_honours_if_none_match(s3):
    """The condition the commit relies on: a second create of one key is refused with 412.
    (moto checks it, then writes, without a lock: not atomic as on AWS, see
    integration_tests/support/s3.py; the tests below are as strong as that.)"""
    import botocore.exceptions

    client = s3._client()
    bucket = s3.create_bucket()
    client.put_object(Bucket=bucket, Key="k", Body=b"1", IfNoneMatch="*")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        client.put_object(Bucket=bucket, Key="k", Body=b"2", IfNoneMatch="*")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert client.get_object(Bucket=bucket, Key="k")["Body"].read() == b"1"


def test_the_servers_conditional_create_is_atomic_as_on_s3(s3, monkeypatch):
    """Two creators of one key with `If-None-Match: *` at once: exactly one wins, the other gets
    412, however slow the server's write. moto looks the key up, then writes, without a lock;
    the suite's server serializes conditional writes (integration_tests/support/s3.py), so the
    Delta commit tests are as strong as S3 makes them. Failed before: with a write slowed by
    0.3 s both creators won (and test_concurrent_committers_never_lose_a_commit lost a commit
    under load)."""
    import botocore.exceptions
    from moto.s3.models import S3Backend

    original = S3Backend.put_object

    def slow_put(self, *args, **kwargs):
        time.sleep(0.3)  # the window between moto's look-up and its write, widened
        return original(self, *args, **kwargs)

    monkeypatch.setattr(S3Backend, "put_object", slow_put)
    bucket = s3.create_bucket()
    barrier = threading.Barrier(2)
    outcomes: list[object] = []

    def create(body: bytes) -> None:
        client = s3._client()
        barrier.wait()
        try:
            client.put_object(Bucket=bucket, Key="v", Body=body, IfNoneMatch="*")
            outcomes.append("created")
        except botocore.exceptions.ClientError as e:
            outcomes.append(e.response["ResponseMetadata"]["HTTPStatusCode"])

    threads = [threading.Thread(target=create, args=(b,)) for b in (b"a", b"b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(outcomes, key=str) == [412, "created"], outcomes


def test_a_stale_committer_is_retried_not_lost(s3):
    """Two writers read version 0; the second commits after the first took version 1: its
    conditional PUT of version 1 is refused, delta-rs retries at version 2. Both batches (rows
    and txn actions) are in the table. Deterministic: no timing involved."""
    from deltalake import DeltaTable

    uri = _table(s3)
    first = DeltaTable(uri, storage_options=s3.storage_options)
    second = DeltaTable(uri, storage_options=s3.storage_options)
    _commit(first, _add(s3, uri, "a.parquet", [1]), "writer-a", 0)
    _commit(second, _add(s3, uri, "b.parquet", [2]), "writer-b", 0)
    table = DeltaTable(uri, storage_options=s3.storage_options)
    assert table.version() == 2
    assert sorted(table.to_pyarrow_table()["x"].to_pylist()) == [0, 1, 2]
    assert table.transaction_version("writer-a") == 0 and table.transaction_version("writer-b") == 0
    log = _log(s3, uri)
    assert [[a["txn"]["appId"] for a in c if "txn" in a] for c in log] == [[], ["writer-a"], ["writer-b"]]


def test_concurrent_committers_never_lose_a_commit(s3):
    """Four threads, each with its own DeltaTable read at the same version, commit at once
    (a barrier), three rounds: every commit is in the log once, at consecutive versions."""
    from deltalake import DeltaTable

    uri = _table(s3)
    writers, rounds = 4, 3
    errors: list[BaseException] = []
    for r in range(rounds):
        adds = [_add(s3, uri, f"r{r}-w{w}.parquet", [100 * r + w]) for w in range(writers)]
        tables = [DeltaTable(uri, storage_options=s3.storage_options) for _ in range(writers)]
        assert len({t.version() for t in tables}) == 1
        barrier = threading.Barrier(writers)

        def commit(w: int) -> None:
            try:
                barrier.wait()
                _commit(tables[w], adds[w], f"writer-{w}", r)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=commit, args=(w,)) for w in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    assert not errors, errors
    table = DeltaTable(uri, storage_options=s3.storage_options)
    assert table.version() == writers * rounds
    assert sorted(table.to_pyarrow_table()["x"].to_pylist()) == sorted(
        [0] + [100 * r + w for r in range(rounds) for w in range(writers)])
    txns = [(a["txn"]["appId"], a["txn"]["version"]) for c in _log(s3, uri) for a in c if "txn" in a]
    assert sorted(txns) == sorted((f"writer-{w}", r) for r in range(rounds) for w in range(writers))
    for w in range(writers):
        assert table.transaction_version(f"writer-{w}") == rounds - 1


def test_conditional_put_disabled_fails_every_commit(s3):
    """Why AWS_CONDITIONAL_PUT=disabled is refused at start: with deltalake 1.6.6 even the
    table's first commit fails (guards the docstring's claim against a deltalake upgrade)."""
    from deltalake import write_deltalake

    uri = f"s3://{s3.create_bucket()}/t"
    with pytest.raises(OSError, match="conditional put is disabled"):
        write_deltalake(uri, pa.table({"x": [1]}),
                        storage_options={**s3.storage_options, "AWS_CONDITIONAL_PUT": "disabled"})
