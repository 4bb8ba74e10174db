"""The cluster's security settings in the Java client's dialect, turned into librdkafka's.

Users arrive with two dialects: librdkafka's property names (`sasl.mechanisms`,
`ssl.ca.location`, ...) and the Java client's, from their `format("kafka")` jobs
(`sasl.jaas.config`, `sasl.mechanism`, `ssl.truststore.*`, ...). `translate` turns the Java
names into librdkafka's, converting PKCS#12 stores to PEM, and refuses what has no equivalent,
naming the option to use instead. Nothing Java-only reaches librdkafka to fail obscurely there.
Every client then reads the same librdkafka settings: librdkafka itself (the source's
consumers, the sinks' producers) and kafka-python (the Kafka sink's driver-side commit client,
through connectors/core/kafka/python_security.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from connectors.core.kafka.cloud_tokens import finish as finish_cloud_method
from connectors.core.kafka.cloud_tokens import translate_java as translate_cloud_java
from connectors.core.options import OptionError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

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
    # the clouds' Java options (MSK IAM, Google's handler, Databricks' shaded names):
    # connectors/core/kafka/cloud_tokens/java.py
    translate_cloud_java(out, parse_jaas)
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
    finish_cloud_method(out)  # a cloud token method's settings, checked now
    return out
