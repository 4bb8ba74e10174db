"""The cluster's security settings, read once from the `kafka.*` options and spoken by every
client: librdkafka (the source's consumers, the sinks' producers) and kafka-python (the Kafka
sink's driver-side commit client).

Users arrive with two dialects: librdkafka's property names (`sasl.mechanisms`,
`ssl.ca.location`, ...) and the Java client's, from their `format("kafka")` jobs
(`sasl.jaas.config`, `sasl.mechanism`, `ssl.truststore.*`, ...). `translate` turns the Java
names into librdkafka's, converting PKCS#12 stores to PEM, and refuses what has no equivalent,
naming the option to use instead. Nothing Java-only reaches librdkafka to fail obscurely there.
`kafka_python_config` then maps the librdkafka names onto kafka-python's settings, so both
clients authenticate the same way from the same options.
"""

from __future__ import annotations

import json
import os
import re
import ssl
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from connectors.options import OptionError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: Mechanisms the driver's commit client can speak (kafka-python); GSSAPI needs a Kerberos
#: stack on the driver that this package does not install.
COMMIT_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")

_JAAS_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": "PLAIN",
    "org.apache.kafka.common.security.scram.ScramLoginModule": "SCRAM",
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule": "OAUTHBEARER",
    "com.sun.security.auth.module.Krb5LoginModule": "GSSAPI",
}
_JAAS = re.compile(r"^\s*(?P<module>[\w.$]+)\s+(?P<flag>required|requisite|sufficient|optional)"
                   r"(?:\s+(?P<body>.*?))?\s*;?\s*$", re.S | re.I)
_JAAS_OPTION = re.compile(r'\s*([\w.$-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"=]+))')
#: Kafka's own login callback handler for OIDC client credentials (3.4+, and 3.1-3.3's):
#: what librdkafka's sasl.oauthbearer.method=oidc does.
_OIDC_HANDLERS = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler",
)

#: Java client settings with no librdkafka counterpart, and what to use instead.
_REFUSED_JAVA = {
    "ssl.protocol": "librdkafka negotiates the highest TLS version both sides speak; "
                    "remove it",
    "ssl.enabled.protocols": "librdkafka negotiates the TLS version; remove it",
    "ssl.keymanager.algorithm": "a JVM setting; remove it",
    "ssl.trustmanager.algorithm": "a JVM setting; remove it",
    "ssl.secure.random.implementation": "a JVM setting; remove it",
    "ssl.engine.factory.class": "a JVM setting; use the PEM options kafka.ssl.ca.location, "
                                "kafka.ssl.certificate.location and kafka.ssl.key.location",
    "ssl.provider": "a JVM setting; remove it",
    "sasl.login.callback.handler.class": "a JVM class; for OAUTHBEARER with OIDC set "
        "kafka.sasl.oauthbearer.method=oidc, kafka.sasl.oauthbearer.client.id, "
        "kafka.sasl.oauthbearer.client.secret and kafka.sasl.oauthbearer.token.endpoint.url",
    "sasl.client.callback.handler.class": "a JVM class; use kafka.sasl.username and "
                                          "kafka.sasl.password",
    "sasl.login.class": "a JVM class; remove it",
    **{f"sasl.login.refresh.{name}": "Java's token refresh timing; librdkafka renews tokens "
                                     "before they expire by itself; remove it"
       for name in ("window.factor", "window.jitter", "min.period.seconds", "buffer.seconds")},
    **{f"sasl.login.{name}": "Java's token endpoint timing, which librdkafka does not "
                             "expose; remove it"
       for name in ("connect.timeout.ms", "read.timeout.ms", "retry.backoff.ms",
                    "retry.backoff.max.ms")},
    "sasl.oauthbearer.scope.claim.name": "Java's check of the token's scope claim, which "
                                         "librdkafka does not make; remove it",
    **{f"sasl.oauthbearer.{name}": "a broker setting (validating clients' tokens); remove it"
       for name in ("jwks.endpoint.url", "jwks.endpoint.refresh.ms", "expected.audience",
                    "expected.issuer", "clock.skew.seconds")},
    "security.providers": "a JVM setting; remove it",
    "key.serializer": "the sink writes the key column's bytes; remove it",
    "value.serializer": "the sink writes the value column's bytes; remove it",
    "key.deserializer": "the source returns the key as bytes; remove it",
    "value.deserializer": "the source returns the value as bytes; remove it",
    "interceptor.classes": "a JVM class; remove it",
}
#: Their option names (`kafka.` + each), documented in docs/secured-clusters.md.
REFUSED_JAVA_OPTIONS = tuple(f"kafka.{name}" for name in _REFUSED_JAVA)


