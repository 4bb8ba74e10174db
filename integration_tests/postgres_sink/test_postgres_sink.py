"""`postgres-eos` beyond crashes, against a real throwaway PostgreSQL and a real local Spark:
rows and types written once, bad options at query start, no password in any error, the
server setting exactly-once needs, and at-least-once mode."""

from __future__ import annotations

import collections
import datetime
import decimal
import uuid

import pytest

from integration_tests.support.crash_matrix import ours
from integration_tests.support.postgres import postgres_server, prepared_transactions, query
from integration_tests.support.kafka_data import create_topic, produce, unique_topic
from integration_tests.support.streaming import earliest_stream


@pytest.fixture(scope="module")
def source(spark, bootstrap):
    topic = unique_topic("pgsink")
    create_topic(bootstrap, topic, 2)
    expected = produce(bootstrap, topic, 2, 40)

    def frame(max_per_trigger: str = "30", **options: str):
        return earliest_stream(spark, bootstrap, topic, max_per_trigger, **options)

    return frame, expected


def _table() -> str:
    return f"t_{uuid.uuid4().hex[:10]}"


def _start(df, tmp_path, url: str, **options: str):
    writer = (
        df.writeStream.format("postgres-eos")
        .option("url", url)
        .option("checkpointLocation", str(tmp_path / f"ckpt-{uuid.uuid4().hex[:6]}"))
    )
    for k, v in options.items():
        writer = writer.option(k, v)
    return writer.trigger(availableNow=True).start()


def _run(df, tmp_path, url: str, **options: str):
    query_ = _start(df, tmp_path, url, **options)
    query_.awaitTermination(300)
    return query_


def _basic(frame):
    return frame().selectExpr(
        "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "partition", "offset"
    )


def _assert_once(postgres, table: str, expected) -> None:
    got = query(postgres, f'SELECT partition, "offset", key, value FROM {table}')
    counts = collections.Counter((p, o) for p, o, _, _ in got)
    dupes = [k for k, n in counts.items() if n > 1]
    assert not dupes, f"{len(dupes)} records written more than once, e.g. {dupes[:5]}"
    want = sorted((r.partition, r.offset, r.key.decode(), r.value.decode()) for r in expected)
    assert sorted(got) == want


@pytest.mark.quick  # the quick lane's end-to-end smoke of this format
def test_appends_exactly_once_and_creates_the_table(postgres, source, tmp_path):
    frame, expected = source
    table = _table()
    df = _basic(frame)
    q = _run(df, tmp_path, postgres.url(), table=table)
    assert q.exception() is None
    assert q.lastProgress["batchId"] >= 2  # 80 records, 30 per trigger: several batches
    _assert_once(postgres, table, expected)
    (checkpoint,) = tmp_path.glob("ckpt-*")
    # this query's, by its gids: the server is the session's (another test's leftovers are theirs)
    assert ours(postgres, str(checkpoint)) == {}
    columns = dict(
        query(
            postgres,
            "SELECT column_name, data_type || ':' || is_nullable FROM information_schema.columns "
            "WHERE table_name = %s",
            (table,),
        )
    )
    pg_types = {"string": "text", "int": "integer", "bigint": "bigint"}
    assert columns == {
        f.name: f"{pg_types[f.dataType.simpleString()]}:{'YES' if f.nullable else 'NO'}"
        for f in df.schema.fields
    }
    assert postgres.password not in str(q.lastProgress)


