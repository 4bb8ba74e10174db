"""The librdkafka security settings mapped onto kafka-python's, and what to tell the user when
a connection fails.

The Kafka sink's driver-side commit client and the Kafka oracle speak kafka-python; they read
the same librdkafka settings as every other client (connectors/core/kafka/java_options.py
turns the Java dialect into them), so both clients authenticate the same way from the same
options: TLS through an `ssl.SSLContext` built from librdkafka's TLS properties, SASL PLAIN,
SCRAM and OAUTHBEARER (tokens from connectors/core/kafka/oidc_token.py).
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Mapping
from typing import Any

from connectors.core.kafka.cloud_tokens import is_cloud, kafka_python_token_provider
from connectors.core.kafka.java_options import translate
from connectors.core.kafka.oidc_token import OidcTokenProvider
from connectors.core.options import OptionError

#: Mechanisms the driver's commit client can speak (kafka-python); GSSAPI needs a Kerberos
#: stack on the driver that this package does not install.
COMMIT_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


def _opt(name: str) -> str:
    return f"kafka.{name}"


def protocol_of(conf: Mapping[str, str]) -> str:
    return conf.get("security.protocol", "PLAINTEXT").upper()


def check_commit_mechanism(conf: Mapping[str, str]) -> None:
    """Refuse, at query start, a mechanism the driver's commit client cannot speak."""
    if not protocol_of(conf).startswith("SASL"):
        return
    mechanism = conf.get("sasl.mechanisms", "GSSAPI").upper()  # librdkafka's default
    if mechanism not in COMMIT_MECHANISMS:
        raise OptionError(
            _opt("sasl.mechanisms"),
            f"{mechanism} cannot be used by the exactly-once Kafka sink: its driver commits "
            f"transactions with a client that speaks {', '.join(COMMIT_MECHANISMS)}"
            + (" (librdkafka defaults to GSSAPI when no mechanism is set)"
               if "sasl.mechanisms" not in conf else ""))
    if mechanism == "OAUTHBEARER" and not is_cloud(conf) \
            and conf.get("sasl.oauthbearer.method", "").lower() != "oidc":
        raise OptionError(
            _opt("sasl.oauthbearer.method"),
            "the exactly-once Kafka sink needs OAUTHBEARER tokens from an OIDC provider or a "
            "cloud's identity: set kafka.sasl.oauthbearer.method=oidc with "
            "kafka.sasl.oauthbearer.client.id, kafka.sasl.oauthbearer.client.secret and "
            "kafka.sasl.oauthbearer.token.endpoint.url, or aws_msk_iam, azure or google "
            "(docs/secured-clusters.md)")


def _oauth_provider(conf: Mapping[str, str]):
    from kafka.net.sasl.oauth import AbstractTokenProvider

    missing = [k for k in ("sasl.oauthbearer.client.id", "sasl.oauthbearer.client.secret",
                           "sasl.oauthbearer.token.endpoint.url") if not conf.get(k)]
    if missing:
        raise OptionError(_opt(missing[0]), "is required for OAUTHBEARER with "
                                            "sasl.oauthbearer.method=oidc")

    extensions = {}
    for pair in filter(None, (p.strip() for p in
                              conf.get("sasl.oauthbearer.extensions", "").split(","))):
        key, eq, value = pair.partition("=")
        if not eq or not key.strip():
            raise OptionError(_opt("sasl.oauthbearer.extensions"),
                              "expected comma-separated key=value pairs")
        extensions[key.strip()] = value.strip()

    class _Provider(OidcTokenProvider, AbstractTokenProvider):
        pass

    return _Provider(conf["sasl.oauthbearer.token.endpoint.url"],
                     conf["sasl.oauthbearer.client.id"], conf["sasl.oauthbearer.client.secret"],
                     conf.get("sasl.oauthbearer.scope"), extensions=extensions)


