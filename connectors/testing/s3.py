"""A real S3 protocol server on a loopback port (moto's server mode) for tests and demos.

pyarrow's S3 client and delta-rs both read the standard AWS environment, which `s3_server()`
sets for its duration (DESIGN.md section 10): endpoint, keys, region, plain HTTP allowed.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class S3Server:
    endpoint: str

    def create_bucket(self, name: str | None = None) -> str:
        import boto3

        bucket = name or f"eos-{uuid.uuid4().hex[:12]}"  # valid S3 names: 3+ characters
        boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
        return bucket

    def list_keys(self, bucket: str, prefix: str = "") -> list[str]:
        import boto3

        s3 = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1")
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [o["Key"] for page in pages for o in page.get("Contents", [])]


_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ALLOW_HTTP": "true",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@contextmanager
def s3_server() -> Iterator[S3Server]:
    """Start moto's S3 server on a free loopback port; point the AWS environment at it."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    saved = {k: os.environ.get(k) for k in (*_ENV, "AWS_ENDPOINT_URL")}
    os.environ.update(_ENV, AWS_ENDPOINT_URL=endpoint)
    try:
        yield S3Server(endpoint)
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
