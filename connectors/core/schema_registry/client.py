"""The Schema Registry client the source and sink share: confluent-kafka's own
`SchemaRegistryClient` built from `RegistryOptions`, its calls retried with backoff under one
deadline (`schemaRegistryRetryTimeout`), and schemas cached per process by id, so that each
worker asks the registry once per schema id however many tasks and batches it runs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka.schema_registry.common._httpx_compat import httpx
from confluent_kafka.schema_registry import RegisteredSchema, Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from tenacity import RetryCallState, RetryError, Retrying, retry_if_exception, stop_before_delay

from connectors.core.redaction import redact_text
from connectors.core.schema_registry.options import RETRY_TIMEOUT_OPTION, RegistryOptions

log = logging.getLogger(__name__)
T = TypeVar("T")

#: HTTP answers that say "try again" (as confluent-kafka's own client reads them).
_RETRIABLE_STATUS = (408, 429, 500, 502, 503, 504)
#: Confluent's error codes for "no such subject / version / schema id".
SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403


class RegistryError(RuntimeError):
    """The registry answered, but not with what was asked (no such subject, schema refused)."""

    def __init__(self, message: str, *, status: int | None = None, code: int | None = None):
        super().__init__(message)
        self.status = status
        self.code = code

    @property
    def not_found(self) -> bool:
        return self.status == 404


class UnknownSchemaId(RegistryError):
    """A record names a schema id the registry does not know."""


class RegistryUnavailable(RuntimeError):
    """The registry could not be reached (or kept failing) until the retry deadline ran out.
    The message names the URL without credentials; not itself retried by callers."""


def is_transient(exc: BaseException) -> bool:
    """A registry that did not answer, or answered 'busy / try later'."""
    if isinstance(exc, httpx.TransportError):
        return True
    if isinstance(exc, SchemaRegistryError):
        return exc.http_status_code in _RETRIABLE_STATUS
    return isinstance(exc, (ConnectionError, TimeoutError))


class RegistryClient:
    """One registry, as the options describe it. `raw` is confluent-kafka's client, for its
    serializers; everything else goes through `call` (retried) and the id cache."""

    def __init__(self, opts: RegistryOptions, *, sleep: Callable[[float], None] = time.sleep):
        if not opts.enabled or not opts.url:
            raise ValueError(f"{opts.format_option} is binary: no Schema Registry to talk to")
        self.opts = opts
        self.raw = SchemaRegistryClient(dict(opts.client_conf))
        self._sleep = sleep

    @property
    def safe_url(self) -> str:
        return self.opts.safe_url

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """`fn()`, retried with exponential backoff while the registry is unreachable or busy,
        up to `schemaRegistryRetryTimeout`; then RegistryUnavailable naming the URL. An answer
        that is an error (404, 409, 422, 401) is a RegistryError at once."""
        started = time.monotonic()
        timeout_s = self.opts.retry_timeout_s

        def before_sleep(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome else None
            (log.warning if state.attempt_number == 1 else log.info)(
                "kafka-eos: Schema Registry at %s did not answer %s (attempt %d, %.1f s so far, "
                "retrying for up to %s=%.0f s): %s", self.safe_url, what, state.attempt_number,
                time.monotonic() - started, RETRY_TIMEOUT_OPTION, timeout_s, self._describe(error))

        retrying = Retrying(retry=retry_if_exception(is_transient),
                            stop=stop_before_delay(timeout_s),
                            wait=lambda s: min(5.0, 0.2 * 2 ** (s.attempt_number - 1)),
                            before_sleep=before_sleep, sleep=self._sleep)
        try:
            return retrying(fn)
        except RetryError as e:
            last = e.last_attempt.exception()
            raise RegistryUnavailable(
                f"kafka-eos: the Schema Registry at {self.safe_url} did not answer {what} for "
                f"{time.monotonic() - started:.0f} s ({e.last_attempt.attempt_number} attempts; "
                f"the last: {self._describe(last)}). Gave up after {RETRY_TIMEOUT_OPTION}="
                f"{timeout_s:.0f} s: check that the registry is up and reachable from here, or "
                f"raise {RETRY_TIMEOUT_OPTION}") from None
        except SchemaRegistryError as e:
            raise RegistryError(
                f"kafka-eos: the Schema Registry at {self.safe_url} refused {what}: "
                f"{self._describe(e)}", status=e.http_status_code, code=e.error_code) from None

    def _describe(self, error: BaseException | None) -> str:
        """An error's text with credentials out: the configured URL (which may carry a
        password) replaced by its safe form, any other URL password masked."""
        if error is None:
            return "no error"
        text = f"{type(error).__name__}: {error}"
        for one in (self.opts.url or "").split(","):
            if one.strip():
                text = text.replace(one.strip(), self.safe_url)
        return redact_text(text)

    def schema_by_id(self, schema_id: int, fmt: str | None = None) -> Schema:
        """The schema registered under `schema_id`, from this process's cache after the first
        time. UnknownSchemaId when the registry has no such id. `fmt="serialized"` asks for a
        Protobuf schema as a base64 FileDescriptorProto (what descriptors are built from)."""
        key = (self.opts.url, schema_id, fmt)
        cached = _SCHEMAS.get(key)
        if cached is not None:
            return cached
        try:
            schema = self.call(f"schema id {schema_id}",
                               lambda: self.raw.get_schema(schema_id, fmt=fmt))
        except RegistryError as e:
            if e.not_found:
                raise UnknownSchemaId(
                    f"kafka-eos: schema id {schema_id} is not in the Schema Registry at "
                    f"{self.safe_url}", status=e.status, code=e.code) from None
            raise
        with _LOCK:
            _SCHEMAS[key] = schema
        return schema

    def version_of(self, subject: str, version: int | None = None,
                   fmt: str | None = None) -> RegisteredSchema:
        """Version `version` of `subject` (its latest when None), naming the subject and the
        option to fix when it is not there. Asked of the registry every time: "latest" is
        what it is when the query starts."""
        what = f"subject {subject!r} version {version if version is not None else 'latest'}"
        try:
            registered = self.call(what, lambda: self.raw.get_version(
                subject, version if version is not None else "latest", fmt=fmt))
        except RegistryError as e:
            if e.not_found:
                hint = (f"set {self.opts.format_option.replace('Format', 'Subject')} (or "
                        f"{self.opts.format_option.replace('Format', 'SubjectNameStrategy')}) to "
                        f"the subject the producers register under")
                raise RegistryError(f"{e} ({hint})", status=e.status, code=e.code) from None
            raise
        with _LOCK:
            _SCHEMAS.setdefault((self.opts.url, registered.schema_id, fmt), registered.schema)
        return registered

    def reader_schema(self, topic: str | None, record_name: str | None = None,
                      fmt: str | None = None) -> RegisteredSchema:
        """The schema rows are read into: the subject's `schemaVersion`, else its latest."""
        subject = self.opts.subject_for(topic, record_name)
        return self.version_of(subject, self.opts.schema_version, fmt)

    def register(self, subject: str, schema: Schema, *, normalize: bool = False) -> int:
        """Register `schema` under `subject` (an existing identical one keeps its id)."""
        schema_id = self.call(f"registering a schema under subject {subject!r}",
                              lambda: self.raw.register_schema(subject, schema, normalize))
        with _LOCK:
            _SCHEMAS.setdefault((self.opts.url, schema_id, None), schema)
        return schema_id


#: Schemas by (registry URL, id, format asked for), shared by every client of this process.
_SCHEMAS: dict[tuple[Any, int, str | None], Schema] = {}
#: Clients by their options, one per process (tasks of many batches reuse it).
_CLIENTS: dict[Any, RegistryClient] = {}
_LOCK = threading.Lock()


def registry_client(opts: RegistryOptions) -> RegistryClient:
    """This process's client for `opts` (built on first use, then reused)."""
    key = _client_key(opts)
    client = _CLIENTS.get(key)
    if client is None:
        with _LOCK:
            client = _CLIENTS.get(key)
            if client is None:
                client = RegistryClient(opts)
                _CLIENTS[key] = client
    return client


def _client_key(opts: RegistryOptions) -> Any:
    return (opts.url, tuple(sorted((k, str(v)) for k, v in opts.client_conf.items())),
            opts.retry_timeout_s, opts.side, opts.subject, opts.subject_strategy,
            opts.record_name, opts.schema_version, opts.format)


def clear_caches() -> None:
    """Forget every cached client and schema (tests; a registry recreated in place)."""
    with _LOCK:
        _SCHEMAS.clear()
        _CLIENTS.clear()
