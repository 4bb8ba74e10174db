"""Real Apache Kafka's own secured listeners (integration_tests.support.secured_listeners)
really demand TLS and SASL: correctly configured librdkafka and kafka-python clients work through them (transactions
included), and every kind of misconfigured client is refused, with the refusal's own error.

Real processes and sockets only; one node (the session's broker) serves every scenario.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import struct
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from cryptography import x509
from cryptography.hazmat.primitives.serialization import pkcs12
from kafka import KafkaAdminClient
from kafka.admin import NewTopic as KafkaPythonNewTopic
from kafka.errors import (KafkaConnectionError, SaslAuthenticationFailedError,
                          UnsupportedSaslMechanismError)
from kafka.net.compat import KafkaNetClient
from kafka.protocol.metadata.api_versions import ApiVersionsRequest
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.sasl import SaslHandshakeRequest, SaslHandshakeResponse

from connectors.local.broker_handle import Broker
from integration_tests.support.secured_listeners import SecuredBroker, secured_listener

# -- fixtures ------------------------------------------------------------------------------

# (protocol, mechanism, mtls): every SASL mechanism over TLS, SASL without TLS, TLS alone, mTLS.
SCENARIOS = [
    ("SASL_SSL", "SCRAM-SHA-256", False),
    ("SASL_SSL", "SCRAM-SHA-512", False),
    ("SASL_SSL", "PLAIN", False),
    ("SASL_PLAINTEXT", "PLAIN", False),
    ("SASL_PLAINTEXT", "SCRAM-SHA-512", False),
    ("SSL", None, False),
    ("SSL", None, True),
    ("SASL_SSL", "SCRAM-SHA-256", True),
]


def _scenario_id(s: tuple[str, str | None, bool]) -> str:
    protocol, mechanism, mtls = s
    return "-".join(p for p in (protocol, mechanism, "mTLS" if mtls else None) if p)


@pytest.fixture(scope="module", autouse=True)
def quiet_kafka_python() -> Iterator[None]:
    """kafka-python logs every refused connection at ERROR; refusals are these tests' point."""
    loggers = [logging.getLogger(n) for n in ("kafka.net.transport", "kafka.net.connection",
                                              "kafka.net.manager", "kafka.conn", "kafka.client")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    yield
    for lg, level in zip(loggers, levels):
        lg.setLevel(level)


@pytest.fixture(scope="module")
def brokers(secured_kafka: Broker) -> dict[tuple[str, str | None, bool], SecuredBroker]:
    """The node's secured listener for each scenario (one node serves them all)."""

    class _Listeners(dict):
        def __missing__(self, key: tuple[str, str | None, bool]) -> SecuredBroker:
            protocol, mechanism, mtls = key
            kwargs: dict[str, Any] = {"mtls": mtls}
            if mechanism is not None:
                kwargs["mechanism"] = mechanism
            self[key] = secured_listener(secured_kafka.node, protocol, **kwargs)  # type: ignore[arg-type]
            return self[key]

    return _Listeners()


@pytest.fixture(params=SCENARIOS, ids=[_scenario_id(s) for s in SCENARIOS])
def secured(request: pytest.FixtureRequest, brokers: dict) -> SecuredBroker:
    return brokers[request.param]


@pytest.fixture
def sasl_ssl(brokers: dict) -> SecuredBroker:
    return brokers[("SASL_SSL", "SCRAM-SHA-256", False)]


@pytest.fixture
def sasl_plaintext(brokers: dict) -> SecuredBroker:
    return brokers[("SASL_PLAINTEXT", "PLAIN", False)]


@pytest.fixture
def mtls(brokers: dict) -> SecuredBroker:
    return brokers[("SSL", None, True)]


# -- helpers -------------------------------------------------------------------------------


def _conf(b: SecuredBroker, **overrides: str) -> dict[str, str]:
    return {"bootstrap.servers": b.bootstrap_servers, **b.client_options, **overrides}


def _kafka_python_conf(b: SecuredBroker, **overrides: Any) -> dict[str, Any]:
    """The kafka-python settings matching `b.client_options`."""
    o = b.client_options
    conf: dict[str, Any] = {
        "bootstrap_servers": b.bootstrap_servers,
        "security_protocol": o["security.protocol"],
    }
    if "ssl.ca.location" in o:
        conf["ssl_cafile"] = o["ssl.ca.location"]
    if "ssl.certificate.location" in o:
        conf["ssl_certfile"] = o["ssl.certificate.location"]
        conf["ssl_keyfile"] = o["ssl.key.location"]
    if "sasl.mechanisms" in o:
        conf["sasl_mechanism"] = o["sasl.mechanisms"]
        conf["sasl_plain_username"] = o["sasl.username"]
        conf["sasl_plain_password"] = o["sasl.password"]
    conf.update(overrides)
    return conf


def _first_error(conf: dict[str, str], wanted: set[int], timeout_s: float = 8.0) -> tuple[KafkaError | None, float, list[str]]:
    """Poll a librdkafka producer until error_cb reports one of `wanted` codes; returns it, the
    seconds it took, and librdkafka's log lines (what it says about dropped connections)."""
    errors: list[KafkaError] = []
    lines: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger(f"rdkafka-{uuid.uuid4().hex}")
    logger.propagate = False
    logger.addHandler(_Collect())
    logger.setLevel(logging.INFO)
    producer = Producer({**conf, "error_cb": errors.append, "logger": logger,
                         "reconnect.backoff.ms": 100})
    start = time.monotonic()
    try:
        while time.monotonic() - start < timeout_s:
            producer.poll(0.1)
            for e in errors:
                if e.code() in wanted:
                    return e, time.monotonic() - start, lines
        return None, time.monotonic() - start, lines
    finally:
        producer.flush(0)


def _kafka_python_connect(conf: dict[str, Any], timeout_s: float = 8.0) -> BaseException | None:
    """Open one kafka-python connection (TLS, SASL) to the bootstrap server: None when it is
    up, else the exception it failed with. The public await_ready() hides that exception behind
    'node not ready', and KafkaAdminClient retries a refusal until its bootstrap timeout."""
    client = KafkaNetClient(**conf, reconnect_backoff_ms=50)
    try:
        node = client.least_loaded_node(bootstrap_fallback=True)
        client.maybe_connect(node)
        conn = client._manager._conns[node]
        client.poll(timeout_ms=int(timeout_s * 1000), future=conn.init_future)
        if not conn.init_future.is_done:
            raise AssertionError(f"no answer from {conf['bootstrap_servers']} in {timeout_s} s")
        return conn.init_future.exception if conn.init_future.failed() else None
    finally:
        client.close()


def _create_topic(b: SecuredBroker, topic: str) -> None:
    admin = AdminClient(_conf(b))
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(timeout=30)


def _request(request: Any, correlation_id: int, client_id: str = "raw-test") -> bytes:
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(header=True, framed=True))


