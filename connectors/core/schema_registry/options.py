"""Options of the Schema Registry formats, shared by the `kafka-eos` source and sink.

One `RegistryOptions` per side (`value` or `key`), parsed when the DataSource is built so that a
bad option fails at `.load()` / `.start()`. Names follow Spark's `from_avro` (`mode`) and
Confluent's serializers (`schema.registry.*`, subject name strategies); every `schema.registry.*`
key but `url` is handed to confluent-kafka's `SchemaRegistryClient` as it is (basic auth, TLS,
bearer auth, timeouts). Secrets in those keys, and a password in the URL, never reach a message.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from connectors.core import extras
from connectors.core.options import OptionError, Options, is_secret
from connectors.core.redaction import MASK, redact_text

Side = Literal["value", "key"]

#: What the `value` / `key` bytes are: `binary` is Spark's row, unchanged.
FORMATS = ("binary", "avro", "protobuf", "json-schema")
REGISTRY_FORMATS = FORMATS[1:]
MODES = ("FAILFAST", "PERMISSIVE")
#: Confluent's subject name strategies, by short name; their class names are accepted too.
STRATEGIES = ("topic", "record", "topic-record")
_STRATEGY_ALIASES = {
    "topic": "topic", "topicnamestrategy": "topic",
    "record": "record", "recordnamestrategy": "record",
    "topic-record": "topic-record", "topicrecordnamestrategy": "topic-record",
}

OPTION_PREFIX = "schema.registry."
URL_OPTION = "schema.registry.url"
MODE_OPTION = "mode"
RETRY_TIMEOUT_OPTION = "schemaRegistryRetryTimeout"
#: A registry outage is retried this long (with backoff) before the query fails.
DEFAULT_RETRY_TIMEOUT_MS = 120_000
#: Per-request HTTP timeout when the user sets none (httpx's `None` would wait forever).
DEFAULT_HTTP_TIMEOUT_S = 10.0

#: Client settings confluent-kafka wants as numbers; Spark hands every option over as a string.
_NUMERIC_CLIENT_KEYS = ("timeout", "cache.capacity", "cache.latest.ttl.sec", "max.retries",
                        "retries.wait.ms", "retries.max.wait.ms")
#: Client settings holding a secret that `connectors.core.options.is_secret` does not catch by name.
_SECRET_CLIENT_KEYS = ("basic.auth.user.info",)


def side_option(side: Side, name: str) -> str:
    """`valueFormat`, `keySubject`, ...: the per-side option name as the docs spell it."""
    return f"{side}{name[0].upper()}{name[1:]}"


def registry_option_names(sides: tuple[Side, ...] = ("value", "key")) -> tuple[str, ...]:
    """Every option this module reads (besides `schema.registry.*`), for `reject_unknown`."""
    per_side = ("format", "subject", "subjectNameStrategy", "recordName", "schemaVersion")
    names = [side_option(s, n) for s in sides for n in per_side]
    names += ["includeRawValue" if s == "value" else "includeRawKey" for s in sides]
    return (*names, MODE_OPTION, RETRY_TIMEOUT_OPTION)


def is_client_secret(key: str) -> bool:
    """Whether a `schema.registry.*` client setting (without the prefix) holds a secret."""
    return is_secret(key) or key.lower() in _SECRET_CLIENT_KEYS


def url_without_credentials(url: str) -> str:
    """`url` (or a comma-separated list of them) with any `user:password@` removed."""
    parts = []
    for one in url.split(","):
        one = one.strip()
        try:
            split = urlsplit(one)
        except ValueError:
            parts.append(redact_text(one))
            continue
        host = split.netloc.rsplit("@", 1)[-1]
        parts.append(urlunsplit((split.scheme, host, split.path, split.query, split.fragment)))
    return ",".join(parts)


def redact_client_conf(conf: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a client config safe to print: secrets masked, the URL without credentials."""
    out: dict[str, Any] = {}
    for k, v in conf.items():
        if k == "url":
            out[k] = url_without_credentials(str(v))
        elif is_client_secret(k):
            out[k] = MASK
        else:
            out[k] = v
    return out


