"""The cluster's security settings, one option at a time: the Java client's names translated to
librdkafka's, PKCS#12 stores converted to PEM (connectors/core/kafka/java_options.py),
kafka-python's settings derived from them (connectors/core/kafka/python_security.py), the
OIDC token provider against a real local HTTP server (connectors/core/kafka/oidc_token.py), the
hints given for a failed connection, and secrets never shown. Pure logic: no broker, no Spark.
TLS is proven by real handshakes between in-memory sockets (ssl.MemoryBIO), against
certificates generated for the test run.
"""

from __future__ import annotations

import base64
import http.server
import json
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.parse
from dataclasses import dataclass, field

import pytest
from cryptography.hazmat.primitives import serialization
from kafka.net.sasl.oauth import AbstractTokenProvider

from connectors.core.kafka import java_options as kafka_java_options
from connectors.core.kafka.client import librdkafka_conf
from connectors.core.kafka.java_options import PROTOCOLS, parse_jaas, translate
from connectors.core.kafka.python_security import (
    check_commit_mechanism,
    connection_hint,
    kafka_python_config,
    ssl_context,
)
from connectors.core.kafka.oidc_token import OidcTokenProvider
from connectors.core.options import OptionError, Options, redact
from integration_tests.support.certs import TestPKI, generate_test_pki

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTH = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
KRB5 = "com.sun.security.auth.module.Krb5LoginModule"
SECRET = "s3cr3t-Do-Not-Print-7f3a"
TOKEN_URL = "http://127.0.0.1:1/oauth2/token"


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> TestPKI:
    return generate_test_pki(str(tmp_path_factory.mktemp("pki")))


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def der(pem_path: str) -> bytes:
    return ssl.PEM_cert_to_DER_cert(read(pem_path))


def java_quote(value: str) -> str:
    """A JAAS quoted value, as a Java user escapes it."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def shown(error: BaseException) -> str:
    return f"{error} {error!r} {error.args!r}"


def refused(conf: dict, option: str, *words: str, hidden: tuple[str, ...] = (SECRET,),
            call=translate) -> OptionError:
    """`call(conf)` raises OptionError naming `option`, saying `words`, showing no `hidden`."""
    with pytest.raises(OptionError) as info:
        call(conf)
    e = info.value
    assert e.option == option, str(e)
    assert str(e).startswith(f"Option '{option}': "), str(e)
    for word in words:
        assert word in str(e), (word, str(e))
    for secret in hidden:
        assert secret not in shown(e)
    return e


# -- TLS proven by handshakes over memory ----------------------------------------------------


def handshake(client_ctx: ssl.SSLContext, pki: TestPKI, *, server_name: str = "localhost",
              require_client_certificate: bool = False) -> bytes | None:
    """A TLS handshake (and one record each way) between `client_ctx` and a server holding
    the PKI's server certificate; returns the client certificate the server saw (DER)."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(pki.server_cert_pem, pki.server_key_pem)
    if require_client_certificate:
        server_ctx.verify_mode = ssl.CERT_REQUIRED
        server_ctx.load_verify_locations(pki.ca_pem)
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname=server_name)
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    done = {"client": False, "server": False}
    for _ in range(10):
        for name, end in (("client", client), ("server", server)):
            if not done[name]:
                try:
                    end.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
            s_in.write(c_out.read())
            c_in.write(s_out.read())
        if all(done.values()):
            break
    assert all(done.values()), done
    client.write(b"ping")
    s_in.write(c_out.read())
    assert server.read(4) == b"ping"
    server.write(b"pong")
    c_in.write(s_out.read())
    assert client.read(4) == b"pong"
    return server.getpeercert(binary_form=True)


# -- sasl.jaas.config -------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism_option", [None, "sasl.mechanism", "sasl.mechanisms"])
def test_plain_jaas_gives_username_password_and_mechanism(mechanism_option):
    conf = {"sasl.jaas.config": f'{PLAIN} required username="alice" password="{SECRET}";'}
    if mechanism_option:
        conf[mechanism_option] = "plain"
    out = translate(conf)
    assert out["sasl.mechanisms"] == "PLAIN"
    assert out["sasl.username"] == "alice"
    assert out["sasl.password"] == SECRET
    assert "sasl.jaas.config" not in out and "sasl.mechanism" not in out


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "scram-sha-512"])
def test_scram_jaas_keeps_the_given_mechanism(mechanism):
    out = translate({"sasl.mechanism": mechanism,
                     "sasl.jaas.config": f'{SCRAM} required username="bob" password="{SECRET}";'})
    assert out["sasl.mechanisms"] == mechanism.upper()
    assert (out["sasl.username"], out["sasl.password"]) == ("bob", SECRET)


def test_scram_jaas_without_a_mechanism_is_refused_rather_than_guessed():
    # Java defaults sasl.mechanism to GSSAPI: SHA-256 or SHA-512 must be said
    refused({"sasl.jaas.config": f'{SCRAM} required username="bob" password="{SECRET}";'},
            "kafka.sasl.mechanism", "SCRAM-SHA-256", "SCRAM-SHA-512")


@pytest.mark.parametrize("password", [
    'with "quotes" inside',
    "back\\slash and \\\" both",
    "semi;colon; and = equals",
    "trailing backslash\\",
    "",
])
def test_jaas_quoted_values_with_escapes(password):
    jaas = f"{PLAIN} required username={java_quote('al ice')} password={java_quote(password)};"
    out = translate({"sasl.jaas.config": jaas})
    assert out["sasl.username"] == "al ice"
    assert out["sasl.password"] == password


@pytest.mark.parametrize("jaas", [
    f'{PLAIN} required username="alice" password="{SECRET}"',  # no ';'
    f'{PLAIN} required username="alice" password="{SECRET}";  \n',
    f'\n  {PLAIN}\n    required\n\tusername = "alice"\n\tpassword="{SECRET}"\n  ;\n',
    f'{PLAIN}   required   username=alice   password={SECRET};',  # bare values
    f'{PLAIN} required password="{SECRET}" username="alice";',  # any order
])
def test_jaas_layouts(jaas):
    out = translate({"sasl.jaas.config": jaas})
    assert (out["sasl.username"], out["sasl.password"]) == ("alice", SECRET)


def test_jaas_escapes_are_read_as_javas_stream_tokenizer_reads_them():
    # what java.io.StreamTokenizer (Kafka's JaasConfig) gives for this quoted value
    jaas = f'{PLAIN} required username="u" password="a\\tb\\\\c\\"d\\101e\\qf\\7g";'
    assert translate({"sasl.jaas.config": jaas})["sasl.password"] == 'a\tb\\c"dAeqf\x07g'