def _read_frame(sock: socket.socket) -> bytes | None:
    """One Kafka frame, or None if the peer closed first."""
    def exactly(n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    head = exactly(4)
    if head is None:
        return None
    return exactly(struct.unpack(">i", head)[0])


def _closed_without_answer(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, ssl.SSLError):
        return True


def _port(b: SecuredBroker) -> int:
    return int(b.bootstrap_servers.rpartition(":")[2])


# -- correctly configured clients ----------------------------------------------------------


def test_transactional_roundtrip_with_librdkafka(secured: SecuredBroker) -> None:
    """A transactional producer commits; a read_committed consumer (assign, no group) reads it
    back: every connection, including those to the advertised address, is a secured one."""
    topic = f"sec-{uuid.uuid4().hex[:8]}"
    _create_topic(secured, topic)
    producer = Producer(_conf(secured, **{"transactional.id": f"{topic}-tx"}))
    producer.init_transactions(30)
    producer.begin_transaction()
    sent = [f"v{i}".encode() for i in range(5)]
    for v in sent:
        producer.produce(topic, value=v, partition=0)
    producer.commit_transaction(30)

    consumer = Consumer(_conf(secured, **{
        "group.id": f"{topic}-unused", "isolation.level": "read_committed",
        "enable.auto.commit": "false",
    }))
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < len(sent) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    assert got == sent
    # The listener advertises itself, never the node's plaintext port.
    brokers = AdminClient(_conf(secured)).list_topics(timeout=10).brokers
    assert [f"{m.host}:{m.port}" for m in brokers.values()] == [secured.bootstrap_servers]


def test_kafka_python_admin_creates_and_lists_topics(secured: SecuredBroker) -> None:
    topic = f"sec-kp-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(**_kafka_python_conf(secured), bootstrap_timeout_ms=15000)
    try:
        admin.create_topics([KafkaPythonNewTopic(topic, 1, 1)])
        deadline = time.monotonic() + 10
        while topic not in admin.list_topics() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert topic in admin.list_topics()
    finally:
        admin.close()
    # ...and librdkafka, through the same listener, sees the topic kafka-python created.
    assert topic in AdminClient(_conf(secured)).list_topics(timeout=10).topics


def test_both_clients_authenticate_with_scram_sha_512(brokers: dict) -> None:
    """librdkafka (SaslHandshake v1 + SaslAuthenticate v1) and kafka-python 3 (SaslAuthenticate
    v2, flexible) both authenticate with SCRAM-SHA-512 over TLS, and the broker acts as the user
    they authenticated as: alice (a super user) may create a topic, `limited` (no ACL) may not.
    (The proxy used to record each exchange's versions; the real broker keeps no such record,
    so the versions themselves are no longer asserted.)"""
    b = brokers[("SASL_SSL", "SCRAM-SHA-512", False)]
    assert _kafka_python_connect(_kafka_python_conf(b)) is None
    limited = secured_listener(b.node, "SASL_SSL", mechanism="SCRAM-SHA-512", user="limited")
    assert _kafka_python_connect(_kafka_python_conf(limited)) is None
    topic = f"sec-who-{uuid.uuid4().hex[:8]}"
    limited_admin = AdminClient(_conf(limited))  # kept referenced until its future is done
    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
        limited_admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=10)
    _create_topic(b, topic)


