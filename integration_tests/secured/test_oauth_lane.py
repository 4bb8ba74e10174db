"""OAUTHBEARER against a real broker: Apache Kafka 4.x (the suite's Maven jars) with a
SASL_PLAINTEXT listener that validates JWTs against a local JWKS
(`OAuthBearerValidatorCallbackHandler`), tokens from a local client-credentials endpoint
(integration_tests/support/oauth_server.py) that live a few seconds and are signed by keys
rotated during the run, and the broker re-authenticating connections
(`connections.max.reauth.ms`).

One broker start and one query for the module: `kafka-eos` -> `kafka-eos` exactly once through
the OAUTHBEARER listener only. The source's metadata look-ups and task consumers and the sink's
task producers fetch tokens with librdkafka's OIDC client (`kafka.sasl.oauthbearer.method=oidc`,
the source's options in librdkafka's names); the sink's options are the Java client's
(`OAuthBearerLoginModule` with clientId/clientSecret, Kafka's `OAuthBearerLoginCallbackHandler`)
and its driver-side commit client (kafka-python) gets its tokens from
connectors/core/kafka/oidc_token.py. Then a wrong client secret fails the source and the
exactly-once sink at query start, naming the option, with the secret in no error and no log
line.
"""

from __future__ import annotations

import collections
import secrets
import time
from dataclasses import dataclass, field

import pytest

from connectors.local.apache_kafka import apache_kafka
from connectors.local.kafka_oracle import committed, read_partition
from integration_tests.support.kafka_data import create_topic, produce, unique_topic
from integration_tests.support.oauth_server import AUDIENCE, oauth_server
from integration_tests.support.streaming import wait_for

CLIENT = "eos-client"
LISTENER = "OAUTH"
#: Seconds: short, so that a run outlives several; 4 s tokens expired under a loaded host's
#: starved refresh (an _AUTHENTICATION error in a task, 2026-11-28).
TOKEN_LIFETIME_S = 6
ROTATE_S = 7
REAUTH_MS = 6000
#: At least PER_PARTITION records a partition, PER_ROUND more a second until tokens renewed.
PARTITIONS, PER_PARTITION, PER_ROUND, PER_TRIGGER = 2, 60, 10, 20


def _librdkafka_tokens(auth) -> int:
    """Tokens librdkafka's OIDC client fetched (it sends no User-Agent; the commit client's
    urllib does)."""
    return auth.tokens_for(CLIENT) - auth.tokens_for(CLIENT, "Python-urllib")


@dataclass
class OAuthListener:
    """The node's OAUTH listener (connectors.local.apache_kafka.ExtraListeners): SASL_PLAINTEXT,
    its settings in server.properties."""

    settings: dict[str, str]
    protocols: dict[str, str] = field(default_factory=lambda: {LISTENER: "SASL_PLAINTEXT"})

    def server_properties(self) -> dict[str, str]:
        return dict(self.settings)

    def format_args(self) -> list[str]:
        return []


@pytest.fixture(scope="module")
def oauth_kafka():
    """(OAuth server, Apache Kafka node): the node's OAUTH listener validates the server's
    tokens; its PLAINTEXT listener is the tests' set-up and oracle."""
    secret = secrets.token_urlsafe(24)
    with oauth_server({CLIENT: secret}, lifetime_s=TOKEN_LIFETIME_S, rotate_s=ROTATE_S) as auth:
        prefix = f"listener.name.{LISTENER.lower()}"
        settings = {
            f"{prefix}.sasl.enabled.mechanisms": "OAUTHBEARER",
            f"{prefix}.oauthbearer.sasl.jaas.config":
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
            f"{prefix}.oauthbearer.sasl.server.callback.handler.class":
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
            f"{prefix}.oauthbearer.connections.max.reauth.ms": str(REAUTH_MS),
            "sasl.oauthbearer.jwks.endpoint.url": auth.jwks_url,
            # the JWKS is read again well within a key's rotation: the next key is in it
            "sasl.oauthbearer.jwks.endpoint.refresh.ms": "2000",
            "sasl.oauthbearer.expected.audience": AUDIENCE,
            "sasl.oauthbearer.expected.issuer": auth.url,
            # no grace past a token's exp (the default allows 30 s)
            "sasl.oauthbearer.clock.skew.seconds": "0",
            "super.users": f"User:ANONYMOUS;User:{CLIENT}",
        }
        jvm = (f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls="
               f"{auth.jwks_url},{auth.token_url}",)
        listener = OAuthListener(settings)
        with apache_kafka(listeners=lambda _workdir: listener, jvm_options=jvm) as node:
            yield auth, node, secret