def ssl_context(conf: Mapping[str, str]) -> ssl.SSLContext:
    """An SSL context from librdkafka's TLS properties (files, PEM strings, PKCS12)."""
    # Trust what librdkafka trusts: the configured CAs only, the system's when none is.
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the chain and the host name
    ca = conf.get("ssl.ca.location")
    if (not ca or ca == "probe") and not conf.get("ssl.ca.pem"):
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if ca and ca != "probe":  # "probe": librdkafka's system CAs, which the default context has
        try:
            if os.path.isdir(ca):
                ctx.load_verify_locations(capath=ca)
            else:
                ctx.load_verify_locations(cafile=ca)
        except (OSError, ssl.SSLError) as e:
            raise OptionError(_opt("ssl.ca.location"),
                              f"cannot load the CA certificates of {ca!r}: "
                              f"{getattr(e, 'strerror', None) or e}") from None
    if conf.get("ssl.ca.pem"):
        try:
            ctx.load_verify_locations(cadata=conf["ssl.ca.pem"])
        except (OSError, ssl.SSLError, ValueError) as e:
            raise OptionError(_opt("ssl.ca.pem"),
                              f"cannot load the CA certificates: {e}") from None
    if conf.get("ssl.endpoint.identification.algorithm", "https").lower() == "none":
        ctx.check_hostname = False
    if conf.get("enable.ssl.certificate.verification", "true").lower() == "false":
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    _load_client_certificate(ctx, dict(conf))
    return ctx


def _load_client_certificate(ctx: ssl.SSLContext, conf: dict[str, str]) -> None:
    if conf.get("ssl.keystore.location"):  # librdkafka's own PKCS12 client keystore
        conf = translate({"ssl.keystore.location": conf["ssl.keystore.location"],
                          "ssl.keystore.type": "PKCS12",
                          "ssl.keystore.password": conf.get("ssl.keystore.password", "")})
    cert_file, key_file = conf.get("ssl.certificate.location"), conf.get("ssl.key.location")
    cert_pem, key_pem = conf.get("ssl.certificate.pem"), conf.get("ssl.key.pem")
    password = conf.get("ssl.key.password") or None
    if not (cert_file or cert_pem):
        if key_file or key_pem:
            raise OptionError(
                _opt("ssl.certificate.location"),
                f"is required with kafka.{'ssl.key.location' if key_file else 'ssl.key.pem'}: "
                f"the client certificate that goes with the key (or kafka.ssl.certificate.pem)")
        return
    try:
        if cert_pem or key_pem:  # the ssl module loads chains from files only
            with tempfile.TemporaryDirectory(prefix="kafka-eos-tls-") as d:
                paths = []
                for name, text, file in (("cert.pem", cert_pem, cert_file),
                                         ("key.pem", key_pem, key_file)):
                    if not text and not file:
                        paths.append(None)  # the key is in the certificate's PEM
                        continue
                    if not text:
                        with open(file) as f:
                            text = f.read()
                    path = os.path.join(d, name)
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    with os.fdopen(fd, "w") as f:
                        f.write(text)
                    paths.append(path)
                ctx.load_cert_chain(paths[0], paths[1], password)
        else:
            ctx.load_cert_chain(cert_file, key_file or None, password)
    except (OSError, ssl.SSLError) as e:
        raise OptionError(
            _opt("ssl.certificate.location"),
            f"cannot load the client certificate and key ({type(e).__name__}: "
            f"{getattr(e, 'strerror', None) or e}); check kafka.ssl.certificate.location, "
            f"kafka.ssl.key.location and kafka.ssl.key.password") from None


#: The largest response frame kafka-python accepts (its default is 1 MB).
RECEIVE_MESSAGE_MAX_BYTES = 64 << 20


def kafka_python_config(conf: Mapping[str, str]) -> dict[str, Any]:
    """kafka-python client settings that authenticate as the librdkafka `conf` does."""
    protocol = protocol_of(conf)
    config: dict[str, Any] = {
        "bootstrap_servers": conf["bootstrap.servers"],
        "security_protocol": protocol,
        "client_id": conf.get("client.id", "kafka-eos-driver"),
        # The Fetch requests that settle a commit in doubt (and the tests' oracle) ask for up
        # to 8 MiB; kafka-python's default frame limit (1 MB) refuses such an answer with
        # "Invalid frame length" as soon as a partition holds more than a megabyte.
        "receive_message_max_bytes": RECEIVE_MESSAGE_MAX_BYTES,
    }
    if protocol in ("SSL", "SASL_SSL"):
        config["ssl_context"] = ssl_context(conf)
    if protocol.startswith("SASL"):
        check_commit_mechanism(conf)
        mechanism = conf["sasl.mechanisms"].upper()
        config["sasl_mechanism"] = mechanism
        if mechanism == "OAUTHBEARER":
            config["sasl_oauth_token_provider"] = (
                kafka_python_token_provider(conf) if is_cloud(conf) else _oauth_provider(conf))
        else:
            config["sasl_plain_username"] = conf.get("sasl.username", "")
            config["sasl_plain_password"] = conf.get("sasl.password", "")
    return config