def test_pkcs12_keystore_and_truststore(mtls: SecuredBroker) -> None:
    """The PKCS#12 stores hold what Java-style ssl.keystore/ssl.truststore options expect, and
    librdkafka's ssl.keystore.location (PKCS#12) passes the mTLS proxy with the keystore alone."""
    pki = mtls.pki
    password = pki.store_password.encode()
    with open(pki.keystore_p12, "rb") as f:
        keystore = pkcs12.load_pkcs12(f.read(), password)
    with open(pki.client_cert_pem, "rb") as f:
        client_cert = x509.load_pem_x509_certificate(f.read())
    with open(pki.ca_pem, "rb") as f:
        ca_cert = x509.load_pem_x509_certificate(f.read())
    assert keystore.key is not None and keystore.cert is not None
    assert keystore.cert.certificate == client_cert
    with open(pki.truststore_p12, "rb") as f:
        truststore = pkcs12.load_pkcs12(f.read(), password)
    assert truststore.key is None and truststore.cert is None
    assert [c.certificate for c in truststore.additional_certs] == [ca_cert]
    with pytest.raises(ValueError):
        with open(pki.keystore_p12, "rb") as f:
            pkcs12.load_pkcs12(f.read(), b"wrong password")

    conf = {k: v for k, v in _conf(mtls).items()
            if k not in ("ssl.certificate.location", "ssl.key.location")}
    conf.update({"ssl.keystore.location": pki.keystore_p12,
                 "ssl.keystore.password": pki.store_password})
    assert AdminClient(conf).list_topics(timeout=10).brokers


def test_repr_hides_secrets(sasl_ssl: SecuredBroker) -> None:
    password = sasl_ssl.users["alice"]
    assert password and password not in repr(sasl_ssl)
    assert sasl_ssl.pki.store_password not in repr(sasl_ssl)
    assert sasl_ssl.options()["kafka.sasl.password"] == password
    assert sasl_ssl.options()["kafka.security.protocol"] == "SASL_SSL"
    assert set(sasl_ssl.options("")) == set(sasl_ssl.client_options)


