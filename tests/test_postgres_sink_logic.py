"""Unit tests of the postgres-eos sink's pure logic (sinks/postgres/): options, connection strings and their
redaction, table names, global transaction ids, Arrow -> COPY encoding. No server, no Spark."""

from __future__ import annotations

import csv
import io
import pickle
import random

import pyarrow as pa
import pytest

from connectors.core.options import OptionError, Options
from sinks.postgres import (
    FORMAT_NAME,
    CannotConnect,
    GID_MAX_BYTES,
    OutcomeUnknown,
    PostgresOptions,
    PostgresSink,
    PreparedTransactionsDisabled,
    TableName,
    TooManyPreparedTransactions,
    bytea_hex,
    check_columns,
    gid_batch,
    gid_prefix,
    is_prepared_limit,
    make_gid,
    parse_gid,
    parse_url,
    prepared_limit_message,
    pg_type,
    redacted_url,
    scrub,
    to_csv,
)
from sinks.two_phase_commit import SinkSettings, TransactionLost

SECRET = "hunter2-Zq9"
URLS = [
    f"postgresql://app:{SECRET}@db.example.com:6543/events?sslmode=require",
    f"host=db.example.com port=6543 dbname=events user=app password={SECRET} sslmode=require",
    f"host=db.example.com port=6543 dbname=events user=app password='{SECRET}'",
]


def _parse(**options: str) -> tuple[SinkSettings, PostgresOptions]:
    opts = Options(options)
    settings = SinkSettings.from_options(FORMAT_NAME, opts)
    return settings, PostgresOptions.parse(opts, settings)


# -- connection strings ---------------------------------------------------------------------


@pytest.mark.parametrize("url", URLS)
def test_redacted_url_names_the_place_not_the_password(url):
    shown = redacted_url(parse_url(url))
    assert shown == "postgresql://app@db.example.com:6543/events"
    assert SECRET not in shown


def test_redacted_url_defaults_like_libpq():
    assert redacted_url(parse_url("dbname=x")) == "postgresql://localhost:5432/x"
    assert redacted_url(parse_url("user=bob")) == "postgresql://bob@localhost:5432/bob"


@pytest.mark.parametrize("bad", [f"host=a password={SECRET} {SECRET}", f"postgresql://u:{SECRET}@h/d?nosuchparam={SECRET}"])
def test_malformed_url_error_names_the_option_not_the_value(bad):
    with pytest.raises(OptionError, match="Option 'url'") as info:
        parse_url(bad)
    assert SECRET not in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_scrub_masks_every_occurrence():
    assert scrub(f"a {SECRET} b {SECRET}", SECRET) == "a *** b ***"
    assert scrub("nothing here", None) == "nothing here"


# -- options --------------------------------------------------------------------------------


@pytest.mark.parametrize("url", URLS)
def test_options_keep_the_password_out_of_reprs(url, tmp_path):
    settings, options = _parse(url=url, table="t", checkpointLocation=str(tmp_path))
    assert options.password == SECRET
    sink = PostgresSink(settings, options, pa.schema([("a", pa.int64())]))
    for text in (repr(options), str(options), sink.describe(), repr(sink)):
        assert SECRET not in text
    assert "db.example.com:6543/events" in sink.describe()
    clone = pickle.loads(pickle.dumps(sink))  # shipped to tasks: the url must survive
    assert clone.options.url == url


@pytest.mark.parametrize(
    "options,option",
    [
        ({"table": "t"}, "url"),
        ({"url": "dbname=x"}, "table"),
        ({"url": "dbname=x", "table": "  "}, "table"),
        ({"url": "dbname=x", "table": "a.b.c"}, "table"),
        ({"url": "dbname=x", "table": "t", "createTable": "sometimes"}, "createTable"),
        ({"url": "dbname=x", "table": "t", "deliveryGuarantee": "twice"}, "deliveryGuarantee"),
        ({"url": "dbname=x", "table": "t", "checkpointLocation": None}, "checkpointLocation"),
    ],
)
def test_bad_options_name_the_option(options, option, tmp_path):
    options = {"checkpointLocation": str(tmp_path), **options}
    options = {k: v for k, v in options.items() if v is not None}
    with pytest.raises(OptionError, match=f"Option '{option}'"):
        _parse(**options)