def test_jaas_control_flag_is_case_insensitive_as_in_java():
    out = translate({"sasl.jaas.config": f'{PLAIN} REQUIRED username="u" password="p";'})
    assert (out["sasl.username"], out["sasl.password"]) == ("u", "p")


def test_parse_jaas_returns_the_family_and_every_option():
    family, options = parse_jaas(f'{SCRAM} required username="u" password="{SECRET}" '
                                 f'tokenauth=true;')
    assert family == "SCRAM"
    assert options == {"username": "u", "password": SECRET, "tokenauth": "true"}


@pytest.mark.parametrize("jaas", [
    f'{PLAIN} required username="alice";',
    f'{PLAIN} required password="{SECRET}";',
    f"{PLAIN} required;",
])
def test_jaas_without_username_or_password_is_refused(jaas):
    refused({"sasl.jaas.config": jaas}, "kafka.sasl.jaas.config", "username", "password")


@pytest.mark.parametrize("module, mechanism", [
    (PLAIN, "SCRAM-SHA-256"),
    (SCRAM, "PLAIN"),
    (SCRAM, "OAUTHBEARER"),
    (OAUTH, "PLAIN"),
    (OAUTH, "SCRAM-SHA-512"),
])
def test_jaas_module_and_mechanism_mismatch_is_refused(module, mechanism):
    jaas = f'{module} required username="u" password="{SECRET}" clientSecret="{SECRET}";'
    e = refused({"sasl.jaas.config": jaas, "sasl.mechanism": mechanism},
                "kafka.sasl.jaas.config", mechanism)
    assert "kafka.sasl.mechanism" in str(e)


def test_kerberos_jaas_is_refused():
    jaas = f'{KRB5} required useKeyTab=true keyTab="/etc/k.keytab" principal="kafka@REALM";'
    refused({"sasl.jaas.config": jaas, "sasl.mechanism": "GSSAPI"},
            "kafka.sasl.jaas.config", "Kerberos", "GSSAPI", "SCRAM", hidden=("/etc/k.keytab",))


@pytest.mark.parametrize("jaas", [
    "",
    "garbage",
    f'PlainLoginModule required username="u" password="{SECRET}";',  # not the class name
    f'{PLAIN} username="u" password="{SECRET}";',  # no control flag
    f'{PLAIN} mandatory username="u" password="{SECRET}";',  # no such flag
    f'org.example.CustomLoginModule required password="{SECRET}";',
    f'password="{SECRET}"',
    f'{PLAIN} requiredusername="u" password="{SECRET}";',
])
def test_garbage_jaas_is_refused_without_echoing_it(jaas):
    e = refused({"sasl.jaas.config": jaas}, "kafka.sasl.jaas.config", PLAIN, SCRAM,
                "kafka.sasl.username")
    assert jaas not in str(e) or not jaas


@pytest.mark.parametrize("jaas", [
    f'{PLAIN} required username="u" password="{SECRET}" junk;',
    f'{PLAIN} required username="u" password="{SECRET}" = "x";',
    f'{PLAIN} required username="u" password="{SECRET}"; {SCRAM} required;',  # two modules
    f'{PLAIN} required username="u" password="{SECRET}";;',
    f'{PLAIN} required username="u" password="{SECRET}',  # unterminated quote
])
def test_jaas_with_something_else_than_options_is_refused(jaas):
    refused({"sasl.jaas.config": jaas}, "kafka.sasl.jaas.config", 'key="value"')


def test_oauthbearer_jaas_with_client_credentials_becomes_oidc():
    jaas = (f'{OAUTH} required clientId="app-1" clientSecret={java_quote(SECRET)} '
            f'scope="kafka.write";')
    out = translate({"sasl.jaas.config": jaas, "sasl.mechanism": "OAUTHBEARER",
                     "sasl.oauthbearer.token.endpoint.url": TOKEN_URL})
    assert out["sasl.mechanisms"] == "OAUTHBEARER"
    assert out["sasl.oauthbearer.method"] == "oidc"
    assert out["sasl.oauthbearer.client.id"] == "app-1"
    assert out["sasl.oauthbearer.client.secret"] == SECRET
    assert out["sasl.oauthbearer.scope"] == "kafka.write"
    assert out["sasl.oauthbearer.token.endpoint.url"] == TOKEN_URL
    assert "sasl.jaas.config" not in out
    check_commit_mechanism({**out, "security.protocol": "SASL_SSL"})  # the sink can use it


JAVA_OIDC_HANDLERS = [
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler",
]


@pytest.mark.parametrize("handler", JAVA_OIDC_HANDLERS)
def test_java_oidc_callback_handler_is_what_oidc_does(handler):
    """A Java job's OIDC settings, as they are: the handler class is librdkafka's oidc."""
    out = translate({
        "sasl.mechanism": "OAUTHBEARER", "sasl.login.callback.handler.class": handler,
        "sasl.oauthbearer.token.endpoint.url": TOKEN_URL,
        "sasl.jaas.config": f'{OAUTH} required clientId="app" clientSecret="{SECRET}";'})
    assert out == {"sasl.mechanisms": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
                   "sasl.oauthbearer.token.endpoint.url": TOKEN_URL,
                   "sasl.oauthbearer.client.id": "app",
                   "sasl.oauthbearer.client.secret": SECRET}


@pytest.mark.parametrize("handler", JAVA_OIDC_HANDLERS)
def test_java_oidc_callback_handler_without_a_token_endpoint_is_refused(handler):
    refused({"sasl.mechanism": "OAUTHBEARER", "sasl.login.callback.handler.class": handler,
             "sasl.jaas.config": f'{OAUTH} required clientId="app" clientSecret="{SECRET}";'},
            "kafka.sasl.oauthbearer.token.endpoint.url", "OAuthBearerLoginCallbackHandler")


def test_other_login_callback_handlers_are_refused():
    refused({"sasl.login.callback.handler.class": "com.example.MyHandler"},
            "kafka.sasl.login.callback.handler.class", "kafka.sasl.oauthbearer.method=oidc")


def test_oauthbearer_jaas_extensions_become_sasl_extensions():
    jaas = (f'{OAUTH} required clientId="app" clientSecret="{SECRET}" '
            f'extension_logicalCluster="lkc-123" extension_identityPoolId="pool-4";')
    out = translate({"sasl.jaas.config": jaas, "sasl.oauthbearer.token.endpoint.url": TOKEN_URL})
    assert out["sasl.oauthbearer.extensions"] == "logicalCluster=lkc-123,identityPoolId=pool-4"
    provider = kafka_python_config({**out, "bootstrap.servers": "b",
                                    "security.protocol": "SASL_PLAINTEXT"}
                                   )["sasl_oauth_token_provider"]
    assert provider.extensions() == {"logicalCluster": "lkc-123", "identityPoolId": "pool-4"}