# -- wrong credentials ---------------------------------------------------------------------

SASL_SCENARIOS = [s for s in SCENARIOS if s[1] is not None]


@pytest.mark.parametrize("scenario", SASL_SCENARIOS, ids=[_scenario_id(s) for s in SASL_SCENARIOS])
@pytest.mark.parametrize("wrong", ["password", "user"])
def test_wrong_credentials_refused_by_librdkafka(brokers: dict, scenario: tuple, wrong: str) -> None:
    b = brokers[scenario]
    bad = {"sasl.password": "not-" + b.users["alice"]} if wrong == "password" else {"sasl.username": "mallory"}
    error, seconds, _ = _first_error(_conf(b, **bad), {KafkaError._AUTHENTICATION})
    assert error is not None, "no SASL authentication error reported"
    assert "Authentication failed" in error.str()
    assert seconds < 5


@pytest.mark.parametrize("scenario", SASL_SCENARIOS, ids=[_scenario_id(s) for s in SASL_SCENARIOS])
@pytest.mark.parametrize("wrong", ["password", "user"])
def test_wrong_credentials_refused_by_kafka_python(brokers: dict, scenario: tuple, wrong: str) -> None:
    """Refused within seconds. The broker answers SaslAuthenticate with
    SASL_AUTHENTICATION_FAILED and closes the connection at once; kafka-python 3.0.12 drops the
    bytes it read together with the close (`_sock_recv` returns them with the disconnection
    error and `_read_from_sock` aborts without handing them on), so it mostly reports "socket
    disconnected" rather than the broker's answer (librdkafka's test above sees the answer)."""
    b = brokers[scenario]
    bad = ({"sasl_plain_password": "not-" + b.users["alice"]} if wrong == "password"
           else {"sasl_plain_username": "mallory"})
    start = time.monotonic()
    error = _kafka_python_connect(_kafka_python_conf(b, **bad))
    assert time.monotonic() - start < 5
    _assert_refused_by_broker(error, SaslAuthenticationFailedError, "Authentication failed")


def _assert_refused_by_broker(error: BaseException | None, answer: type,
                              text: str | None) -> None:
    """kafka-python saw the broker's refusal `answer` (with `text`, where kafka-python carries the
    broker's words), or, as its 3.0.12 drops an answer that arrives with the connection's close,
    the bare disconnection."""
    assert error is not None, "the connection was accepted"
    if isinstance(error, answer):
        assert text is None or text in str(error), repr(error)
    else:
        assert isinstance(error, KafkaConnectionError), repr(error)
        assert "socket disconnected" in str(error), repr(error)


class _Token:
    """A kafka-python OAUTHBEARER token provider: the mechanism is refused before any token."""

    def token(self) -> str:
        return "unused"


def test_mechanism_not_enabled_refused(sasl_ssl: SecuredBroker) -> None:
    """A client set up for OAUTHBEARER against the listener (SCRAM-SHA-512, SCRAM-SHA-256 and
    PLAIN enabled) is refused within seconds: librdkafka names the mechanisms the listener has,
    kafka-python reports UNSUPPORTED_SASL_MECHANISM (or the bare disconnection)."""
    error, seconds, _ = _first_error(
        _conf(sasl_ssl, **{"sasl.mechanisms": "OAUTHBEARER",
                           "enable.sasl.oauthbearer.unsecure.jwt": "true",
                           "sasl.oauthbearer.config": "principal=alice"}),
        {KafkaError._AUTHENTICATION})
    assert error is not None and "SCRAM-SHA-512" in error.str(), error
    assert seconds < 5
    error = _kafka_python_connect(_kafka_python_conf(
        sasl_ssl, sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=_Token()))
    # kafka-python 3.0.12 raises a SaslHandshake error code as the bare error class, without the
    # mechanisms the broker listed (librdkafka, above, shows them): CI saw exactly that.
    _assert_refused_by_broker(error, UnsupportedSaslMechanismError, None)