def test_types_round_trip(postgres, source, tmp_path):
    """Every column type the sink writes, nulls and empty strings included, read back by
    psycopg and compared with what the test computes from the Kafka records themselves."""
    frame, expected = source
    table = _table()
    df = frame().selectExpr(
        "key",  # binary -> bytea
        "CAST(value AS STRING) AS value",
        "CASE WHEN offset % 3 = 0 THEN NULL WHEN offset % 3 = 1 THEN '' "
        "ELSE concat('a,\"b\"', char(10), CAST(value AS STRING)) END AS tricky",
        "partition", "offset",
        "CAST(offset AS SMALLINT) AS small",
        "offset / 4.0D AS ratio",
        "CAST(offset AS FLOAT) AS single",
        "offset % 2 = 0 AS even",
        "CAST(offset AS DECIMAL(12, 3)) / 8 AS dec",
        "timestamp",
        "date_add(DATE'2024-02-27', CAST(offset AS INT)) AS day",
        "CAST(timestamp AS TIMESTAMP_NTZ) AS local_ts",
    )
    q = _run(df, tmp_path, postgres.url(), table=table)
    assert q.exception() is None
    got = {
        (r[3], r[4]): r
        for r in query(
            postgres,
            f'SELECT key, value, tricky, partition, "offset", small, ratio, single, even, dec, '
            f'timestamp, day, local_ts FROM {table}',
        )
    }
    assert len(got) == len(expected)
    for rec in expected:
        row = got[(rec.partition, rec.offset)]
        o, value = rec.offset, rec.value.decode()
        tricky = None if o % 3 == 0 else "" if o % 3 == 1 else f'a,"b"\n{value}'
        want = (
            rec.key, value, tricky, rec.partition, o, o, o / 4.0, float(o), o % 2 == 0,
            decimal.Decimal(o) / 8,
        )
        assert tuple(row[:10]) == want, (row, want)
        ts, day, local_ts = row[10:]
        assert ts.tzinfo is not None and ts.utcoffset() == datetime.timedelta(0)
        assert local_ts == ts.replace(tzinfo=None)  # session time zone is UTC
        assert day == datetime.date(2024, 2, 27) + datetime.timedelta(days=o)
    types = dict(query(
        postgres,
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = %s",
        (table,),
    ))
    assert types["key"] == "bytea" and types["timestamp"] == "timestamp with time zone"
    assert types["local_ts"] == "timestamp without time zone" and types["dec"] == "numeric"


BAD_OPTIONS = [
    ("no url", {"url": None, "table": "t"}, "url"),
    ("malformed table", {"table": "a.b.c"}, "table"),
    ("missing table, createTable=false", {"table": "nosuch_table", "createTable": "false"}, "createTable"),
]


@pytest.mark.parametrize("what,options,option", BAD_OPTIONS, ids=[b[0] for b in BAD_OPTIONS])
def test_bad_option_fails_at_query_start(postgres, source, tmp_path, what, options, option):
    frame, _ = source
    opts = {k: v for k, v in {"url": postgres.url(), **options}.items() if v is not None}
    writer = _basic(frame).writeStream.format("postgres-eos").option(
        "checkpointLocation", str(tmp_path / "ckpt")
    )
    for k, v in opts.items():
        writer = writer.option(k, v)
    with pytest.raises(Exception, match=f"Option '{option}'") as info:
        writer.trigger(availableNow=True).start().awaitTermination(120)
    assert postgres.password not in str(info.value)


def test_existing_table_must_have_the_streams_columns(postgres, source, tmp_path):
    frame, _ = source
    table = _table()
    query(postgres, f"CREATE TABLE {table} (key text, value text, partition int)")
    q = _start(_basic(frame), tmp_path, postgres.url(), table=table)
    with pytest.raises(Exception, match="Option 'table'.*no column.*offset"):
        q.awaitTermination(120)


def test_unsupported_column_type_is_named(postgres, source, tmp_path):
    frame, _ = source
    df = frame().selectExpr("CAST(value AS STRING) AS value", "array(partition) AS parts")
    with pytest.raises(Exception, match="Option 'parts'.*array"):
        _run(df, tmp_path, postgres.url(), table=_table())


def test_malformed_url_does_not_echo_it(postgres, source, tmp_path):
    frame, _ = source
    secret = "s3cr3t-" + uuid.uuid4().hex[:8]
    url = f"host=127.0.0.1 password={secret} {secret}"  # libpq's own error would quote it
    with pytest.raises(Exception, match="Option 'url'.*not a valid libpq") as info:
        _run(_basic(frame), tmp_path, url, table=_table())
    assert secret not in str(info.value)


@pytest.mark.parametrize("failure", ["wrong password", "unreachable host"])
def test_connection_errors_never_show_the_password(postgres, source, tmp_path, failure):
    frame, _ = source
    secret = "pw-" + uuid.uuid4().hex
    if failure == "wrong password":
        url, reason = postgres.url(password=secret), "password authentication failed"
    else:
        closed = postgres.port + 1 if postgres.port < 65535 else postgres.port - 1
        url, reason = f"postgresql://postgres:{secret}@127.0.0.1:{closed}/postgres", "refused"
    with pytest.raises(Exception, match=f"cannot connect \\(option 'url'\\): .*{reason}") as info:
        _run(_basic(frame), tmp_path, url, table=_table())
    text = str(info.value)
    assert secret not in text
    assert "postgresql://postgres@127.0.0.1" in text  # says where, without the password


def test_at_least_once_commits_from_tasks_without_prepared_transactions(postgres, source, tmp_path):
    frame, expected = source
    table = _table()
    q = _run(_basic(frame), tmp_path, postgres.url(), table=table, deliveryGuarantee="at-least-once")
    assert q.exception() is None
    _assert_once(postgres, table, expected)  # nothing failed, so nothing was written twice
    checkpoints = [p for p in tmp_path.iterdir() if p.name.startswith("ckpt-")]
    assert checkpoints and not any((p / "eos-sink").exists() for p in checkpoints)