@pytest.mark.parametrize("extensions", ["novalue", "=x", "a=1,,b", "a=1, b"])
def test_bad_sasl_extensions(extensions):
    refused({**OIDC, "sasl.oauthbearer.extensions": extensions},
            "kafka.sasl.oauthbearer.extensions", "key=value", call=kafka_python_config)


def test_oauthbearer_jaas_without_a_token_endpoint_is_not_oidc_and_the_sink_refuses_it():
    out = translate({"sasl.jaas.config": f'{OAUTH} required clientId="a" '
                                         f'clientSecret="{SECRET}";',
                     "security.protocol": "SASL_SSL"})
    assert out["sasl.mechanisms"] == "OAUTHBEARER"
    assert "sasl.oauthbearer.method" not in out
    refused(out, "kafka.sasl.oauthbearer.method", "oidc",
            "kafka.sasl.oauthbearer.token.endpoint.url", call=check_commit_mechanism)


def test_jaas_credentials_conflicting_with_librdkafka_names_are_refused():
    jaas = f'{PLAIN} required username="alice" password="{SECRET}";'
    refused({"sasl.jaas.config": jaas, "sasl.username": "bob"},
            "kafka.sasl.jaas.config", "kafka.sasl.username")
    refused({"sasl.jaas.config": jaas, "sasl.password": SECRET + "-other"},
            "kafka.sasl.jaas.config", "kafka.sasl.password", hidden=(SECRET,))
    same = translate({"sasl.jaas.config": jaas, "sasl.username": "alice",
                      "sasl.password": SECRET})
    assert (same["sasl.username"], same["sasl.password"]) == ("alice", SECRET)


# -- sasl.mechanism ---------------------------------------------------------------------------


@pytest.mark.parametrize("given", ["PLAIN", "scram-sha-256", " SCRAM-SHA-512 ", "OAUTHBEARER"])
def test_sasl_mechanism_becomes_sasl_mechanisms(given):
    out = translate({"sasl.mechanism": given})
    assert out == {"sasl.mechanisms": given.strip().upper()}


def test_sasl_mechanism_conflicting_with_sasl_mechanisms_is_refused():
    e = refused({"sasl.mechanism": "PLAIN", "sasl.mechanisms": "SCRAM-SHA-256"},
                "kafka.sasl.mechanism", "kafka.sasl.mechanisms")
    assert "keep one" in str(e)
    # the same mechanism in both spellings, whatever the case, is no conflict
    assert translate({"sasl.mechanism": "plain", "sasl.mechanisms": "PLAIN"}) == {
        "sasl.mechanisms": "PLAIN"}


# -- ssl.truststore.* -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["PKCS12", "pkcs12", None])  # None: Java's default JKS type
def test_pkcs12_truststore_becomes_the_cas_pem(pki, kind):
    conf = {"ssl.truststore.location": pki.truststore_p12,
            "ssl.truststore.password": pki.store_password}
    if kind:
        conf["ssl.truststore.type"] = kind
    out = translate(conf)
    assert out == {"ssl.ca.pem": read(pki.ca_pem)}
    handshake(ssl_context(out), pki)  # and it is trusted for real


def test_pem_truststore_type_is_the_ca_location(pki):
    out = translate({"ssl.truststore.location": pki.ca_pem, "ssl.truststore.type": "PEM"})
    assert out == {"ssl.ca.location": pki.ca_pem}


def test_truststore_certificates_become_ca_pem(pki):
    pem = read(pki.ca_pem)
    out = translate({"ssl.truststore.certificates": pem, "ssl.truststore.type": "PEM"})
    assert out == {"ssl.ca.pem": pem}


@pytest.fixture(scope="module")
def jks(pki, tmp_path_factory) -> str:
    """A JKS store (by Java's keytool when there is one, else its header crafted)."""
    path = str(tmp_path_factory.mktemp("jks") / "truststore.jks")
    keytool = shutil.which("keytool")
    if keytool:
        subprocess.run([keytool, "-importcert", "-noprompt", "-alias", "ca", "-file", pki.ca_pem,
                        "-keystore", path, "-storetype", "JKS", "-storepass", SECRET],
                       check=True, capture_output=True, timeout=60)
    else:  # the JKS header: magic, version 2, one entry
        with open(path, "wb") as f:
            f.write(b"\xfe\xed\xfe\xed\x00\x00\x00\x02\x00\x00\x00\x01" + os.urandom(64))
    with open(path, "rb") as f:
        assert f.read(4) == b"\xfe\xed\xfe\xed"
    return path


@pytest.mark.parametrize("kind", ["JKS", "PKCS12", None])
def test_jks_truststore_is_refused_naming_the_pem_option(jks, kind):
    conf = {"ssl.truststore.location": jks, "ssl.truststore.password": SECRET}
    if kind:
        conf["ssl.truststore.type"] = kind
    refused(conf, "kafka.ssl.truststore.location", "JKS", "kafka.ssl.ca.location", "PKCS12")


def test_jks_keystore_is_refused_naming_the_pem_options(jks):
    refused({"ssl.keystore.location": jks, "ssl.keystore.password": SECRET},
            "kafka.ssl.keystore.location", "JKS", "kafka.ssl.certificate.location",
            "kafka.ssl.key.location")


@pytest.mark.parametrize("store", ["truststore", "keystore"])
def test_wrong_store_password_is_refused_naming_the_password_option(pki, store):
    location = pki.truststore_p12 if store == "truststore" else pki.keystore_p12
    e = refused({f"ssl.{store}.location": location, f"ssl.{store}.type": "PKCS12",
                 f"ssl.{store}.password": SECRET}, f"kafka.ssl.{store}.password", "password",
                hidden=(SECRET, pki.store_password))
    assert location in str(e)


@pytest.mark.parametrize("store", ["truststore", "keystore"])
def test_missing_store_password_is_refused_naming_the_password_option(pki, store):
    location = pki.truststore_p12 if store == "truststore" else pki.keystore_p12
    refused({f"ssl.{store}.location": location, f"ssl.{store}.type": "PKCS12"},
            f"kafka.ssl.{store}.location", f"kafka.ssl.{store}.password",
            hidden=(pki.store_password,))