def test_non_sasl_request_before_authentication_closes(sasl_plaintext: SecuredBroker) -> None:
    """A client that skips SASL gets the broker's ApiVersions answer, but its next request
    (Metadata) ends the connection unanswered, as on a secured broker."""
    with socket.create_connection(("127.0.0.1", _port(sasl_plaintext)), timeout=5) as sock:
        sock.sendall(_request(ApiVersionsRequest(version=0), 1))
        answer = _read_frame(sock)
        assert answer is not None and struct.unpack_from(">i", answer)[0] == 1
        sock.sendall(_request(MetadataRequest(topics=None, version=1), 2))
        assert _closed_without_answer(sock)

    # librdkafka without SASL: never gets metadata.
    _, _, lines = _first_error({"bootstrap.servers": sasl_plaintext.bootstrap_servers}, set(), 2)
    assert any("Disconnected" in line for line in lines), lines
    with pytest.raises(KafkaException):
        AdminClient({"bootstrap.servers": sasl_plaintext.bootstrap_servers}).list_topics(timeout=2)


def test_unsupported_mechanism_and_handshake_v0(sasl_plaintext: SecuredBroker) -> None:
    """SaslHandshake names the enabled mechanisms when asked for another; SaslHandshake v0 (bare
    SASL tokens, no SaslAuthenticate) authenticates PLAIN, after which requests are served."""
    port = _port(sasl_plaintext)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(_request(SaslHandshakeRequest(mechanism="GSSAPI", version=1), 7))
        answer = SaslHandshakeResponse.decode(_read_frame(sock), version=1, header=True)
        assert answer.error_code == 33  # UNSUPPORTED_SASL_MECHANISM
        assert set(answer.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
        assert _closed_without_answer(sock)

    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(_request(SaslHandshakeRequest(mechanism="PLAIN", version=0), 1))
        answer = SaslHandshakeResponse.decode(_read_frame(sock), version=0, header=True)
        assert answer.error_code == 0
        token = b"\0alice\0" + sasl_plaintext.users["alice"].encode()
        sock.sendall(struct.pack(">i", len(token)) + token)
        assert _read_frame(sock) == b""  # PLAIN's (empty) server token: authenticated
        sock.sendall(_request(MetadataRequest(topics=None, version=1), 2))
        metadata = MetadataResponse.decode(_read_frame(sock), version=1, header=True)
        assert [f"{b.host}:{b.port}" for b in metadata.brokers] == [sasl_plaintext.bootstrap_servers]

    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(_request(SaslHandshakeRequest(mechanism="PLAIN", version=0), 1))
        _read_frame(sock)
        token = b"\0alice\0wrong"
        sock.sendall(struct.pack(">i", len(token)) + token)
        assert _closed_without_answer(sock)  # v0 has no error answer: the connection just ends


# -- wrong TLS -----------------------------------------------------------------------------


def test_untrusted_server_certificate_refused(sasl_ssl: SecuredBroker) -> None:
    error, seconds, _ = _first_error(
        _conf(sasl_ssl, **{"ssl.ca.location": sasl_ssl.pki.other_ca_pem}), {KafkaError._SSL})
    assert error is not None and "certificate verify failed" in error.str()
    assert seconds < 5

    error = _kafka_python_connect(_kafka_python_conf(sasl_ssl, ssl_cafile=sasl_ssl.pki.other_ca_pem))
    assert error is not None and "CERTIFICATE_VERIFY_FAILED" in str(error), repr(error)


def test_plaintext_client_against_tls_port_refused(sasl_ssl: SecuredBroker) -> None:
    """A Kafka frame where a TLS ClientHello belongs: the handshake fails, the connection ends
    without a Kafka answer, and the listener keeps serving others."""
    with socket.create_connection(("127.0.0.1", _port(sasl_ssl)), timeout=5) as sock:
        sock.sendall(_request(ApiVersionsRequest(version=0), 1))
        data = b""
        with contextlib.suppress(ConnectionResetError):  # a reset is a refusal too
            while chunk := sock.recv(4096):
                data += chunk
        # Nothing, or a TLS alert record (content type 21): never a Kafka answer.
        assert data == b"" or data[0] == 21, data[:16]

    for protocol in ("PLAINTEXT", "SASL_PLAINTEXT"):
        _, _, lines = _first_error(_conf(sasl_ssl, **{"security.protocol": protocol}), set(), 1.5)
        assert any("Disconnected" in line and "APIVERSION_QUERY" in line for line in lines), lines
    assert AdminClient(_conf(sasl_ssl)).list_topics(timeout=10).brokers


def test_tls_client_against_plaintext_sasl_port_refused(sasl_plaintext: SecuredBroker) -> None:
    conf = _conf(sasl_plaintext, **{"security.protocol": "SASL_SSL",
                                    "ssl.ca.location": sasl_plaintext.pki.ca_pem})
    error, seconds, _ = _first_error(conf, {KafkaError._TRANSPORT, KafkaError._SSL})
    # "SSL handshake failed: ... connecting to a PLAINTEXT broker listener?" or, as the close
    # races the ClientHello, "SSL connection closed by peer (... in state SSL_HANDSHAKE)".
    assert error is not None and "ssl handshake" in error.str().lower().replace("_", " "), error
    assert seconds < 5
    assert AdminClient(_conf(sasl_plaintext)).list_topics(timeout=10).brokers


def test_mtls_refuses_client_without_certificate(mtls: SecuredBroker) -> None:
    no_cert = {k: v for k, v in _conf(mtls).items()
               if k not in ("ssl.certificate.location", "ssl.key.location")}
    with pytest.raises(KafkaException):
        AdminClient({**no_cert, "log_level": 0}).list_topics(timeout=3)
    _, _, lines = _first_error(no_cert, set(), 1.5)
    # Dropped before the broker's first answer: the broker's TLS alert ("bad certificate" or
    # "certificate required"), "SSL connection closed by peer" or "connection reset by peer",
    # as the close races librdkafka's first request.
    assert any(("Disconnected" in line or "Receive failed" in line)
               and ("APIVERSION_QUERY" in line or "SSL_HANDSHAKE" in line)
               for line in lines), lines

    # Raw TLS: without a certificate no Kafka answer comes back (the handshake fails, or with
    # TLS 1.3 the broker's "certificate required" alert ends the connection); with it, one does.
    ctx = ssl.create_default_context(cafile=mtls.pki.ca_pem)
    with socket.create_connection(("127.0.0.1", _port(mtls)), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(_request(ApiVersionsRequest(version=0), 1))
            assert _closed_without_answer(tls)
    ctx.load_cert_chain(mtls.pki.client_cert_pem, mtls.pki.client_key_pem)
    with socket.create_connection(("127.0.0.1", _port(mtls)), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(_request(ApiVersionsRequest(version=0), 1))
            answer = _read_frame(tls)
            assert answer is not None and struct.unpack_from(">i", answer)[0] == 1

    # kafka-python without its certificate is refused too; with it, it connects.
    conf = _kafka_python_conf(mtls)
    conf.pop("ssl_certfile"), conf.pop("ssl_keyfile")
    assert _kafka_python_connect(conf) is not None
    assert _kafka_python_connect(_kafka_python_conf(mtls)) is None
    assert AdminClient(_conf(mtls)).list_topics(timeout=10).brokers


# -- the broker process ---------------------------------------------------------------------


def test_freezing_the_broker_silences_the_secured_listener(secured_kafka: Broker,
                                                           brokers: dict) -> None:
    """The listener is the broker JVM's own: frozen (SIGSTOP, Broker.freeze()), the secured
    address stops answering; resumed, it answers again (tests build broker-outage scenarios on
    this)."""
    b = brokers[("SASL_PLAINTEXT", "SCRAM-SHA-512", False)]
    assert b.pid is not None and b.pid == secured_kafka.node.process.pid
    secured_kafka.freeze()
    try:
        with pytest.raises(KafkaException):
            AdminClient({**_conf(b), "log_level": 0}).list_topics(timeout=2)
    finally:
        secured_kafka.resume()
    assert AdminClient(_conf(b)).list_topics(timeout=10).brokers
