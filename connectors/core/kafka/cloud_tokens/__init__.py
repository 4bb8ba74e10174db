"""OAUTHBEARER tokens from the clouds' own identities: Amazon MSK IAM, Azure Event Hubs (Entra
ID), Google Cloud Managed Service for Apache Kafka.

A managed cluster authenticates with the cloud's identity, and each cloud's Java client does it
with a JVM class named in the options (`IAMLoginModule`, `GcpLoginCallbackHandler`, ...). Here
the tokens come from the clouds' Python libraries instead, in the token format each service
documents, and are handed to librdkafka as an `oauth_cb` (the source's and the sinks' clients)
and to kafka-python as a token provider (the Kafka sink's driver-side commit client).

The options stay strings from end to end (they are pickled to the tasks and logged redacted):
`translate_java` (called by connectors/core/kafka/java_options.translate) turns the Java
options into `kafka.sasl.oauthbearer.method=aws_msk_iam|azure|google` with this package's
`aws.*` / `azure.*` settings; `librdkafka_client_conf` swaps those for the callback where a
librdkafka client is built, in every process (driver and executors) that builds one.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from connectors.core.kafka.cloud_tokens.base import CloudTokenSource, method_of
from connectors.core.kafka.cloud_tokens.java import translate_java
from connectors.core.kafka.cloud_tokens.settings import (
    METHODS,
    OWN_KEYS,
    finish,
    is_cloud,
)

__all__ = ["METHODS", "CloudTokenSource", "finish", "is_cloud", "kafka_python_token_provider",
           "librdkafka_client_conf", "source_for", "without_cloud_settings", "translate_java", "check_tokens"]

_SOURCES: dict[tuple, CloudTokenSource] = {}
_LOCK = threading.Lock()


def _key(conf: Mapping[str, Any]) -> tuple:
    wanted = {k: v for k, v in conf.items()
              if k in OWN_KEYS or k.startswith(("aws.", "azure.", "google."))
              or k.startswith("sasl.oauthbearer.") or k == "bootstrap.servers"}
    return tuple(sorted((k, str(v)) for k, v in wanted.items()))


def source_for(conf: Mapping[str, Any]) -> CloudTokenSource:
    """The token source of these settings, one per process: every client of the process
    (consumers, producers, admin clients, the commit client) shares its cached token."""
    from connectors.core.kafka.cloud_tokens.settings import build_source

    key = _key(conf)
    with _LOCK:
        source = _SOURCES.get(key)
        if source is None:
            source = _SOURCES[key] = build_source(conf)
        return source


def without_cloud_settings(conf: Mapping[str, Any]) -> dict[str, Any]:
    """`conf` less a cloud method's settings, which librdkafka does not know (a copy)."""
    out = dict(conf)
    if is_cloud(out):
        for key in list(out):
            if key in OWN_KEYS or key.startswith(("aws.", "azure.", "google.")):
                out.pop(key)
    return out


def librdkafka_client_conf(conf: Mapping[str, Any]) -> dict[str, Any]:
    """`conf` for a librdkafka client: a cloud method's settings replaced by an `oauth_cb`;
    anything else returned as it is (a copy). The first token is fetched here, so that missing
    credentials raise an OptionError in the caller's thread rather than an authentication
    error from inside librdkafka. librdkafka calls the callback when the client is created and
    again before each token expires, on its own thread (confluent-kafka 2.16, measured: no
    poll() needed), so long-lived clients keep authenticating."""
    if not is_cloud(conf):
        return dict(conf)
    source = source_for(conf)
    source.current()
    out = without_cloud_settings(conf)
    out["oauth_cb"] = source.oauth_cb
    return out


def kafka_python_token_provider(conf: Mapping[str, Any]):
    """A kafka-python token provider for the cloud method of `conf` (the commit client asks it
    at every (re-)authentication; it renews the token before it expires). The first token is
    fetched here: kafka-python would report a failure inside its SASL exchange as a dropped
    connection, and the OptionError naming what to set would be lost."""
    from kafka.net.sasl.oauth import AbstractTokenProvider

    source = source_for(conf)
    source.current()

    class _Provider(AbstractTokenProvider):
        def token(self) -> str:
            return source.token()

        def extensions(self) -> dict[str, str]:
            return {}

        def __repr__(self) -> str:
            return f"CloudTokenProvider({source!r})"

    return _Provider()


def check_tokens(conf: Mapping[str, Any]) -> None:
    """At query start, in the driver: fetch the first token, so that missing credentials, a
    missing region or a refused role fail now with an OptionError naming what to set."""
    if is_cloud(conf):
        source_for(conf).token()


__all__ += ["method_of"]