def test_option_defaults_and_case_insensitive_names(tmp_path):
    _, options = _parse(URL="dbname=x", TABLE="Events", checkpointlocation=str(tmp_path))
    assert options.create_table is True
    assert options.table == TableName(None, "events")
    _, options = _parse(url="dbname=x", table="t", createTable="false", checkpointLocation=str(tmp_path))
    assert options.create_table is False


def test_gid_prefix_follows_the_checkpoint(tmp_path):
    _, a = _parse(url="dbname=x", table="t", checkpointLocation=str(tmp_path / "a"))
    _, a2 = _parse(url="dbname=y", table="u", checkpointLocation=str(tmp_path / "a"))
    _, b = _parse(url="dbname=x", table="t", checkpointLocation=str(tmp_path / "b"))
    assert a.gid_prefix == a2.gid_prefix == gid_prefix(str(tmp_path / "a"))
    assert a.gid_prefix != b.gid_prefix
    # at-least-once needs no checkpoint (and prepares nothing)
    _, c = _parse(url="dbname=x", table="t", deliveryGuarantee="at-least-once")
    assert c.gid_prefix.startswith("pg-eos-")


# -- table names ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,schema,name,sql",
    [
        ("events", None, "events", '"events"'),
        ("Events", None, "events", '"events"'),
        ("Sales.Events", "sales", "events", '"sales"."events"'),
        ('"Sales"."Big Events"', "Sales", "Big Events", '"Sales"."Big Events"'),
        ('public."a""b.c"', "public", 'a"b.c', '"public"."a""b.c"'),
        ("  t  ", None, "t", '"t"'),
    ],
)
def test_table_names_resolve_like_postgres(text, schema, name, sql):
    t = TableName.parse(text)
    assert (t.schema, t.name) == (schema, name)
    assert str(t) == sql


@pytest.mark.parametrize("bad", ["", "a.b.c", "a b", '"open', "a.", ".a", 'a;drop table x'])
def test_bad_table_names(bad):
    with pytest.raises(OptionError, match="Option 'table'"):
        TableName.parse(bad)


# -- global transaction ids -----------------------------------------------------------------


def test_gid_is_deterministic_and_parses_back():
    prefix = gid_prefix("/ckpt/q1")
    gid = make_gid(prefix, 12, 3, 1)
    assert gid == make_gid(prefix, 12, 3, 1)
    assert len({make_gid(prefix, b, p, a) for b in (1, 11) for p in (1, 11) for a in (0, 1)}) == 8
    assert gid_batch(prefix, gid) == 12
    assert gid_batch(prefix, make_gid(prefix, 1, 23, 0)) == 1


def test_gid_of_another_sink_or_shape_is_not_ours():
    prefix, other = gid_prefix("/ckpt/q1"), gid_prefix("/ckpt/q2")
    assert gid_batch(prefix, make_gid(other, 1, 0, 0)) is None
    assert gid_batch(prefix, prefix + "-1-0") is None
    assert gid_batch(prefix, prefix + "-1-0-0-extra") is None
    assert gid_batch(prefix, "someone-else") is None


def test_parse_gid_gives_batch_partition_and_attempt_of_ours_only():
    prefix = gid_prefix("/ckpt/q1")
    assert parse_gid(prefix, make_gid(prefix, 12, 3, 1)) == (12, 3, 1)
    assert parse_gid(prefix, make_gid(gid_prefix("/ckpt/q2"), 12, 3, 1)) is None
    assert parse_gid(prefix, "someone-else") is None