def _source_options(auth, node, secret: str) -> dict[str, str]:
    """librdkafka's names."""
    return {"kafka.bootstrap.servers": node.address(LISTENER),
            "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanism": "OAUTHBEARER",
            "kafka.sasl.oauthbearer.method": "oidc",
            "kafka.sasl.oauthbearer.client.id": CLIENT,
            "kafka.sasl.oauthbearer.client.secret": secret,
            "kafka.sasl.oauthbearer.token.endpoint.url": auth.token_url}


def _sink_options(auth, node, secret: str) -> dict[str, str]:
    """The Java client's names, as a Spark job on format("kafka") has them."""
    return {"kafka.bootstrap.servers": node.address(LISTENER),
            "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanism": "OAUTHBEARER",
            "kafka.sasl.jaas.config":
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                f'clientId="{CLIENT}" clientSecret="{secret}";',
            "kafka.sasl.login.callback.handler.class":
                "org.apache.kafka.common.security.oauthbearer.secured."
                "OAuthBearerLoginCallbackHandler",
            "kafka.sasl.oauthbearer.token.endpoint.url": auth.token_url}


def test_kafka_to_kafka_exactly_once_with_tokens_expiring_mid_run(
        spark, oauth_kafka, tmp_path, capfd):
    auth, node, secret = oauth_kafka
    plain = node.bootstrap_servers  # set-up and oracle only
    topic, out = unique_topic("oauth-in"), unique_topic("oauth-out")
    create_topic(plain, topic, PARTITIONS)
    create_topic(plain, out, PARTITIONS)
    keys_before, librdkafka_before = set(auth.kids_used), _librdkafka_tokens(auth)
    commit_before = auth.tokens_for(CLIENT, "Python-urllib")

    def renewed() -> bool:
        """The clients have renewed their tokens across a key rotation."""
        return (len(auth.kids_used - keys_before) >= 2
                and _librdkafka_tokens(auth) - librdkafka_before >= 3
                and auth.tokens_for(CLIENT, "Python-urllib") - commit_before >= 2)

    started = time.monotonic()
    query = (spark.readStream.format("kafka-eos").options(**_source_options(auth, node, secret))
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", str(PER_TRIGGER)).load()
             .select("key", "value")
             .writeStream.format("kafka-eos").options(**_sink_options(auth, node, secret))
             .option("topic", out).option("deliveryGuarantee", "exactly-once")
             .option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(processingTime="1 second").start())
    # Input keeps arriving, a round a second, until the run has outlived several tokens and a
    # key rotation (polled, not timed: an availableNow run over a fixed input took 12 s on a
    # quiet host, under the three tokens it was meant to outlive).
    expected: list = []
    while len(expected) < PARTITIONS * PER_PARTITION or not renewed():
        assert query.isActive, query.exception()
        assert time.monotonic() - started < 300, "the clients renewed too few tokens in 300 s"
        expected += produce(plain, topic, PARTITIONS, PER_ROUND,
                            start_index=len(expected) // PARTITIONS)
        time.sleep(1)
    wait_for(lambda: not query.isActive or len(committed(plain, out)) >= len(expected), 300,
             "every record committed")
    elapsed = time.monotonic() - started
    assert query.exception() is None, query.exception()
    batches = len(query.recentProgress)
    query.stop()

    got = collections.Counter((r.key, r.value) for r in committed(plain, out))
    want = collections.Counter((r.key, r.value) for r in expected)
    assert not [k for k, n in got.items() if n > 1], "a record committed twice"
    assert got == want, f"{len(set(want) - set(got))} records missing of {len(want)}"
    for p in range(PARTITIONS):
        assert read_partition(plain, out, p).open == []
    # the run outlived several tokens and a key rotation: the clients renewed their tokens
    assert len(auth.kids_used - keys_before) >= 2, "no signing key rotated during the run"
    assert _librdkafka_tokens(auth) - librdkafka_before >= 3
    assert auth.tokens_for(CLIENT, "Python-urllib") - commit_before >= 2, \
        "the commit client never renewed its token"
    assert not auth.refused
    output = capfd.readouterr()
    assert secret not in output.out + output.err
    print(f"\noauth lane: {len(want)} records in {batches} batches, {elapsed:.0f} s; tokens "
          f"issued {dict(auth.issued)}; keys {sorted(auth.kids_used)}")


@pytest.mark.parametrize("side", ["source", "exactly-once sink"])
def test_a_wrong_client_secret_fails_at_query_start_without_showing_it(
        spark, oauth_kafka, tmp_path, capfd, caplog, side):
    auth, node, _secret = oauth_kafka
    wrong = "wrong-" + secrets.token_urlsafe(16)
    started = time.monotonic()
    with pytest.raises(Exception) as info:
        if side == "source":
            query = (spark.readStream.format("kafka-eos")
                     .options(**_source_options(auth, node, wrong))
                     .option("subscribe", "anything").load()
                     .writeStream.format("noop")
                     .option("checkpointLocation", str(tmp_path / "ck")).start())
        else:
            query = (spark.readStream.format("rate").option("rowsPerSecond", "5").load()
                     .selectExpr("CAST(value AS STRING) AS value")
                     .writeStream.format("kafka-eos").options(**_sink_options(auth, node, wrong))
                     .option("topic", "anything").option("deliveryGuarantee", "exactly-once")
                     .option("checkpointLocation", str(tmp_path / "ck")).start())
        query.awaitTermination(120)
        query.stop()
        pytest.fail("the query did not fail")
    assert time.monotonic() - started < 60, "the refusal took as long as a timeout"
    message = str(info.value)
    assert "kafka.sasl.oauthbearer.client.secret" in message, message[:3000]
    assert wrong not in message
    output = capfd.readouterr()
    assert wrong not in output.out + output.err, "the wrong secret reached a log"
    assert wrong not in caplog.text


class LocalEndpointCredential:
    """azure-identity's credential interface (get_token(*scopes) -> AccessToken), its tokens
    from the local endpoint: the broker validates them as it would Entra ID's with Entra's
    JWKS. Stands in for the cloud's identity service only; the clients, the callback and the
    broker are real."""

    def __init__(self, auth, secret: str) -> None:
        from connectors.core.kafka.oidc_token import OidcTokenProvider

        self._fetch = OidcTokenProvider(auth.token_url, CLIENT, secret)._fetch
        self.calls = 0

    def get_token(self, *_scopes: str, **_kwargs):
        from azure.core.credentials import AccessToken

        self.calls += 1
        token, lifetime = self._fetch()
        return AccessToken(token, int(time.time() + lifetime))


def test_a_cloud_token_callback_renews_tokens_for_librdkafka_and_the_commit_client(
        oauth_kafka, monkeypatch):
    """The cloud methods' path (connectors/core/kafka/cloud_tokens/: librdkafka's oauth_cb and
    the commit client's token provider) against the real OAUTHBEARER listener, here with Event
    Hubs' method and a credential backed by the local endpoint: a transactional producer
    writes for three token lifetimes without being polled between transactions more than
    the commits do, librdkafka asks the callback again on its own schedule, and the broker's
    re-authentication accepts each renewed token; then the oracle (kafka-python through the
    same provider, and an admin client) reads every committed record back through the
    listener."""
    import azure.identity
    from confluent_kafka import Producer

    from connectors.core.kafka import cloud_tokens
    from connectors.core.kafka.java_options import translate
    from sinks.kafka.commit_client import fence_transactional_id

    auth, node, secret = oauth_kafka
    credential = LocalEndpointCredential(auth, secret)
    monkeypatch.setattr(azure.identity, "DefaultAzureCredential", lambda **_kw: credential)
    cloud_tokens._SOURCES.clear()
    conf = translate({"bootstrap.servers": node.address(LISTENER),
                      "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                      "sasl.oauthbearer.method": "azure",
                      "sasl.oauthbearer.scope": "https://ns.servicebus.windows.net/.default"})
    topic = unique_topic("oauth-cloud")
    create_topic(node.bootstrap_servers, topic, 1)
    producer = Producer(cloud_tokens.librdkafka_client_conf(
        {**conf, "transactional.id": f"cloud-{topic}", "log_level": 0}))
    producer.init_transactions(30)
    # the sink's commit client (kafka-python, its connection kept): InitProducerId now...
    fence_transactional_id(conf, f"fence-{topic}", 60_000)
    written, started = 0, time.monotonic()
    while time.monotonic() - started < 3 * TOKEN_LIFETIME_S:
        producer.begin_transaction()
        for _ in range(10):
            producer.produce(topic, key=f"k{written}".encode(), value=b"v")
            written += 1
        producer.commit_transaction(30)
        time.sleep(1.0)
    fetched_while_writing = credential.calls
    # ...and again on the same client once its first token has long expired: the broker ended
    # that session, and the client re-authenticated with a renewed token (an expired one is
    # refused: clock.skew.seconds=0)
    fence_transactional_id(conf, f"fence-{topic}", 60_000)
    got = committed(node.address(LISTENER), topic, conf)
    assert len(got) == written and len({r.key for r in got}) == written
    assert fetched_while_writing >= 3, f"{fetched_while_writing} tokens in {3 * TOKEN_LIFETIME_S} s"
    cloud_tokens._SOURCES.clear()