@pytest.mark.parametrize("store", ["truststore", "keystore"])
def test_unreadable_or_unknown_store(pki, tmp_path, store):
    missing = str(tmp_path / "nope.p12")
    refused({f"ssl.{store}.location": missing, f"ssl.{store}.type": "PKCS12"},
            f"kafka.ssl.{store}.location", missing)
    refused({f"ssl.{store}.location": pki.ca_pem, f"ssl.{store}.type": "BCFKS"},
            f"kafka.ssl.{store}.type", "PKCS12", "JKS", "PEM", "BCFKS")


# -- ssl.keystore.* and ssl.key.password -----------------------------------------------------


def _same_key(pem_a: str, pem_b: str, password: bytes | None = None) -> bool:
    a = serialization.load_pem_private_key(pem_a.encode(), None)
    b = serialization.load_pem_private_key(pem_b.encode(), password)
    return a.private_numbers() == b.private_numbers()


@pytest.mark.parametrize("kind", ["PKCS12", "pkcs12", None])  # None: librdkafka's own spelling
def test_pkcs12_keystore_becomes_usable_pem(pki, tmp_path, kind):
    conf = {"ssl.keystore.location": pki.keystore_p12,
            "ssl.keystore.password": pki.store_password}
    if kind:
        conf["ssl.keystore.type"] = kind
    out = translate(conf)
    assert set(out) == {"ssl.certificate.pem", "ssl.key.pem"}
    assert out["ssl.certificate.pem"] == read(pki.client_cert_pem) + read(pki.ca_pem)
    assert _same_key(out["ssl.key.pem"], read(pki.client_key_pem))
    # usable: the ssl module loads the pair (files only), and a server requiring it accepts it
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text(out["ssl.certificate.pem"])
    key.write_text(out["ssl.key.pem"])
    ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(str(cert), str(key))
    seen = handshake(ssl_context({**out, "ssl.ca.location": pki.ca_pem}), pki,
                     require_client_certificate=True)
    assert seen == der(pki.client_cert_pem)


def test_keystore_without_a_key_is_refused(pki):
    refused({"ssl.keystore.location": pki.truststore_p12, "ssl.keystore.type": "PKCS12",
             "ssl.keystore.password": pki.store_password},
            "kafka.ssl.keystore.location", "no private key", hidden=(pki.store_password,))


def _pem_identity(pki: TestPKI, key_password: str | None) -> tuple[str, str]:
    """(certificate chain PEM, private key PEM encrypted with key_password if given)."""
    key = serialization.load_pem_private_key(read(pki.client_key_pem).encode(), None)
    encryption = (serialization.BestAvailableEncryption(key_password.encode()) if key_password
                  else serialization.NoEncryption())
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                encryption).decode()
    return read(pki.client_cert_pem) + read(pki.ca_pem), key_pem


@pytest.mark.parametrize("key_password", [SECRET, None])
def test_pem_keystore_type_is_the_certificate_and_key_location(pki, tmp_path, key_password):
    chain, key_pem = _pem_identity(pki, key_password)
    path = tmp_path / "keystore.pem"
    path.write_text(key_pem + chain)  # Java's PEM keystore: the key and its chain, one file
    conf = {"ssl.keystore.location": str(path), "ssl.keystore.type": "PEM"}
    if key_password:
        conf["ssl.key.password"] = key_password
    out = translate(conf)
    assert out == {"ssl.certificate.location": str(path), "ssl.key.location": str(path),
                   **({"ssl.key.password": key_password} if key_password else {})}
    seen = handshake(ssl_context({**out, "ssl.ca.location": pki.ca_pem}), pki,
                     require_client_certificate=True)
    assert seen == der(pki.client_cert_pem)


def test_keystore_key_and_certificate_chain_with_key_password(pki, tmp_path):
    chain, key_pem = _pem_identity(pki, SECRET)
    out = translate({"ssl.keystore.type": "PEM", "ssl.keystore.key": key_pem,
                     "ssl.keystore.certificate.chain": chain, "ssl.key.password": SECRET})
    assert out == {"ssl.key.pem": key_pem, "ssl.certificate.pem": chain,
                   "ssl.key.password": SECRET}
    seen = handshake(ssl_context({**out, "ssl.ca.pem": read(pki.ca_pem)}), pki,
                     require_client_certificate=True)
    assert seen == der(pki.client_cert_pem)
    # a wrong key password is refused when the key is loaded, naming the options, not echoed
    refused({**out, "ssl.key.password": SECRET + "-wrong"}, "kafka.ssl.certificate.location",
            "kafka.ssl.key.password", call=ssl_context)


@pytest.mark.parametrize("given, missing", [
    ("ssl.keystore.key", "ssl.keystore.certificate.chain"),
    ("ssl.keystore.certificate.chain", "ssl.keystore.key"),
])
def test_keystore_key_without_its_chain_is_refused(pki, tmp_path, given, missing):
    chain, key_pem = _pem_identity(pki, None)
    value = key_pem if given == "ssl.keystore.key" else chain
    e = refused({given: value}, f"kafka.{missing}", f"kafka.{given}")
    assert value not in str(e)


def test_key_password_alone_passes_through():
    assert translate({"ssl.key.password": SECRET}) == {"ssl.key.password": SECRET}


# -- ssl.endpoint.identification.algorithm ----------------------------------------------------


@pytest.mark.parametrize("given, expected", [
    ("", "none"), ("none", "none"), (" NONE ", "none"), ("https", "https"), ("HTTPS", "https"),
])
def test_endpoint_identification(given, expected):
    out = translate({"ssl.endpoint.identification.algorithm": given})
    assert out == {"ssl.endpoint.identification.algorithm": expected}


def test_bad_endpoint_identification_is_refused():
    refused({"ssl.endpoint.identification.algorithm": "dns"},
            "kafka.ssl.endpoint.identification.algorithm", "https", "none", "'dns'")


# -- Java-only settings and security.protocol -------------------------------------------------


@pytest.mark.parametrize("name", sorted(kafka_java_options._REFUSED_JAVA))
def test_java_only_setting_is_refused_naming_it(name):
    e = refused({name: "whatever", "bootstrap.servers": "b:9092"}, f"kafka.{name}",
                "Java client setting", kafka_java_options._REFUSED_JAVA[name])
    assert "whatever" not in str(e)


def test_java_only_settings_are_unknown_to_librdkafka():
    """Only what librdkafka would refuse itself, obscurely, is refused here by name."""
    from confluent_kafka import KafkaException, Producer

    for name in kafka_java_options._REFUSED_JAVA:
        with pytest.raises(KafkaException, match="No such configuration property"):
            Producer({"bootstrap.servers": "127.0.0.1:9", name: "x", "log_level": 0})