def test_gid_fits_postgres_limit_for_extreme_ids():
    gid = make_gid(gid_prefix("x" * 5000), 2**63 - 1, 2**31 - 1, 2**31 - 1)
    assert len(gid.encode()) <= GID_MAX_BYTES


# -- max_prepared_transactions --------------------------------------------------------------


def test_prepared_limit_message_names_the_limit_and_the_write_tasks():
    """Partitions 0 and 1 of batch 5 hold a slot (1 twice: a retried attempt), an earlier batch
    holds one, another client one; partition 2 is refused: at least 3 write tasks, limit 5."""
    prefix = gid_prefix("/ckpt/q1")
    held = {
        make_gid(prefix, 5, 0, 0): (5, 0, 0),
        make_gid(prefix, 5, 1, 0): (5, 1, 0),
        make_gid(prefix, 5, 1, 1): (5, 1, 1),
        make_gid(prefix, 4, 0, 1): (4, 0, 1),
        "someone-else": None,
    }
    text = prepared_limit_message(5, 5, 2, held)
    assert "max_prepared_transactions = 5" in text and "at least 3 write tasks" in text
    assert "3 by this batch, 1 left by earlier batches of this query, 1 by other clients" in text
    assert "deliveryGuarantee=at-least-once" in text


def test_prepared_limit_message_counts_at_least_the_partition_ids():
    """A refused partition 9 proves 10 write tasks, whatever else holds the slots."""
    text = prepared_limit_message(2, 0, 9, {"a": None, "b": None})
    assert "max_prepared_transactions = 2" in text and "at least 10 write tasks" in text


def test_only_the_prepared_transaction_limit_is_recognised():
    import psycopg

    assert is_prepared_limit(psycopg.errors.OutOfMemory("maximum number of prepared transactions reached"))
    assert not is_prepared_limit(psycopg.errors.OutOfMemory("out of shared memory"))
    assert not is_prepared_limit(psycopg.OperationalError("maximum number of prepared transactions reached"))


# -- Arrow -> PostgreSQL --------------------------------------------------------------------


@pytest.mark.parametrize(
    "arrow,pg",
    [
        (pa.bool_(), "boolean"), (pa.int8(), "smallint"), (pa.int16(), "smallint"),
        (pa.int32(), "integer"), (pa.int64(), "bigint"), (pa.float32(), "real"),
        (pa.float64(), "double precision"), (pa.decimal128(12, 3), "numeric(12,3)"),
        (pa.string(), "text"), (pa.large_string(), "text"), (pa.binary(), "bytea"),
        (pa.date32(), "date"), (pa.timestamp("us", tz="UTC"), "timestamp with time zone"),
        (pa.timestamp("us"), "timestamp without time zone"),
    ],
)
def test_pg_types(arrow, pg):
    assert pg_type(arrow) == pg


def test_unsupported_column_is_named_with_the_users_type():
    schema = pa.schema([("ok", pa.int32()), ("tags", pa.list_(pa.string()))])
    with pytest.raises(OptionError, match="Option 'tags'.*array<string>"):
        check_columns(schema, {"tags": "array<string>"})
    with pytest.raises(OptionError, match="Option 'tags'.*list<"):
        check_columns(schema)


def test_bytea_hex_matches_python_for_random_values_slices_and_nulls():
    rng = random.Random(3)
    values = [
        None if rng.random() < 0.2 else bytes(rng.randrange(256) for _ in range(rng.randrange(6)))
        for _ in range(200)
    ]
    for arr in (pa.array(values, pa.binary()), pa.array(values, pa.large_binary())):
        for start, stop in ((0, 200), (7, 150), (199, 200), (5, 5)):
            got = bytea_hex(arr.slice(start, stop - start)).to_pylist()
            want = [None if v is None else "\\x" + v.hex() for v in values[start:stop]]
            assert got == want