def _client_conf(options: Options, url: str) -> dict[str, Any]:
    """The `SchemaRegistryClient` config: `schema.registry.*` without the prefix, numbers as
    numbers. The client's own retries are off unless asked for: `RegistryClient` retries under
    one deadline (`schemaRegistryRetryTimeout`)."""
    conf: dict[str, Any] = {"timeout": DEFAULT_HTTP_TIMEOUT_S, "max.retries": 0}
    for key, value in options.with_prefix(OPTION_PREFIX).items():
        if key == "url":
            continue
        if key in _NUMERIC_CLIENT_KEYS:
            try:
                value = float(value) if "." in str(value) or key == "timeout" else int(value)
            except ValueError:
                raise OptionError(OPTION_PREFIX + key,
                                  f"expected a number, got {value!r}") from None
        conf[key] = value
    conf["url"] = url
    return conf


_SUBJECT_CHARS = re.compile(r"^[^\x00-\x1f]+$")


@dataclass(frozen=True)
class RegistryOptions:
    """The registry options of one side (`value` or `key`) of a Kafka record. Picklable: the
    source and sink hand it to their tasks, which build their own client from it."""

    side: Side
    format: str = "binary"
    url: str | None = field(default=None, repr=False)  # may hold a password: see safe_url
    client_conf: dict[str, Any] = field(default_factory=dict, repr=False)
    subject_strategy: str = "topic"
    subject: str | None = None
    record_name: str | None = None
    schema_version: int | None = None  # None: the subject's latest version at query start
    mode: str = "FAILFAST"
    include_raw: bool = False
    retry_timeout_s: float = DEFAULT_RETRY_TIMEOUT_MS / 1000

    @property
    def enabled(self) -> bool:
        """Whether this side goes through the registry (any format but `binary`)."""
        return self.format != "binary"

    @property
    def permissive(self) -> bool:
        return self.mode == "PERMISSIVE"

    @property
    def format_option(self) -> str:
        return side_option(self.side, "format")

    @property
    def raw_column(self) -> str:
        """The binary column that keeps the record's bytes under `includeRawValue`/`Key`."""
        return "rawValue" if self.side == "value" else "rawKey"

    @property
    def safe_url(self) -> str:
        """The registry URL as it may appear in logs and errors: without credentials."""
        return url_without_credentials(self.url or "")

    def safe_client_conf(self) -> dict[str, Any]:
        return redact_client_conf(self.client_conf)

    @classmethod
    def parse(cls, options: Mapping[str, str] | Options, side: Side = "value") -> RegistryOptions:
        """The options of `side`, validated: every error names the option and what it accepts,
        and never shows a secret."""
        if side not in ("value", "key"):
            raise ValueError(f"side must be 'value' or 'key', not {side!r}")
        opts = options if isinstance(options, Options) else Options(options)
        fmt = opts.get_choice(side_option(side, "format"), FORMATS, "binary")
        mode_raw = (opts.get(MODE_OPTION) or "FAILFAST").strip().upper()
        if mode_raw not in MODES:
            raise OptionError(MODE_OPTION, f"expected one of {', '.join(MODES)}; "
                                           f"got {opts.get(MODE_OPTION)!r}")
        retry_ms = opts.get_duration_ms(RETRY_TIMEOUT_OPTION, DEFAULT_RETRY_TIMEOUT_MS)
        if retry_ms <= 0:
            raise OptionError(RETRY_TIMEOUT_OPTION,
                              f"must be a positive duration such as '2m' or '30s', not {retry_ms} ms")
        raw_option = "includeRawValue" if side == "value" else "includeRawKey"
        include_raw = opts.get_bool(raw_option, False)
        if fmt == "binary":
            return cls(side=side, mode=mode_raw, include_raw=include_raw,
                       retry_timeout_s=retry_ms / 1000)

        url = opts.get(URL_OPTION)
        if url is None or not url.strip():
            raise OptionError(URL_OPTION, f"is required when {side_option(side, 'format')} is "
                                          f"{fmt} (the Schema Registry's base URL, e.g. "
                                          f"http://registry:8081)")
        url = url.strip()
        for one in url.split(","):
            if not one.strip().lower().startswith(("http://", "https://")):
                raise OptionError(URL_OPTION, "expected http:// or https:// URLs (comma-separated "
                                              f"for several); got {url_without_credentials(one)!r}")
        strategy_option = side_option(side, "subjectNameStrategy")
        strategy_raw = (opts.get(strategy_option) or "topic").strip()
        strategy = _STRATEGY_ALIASES.get(strategy_raw.lower().rsplit(".", 1)[-1])
        if strategy is None:
            raise OptionError(strategy_option, f"expected one of {', '.join(STRATEGIES)} (or "
                                               f"Confluent's TopicNameStrategy, RecordNameStrategy, "
                                               f"TopicRecordNameStrategy); got {strategy_raw!r}")
        subject = _stripped(opts.get(side_option(side, "subject")))
        if subject is not None and not _SUBJECT_CHARS.match(subject):
            raise OptionError(side_option(side, "subject"), "must not contain control characters")
        record_name = _stripped(opts.get(side_option(side, "recordName")))
        version_option = side_option(side, "schemaVersion")
        version_raw = _stripped(opts.get(version_option))
        version: int | None = None
        if version_raw is not None and version_raw.lower() != "latest":
            version = opts.get_int(version_option, minimum=1)
        parsed = cls(side=side, format=fmt, url=url, client_conf=_client_conf(opts, url),
                     subject_strategy=strategy, subject=subject, record_name=record_name,
                     schema_version=version, mode=mode_raw, include_raw=include_raw,
                     retry_timeout_s=retry_ms / 1000)
        extras.require("registry")  # the client checks its settings: needs the extra
        _check_client_conf(parsed)
        return parsed

    def subject_for(self, topic: str | None, record_name: str | None = None) -> str:
        """The subject by the options: `valueSubject` if given, else the strategy's name for
        `topic` and the record (`valueRecordName`, else `record_name` from the schema)."""
        if self.subject is not None:
            return self.subject
        name = self.record_name or record_name
        if self.subject_strategy == "topic":
            if not topic:
                raise OptionError(side_option(self.side, "subject"),
                                  "is required when the topic is not known up front (a pattern or "
                                  "several topics): name the subject to read the schema from")
            return f"{topic}-{self.side}"
        if not name:
            raise OptionError(side_option(self.side, "recordName"),
                              f"is required with {side_option(self.side, 'subjectNameStrategy')}="
                              f"{self.subject_strategy} (the record's fully qualified name), "
                              f"unless {side_option(self.side, 'subject')} is given")
        if self.subject_strategy == "record":
            return name
        if not topic:
            raise OptionError(side_option(self.side, "subject"),
                              "is required with topic-record naming when the topic is not known "
                              "up front")
        return f"{topic}-{name}"


def _stripped(value: str | None) -> str | None:
    if value is None or not value.strip():
        return None
    return value.strip()


def _check_client_conf(opts: RegistryOptions) -> None:
    """Build a client once (no request is sent) so that a setting confluent-kafka refuses fails
    at `.load()`, naming the option, with secrets out of the message."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    try:
        SchemaRegistryClient(dict(opts.client_conf))
    except (ValueError, TypeError) as e:
        message = redact_text(str(e))
        unknown = re.match(r"Unrecognized properties: (.*)", message)
        if unknown:
            keys = [k.strip() for k in unknown.group(1).split(",")]
            raise OptionError(OPTION_PREFIX + keys[0],
                              "is not a Schema Registry client setting (accepted under "
                              f"'{OPTION_PREFIX}*': url, basic.auth.user.info, "
                              "bearer.auth.* (with bearer.auth.credentials.source), ssl.ca.location, "
                              "ssl.certificate.location, ssl.key.location, ssl.key.password, "
                              "proxy, timeout, cache.capacity, cache.latest.ttl.sec, "
                              "max.retries, retries.wait.ms, retries.max.wait.ms)") from None
        raise OptionError(OPTION_PREFIX + "*", f"the Schema Registry client refused its "
                                               f"settings: {message}") from None