def _opt(name: str) -> str:
    return f"kafka.{name}"


# -- Java names -> librdkafka names ---------------------------------------------------------


_JAVA_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def _java_unescape(quoted: str) -> str:
    """A quoted JAAS value as Java's StreamTokenizer reads it: \\t, \\n... and octal \\101
    are characters, any other escaped character is itself (\\" and \\\\ included)."""
    def one(m: re.Match) -> str:
        escaped = m.group(1)
        if escaped[0] in "01234567":
            return chr(int(escaped, 8))
        return _JAVA_ESCAPES.get(escaped, escaped)

    return re.sub(r"\\([0-3][0-7]{0,2}|[4-7][0-7]?|.)", one, quoted, flags=re.S)


def parse_jaas(value: str) -> tuple[str, dict[str, str]]:
    """(mechanism family, options) of a one-module JAAS line; never echoes the value."""
    m = _JAAS.match(value or "")
    if not m or m.group("module") not in _JAAS_MODULES:
        known = ", ".join(sorted(_JAAS_MODULES))
        raise OptionError(
            _opt("sasl.jaas.config"),
            f"expected one login module of {known} followed by 'required' and its options, "
            f"e.g. org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="user" password="...";  (or set kafka.sasl.username and '
            f"kafka.sasl.password instead)",
        )
    body, position, options = m.group("body") or "", 0, {}
    while body[position:].strip():
        option = _JAAS_OPTION.match(body, position)
        if option is None:
            after = f" after its option {list(options)[-1]}" if options else ""
            raise OptionError(
                _opt("sasl.jaas.config"),
                f"expected key=\"value\" options after the login module and 'required', and "
                f"nothing else{after} (one login module, ended by ';')")
        key, quoted, bare = option.groups()
        options[key] = _java_unescape(quoted) if quoted is not None else bare
        position = option.end()
    return _JAAS_MODULES[m.group("module")], options


def _move(conf: dict[str, str], java: str, rdkafka: str) -> None:
    """Rename `java` to `rdkafka`, refusing two different values (case aside) for one
    setting."""
    if java not in conf:
        return
    value = conf.pop(java)
    if rdkafka in conf and conf[rdkafka].strip().upper() != value.strip().upper():
        raise OptionError(
            _opt(java), f"conflicts with kafka.{rdkafka} (the same setting in librdkafka's "
                        f"spelling) set to another value; keep one of the two")
    conf[rdkafka] = value


def _read_store(option: str, location: str) -> bytes:
    try:
        with open(location, "rb") as f:
            return f.read()
    except OSError as e:
        raise OptionError(_opt(option), f"cannot read {location!r}: {e.strerror}") from None


def _pkcs12(option: str, location: str, password: str | None):
    """(key, certificate, additional certificates) of the PKCS#12 store at `location`, given by
    the option `option` (ssl.truststore.location or ssl.keystore.location)."""
    from cryptography.hazmat.primitives.serialization import pkcs12

    password_option = option.replace(".location", ".password")
    data = _read_store(option, location)
    if data[:4] == b"\xfe\xed\xfe\xed":
        raise OptionError(
            _opt(option),
            f"{location!r} is a JKS store, which cannot be read here: convert it to PKCS12 "
            f"(keytool -importkeystore -srcstoretype JKS -deststoretype PKCS12) or to PEM and "
            f"use kafka.ssl.ca.location / kafka.ssl.certificate.location / "
            f"kafka.ssl.key.location",
        )
    try:
        return pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except ValueError:
        pass
    if password:
        raise OptionError(
            _opt(password_option),
            f"does not open the PKCS12 store {location!r} (kafka.{option}): wrong password, or "
            f"not a PKCS12 file") from None
    raise OptionError(
        _opt(option), f"{location!r} is not a PKCS12 store that opens without a password: "
                      f"set kafka.{password_option}")