def test_csv_tells_null_from_empty_string_and_quotes_what_needs_it():
    batch = pa.record_batch({
        "s": pa.array(["plain", "", None, 'a,"b"\nc']),
        "b": pa.array([b"\x00\xff", None, b"", b"z"], pa.binary()),
        "n": pa.array([1, None, 3, 4], pa.int64()),
    })
    text = to_csv(batch).decode()
    rows = list(csv.reader(io.StringIO(text)))
    assert rows == [
        ["plain", "\\x00ff", "1"], ["", "", ""], ["", "\\x", "3"], ['a,"b"\nc', "\\x7a", "4"]
    ]
    # COPY reads a bare empty field as NULL and a quoted one as an empty string:
    first_fields = [line.split(",")[0] for line in text.splitlines()[:3]]
    assert first_fields == ['"plain"', '""', ""]


def test_connection_failure_names_the_option_and_hides_the_password(tmp_path):
    """Nothing listens on port 1: libpq fails at once, and the error must not carry the url."""
    url = f"postgresql://app:{SECRET}@127.0.0.1:1/events?connect_timeout=2"
    settings, options = _parse(url=url, table="t", checkpointLocation=str(tmp_path))
    sink = PostgresSink(settings, options, pa.schema([("a", pa.int64())]))
    with pytest.raises(CannotConnect, match=r"cannot connect \(option 'url'\)") as info:
        sink.open()
    assert SECRET not in str(info.value) and "postgresql://app@127.0.0.1:1/events" in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert sink.isTransient(info.value)  # an outage, as far as a commit retry can tell


def test_store_errors_that_must_not_be_retried(tmp_path):
    settings, options = _parse(url="dbname=x", table="t", checkpointLocation=str(tmp_path))
    sink = PostgresSink(settings, options, pa.schema([("a", pa.int64())]))
    assert sink.isTransient(ConnectionError("reset"))
    for exc in (
        OutcomeUnknown("?"), PreparedTransactionsDisabled("0"), TooManyPreparedTransactions("1"),
        TransactionLost([1], "gone"),
    ):
        assert not sink.isTransient(exc)


# -- the throwaway server's URLs (integration_tests/support/postgres.py) ---------------------------


def test_test_server_url_quotes_what_libpq_must_read_back():
    from integration_tests.support.postgres import PostgresServer

    server = PostgresServer("127.0.0.1", 5433, "postgres", "p@ss/w:rd?&", "postgres", "15", "/d", 1)
    assert "p@ss" not in repr(server)
    params = parse_url(server.url(connect_timeout="2"))
    assert params["password"] == "p@ss/w:rd?&" and params["connect_timeout"] == "2"
    assert redacted_url(parse_url(server.url(password="x", dbname="other"))) == (
        "postgresql://postgres@127.0.0.1:5433/other"
    )


# -- no option silently ignored -------------------------------------------------------------


def _stream_writer(tmp_path, **extra: str):
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from sinks.postgres import PostgresEosDataSource

    schema = StructType([StructField("id", LongType()), StructField("v", StringType())])
    raw = {"url": URLS[0], "table": "public.events",
           "checkpointlocation": str(tmp_path / "ck"), **extra}  # lower-cased, as from Spark
    return PostgresEosDataSource(raw).streamWriter(schema, False)


@pytest.mark.parametrize(
    "option,hint",
    [
        ("createTabel", "did you mean 'createTable'"),
        ("tabel", "did you mean 'table'"),
        ("commitTimeut", "did you mean 'commitTimeout'"),
        ("dbtable", "is not an option of the postgres-eos sink"),  # Spark's JDBC option
    ],
)
def test_an_unknown_option_fails_at_query_start_naming_the_closest(tmp_path, option, hint):
    with pytest.raises(OptionError, match=hint) as e:
        _stream_writer(tmp_path, **{option.lower(): "x"})
    assert SECRET not in str(e.value)


def test_what_spark_passes_to_the_sink_is_never_refused(tmp_path):
    # seen with PySpark 4.3: queryName(), start(path), option("checkpointLocation")
    writer = _stream_writer(tmp_path, queryname="q", path="/somewhere", createtable="false")
    assert writer.sink.options.create_table is False
