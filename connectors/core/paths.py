"""Storage locations as Spark users write them (`checkpointLocation`, a table's `path`), mapped
to what pyarrow.fs and delta-rs understand, once, at query start.

A location that every executor cannot reach the same way is a silent duplicate: a `file:/x`
taken for a relative path logs to `<cwd>/file:/x` on each machine, so a replay's tasks see no
committed marker. So every location is normalised here, and one that cannot be served fails at
query start naming the option and the schemes that work.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from typing import TYPE_CHECKING

from connectors.core.options import OptionError

if TYPE_CHECKING:
    import pyarrow.fs as pafs

#: Hadoop's names for S3 -> the standard one (pyarrow and delta-rs know only `s3://`).
_S3_ALIASES = ("s3a", "s3n")
#: Object stores: credentials from the sink's storage options, else the standard environment.
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
        import pyarrow.fs as pafs

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


def resolve_location(option: str, value: str,
                     storage_options: Mapping[str, str] | None = None) -> Location:
    """`normalise`, then the pyarrow filesystem that serves it (fails naming the option).

    `storage_options` are delta-rs's (object_store's) keys, the ones a sink hands to
    `DeltaTable(..., storage_options=...)`: what pyarrow can take from them is given to the
    filesystem too, so that the Parquet files and the Delta log are written with one set of
    credentials. Keys are matched case-insensitively (Spark lower-cases option keys), in their
    `AWS_*`/`aws_*` spelling or object_store's short one; what is not set falls back to the
    standard environment, as delta-rs does; keys pyarrow has no use for are left to delta-rs.
    Secrets never appear in a repr, a log line or an error message.
    """
    import pyarrow.fs as pafs  # on use: pyarrow costs workers that only check options

    uri = normalise(option, value)
    if uri.startswith("/"):
        return Location(uri, pafs.LocalFileSystem(), uri)
    scheme = uri.split("://", 1)[0]
    opts = {k.lower(): v for k, v in (storage_options or {}).items() if v is not None}
    secrets = _secret_values(opts)
    try:
        if scheme == "s3":
            fs, path = _s3(option, uri, opts)
        elif scheme in ("gs", "gcs"):
            fs, path = _gcs(option, uri, opts)
        elif scheme in ("abfs", "abfss"):
            fs, path = _azure(option, uri, opts)
        else:
            fs, path = pafs.FileSystem.from_uri(uri)
    except OptionError:
        raise
    except (OSError, ValueError) as e:  # pyarrow.ArrowInvalid is a ValueError
        needs = " (hdfs:// needs libhdfs and a JVM: set JAVA_HOME, HADOOP_HOME and CLASSPATH)" \
            if scheme in ("hdfs", "viewfs") else ""
        reason = _redact(str(e).splitlines()[0] if str(e) else type(e).__name__, secrets)
        raise OptionError(option, f"cannot open {uri!r}{needs}: {reason}") from None
    return Location(uri, fs, path.rstrip("/"))


# -- storage options -> pyarrow ------------------------------------------------------------------
#
# The aliases are object_store's (AmazonS3ConfigKey, AzureConfigKey, GoogleConfigKey) and
# delta-rs's own, lower-cased: what `DeltaTable(storage_options=...)` accepts for the same thing.

_S3_ACCESS_KEY = ("aws_access_key_id", "access_key_id")
_S3_SECRET_KEY = ("aws_secret_access_key", "secret_access_key")
_S3_TOKEN = ("aws_session_token", "aws_token", "session_token", "token")
_S3_REGION = ("aws_region", "region", "aws_default_region", "default_region")
_S3_ENDPOINT = ("aws_endpoint_url_s3", "aws_endpoint_url", "aws_endpoint", "endpoint_url", "endpoint")
_S3_ALLOW_HTTP = ("aws_allow_http", "allow_http")
_S3_VIRTUAL = ("aws_virtual_hosted_style_request", "virtual_hosted_style_request")
_S3_SKIP_SIGNATURE = ("aws_skip_signature", "skip_signature")
_S3_ROLE_ARN = ("aws_iam_role_arn", "aws_s3_assume_role_arn")
_S3_ROLE_SESSION = ("aws_iam_role_session_name", "aws_s3_role_session_name")
_S3_PROFILE = ("aws_profile", "profile")
_S3_KEYS = (*_S3_ACCESS_KEY, *_S3_SECRET_KEY, *_S3_TOKEN, *_S3_REGION, *_S3_ENDPOINT,
            *_S3_ALLOW_HTTP, *_S3_VIRTUAL, *_S3_SKIP_SIGNATURE, *_S3_ROLE_ARN,
            *_S3_ROLE_SESSION, *_S3_PROFILE, "aws_s3_addressing_style")

_AZ_ACCOUNT = ("azure_storage_account_name", "account_name")
_AZ_KEY = ("azure_storage_account_key", "azure_storage_access_key", "azure_storage_master_key",
           "account_key", "access_key", "master_key")
_AZ_SAS = ("azure_storage_sas_key", "azure_storage_sas_token", "sas_key", "sas_token")
_AZ_CLIENT_ID = ("azure_storage_client_id", "azure_client_id", "client_id")
_AZ_CLIENT_SECRET = ("azure_storage_client_secret", "azure_client_secret", "client_secret")
_AZ_TENANT = ("azure_storage_tenant_id", "azure_tenant_id", "tenant_id",
              "azure_storage_authority_id", "azure_authority_id", "authority_id")
_AZ_KEYS = (*_AZ_ACCOUNT, *_AZ_KEY, *_AZ_SAS, *_AZ_CLIENT_ID, *_AZ_CLIENT_SECRET, *_AZ_TENANT)

_GCS_SERVICE_ACCOUNT = ("google_service_account", "google_service_account_path",
                        "service_account", "service_account_path", "google_application_credentials")

#: Values that are secrets, whatever the store: never shown.
_SECRET_KEYS = (*_S3_SECRET_KEY, *_S3_TOKEN, *_AZ_KEY, *_AZ_SAS, *_AZ_CLIENT_SECRET,
                "google_service_account_key", "service_account_key")

_TRUE = ("1", "true", "on", "yes", "y")  # delta-rs's str_is_truthy


def is_truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() in _TRUE


def storage_option_name(key: str) -> str:
    """How the user writes a storage option on the sink (`storage.<KEY>`)."""
    return f"storage.{key.upper()}"


def _pick(opts: Mapping[str, str], aliases: tuple[str, ...]) -> tuple[str, str] | None:
    """(the key as given, its value) of the first alias present."""
    for key in aliases:
        if key in opts:
            return key, opts[key]
    return None


def _value(opts: Mapping[str, str], aliases: tuple[str, ...], env: tuple[str, ...] = ()) -> str | None:
    found = _pick(opts, aliases)
    if found is not None:
        return found[1]
    for name in env:
        if os.environ.get(name):
            return os.environ[name]
    return None


def _secret_values(opts: Mapping[str, str]) -> list[str]:
    return [v for k, v in opts.items() if v and (k in _SECRET_KEYS or "secret" in k or "token" in k)]


def _redact(message: str, secrets: list[str]) -> str:
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= 4:
            message = message.replace(secret, "***")
    return message


def _not_per_filesystem(option: str, key: str, value: str, env: str, what: str) -> None:
    """pyarrow reads `env` from the environment only: a different value as a storage option
    would have delta-rs and pyarrow use different credentials."""
    if os.environ.get(env) == value:
        return
    raise OptionError(
        storage_option_name(key),
        f"{what} cannot be given to pyarrow's filesystem, which writes the data files of "
        f"{option!r}: pyarrow reads it from the environment variable {env} only. Set {env} in "
        f"the environment of the driver and of every executor (e.g. spark.executorEnv.{env}) "
        "instead, or give keys",
    )


def _s3(option: str, uri: str, opts: Mapping[str, str]) -> tuple[pafs.FileSystem, str]:
    import pyarrow.fs as pafs

    if not any(k in opts for k in _S3_KEYS):
        # Nothing given: pyarrow's own reading of the environment and of the bucket's region.
        # S3: small records as one PUT (no multipart upload), one round trip fewer per open.
        query = "?allow_delayed_open=true" if "?" not in uri else ""
        return pafs.FileSystem.from_uri(uri + query)
    kwargs: dict = {"allow_delayed_open": True}
    access = _pick(opts, _S3_ACCESS_KEY)
    secret = _pick(opts, _S3_SECRET_KEY)
    if (access is None) != (secret is None):
        given, missing = (access, _S3_SECRET_KEY[0]) if secret is None else (secret, _S3_ACCESS_KEY[0])
        raise OptionError(
            storage_option_name(given[0]),
            f"is set without {storage_option_name(missing)}: give both (or neither, for the "
            "standard AWS environment)",
        )
    if access is not None:
        kwargs["access_key"], kwargs["secret_key"] = access[1], secret[1]
        token = _value(opts, _S3_TOKEN)
        if token:
            kwargs["session_token"] = token
    profile = _pick(opts, _S3_PROFILE)
    if profile is not None and access is None:
        _not_per_filesystem(option, profile[0], profile[1], "AWS_PROFILE", "an AWS profile")
    if is_truthy(_value(opts, _S3_SKIP_SIGNATURE)):
        kwargs["anonymous"] = True
    role = _value(opts, _S3_ROLE_ARN)
    if role:
        kwargs["role_arn"] = role
        session = _value(opts, _S3_ROLE_SESSION)
        if session:
            kwargs["session_name"] = session
    endpoint = _value(opts, _S3_ENDPOINT, env=("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"))
    allow_http = is_truthy(_value(opts, _S3_ALLOW_HTTP, env=("AWS_ALLOW_HTTP",)))
    if endpoint:
        parts = urlsplit(endpoint if "://" in endpoint else f"//{endpoint}")
        kwargs["endpoint_override"] = (parts.netloc + parts.path.rstrip("/")) or endpoint
        kwargs["scheme"] = parts.scheme or ("http" if allow_http else "https")
    region = _value(opts, _S3_REGION, env=("AWS_REGION", "AWS_DEFAULT_REGION"))
    if not region and not endpoint:
        region = _bucket_region(uri[len("s3://"):].split("/", 1)[0])
    if region:
        kwargs["region"] = region
    addressing = _value(opts, ("aws_s3_addressing_style",))
    if is_truthy(_value(opts, _S3_VIRTUAL)) or (addressing or "").strip().lower() == "virtual":
        kwargs["force_virtual_addressing"] = True
    return pafs.S3FileSystem(**kwargs), uri[len("s3://"):]


@functools.lru_cache(maxsize=256)
def _bucket_region(bucket: str) -> str | None:
    """As from_uri does: the bucket's own region (one request per bucket and process, not one
    per file: the sink resolves its path for every file it writes)."""
    import pyarrow.fs as pafs

    try:
        return pafs.resolve_s3_region(bucket)
    except (OSError, ValueError):
        return None


def _gcs(option: str, uri: str, opts: Mapping[str, str]) -> tuple[pafs.FileSystem, str]:
    import pyarrow.fs as pafs

    account = _pick(opts, _GCS_SERVICE_ACCOUNT)
    if account is not None:
        _not_per_filesystem(option, account[0], account[1], "GOOGLE_APPLICATION_CREDENTIALS",
                            "a service account key file")
    return pafs.FileSystem.from_uri(uri)


def _azure(option: str, uri: str, opts: Mapping[str, str]) -> tuple[pafs.FileSystem, str]:
    import pyarrow.fs as pafs

    if not any(k in opts for k in _AZ_KEYS):
        return pafs.FileSystem.from_uri(uri)
    parts = urlsplit(uri)
    container, _, host = parts.netloc.rpartition("@")
    if not container:  # abfss://container/path: the account comes from the options
        container, host = host, ""
    account = _value(opts, _AZ_ACCOUNT) or (host.split(".", 1)[0] if host else None)
    if not account:
        raise OptionError(
            storage_option_name(_AZ_ACCOUNT[0]),
            f"{uri!r} names no storage account: use abfss://<container>@<account>."
            "dfs.core.windows.net/<path> or set this option",
        )
    kwargs: dict = {}
    key, sas = _value(opts, _AZ_KEY), _value(opts, _AZ_SAS)
    if key and sas:
        raise OptionError(
            storage_option_name(_pick(opts, _AZ_SAS)[0]),
            f"is set together with {storage_option_name(_pick(opts, _AZ_KEY)[0])}: give one "
            "of the account key and the SAS token",
        )
    if key:
        kwargs["account_key"] = key
    if sas:
        kwargs["sas_token"] = sas.lstrip("?")
    for name, aliases in (("client_id", _AZ_CLIENT_ID), ("client_secret", _AZ_CLIENT_SECRET),
                          ("tenant_id", _AZ_TENANT)):
        v = _value(opts, aliases)
        if v:
            kwargs[name] = v
    path = f"{container}/{parts.path.lstrip('/')}".rstrip("/")
    return pafs.AzureFileSystem(account, **kwargs), path