def test_java_only_setting_is_refused_whatever_its_case():
    refused({"SSL.Protocol": "TLSv1.3"}, "kafka.ssl.protocol", "remove it")
    refused(Options({"kafka.ssl.enabled.protocols": "TLSv1.2", "kafka.bootstrap.servers": "b"}),
            "kafka.ssl.enabled.protocols", call=librdkafka_conf)


@pytest.mark.parametrize("given", PROTOCOLS + ("sasl_ssl", " Ssl ", "plaintext"))
def test_security_protocol_is_normalised(given):
    assert translate({"security.protocol": given}) == {"security.protocol": given.strip().upper()}


@pytest.mark.parametrize("given", ["TLS", "SASL", "https", ""])
def test_bad_security_protocol_is_refused(given):
    refused({"security.protocol": given}, "kafka.security.protocol", *PROTOCOLS)


def test_librdkafka_names_pass_through_unchanged(pki):
    conf = {
        "bootstrap.servers": "b1:9093,b2:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": SECRET,
        "ssl.ca.location": pki.ca_pem,
        "ssl.certificate.location": pki.client_cert_pem,
        "ssl.key.location": pki.client_key_pem,
        "ssl.key.password": SECRET,
        "ssl.endpoint.identification.algorithm": "https",
        "enable.ssl.certificate.verification": "true",
        "sasl.oauthbearer.token.endpoint.url": TOKEN_URL,
        "client.id": "job-7",
        "linger.ms": "5",
        "socket.timeout.ms": "30000",
    }
    given = dict(conf)
    assert translate(conf) == conf
    assert conf == given  # the input is not modified


def test_translation_is_idempotent(pki):
    """Translated settings are librdkafka's: translating them again changes nothing."""
    once = translate({
        "bootstrap.servers": "b:9093", "security.protocol": "sasl_ssl",
        "sasl.mechanism": "scram-sha-256",
        "sasl.jaas.config": f'{SCRAM} required username="u" password="{SECRET}";',
        "ssl.truststore.location": pki.truststore_p12, "ssl.truststore.type": "PKCS12",
        "ssl.truststore.password": pki.store_password,
        "ssl.keystore.location": pki.keystore_p12, "ssl.keystore.password": pki.store_password,
        "ssl.endpoint.identification.algorithm": "",
    })
    assert translate(once) == once
    assert not any(k.startswith(("ssl.truststore", "ssl.keystore", "sasl.jaas"))
                   or k == "sasl.mechanism" for k in once)


