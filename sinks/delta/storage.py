"""Storage configurations under which concurrent Delta commits are not safe, refused at query start.

A Delta commit is the creation of `_delta_log/<version>.json`; two writers that both read
version N must not both create N+1, or one commit is silently overwritten: its batch is gone
from the table while its `txn` action, read before the overwrite, told the sink "committed".
The exactly-once sink relies on that never happening (docs/design.md#commit-protocol and
#delta-commits), and another writer may append to the same table at any time.

The settings that make a commit on S3 a plain overwrite, or fail every commit, are refused;
how delta-rs commits under each of them is in docs/design.md#how-delta-rs-commits-on-s3.
delta-rs reads these keys from the storage options and, when absent there, from the process
environment; so does this check (on the driver, where the sink commits). GCS, Azure, local and
mounted paths commit by create-if-absent: nothing to refuse there.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from connectors.core.options import OptionError
from connectors.core.paths import is_truthy, normalise, storage_option_name

#: delta-rs's key and object_store's aliases of it, lower-cased.
_UNSAFE_RENAME = ("aws_s3_allow_unsafe_rename",)
_LOCKING_PROVIDER = ("aws_s3_locking_provider",)
_CONDITIONAL_PUT = ("aws_conditional_put", "conditional_put")


def _setting(opts: Mapping[str, str], aliases: tuple[str, ...]) -> tuple[str, str, bool] | None:
    """(key, value, from the environment) of the first alias set in the options, else in the
    environment (delta-rs's order)."""
    for key in aliases:
        if key in opts:
            return key, opts[key], False
    for key in aliases:
        for name in (key.upper(), key):
            if os.environ.get(name) is not None:
                return key, os.environ[name], True
    return None


def _where(key: str, from_env: bool) -> str:
    return f" (set in the environment as {key.upper()})" if from_env else ""


def check_delta_storage(option: str, uri: str, storage_options: Mapping[str, str]) -> None:
    """Refuse, naming the `storage.<KEY>` option, a storage configuration under which two
    writers committing to the Delta table at `uri` (the value of `option`) could overwrite
    each other's commit. Called at query start, before anything is written.

    Refused on s3:// (and s3a://, s3n://):

    * `AWS_S3_ALLOW_UNSAFE_RENAME` true: it is delta-rs's opt-out of safe concurrent commits
      (commit by a plain, overwriting rename where the log store renames). deltalake 1.6.6
      commits by conditional PUT whatever it says, so it buys nothing; with a delta-rs that
      renames it loses commits. It is not worth a silent dependency on the version installed.
    * `AWS_S3_LOCKING_PROVIDER` set: `dynamodb` asks for coordination through DynamoDB with
      other writers (delta-spark's S3DynamoDBLogStore, which writes `<version>.json` without a
      condition once DynamoDB granted it), and delta-rs 1.6 no longer does any: it logs an
      error and commits by conditional PUT, so such a writer could overwrite our commit. Any
      other value names no provider delta-rs knows. Remove it; the conditional PUT is safe
      among delta-rs writers.
    * `AWS_CONDITIONAL_PUT` other than `etag`: `disabled` turns off the conditional PUT that
      makes the commit safe (delta-rs 1.6.6 then fails every commit), and no other value is
      known; refused here once, naming the option, rather than at every batch.
    """
    normalised = normalise(option, uri)
    if not normalised.startswith("s3://"):
        return
    opts = {k.lower(): v for k, v in (storage_options or {}).items() if v is not None}

    found = _setting(opts, _UNSAFE_RENAME)
    if found is not None and is_truthy(found[1]):
        key, value, env = found
        raise OptionError(
            storage_option_name(key),
            f"={value!r}{_where(key, env)} asks delta-rs to commit to {normalised} ({option!r}) "
            "without protection against a concurrent commit of the same version (a plain, "
            "overwriting rename), which would silently drop one writer's batch. delta-eos "
            "refuses it: remove it; delta-rs commits safely by a conditional PUT (If-None-Match), "
            "which AWS S3 supports; an S3-compatible store without conditional writes cannot "
            "take concurrent exactly-once commits",
        )

    found = _setting(opts, _LOCKING_PROVIDER)
    if found is not None and found[1].strip():
        key, value, env = found
        raise OptionError(
            storage_option_name(key),
            f"={value!r}{_where(key, env)}: deltalake 1.6 has no locking provider any more (the "
            "DynamoDB log store was removed, delta-rs discussion 4482) and ignores it, so it "
            "coordinates nothing with other writers of " + normalised + " that rely on DynamoDB "
            "(delta-spark's S3DynamoDBLogStore writes commits unconditionally and could overwrite "
            "ours). Remove it: delta-rs writers are kept apart by the conditional PUT; do not "
            "let S3DynamoDBLogStore writers append to a table delta-eos writes",
        )

    found = _setting(opts, _CONDITIONAL_PUT)
    if found is not None and found[1].strip().lower() != "etag":
        key, value, env = found
        raise OptionError(
            storage_option_name(key),
            f"={value!r}{_where(key, env)}: the conditional PUT (If-None-Match) is what keeps "
            f"two commits to {normalised} ({option!r}) from overwriting each other, and with "
            "it disabled deltalake fails every commit; remove the option (its default, etag, "
            "is the safe one)",
        )