def test_prepared_transactions_disabled_is_named_exactly_once_refused(source, tmp_path):
    """max_prepared_transactions = 0: exactly-once fails at query start naming the setting;
    at-least-once (plain COMMIT in the tasks) works there."""
    frame, expected = source
    with postgres_server(max_prepared_transactions=0) as server:
        with pytest.raises(Exception, match="max_prepared_transactions = 0") as info:
            _run(_basic(frame), tmp_path, server.url(), table=_table())
        assert "deliveryGuarantee=at-least-once" in str(info.value)
        table = _table()
        q = _run(_basic(frame), tmp_path, server.url(), table=table, deliveryGuarantee="at-least-once")
        assert q.exception() is None
        _assert_once(server, table, expected)


def test_too_few_prepared_transaction_slots_fail_the_query_naming_both_numbers(source, tmp_path):
    """max_prepared_transactions = 1 and a batch of 2 write tasks (2 source partitions): the
    query fails with an error naming the setting and the write tasks, not with PostgreSQL's
    bare "maximum number of prepared transactions reached". What the failed batch's other
    task prepared (Spark's abort may not hear of it) is rolled back when the query next
    starts: its planning, here run in this process, leaves nothing prepared."""
    frame, _ = source
    table = _table()
    with postgres_server(max_prepared_transactions=1) as server:
        # a task per source partition (the default plans a batch of 30 records as one task)
        df = _basic(lambda: frame(targetTasksPerBatch="8"))
        with pytest.raises(Exception, match="max_prepared_transactions = 1") as info:
            _run(df, tmp_path, server.url(), table=table)
        text = str(info.value)
        assert "at least 2 write tasks" in text, text
        assert server.password not in text
        (checkpoint,) = tmp_path.glob("ckpt-*")
        _planning(server.url(), table, str(checkpoint), df.schema)
        assert prepared_transactions(server) == []


def _planning(url: str, table: str, checkpoint: str, schema) -> None:
    """What Spark runs before a batch's tasks when the query (re)starts: open, recover, clean."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from connectors.core.options import Options
    from sinks.postgres import FORMAT_NAME, PostgresOptions, PostgresSink
    from sinks.two_phase_commit import SinkSettings, TwoPhaseCommitWriter

    opts = Options({"url": url, "table": table, "checkpointLocation": checkpoint})
    settings = SinkSettings.from_options(FORMAT_NAME, opts)
    sink = PostgresSink(settings, PostgresOptions.parse(opts, settings), to_arrow_schema(schema))
    TwoPhaseCommitWriter(sink).prepare_for_tasks()


def test_complete_mode_is_refused(postgres, source, tmp_path):
    frame, _ = source
    counts = frame().groupBy("partition").count()
    q = (
        counts.writeStream.format("postgres-eos").outputMode("complete")
        .option("url", postgres.url()).option("table", _table())
        .option("checkpointLocation", str(tmp_path / "c"))
        .trigger(availableNow=True).start()
    )
    with pytest.raises(Exception, match="append output mode only"):
        q.awaitTermination(120)



def test_a_table_dropped_while_its_query_was_stopped_is_refused(postgres, spark, bootstrap,
                                                                 tmp_path):
    """The restarted query must not re-create the table and fill it with only the new rows:
    the checkpoint recorded the table (its OID) when it first wrote into it."""
    topic = unique_topic("pgdrop")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 1, 10)

    def frame():
        return earliest_stream(spark, bootstrap, topic, "100")

    table = _table()
    checkpoint = str(tmp_path / "ckpt-dropped")
    q = _run(_basic(frame), tmp_path, postgres.url(), table=table, checkpointLocation=checkpoint)
    assert q.exception() is None
    query(postgres, f"DROP TABLE {table}")
    produce(bootstrap, topic, 1, 10, start_index=100)  # the restart has rows to write
    with pytest.raises(Exception) as failure:
        _run(_basic(frame), tmp_path, postgres.url(), table=table, checkpointLocation=checkpoint)
    message = str(failure.value)
    assert table in message and "deleted" in message and "allowNewTable" in message, message
    assert not query(postgres, "SELECT 1 FROM pg_class WHERE relname = %s", (table,))
    q = _run(_basic(frame), tmp_path, postgres.url(), table=table, checkpointLocation=checkpoint,
             allowNewTable="true")
    assert q.exception() is None
    assert query(postgres, "SELECT 1 FROM pg_class WHERE relname = %s", (table,))