def test_librdkafka_conf_translates_the_java_names():
    conf = librdkafka_conf(Options({
        "kafka.bootstrap.servers": "b:9092", "kafka.security.protocol": "sasl_plaintext",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": f'{SCRAM} required username="u" password="{SECRET}";'}))
    assert conf == {"bootstrap.servers": "b:9092", "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": "u",
                    "sasl.password": SECRET}


def test_translated_settings_are_accepted_by_librdkafka(pki):
    """librdkafka checks its properties, and loads PEM keys and certificates, at creation."""
    from confluent_kafka import Producer

    conf = translate({
        "bootstrap.servers": "127.0.0.1:9",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": f'{SCRAM} required username="u" password="{SECRET}";',
        "ssl.truststore.location": pki.truststore_p12, "ssl.truststore.type": "PKCS12",
        "ssl.truststore.password": pki.store_password,
        "ssl.keystore.location": pki.keystore_p12, "ssl.keystore.type": "PKCS12",
        "ssl.keystore.password": pki.store_password,
        "ssl.endpoint.identification.algorithm": "",
    })
    Producer({**conf, "log_level": 0}).flush(0)
    oidc = translate({
        "bootstrap.servers": "127.0.0.1:9", "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.token.endpoint.url": TOKEN_URL,
        "sasl.login.callback.handler.class": JAVA_OIDC_HANDLERS[0],
        "sasl.jaas.config": f'{OAUTH} required clientId="a" clientSecret="{SECRET}" scope="s" '
                            f'extension_logicalCluster="lkc-1";'})
    Producer({**oidc, "log_level": 0}).flush(0)


# -- kafka_python_config ----------------------------------------------------------------------


def test_plaintext_config():
    config = kafka_python_config({"bootstrap.servers": "b:9092"})
    assert config == {"bootstrap_servers": "b:9092", "security_protocol": "PLAINTEXT",
                      "client_id": "kafka-eos-driver",
                      # Fetch answers of up to 8 MiB (settling a commit in doubt)
                      "receive_message_max_bytes": 64 << 20}
    assert kafka_python_config({"bootstrap.servers": "b", "client.id": "me"})["client_id"] == "me"


def test_ssl_config_verifies_the_broker(pki):
    config = kafka_python_config({"bootstrap.servers": "b:9093", "security.protocol": "SSL",
                                  "ssl.ca.location": pki.ca_pem})
    assert config["security_protocol"] == "SSL"
    assert not any(k.startswith("sasl") for k in config)
    ctx = config["ssl_context"]
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    # as librdkafka: the configured CA only, not the system's besides
    assert ctx.get_ca_certs(binary_form=True) == [der(pki.ca_pem)]
    handshake(ctx, pki)
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(ctx, pki, server_name="not-the-broker.example")  # host name checked
    other = ssl_context({"ssl.ca.location": pki.other_ca_pem})
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(other, pki)  # a CA that did not sign the broker's certificate


def test_ssl_context_from_ca_pem(pki):
    ctx = ssl_context({"ssl.ca.pem": read(pki.ca_pem)})
    assert ctx.get_ca_certs(binary_form=True) == [der(pki.ca_pem)]
    handshake(ctx, pki)


@pytest.mark.parametrize("conf", [{}, {"ssl.ca.location": "probe"}])
def test_ssl_context_without_a_ca_trusts_the_systems(conf):
    ctx = ssl_context(conf)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    if not ssl.get_default_verify_paths().cafile:  # a CA directory is read lazily
        pytest.skip("this machine has no system CA bundle file")
    assert ctx.cert_store_stats()["x509_ca"] > 0


def test_unloadable_cas_are_refused_naming_the_option(pki, tmp_path):
    refused({"ssl.ca.location": str(tmp_path / "none.pem")}, "kafka.ssl.ca.location",
            call=ssl_context)
    refused({"ssl.ca.pem": "-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n"},
            "kafka.ssl.ca.pem", call=ssl_context)
    # a good location does not take the blame for a bad PEM
    refused({"ssl.ca.location": pki.ca_pem, "ssl.ca.pem": "garbage"}, "kafka.ssl.ca.pem",
            call=ssl_context)


@pytest.mark.parametrize("how", ["files", "pem strings", "pem cert with key file",
                                 "librdkafka pkcs12", "java pkcs12"])
def test_client_certificate(pki, how):
    base = {"bootstrap.servers": "b", "security.protocol": "SSL", "ssl.ca.location": pki.ca_pem}
    client = {
        "files": {"ssl.certificate.location": pki.client_cert_pem,
                  "ssl.key.location": pki.client_key_pem},
        "pem strings": {"ssl.certificate.pem": read(pki.client_cert_pem),
                        "ssl.key.pem": read(pki.client_key_pem)},
        "pem cert with key file": {"ssl.certificate.pem": read(pki.client_cert_pem),
                                   "ssl.key.location": pki.client_key_pem},
        "librdkafka pkcs12": {"ssl.keystore.location": pki.keystore_p12,
                              "ssl.keystore.password": pki.store_password},
        "java pkcs12": translate({"ssl.keystore.location": pki.keystore_p12,
                                  "ssl.keystore.type": "PKCS12",
                                  "ssl.keystore.password": pki.store_password}),
    }[how]
    ctx = kafka_python_config({**base, **client})["ssl_context"]
    assert handshake(ctx, pki, require_client_certificate=True) == der(pki.client_cert_pem)


def test_without_a_client_certificate_an_mtls_server_refuses(pki):
    ctx = ssl_context({"ssl.ca.location": pki.ca_pem})
    with pytest.raises(ssl.SSLError):
        handshake(ctx, pki, require_client_certificate=True)


def test_what_the_client_sees_of_an_mtls_refusal_gets_the_client_certificate_hint(pki):
    """The TLS 1.3 client finishes its handshake before the server checks for its certificate:
    the refusal arrives as an alert on the next read, and the hint must name the options."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(pki.server_cert_pem, pki.server_key_pem)
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    server_ctx.load_verify_locations(pki.ca_pem)
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    client = ssl_context({"ssl.ca.location": pki.ca_pem}).wrap_bio(
        c_in, c_out, server_hostname="localhost")
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    seen = None
    for _ in range(10):
        for end in (client, server):
            try:
                end.do_handshake() if end is server else client.read(1)
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLError as e:
                if end is client:
                    seen = f"{type(e).__name__}: {e}"
            s_in.write(c_out.read())
            c_in.write(s_out.read())
        if seen:
            break
    assert seen, "the client never saw the refusal"
    conf = {"security.protocol": "SSL", "ssl.ca.location": pki.ca_pem}
    hint = connection_hint(conf, seen)
    assert "kafka.ssl.certificate.location" in hint and "kafka.ssl.key.location" in hint, (
        seen, hint)


def test_client_key_without_a_certificate_is_refused(pki):
    refused({"ssl.key.location": pki.client_key_pem}, "kafka.ssl.certificate.location",
            "kafka.ssl.key.location", call=ssl_context)


def test_unloadable_client_certificate_is_refused(pki):
    # a key that does not belong to the certificate
    refused({"ssl.certificate.location": pki.client_cert_pem,
             "ssl.key.location": pki.server_key_pem}, "kafka.ssl.certificate.location",
            "kafka.ssl.key.location", call=ssl_context)


def test_endpoint_identification_none_skips_the_host_name_only(pki):
    ctx = ssl_context({"ssl.ca.location": pki.ca_pem,
                       "ssl.endpoint.identification.algorithm": "none"})
    assert ctx.check_hostname is False and ctx.verify_mode == ssl.CERT_REQUIRED
    handshake(ctx, pki, server_name="not-the-broker.example")
    with pytest.raises(ssl.SSLCertVerificationError):  # the chain is still verified
        handshake(ssl_context({"ssl.ca.location": pki.other_ca_pem,
                               "ssl.endpoint.identification.algorithm": "none"}), pki)


def test_certificate_verification_disabled(pki):
    ctx = ssl_context({"ssl.ca.location": pki.other_ca_pem,
                       "enable.ssl.certificate.verification": "false"})
    assert ctx.verify_mode == ssl.CERT_NONE and ctx.check_hostname is False
    handshake(ctx, pki, server_name="not-the-broker.example")


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL", "sasl_ssl"])
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "scram-sha-512"])
def test_sasl_username_and_password(pki, protocol, mechanism):
    config = kafka_python_config({
        "bootstrap.servers": "b", "security.protocol": protocol, "sasl.mechanisms": mechanism,
        "sasl.username": "alice", "sasl.password": SECRET, "ssl.ca.location": pki.ca_pem})
    assert config["security_protocol"] == protocol.upper()
    assert config["sasl_mechanism"] == mechanism.upper()
    assert (config["sasl_plain_username"], config["sasl_plain_password"]) == ("alice", SECRET)
    assert ("ssl_context" in config) == protocol.upper().endswith("SSL")


def test_gssapi_is_refused_for_the_commit_client():
    refused({"bootstrap.servers": "b", "security.protocol": "SASL_PLAINTEXT",
             "sasl.mechanisms": "GSSAPI"}, "kafka.sasl.mechanisms", "GSSAPI", "PLAIN",
            call=kafka_python_config)
    refused({"bootstrap.servers": "b", "security.protocol": "SASL_SSL"},  # librdkafka's default
            "kafka.sasl.mechanisms", "defaults to GSSAPI", call=kafka_python_config)
    # no SASL, no mechanism to refuse
    check_commit_mechanism({"security.protocol": "SSL", "sasl.mechanisms": "GSSAPI"})
    check_commit_mechanism({"sasl.mechanisms": "GSSAPI"})


@pytest.mark.parametrize("method", [None, "default", "OIDC-ish"])
def test_oauthbearer_without_oidc_is_refused(method):
    conf = {"bootstrap.servers": "b", "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "OAUTHBEARER", "sasl.oauthbearer.config": SECRET}
    if method:
        conf["sasl.oauthbearer.method"] = method
    refused(conf, "kafka.sasl.oauthbearer.method", "oidc", call=kafka_python_config)


OIDC = {"bootstrap.servers": "b", "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "OAUTHBEARER", "sasl.oauthbearer.method": "OIDC",
        "sasl.oauthbearer.client.id": "app", "sasl.oauthbearer.client.secret": SECRET,
        "sasl.oauthbearer.token.endpoint.url": TOKEN_URL}


def test_oauthbearer_oidc_gives_a_kafka_python_token_provider():
    config = kafka_python_config(OIDC)
    provider = config["sasl_oauth_token_provider"]
    assert config["sasl_mechanism"] == "OAUTHBEARER"
    assert isinstance(provider, AbstractTokenProvider)
    assert isinstance(provider, OidcTokenProvider)
    assert provider.extensions() == {}
    assert "sasl_plain_password" not in config
    assert SECRET not in repr(provider) and SECRET not in repr(config)


@pytest.mark.parametrize("missing", ["sasl.oauthbearer.client.id",
                                     "sasl.oauthbearer.client.secret",
                                     "sasl.oauthbearer.token.endpoint.url"])
def test_oauthbearer_oidc_settings_are_required(missing):
    conf = {k: v for k, v in OIDC.items() if k != missing}
    refused(conf, f"kafka.{missing}", "oidc", call=kafka_python_config)


# -- OidcTokenProvider against a real HTTP server ---------------------------------------------


@dataclass
class TokenServer:
    """A client-credentials token endpoint on 127.0.0.1 that checks each request."""

    client_id: str
    secret: str
    scope: str | None
    expires_in: float | None = 60
    status: int = 200
    requests: list[dict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    url: str = ""

    def answer(self, handler: http.server.BaseHTTPRequestHandler) -> tuple[int, dict]:
        body = handler.rfile.read(int(handler.headers.get("Content-Length", 0))).decode()
        form = urllib.parse.parse_qs(body, keep_blank_values=True)
        self.requests.append({"path": handler.path, "form": form,
                              "content_type": handler.headers.get("Content-Type")})
        expected = {"grant_type": ["client_credentials"]}
        if self.scope is not None:
            expected["scope"] = [self.scope]
        if form != expected:
            self.problems.append(f"form {form}")
        auth = handler.headers.get("Authorization", "")
        if not auth.startswith("Basic "):
            self.problems.append(f"no Basic authorization: {auth!r}")
            return 401, {"error": "invalid_client"}
        user, _, password = base64.b64decode(auth[6:]).decode().partition(":")
        if (urllib.parse.unquote_plus(user), urllib.parse.unquote_plus(password)) != (
                self.client_id, self.secret):
            self.problems.append("wrong client credentials")
            return 401, {"error": "invalid_client"}
        if self.status != 200:
            return self.status, {"error": "invalid_client",
                                 "error_description": "client authentication failed"}
        answer = {"access_token": f"token-{len(self.requests)}", "token_type": "Bearer"}
        if self.expires_in is not None:
            answer["expires_in"] = self.expires_in
        return 200, answer


@pytest.fixture
def token_server():
    servers = []

    def start(**kwargs) -> TokenServer:
        state = TokenServer(**kwargs)

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                status, answer = state.answer(self)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                         daemon=True).start()
        servers.append(server)
        state.url = f"http://127.0.0.1:{server.server_address[1]}/oauth2/token"
        return state

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_token_is_fetched_by_client_credentials_and_cached(token_server):
    server = token_server(client_id="app", secret=SECRET, scope="kafka")
    provider = OidcTokenProvider(server.url, "app", SECRET, "kafka")
    assert provider.token() == "token-1"
    assert provider.token() == "token-1"
    assert len(server.requests) == 1 and not server.problems, server.problems
    assert server.requests[0]["path"] == "/oauth2/token"
    assert server.requests[0]["content_type"] == "application/x-www-form-urlencoded"
    assert SECRET not in repr(provider)


def test_credentials_with_special_characters_are_form_encoded(token_server):
    client_id, secret = "app:1 é", SECRET + " :/+&=%"
    server = token_server(client_id=client_id, secret=secret, scope=None)
    assert OidcTokenProvider(server.url, client_id, secret).token() == "token-1"
    assert not server.problems, server.problems


def test_token_is_refreshed_when_it_expires(token_server):
    server = token_server(client_id="app", secret=SECRET, scope="s", expires_in=0.5)
    provider = OidcTokenProvider(server.url, "app", SECRET, "s")
    assert provider.token() == "token-1"
    assert provider.token() == "token-1"
    time.sleep(0.5)
    assert provider.token() == "token-2"
    assert len(server.requests) == 2 and not server.problems, server.problems


def test_token_without_expires_in_is_cached(token_server):
    server = token_server(client_id="app", secret=SECRET, scope=None, expires_in=None)
    provider = OidcTokenProvider(server.url, "app", SECRET)
    assert provider.token() == provider.token() == "token-1"
    assert len(server.requests) == 1


@pytest.mark.parametrize("status", [400, 401, 500])
def test_refused_token_request_names_the_endpoint_option_not_the_secret(token_server, status):
    server = token_server(client_id="app", secret=SECRET, scope=None, status=status)
    provider = OidcTokenProvider(server.url, "app", SECRET)
    refused({}, "kafka.sasl.oauthbearer.token.endpoint.url", server.url, str(status),
            "invalid_client: client authentication failed", "kafka.sasl.oauthbearer.client.secret",
            call=lambda _: provider.token())
    assert not server.problems, server.problems


def test_an_error_answer_echoing_the_secret_is_shown_without_it(token_server):
    server = token_server(client_id="app", secret=SECRET, scope=None)
    server.answer = lambda handler: (  # type: ignore[method-assign]
        401, {"error": "invalid_client", "error_description": f"bad secret {SECRET}"})
    refused({}, "kafka.sasl.oauthbearer.token.endpoint.url", "bad secret ***",
            call=lambda _: OidcTokenProvider(server.url, "app", SECRET).token())


def test_wrong_client_secret_is_refused_without_showing_it(token_server):
    server = token_server(client_id="app", secret="the-right-one", scope=None)
    provider = OidcTokenProvider(server.url, "app", SECRET)
    refused({}, "kafka.sasl.oauthbearer.token.endpoint.url", "401",
            hidden=(SECRET, "the-right-one"), call=lambda _: provider.token())


def test_unreachable_endpoint_is_refused_naming_the_option():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/token"
    provider = OidcTokenProvider(url, "app", SECRET, timeout_s=2)
    refused({}, "kafka.sasl.oauthbearer.token.endpoint.url", url,
            call=lambda _: provider.token())


def test_answer_without_access_token_is_refused(token_server):
    server = token_server(client_id="app", secret=SECRET, scope=None)
    server.answer = lambda handler: (200, {"token_type": "Bearer"})  # type: ignore[method-assign]
    refused({}, "kafka.sasl.oauthbearer.token.endpoint.url", "access_token",
            call=lambda _: OidcTokenProvider(server.url, "app", SECRET).token())


def test_java_oauthbearer_options_reach_the_token_endpoint(token_server):
    server = token_server(client_id="app-1", secret=SECRET, scope="kafka.write")
    conf = translate({
        "bootstrap.servers": "b", "security.protocol": "SASL_SSL",
        "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.token.endpoint.url": server.url,
        "sasl.jaas.config": f'{OAUTH} required clientId="app-1" clientSecret="{SECRET}" '
                            f'scope="kafka.write";'})
    provider = kafka_python_config(conf)["sasl_oauth_token_provider"]
    assert provider.token() == "token-1"
    assert not server.problems, server.problems


# -- secrets ----------------------------------------------------------------------------------


def test_redact_hides_the_translated_secrets(pki):
    out = translate({
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": f'{PLAIN} required username="u" password="{SECRET}";',
        "ssl.keystore.location": pki.keystore_p12, "ssl.keystore.type": "PKCS12",
        "ssl.keystore.password": pki.store_password, "ssl.key.password": SECRET + "k",
    })
    oidc = translate({
        "sasl.oauthbearer.token.endpoint.url": TOKEN_URL,
        "sasl.jaas.config": f'{OAUTH} required clientId="a" clientSecret="{SECRET}o";'})
    for conf, keys in ((out, ("sasl.password", "ssl.key.pem")),
                       (oidc, ("sasl.oauthbearer.client.secret",))):
        safe = redact(conf)
        for key in keys:
            assert conf[key] and safe[key] == "***"
        for key, value in conf.items():
            if safe[key] == "***":
                assert value not in repr(safe)
        assert SECRET not in repr(safe) and pki.store_password not in repr(safe)
    assert redact(out)["ssl.certificate.pem"] == out["ssl.certificate.pem"]  # not a secret


def test_ssl_context_shows_no_secret(pki, tmp_path):
    chain, key_pem = _pem_identity(pki, SECRET)
    ctx = ssl_context({"ssl.certificate.pem": chain, "ssl.key.pem": key_pem,
                       "ssl.key.password": SECRET})
    assert SECRET not in repr(ctx) and key_pem not in repr(ctx)


# -- connection_hint --------------------------------------------------------------------------

DROPPED = [
    "KafkaConnectionError: socket disconnected",
    "1/1 brokers are down",
    "ssl://localhost:9093/bootstrap: Disconnected (after 5ms in state SSL_HANDSHAKE)",
    "localhost:9093/bootstrap: Disconnected while requesting ApiVersion",
    "SSLEOFError: [SSL: UNEXPECTED_EOF_WHILE_READING] EOF occurred in violation of protocol",
]
MTLS = "mTLS"


@pytest.mark.parametrize("protocol", ["SSL", "SASL_SSL", "sasl_ssl"])
@pytest.mark.parametrize("detail", DROPPED)
def test_dropped_tls_connection_without_client_certificate_mentions_mtls(protocol, detail):
    hint = connection_hint({"security.protocol": protocol}, detail)
    assert MTLS in hint
    for option in ("kafka.ssl.certificate.location", "kafka.ssl.key.location",
                   "kafka.ssl.keystore.location", "kafka.bootstrap.servers"):
        assert option in hint


@pytest.mark.parametrize("client", [
    {"ssl.certificate.location": "/c.pem", "ssl.key.location": "/k.pem"},
    {"ssl.certificate.pem": "-----BEGIN CERTIFICATE-----", "ssl.key.pem": "x"},
    {"ssl.keystore.location": "/k.p12"},
])
@pytest.mark.parametrize("detail", DROPPED)
def test_dropped_tls_connection_with_a_client_certificate_does_not(client, detail):
    hint = connection_hint({"security.protocol": "SSL", **client}, detail)
    assert MTLS not in hint and "kafka.bootstrap.servers" in hint


@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SASL_PLAINTEXT", None])
@pytest.mark.parametrize("detail", DROPPED)
def test_dropped_plaintext_connection_does_not(protocol, detail):
    conf = {"security.protocol": protocol} if protocol else {}
    hint = connection_hint(conf, detail)
    assert MTLS not in hint and "kafka.security.protocol" in hint


def test_tls_failures_other_than_a_dropped_connection_do_not_mention_mtls():
    conf = {"security.protocol": "SSL"}
    hint = connection_hint(conf, "SSL handshake failed: wrong version number")
    assert "TLS listener" in hint and MTLS not in hint
    hint = connection_hint(conf, "connect timed out")
    assert MTLS not in hint


@pytest.mark.parametrize("protocol, detail, words", [
    ("SASL_SSL", "SASL authentication error: Authentication failed during authentication "
                 "due to invalid credentials with SASL mechanism SCRAM-SHA-256",
     ("kafka.sasl.username", "kafka.sasl.password", "kafka.sasl.jaas.config")),
    ("SSL", "SSL handshake failed: error:0A000086:SSL routines::certificate verify failed",
     ("kafka.ssl.ca.location", "kafka.ssl.truststore.location")),
    ("SSL", "SSLCertVerificationError: Hostname mismatch, certificate is not valid for 'x'",
     ("kafka.ssl.endpoint.identification.algorithm",)),
    ("SSL", "SSL handshake failed: tlsv13 alert certificate required",
     ("kafka.ssl.certificate.location", "kafka.ssl.key.location")),
    ("SASL_SSL", "SSL: sslv3 alert handshake failure",
     ("kafka.ssl.certificate.location",)),
    ("SSL", "SSL handshake failed: record layer failure", ("kafka.security.protocol",)),
])
def test_connection_hint_names_the_options_to_check(protocol, detail, words):
    hint = connection_hint({"security.protocol": protocol}, detail)
    for word in words:
        assert word in hint, (word, hint)


@pytest.mark.parametrize("protocol", ["SASL_SSL", "SASL_PLAINTEXT", "sasl_ssl"])
def test_a_sasl_connection_dropped_without_an_answer_names_the_credentials(protocol):
    """A SASL broker refuses wrong credentials and closes the connection at once; kafka-python
    3.0.12 then often reports only "socket disconnected" (it drops an answer read together with
    the close). Seen on real Apache Kafka under load: the sink's message named no SASL option."""
    hint = connection_hint({"security.protocol": protocol},
                           "TransientTxnError: cannot connect to 127.0.0.1:9093: "
                           "KafkaConnectionError: socket disconnected")
    for option in ("kafka.sasl.username", "kafka.sasl.password", "kafka.sasl.mechanism",
                   "kafka.bootstrap.servers"):
        assert option in hint, (option, hint)


@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SSL"])
def test_a_dropped_connection_without_sasl_does_not_name_credentials(protocol):
    hint = connection_hint({"security.protocol": protocol}, "socket disconnected")
    assert "kafka.sasl" not in hint