# -- what to tell the user when the cluster refuses us --------------------------------------


def _has_client_certificate(conf: Mapping[str, str]) -> bool:
    return any(conf.get(k) for k in ("ssl.certificate.location", "ssl.certificate.pem",
                                     "ssl.keystore.location", "ssl.keystore.certificate.chain"))


#: How a broker that requires client certificates looks to a client that sends none: it
#: drops the connection (TLS 1.3 alerts after the handshake, so no alert may be seen).
_DROPPED = ("socket disconnected", "brokers are down", "disconnected", "unexpected eof",
            "eof occurred in violation of protocol")


def connection_hint(conf: Mapping[str, str], detail: str) -> str:
    """Which `kafka.*` options to check for a failed connection, from what failed."""
    protocol = protocol_of(conf)
    tls = protocol in ("SSL", "SASL_SSL")
    d = detail.lower()
    oauth = protocol.startswith("SASL") and conf.get("sasl.mechanisms", "").upper() == "OAUTHBEARER"
    if oauth and ("oauthbearer" in d or "token" in d or ("sasl" in d and "auth" in d)):
        # a token that was not issued (the OIDC endpoint refused the client) or was refused
        if is_cloud(conf):
            return ("no OAUTHBEARER token was accepted: check the cloud identity's options "
                    "(kafka.sasl.oauthbearer.method and its settings, docs/secured-clusters.md)")
        return ("no OAUTHBEARER token was accepted: check kafka.sasl.oauthbearer.client.id, "
                "kafka.sasl.oauthbearer.client.secret, kafka.sasl.oauthbearer.token.endpoint.url "
                "and kafka.sasl.oauthbearer.scope (or clientId / clientSecret in "
                "kafka.sasl.jaas.config)")
    if "sasl" in d and ("auth" in d or "credential" in d or "password" in d):
        return ("the broker refused the SASL credentials: check kafka.sasl.username, "
                "kafka.sasl.password and kafka.sasl.mechanism (or kafka.sasl.jaas.config)")
    if "certificate verify failed" in d or "certificate_verify_failed" in d or "self-signed" in d \
            or "unable to get local issuer" in d:
        return ("the broker's certificate is not trusted: check kafka.ssl.ca.location (or "
                "kafka.ssl.truststore.location), and kafka.ssl.endpoint.identification.algorithm "
                "if the name in the certificate does not match the address")
    if "hostname" in d or "ip address mismatch" in d:
        return ("the broker's certificate is for another host name: connect by a name the "
                "certificate lists, or set kafka.ssl.endpoint.identification.algorithm to none")
    if tls and ("certificate required" in d or "alert certificate" in d
                or "handshake failure" in d):
        return ("the broker wants a client certificate: set kafka.ssl.certificate.location and "
                "kafka.ssl.key.location (or kafka.ssl.keystore.location)")
    if tls and ("wrong version" in d or "record layer" in d or "unexpected eof" in d
                or "ssl" in d):
        hint = (f"the TLS handshake failed ({protocol}): is the port a TLS listener? check "
                "kafka.security.protocol and kafka.bootstrap.servers")
    else:
        hint = (f"check kafka.bootstrap.servers and kafka.security.protocol ({protocol}): does "
                "the listener at that address speak it?")
    dropped = any(w in d for w in _DROPPED)
    if tls and not _has_client_certificate(conf) and dropped:
        hint += ("; and if the broker requires client certificates (mTLS), set "
                 "kafka.ssl.certificate.location and kafka.ssl.key.location (or "
                 "kafka.ssl.keystore.location)")
    if protocol.startswith("SASL_") and dropped:
        # A broker closes the connection right after refusing SASL credentials, and
        # kafka-python 3.0.12 drops an answer read together with the close: a bare
        # disconnection may be a refusal of the credentials.
        hint += ("; a connection dropped during authentication can also be the broker "
                 "refusing the SASL credentials: check kafka.sasl.username, kafka.sasl.password "
                 "and kafka.sasl.mechanism (or kafka.sasl.jaas.config)")
    return hint
