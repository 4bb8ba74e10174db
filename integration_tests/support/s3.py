"""A real S3 protocol server on a loopback port (moto's server mode) for tests and demos.

pyarrow's S3 client and delta-rs both read the standard AWS environment
(docs/design.md#production-conditions):
`s3_server()` sets it for its duration (endpoint, keys, region, plain HTTP allowed), unless
`set_env=False`; then only `S3Server.env` (for a child process's environment) and
`S3Server.storage_options` (delta-rs keys, for `storage.*` sink options or `DeltaTable`) reach it.

What moto 5.2 does with conditional writes (measured here): a PUT with `If-None-Match: *` on an
existing key is refused with 412 PreconditionFailed, which is what delta-rs's commit relies on.
Its check is not atomic with the write (a look-up, then the put, in a threaded server without a
lock): under load two creators of one Delta version both won once in the suite, and a commit was
lost. The server here passes conditional writes (If-None-Match / If-Match) through one lock
(`_AtomicConditionalWrites`), so they are atomic as S3's are; other requests run concurrently.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

#: moto's keys: any non-empty pair is accepted.
ACCESS_KEY_ID = "testing"
SECRET_ACCESS_KEY = "testing-secret"
REGION = "us-east-1"


@dataclass(frozen=True)
class S3Server:
    endpoint: str

    @property
    def env(self) -> dict[str, str]:
        """The standard AWS environment that points pyarrow, delta-rs and boto3 here."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ALLOW_HTTP": "true",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    @property
    def storage_options(self) -> dict[str, str]:
        """The same as delta-rs storage options (`storage.<KEY>` on the sink)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
            "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "true",
        }

    def _client(self):
        import boto3

        return boto3.client(
            "s3", endpoint_url=self.endpoint, region_name=REGION,
            aws_access_key_id=ACCESS_KEY_ID, aws_secret_access_key=SECRET_ACCESS_KEY,
        )

    def create_bucket(self, name: str | None = None) -> str:
        bucket = name or f"eos-{uuid.uuid4().hex[:12]}"  # valid S3 names: 3+ characters
        self._client().create_bucket(Bucket=bucket)
        return bucket

    def list_keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = self._client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [o["Key"] for page in pages for o in page.get("Contents", [])]


#: Variables that would point a client elsewhere than `S3Server.env` says.
_AWS_VARS = (
    "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ALLOW_HTTP",
    "AWS_EC2_METADATA_DISABLED", "AWS_PROFILE",
)


def without_aws_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of `env` (default: this process's) with no AWS_* variable: for a child process
    that must get its S3 credentials from options only."""
    return {k: v for k, v in (os.environ if env is None else env).items() if not k.startswith("AWS_")}


class _AtomicConditionalWrites:
    """WSGI wrapper around moto: a conditional write (If-None-Match or If-Match) runs alone, so
    moto's look-up of the key and its write are one step, as S3's conditional PUT is."""

    def __init__(self, app: Callable) -> None:
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        conditional = "HTTP_IF_NONE_MATCH" in environ or "HTTP_IF_MATCH" in environ
        if environ.get("REQUEST_METHOD") in ("PUT", "POST") and conditional:
            with self.lock:
                return list(self.app(environ, start_response))
        return self.app(environ, start_response)


@contextmanager
def s3_server(set_env: bool = True, host: str = "127.0.0.1") -> Iterator[S3Server]:
    """Start moto's S3 server on a free port of `host` (loopback unless a lab's hosts must
    reach it: integration_tests/support/spark_cluster.py); with `set_env`, point this process's
    AWS environment at it for the duration (restored afterwards)."""
    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    app = _AtomicConditionalWrites(DomainDispatcherApplication(create_backend_app))
    server = make_server(host, 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="moto-s3", daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    s3 = S3Server(f"http://{host}:{port}")
    saved = {k: os.environ.get(k) for k in _AWS_VARS}
    if set_env:
        for k in _AWS_VARS:
            os.environ.pop(k, None)
        os.environ.update(s3.env)
    try:
        yield s3
    finally:
        server.shutdown()
        thread.join()
        if set_env:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
