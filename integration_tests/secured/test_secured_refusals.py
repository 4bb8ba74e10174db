"""A cluster that refuses us fails the query at its start, within seconds, naming the option to
fix, and never showing a secret: wrong password, unknown user, untrusted certificate, a TLS
client at a plaintext port and a plaintext client at a TLS port. Before, the source retried
quietly until its look-ups timed out, and the exactly-once sink's commit (a plaintext socket)
failed every commit until `commitTimeout`.
"""

from __future__ import annotations

import secrets
import time

import pytest

from integration_tests.support.secured import secured_cluster

#: A hang would be a poll timeout (120 s) or the commit timeout; a refusal takes a second or
#: two. The bound only tells the two apart on a loaded machine; it measures nothing.
NOT_A_HANG_S = 60


@pytest.fixture(scope="module")
def sasl_ssl(secured_kafka):
    return secured_cluster(secured_kafka, "SASL_SSL", mechanism="SCRAM-SHA-512")


@pytest.fixture(scope="module")
def plaintext(secured_kafka) -> str:
    """The node's PLAINTEXT listener (the "TLS client at a plaintext port" case)."""
    return secured_kafka.node.address("PLAINTEXT")


def _cases(b, plaintext_bootstrap: str) -> dict[str, tuple[dict[str, str], str]]:
    """name -> (kafka.* options, the option the error must name)."""
    good = {"kafka.bootstrap.servers": b.bootstrap_servers, **b.options()}
    return {
        "wrong password": ({**good, "kafka.sasl.password": "wrong-" + secrets.token_hex(8)},
                           "kafka.sasl.password"),
        "unknown user": ({**good, "kafka.sasl.username": "mallory"}, "kafka.sasl.username"),
        "untrusted certificate": ({**good, "kafka.ssl.ca.location": b.pki.other_ca_pem},
                                  "kafka.ssl.ca.location"),
        "plaintext client at a TLS port": ({**good, "kafka.security.protocol": "SASL_PLAINTEXT"},
                                           "kafka.security.protocol"),
        "TLS client at a plaintext port": (
            {"kafka.bootstrap.servers": plaintext_bootstrap, "kafka.security.protocol": "SSL",
             "kafka.ssl.ca.location": b.pki.ca_pem}, "kafka.security.protocol"),
    }


CASES = ["wrong password", "unknown user", "untrusted certificate",
         "plaintext client at a TLS port", "TLS client at a plaintext port"]


def _fails_at_start(build_query) -> str:
    started = time.monotonic()
    with pytest.raises(Exception) as info:
        query = build_query()
        query.awaitTermination(NOT_A_HANG_S * 2)
        query.stop()
        pytest.fail("the query did not fail")
    assert time.monotonic() - started < NOT_A_HANG_S, "the refusal took as long as a timeout"
    return str(info.value)


def _secrets(options: dict[str, str], b) -> list[str]:
    return [v for k, v in options.items() if "password" in k] + list(b.users.values())


def _assert_refused(message: str, option: str, options: dict[str, str], b) -> None:
    assert option in message, message[-2000:]
    for secret in _secrets(options, b):
        assert secret not in message


def _sink_query(spark, options: dict[str, str], guarantee: str, tmp_path):
    return (spark.readStream.format("rate").option("rowsPerSecond", "5").load()
            .selectExpr("CAST(value AS STRING) AS value")
            .writeStream.format("kafka-eos").options(**options)
            .option("topic", "anything").option("deliveryGuarantee", guarantee)
            .option("checkpointLocation", str(tmp_path / "ck")).start())


@pytest.mark.parametrize("case", CASES)
def test_the_source_refuses_at_query_start(spark, sasl_ssl, plaintext, case, tmp_path):
    options, option = _cases(sasl_ssl, plaintext)[case]
    message = _fails_at_start(lambda: (
        spark.readStream.format("kafka-eos").options(**options)
        .option("subscribe", "anything").load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ck")).start()))
    _assert_refused(message, option, options, sasl_ssl)


@pytest.mark.parametrize("case", CASES)
def test_the_exactly_once_sink_refuses_at_query_start(spark, sasl_ssl, plaintext, case, tmp_path):
    options, option = _cases(sasl_ssl, plaintext)[case]
    message = _fails_at_start(lambda: _sink_query(spark, options, "exactly-once", tmp_path))
    _assert_refused(message, option, options, sasl_ssl)


def test_the_at_least_once_sink_refuses_at_query_start(spark, sasl_ssl, plaintext, tmp_path):
    """Without transactions the tasks' producers are the only clients: their librdkafka
    settings are checked at start the same way."""
    options, option = _cases(sasl_ssl, plaintext)["wrong password"]
    message = _fails_at_start(lambda: _sink_query(spark, options, "at-least-once", tmp_path))
    _assert_refused(message, option, options, sasl_ssl)