def _pem(cert) -> str:
    from cryptography.hazmat.primitives.serialization import Encoding

    return cert.public_bytes(Encoding.PEM).decode()


def _translate_truststore(conf: dict[str, str]) -> None:
    location = conf.pop("ssl.truststore.location", None)
    password = conf.pop("ssl.truststore.password", None)
    kind = conf.pop("ssl.truststore.type", "JKS" if location else "").upper()
    pem = conf.pop("ssl.truststore.certificates", None)
    if pem is not None:
        conf["ssl.ca.pem"] = pem
        return
    if location is None:
        return
    if kind == "PEM":
        conf.setdefault("ssl.ca.location", location)
        return
    if kind not in ("PKCS12", "JKS"):
        raise OptionError(_opt("ssl.truststore.type"),
                          f"expected PKCS12, JKS or PEM; got {kind!r}")
    _, cert, extra = _pkcs12("ssl.truststore.location", location, password)
    certs = ([cert] if cert is not None else []) + list(extra or [])
    if not certs:
        raise OptionError(_opt("ssl.truststore.location"),
                          f"{location!r} holds no certificate")
    conf["ssl.ca.pem"] = "".join(_pem(c) for c in certs)


def _translate_keystore(conf: dict[str, str]) -> None:
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        NoEncryption,
        PrivateFormat,
    )

    kind = conf.pop("ssl.keystore.type", "").upper()
    key_password = conf.pop("ssl.key.password", None)
    if "ssl.keystore.key" in conf or "ssl.keystore.certificate.chain" in conf:
        for given, other in (("ssl.keystore.key", "ssl.keystore.certificate.chain"),
                             ("ssl.keystore.certificate.chain", "ssl.keystore.key")):
            if not conf.get(other, "").strip():
                raise OptionError(_opt(other), f"is required with kafka.{given}: the client "
                                               f"certificate chain and its private key, in PEM")
        conf["ssl.key.pem"] = conf.pop("ssl.keystore.key")
        conf["ssl.certificate.pem"] = conf.pop("ssl.keystore.certificate.chain")
        if key_password:
            conf["ssl.key.password"] = key_password
        return
    location = conf.get("ssl.keystore.location")
    if location is None:
        if key_password is not None:
            conf["ssl.key.password"] = key_password
        return
    if kind == "PEM":
        conf.pop("ssl.keystore.location")
        conf.pop("ssl.keystore.password", None)
        conf["ssl.certificate.location"] = location
        conf["ssl.key.location"] = location
        if key_password:
            conf["ssl.key.password"] = key_password
        return
    if kind not in ("", "PKCS12", "JKS"):
        raise OptionError(_opt("ssl.keystore.type"), f"expected PKCS12, JKS or PEM; got {kind!r}")
    # librdkafka reads PKCS12 itself, but kafka-python and executors without the file cannot:
    # convert once, here, to PEM held in the options.
    password = conf.pop("ssl.keystore.password", None)
    conf.pop("ssl.keystore.location")
    key, cert, extra = _pkcs12("ssl.keystore.location", location, password)
    if key is None or cert is None:
        raise OptionError(_opt("ssl.keystore.location"),
                          f"{location!r} holds no private key with its certificate")
    conf["ssl.key.pem"] = key.private_bytes(
        Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
    conf["ssl.certificate.pem"] = "".join(_pem(c) for c in [cert, *(extra or [])])


def _set_once(conf: dict[str, str], name: str, value: str, jaas_name: str) -> None:
    """Set `name` from the JAAS option `jaas_name`, refusing another value already given."""
    if conf.get(name, value) != value:
        raise OptionError(
            _opt("sasl.jaas.config"),
            f"its {jaas_name} differs from kafka.{name}: the same setting given twice with "
            f"different values; keep one of the two")
    conf[name] = value


def _translate_jaas(conf: dict[str, str]) -> None:
    if "sasl.jaas.config" not in conf:
        return
    family, jaas = parse_jaas(conf.pop("sasl.jaas.config"))
    mechanism = conf.get("sasl.mechanisms", "").upper()
    if family == "GSSAPI":
        raise OptionError(
            _opt("sasl.jaas.config"),
            "Kerberos (GSSAPI) is not supported: the exactly-once commit cannot speak it. "
            "Use PLAIN, SCRAM-SHA-256/512 or OAUTHBEARER")
    expected = {"PLAIN": ("PLAIN",), "SCRAM": ("SCRAM-SHA-256", "SCRAM-SHA-512"),
                "OAUTHBEARER": ("OAUTHBEARER",)}[family]
    if mechanism and mechanism not in expected:
        raise OptionError(
            _opt("sasl.jaas.config"),
            f"its login module is for {' or '.join(expected)} but kafka.sasl.mechanism is "
            f"{mechanism}")
    if not mechanism and len(expected) > 1:
        # Java defaults to GSSAPI; guessing one SCRAM hash would fail as a wrong password.
        raise OptionError(
            _opt("sasl.mechanism"),
            f"is required with a {family} login module in kafka.sasl.jaas.config: "
            f"{' or '.join(expected)}, as the broker's listener expects")
    conf["sasl.mechanisms"] = mechanism or expected[0]
    if family in ("PLAIN", "SCRAM"):
        if "username" not in jaas or "password" not in jaas:
            raise OptionError(_opt("sasl.jaas.config"),
                              "must give both username=\"...\" and password=\"...\"")
        _set_once(conf, "sasl.username", jaas["username"], "username")
        _set_once(conf, "sasl.password", jaas["password"], "password")
        return
    # OAUTHBEARER: Java's OIDC client credentials live in the JAAS options.
    for java, rd in (("clientId", "sasl.oauthbearer.client.id"),
                     ("clientSecret", "sasl.oauthbearer.client.secret"),
                     ("scope", "sasl.oauthbearer.scope")):
        if java in jaas:
            _set_once(conf, rd, jaas[java], java)
    extensions = {k[len("extension_"):]: v for k, v in jaas.items()
                  if k.startswith("extension_")}
    if extensions:  # e.g. Confluent Cloud's extension_logicalCluster, extension_identityPoolId
        _set_once(conf, "sasl.oauthbearer.extensions",
                  ",".join(f"{k}={v}" for k, v in extensions.items()), "extension_*")
    if "sasl.oauthbearer.token.endpoint.url" in conf:
        conf.setdefault("sasl.oauthbearer.method", "oidc")


def translate(conf: Mapping[str, str]) -> dict[str, str]:
    """librdkafka configuration from `kafka.*` options given in either dialect."""
    out = {k.lower(): v for k, v in conf.items()}
    # Java's OIDC callback handler is what sasl.oauthbearer.method=oidc does: dropped, checked
    # below to come with the token endpoint
    oidc_handler = out.get("sasl.login.callback.handler.class", "").strip() in _OIDC_HANDLERS
    if oidc_handler:
        out.pop("sasl.login.callback.handler.class")
    for name, why in _REFUSED_JAVA.items():
        if name in out:
            raise OptionError(_opt(name), f"is a Java client setting with no librdkafka "
                                          f"counterpart: {why}")
    _move(out, "sasl.mechanism", "sasl.mechanisms")
    if "sasl.mechanisms" in out:
        out["sasl.mechanisms"] = out["sasl.mechanisms"].strip().upper()
    _translate_jaas(out)
    if oidc_handler and out.get("sasl.oauthbearer.method", "").lower() != "oidc":
        raise OptionError(
            _opt("sasl.oauthbearer.token.endpoint.url"),
            "is required with Kafka's OAuthBearerLoginCallbackHandler in "
            "kafka.sasl.login.callback.handler.class: the OIDC provider's token endpoint "
            "(with clientId and clientSecret in kafka.sasl.jaas.config)")
    _translate_truststore(out)
    _translate_keystore(out)
    if "ssl.endpoint.identification.algorithm" in out:
        value = out["ssl.endpoint.identification.algorithm"].strip().lower()
        if value in ("", "none"):
            out["ssl.endpoint.identification.algorithm"] = "none"
        elif value == "https":
            out["ssl.endpoint.identification.algorithm"] = "https"
        else:
            raise OptionError(_opt("ssl.endpoint.identification.algorithm"),
                              f"expected https (verify the broker's host name, the default) or "
                              f"an empty string / none (do not); got {value!r}")
    if "security.protocol" in out:
        protocol = out["security.protocol"].strip().upper()
        if protocol not in PROTOCOLS:
            raise OptionError(_opt("security.protocol"),
                              f"expected one of {', '.join(PROTOCOLS)}; got {protocol!r}")
        out["security.protocol"] = protocol
    return out


# -- librdkafka names -> kafka-python -------------------------------------------------------


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
    if mechanism == "OAUTHBEARER" and conf.get("sasl.oauthbearer.method", "").lower() != "oidc":
        raise OptionError(
            _opt("sasl.oauthbearer.method"),
            "the exactly-once Kafka sink needs OAUTHBEARER tokens from an OIDC provider: set "
            "kafka.sasl.oauthbearer.method=oidc with kafka.sasl.oauthbearer.client.id, "
            "kafka.sasl.oauthbearer.client.secret and kafka.sasl.oauthbearer.token.endpoint.url")


class OidcTokenProvider:
    """OAUTHBEARER tokens by the OIDC client-credentials grant, as librdkafka's
    `sasl.oauthbearer.method=oidc` fetches them; cached until shortly before they expire."""

    def __init__(self, endpoint: str, client_id: str, client_secret: str,
                 scope: str | None = None, timeout_s: float = 10.0,
                 extensions: Mapping[str, str] | None = None) -> None:
        self._endpoint, self._client_id, self._secret = endpoint, client_id, client_secret
        self._scope, self._timeout = scope, timeout_s
        self._extensions = dict(extensions or {})
        self._token: str | None = None
        self._expires = 0.0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OidcTokenProvider({self._endpoint!r}, client_id={self._client_id!r})"

    def token(self) -> str:
        with self._lock:
            if self._token is None or time.monotonic() > self._expires:
                self._token, lifetime = self._fetch()
                # renewed at 80% of its lifetime, never used past it
                self._expires = time.monotonic() + max(lifetime, 0.0) * 0.8
            return self._token

    def extensions(self) -> dict[str, str]:
        """SASL extensions sent with the token (librdkafka's sasl.oauthbearer.extensions)."""
        return dict(self._extensions)

    def _fetch(self) -> tuple[str, float]:
        form = {"grant_type": "client_credentials"}
        if self._scope:
            form["scope"] = self._scope
        request = urllib.request.Request(
            self._endpoint, data=urllib.parse.urlencode(form).encode(), method="POST",
            headers={"Content-Type": "application/x-www-form-urlencoded",
                     "Accept": "application/json"})
        import base64

        # RFC 6749 2.3.1 (and Java's client): each form-urlencoded, then Basic
        form_encode = lambda v: urllib.parse.quote_plus(v, safe="")  # noqa: E731
        basic = base64.b64encode(
            f"{form_encode(self._client_id)}:{form_encode(self._secret)}".encode()
        ).decode()
        request.add_header("Authorization", f"Basic {basic}")
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as response:
                body = json.load(response)
        except Exception as e:  # noqa: BLE001 - every failure is the endpoint's
            raise OptionError(
                _opt("sasl.oauthbearer.token.endpoint.url"),
                f"no token from {self._endpoint}: {type(e).__name__}: {self._hide(str(e))}"
                f"{self._error_of(e)} (check kafka.sasl.oauthbearer.client.id and "
                f"kafka.sasl.oauthbearer.client.secret)"
            ) from None
        token = body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise OptionError(_opt("sasl.oauthbearer.token.endpoint.url"),
                              f"the answer of {self._endpoint} has no access_token")
        try:
            lifetime = float(body.get("expires_in", 300))
        except (TypeError, ValueError):
            lifetime = 300.0
        return token, lifetime

    def _hide(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text

    def _error_of(self, e: Exception) -> str:
        """The OAuth error of a refused request (RFC 6749 5.2: error, error_description)."""
        if not isinstance(e, urllib.error.HTTPError):
            return ""
        try:
            answer = json.loads(e.read(4096) or b"{}")
        except Exception:  # noqa: BLE001 - not JSON: nothing more to say
            return ""
        if not isinstance(answer, dict) or "error" not in answer:
            return ""
        text = str(answer["error"])
        if answer.get("error_description"):
            text += f": {answer['error_description']}"
        return f" ({self._hide(text[:300])})"


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
            config["sasl_oauth_token_provider"] = _oauth_provider(conf)
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
