"""Both ways of making `kafka-eos` known to Spark: register(spark), and zero-config."""

from __future__ import annotations

import subprocess
import sys

import connectors
from integration_tests.support.kafka_data import create_topic, produce, unique_topic


def test_register_is_idempotent_and_names_the_format(spark, bootstrap):
    connectors.register(spark)
    connectors.register(spark)
    topic = unique_topic("reg")
    create_topic(bootstrap, topic, 1)
    expected = produce(bootstrap, topic, 1, 7)
    df = (
        spark.read.format("kafka-eos")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
    )
    assert df.count() == len(expected)


def test_zero_config_registration_in_a_fresh_session(bootstrap, tmp_path):
    topic = unique_topic("zero")
    create_topic(bootstrap, topic, 2)
    expected = produce(bootstrap, topic, 2, 11)
    result = subprocess.run(
        [sys.executable, "-m", "integration_tests.support.pipelines.zero_config_read", bootstrap, topic],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"ROWS={len(expected)}" in result.stdout
    # register() after the static lookup: every format known, none replaced (no WARN per format)
    assert "REGISTERED=kafka-eos,delta-eos,postgres-eos" in result.stdout
    assert "replaced a statically registered data source" not in result.stderr, \
        result.stderr[-3000:]
