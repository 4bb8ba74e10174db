"""Storage locations as Spark users write them (`checkpointLocation`, a table's `path`), mapped
to what pyarrow.fs and delta-rs understand, once, at query start.

A location that every executor cannot reach the same way is a silent duplicate: a `file:/x`
taken for a relative path logs to `<cwd>/file:/x` on each machine, so a replay's tasks see no
committed marker. So every location is normalised here, and one that cannot be served fails at
query start naming the option and the schemes that work.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from connectors.options import OptionError

#: Hadoop's names for S3 -> the standard one (pyarrow and delta-rs know only `s3://`).
_S3_ALIASES = ("s3a", "s3n")
#: Schemes pyarrow.fs serves as they are (credentials from the standard environment).
_OBJECT_STORES = ("s3", "gs", "gcs", "abfs", "abfss")
#: Where Databricks mounts DBFS on every node.
DBFS_MOUNT = "/dbfs"

SUPPORTED = (
    "local paths and file:/ URIs (shared storage on a cluster), s3:// (s3a://, s3n://), gs://, "
    "abfs(s)://, hdfs:// (where libhdfs and a JVM are present), dbfs:/ (through the /dbfs mount)"
)


@dataclass(frozen=True)
class Location:
    """A normalised location: `uri` for delta-rs and messages, `fs` + `path` for pyarrow."""

    uri: str
    fs: pafs.FileSystem
    path: str

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)


def normalise(option: str, value: str) -> str:
    """The URI of `value` that pyarrow.fs and delta-rs read the same way on every machine:
    absolute local paths (relative ones resolved on the driver, where Spark resolves them),
    `s3://` for Hadoop's `s3a://`/`s3n://`, the /dbfs mount for `dbfs:/`."""
    value = value.strip()
    if not value:
        raise OptionError(option, "is empty")
    parts = urlsplit(value)
    scheme = parts.scheme.lower()
    if len(scheme) <= 1:  # no scheme, or a Windows drive letter
        return os.path.abspath(value).rstrip("/") or "/"
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise OptionError(option, f"file URI {value!r} names host {parts.netloc!r}; use file:/path")
        return os.path.normpath(parts.path or "/")
    if scheme in _S3_ALIASES:
        return "s3://" + value.split("://", 1)[1].rstrip("/")
    if scheme == "dbfs":
        if not os.path.isdir(DBFS_MOUNT):
            raise OptionError(
                option,
                f"{value!r} is on DBFS, which this connector reaches through the {DBFS_MOUNT} "
                f"mount, and {DBFS_MOUNT} does not exist here; use {DBFS_MOUNT}/... on "
                "Databricks, or an s3://, abfss:// or gs:// location",
            )
        return os.path.join(DBFS_MOUNT, parts.path.lstrip("/")) if parts.path else DBFS_MOUNT
    if scheme in _OBJECT_STORES or scheme in ("hdfs", "viewfs"):
        return value.rstrip("/")
    raise OptionError(option, f"scheme {scheme}:// is not supported; supported: {SUPPORTED}")


def resolve(option: str, value: str) -> Location:
    """`normalise`, then the pyarrow filesystem that serves it (fails naming the option)."""
    uri = normalise(option, value)
    if uri.startswith("/"):
        return Location(uri, pafs.LocalFileSystem(), uri)
    # S3: small records as one PUT (no multipart upload), one round trip fewer per open.
    query = "?allow_delayed_open=true" if uri.startswith("s3://") and "?" not in uri else ""
    try:
        fs, path = pafs.FileSystem.from_uri(uri + query)
    except (OSError, ValueError) as e:  # pyarrow.ArrowInvalid is a ValueError
        scheme = uri.split("://", 1)[0]
        needs = " (hdfs:// needs libhdfs and a JVM: set JAVA_HOME, HADOOP_HOME and CLASSPATH)" \
            if scheme in ("hdfs", "viewfs") else ""
        raise OptionError(option, f"cannot open {uri!r}{needs}: {str(e).splitlines()[0]}") from None
    return Location(uri, fs, path.rstrip("/"))
