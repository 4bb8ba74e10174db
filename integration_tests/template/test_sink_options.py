"""No sink option silently ignored, through real Spark: what Spark itself adds to a sink's
options (queryName, start(path), checkpointLocation) is accepted; a misspelt option fails the
query at start, naming the closest known one, before anything is written."""

from __future__ import annotations

import json

import pytest
from deltalake import DeltaTable

from integration_tests.support.kafka_data import create_topic, unique_topic
from connectors.local.kafka_oracle import committed
from integration_tests.support.streaming import run_to_end


@pytest.fixture
def rows(spark, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    with open(src / "rows.json", "w") as out:
        for i in range(5):
            out.write(json.dumps({"id": i, "value": f"v{i}"}) + "\n")
    return spark.readStream.format("json").schema("id LONG, value STRING").load(str(src))


def test_delta_eos_accepts_query_name_and_start_path(rows, tmp_path):
    table = str(tmp_path / "t")
    query = (
        rows.writeStream.format("delta-eos").queryName("named_delta")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True).start(table)  # Spark passes it as the `path` option
    )
    run_to_end(query, 300)
    assert DeltaTable(table).to_pyarrow_table().num_rows == 5


def test_delta_eos_refuses_a_misspelt_option_at_start(rows, tmp_path):
    table = tmp_path / "t"
    query = (
        rows.writeStream.format("delta-eos").option("path", str(table))
        .option("checkpointLocation", str(tmp_path / "ck")).option("mergSchema", "true")
        .trigger(availableNow=True).start()
    )
    with pytest.raises(Exception, match=r"Option 'mergschema'.*did you mean 'mergeSchema'"):
        query.awaitTermination(300)
    assert not table.exists()


def test_kafka_eos_accepts_query_name_and_refuses_a_misspelt_option(rows, bootstrap, tmp_path):
    topic = unique_topic("kopts")
    create_topic(bootstrap, topic, 1)

    def start(name: str, **options: str):
        writer = (
            rows.writeStream.format("kafka-eos").queryName(name)
            .option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
            .option("checkpointLocation", str(tmp_path / name))
        )
        for k, v in options.items():
            writer = writer.option(k, v)
        return writer.trigger(availableNow=True).start()

    bad = start("misspelt", transactionalIdPrefx="p")
    with pytest.raises(Exception, match=r"did you mean 'transactionalIdPrefix'"):
        bad.awaitTermination(300)
    assert committed(bootstrap, topic) == []

    good = start("named_kafka")
    run_to_end(good, 300)
    assert len(committed(bootstrap, topic)) == 5
