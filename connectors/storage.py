"""Storage configurations under which concurrent Delta commits are not safe, refused at query start.

A Delta commit is the creation of `_delta_log/<version>.json`; two writers that both read
version N must not both create N+1, or one commit is silently overwritten: its batch is gone
from the table while its `txn` action, read before the overwrite, told the sink "committed".
The exactly-once sink relies on that never happening (docs/design.md#commit-protocol and
#delta-commits), and another writer may append to the same table at any time.

How deltalake 1.6.6 (delta-rs) commits on S3, read in its source and measured here on moto:

* by default through its DefaultLogStore: a PUT of `<version>.json` with `If-None-Match: *`
  (object_store's `PutMode::Create`, S3 conditional writes, which AWS S3 has offered since
  August 2024). A writer that lost the race gets 412, delta-rs reports "version already
  exists", checks for logical conflicts and retries at the next version. Measured on moto: two
  writers that both read version 1 end as versions 2 and 3, both `txn` actions in the log;
* `AWS_S3_LOCKING_PROVIDER=dynamodb` no longer selects a DynamoDB log store: delta-rs removed
  S3DynamoDbLogStore (delta-rs issue 4464, discussion 4482; released in 1.6.1); 1.6.6 logs an
  error ("delta-rs **no longer** supports S3DynamoDBLogStores") and commits by conditional PUT;
* `AWS_S3_ALLOW_UNSAFE_RENAME=true` wraps the store in S3StorageBackend, whose
  `rename_if_not_exists` is a plain rename (copy + delete, which overwrites). In 1.6.6 the log
  store commits by conditional PUT and does not rename, so the flag changes nothing measurable
  there (measured: a stale writer still retried); in delta-rs 0.x it was the documented opt-out
  ("set AWS_S3_ALLOW_UNSAFE_RENAME=true to opt out of support for concurrent writers",
  crates/aws/src/errors.rs in 0.25.5): commits by a plain rename, one lost on a race.
* `AWS_CONDITIONAL_PUT=disabled` (object_store's key; also `conditional_put`) makes every
  commit fail ("`put_opts` with mode `PutMode::Create` when conditional put is disabled not
  yet implemented"), the first one included.

delta-rs reads these keys from the storage options and, when absent there, from the process
environment; so does this check (on the driver, where the sink commits).
GCS and Azure have native create-if-absent; local and mounted paths are committed by a
no-replace rename: nothing to refuse there.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from connectors.options import OptionError
from connectors.paths import is_truthy, normalise, storage_option_name

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


# -- retrying storage operations that failed for a while ---------------------------------------
#
# What the clients retry themselves, per request (measured through integration_tests/
# s3_faults.py against moto; docs/operations-storage-outages.md):
#
# * delta-rs (object_store 0.13): 5xx, 429 and connection errors, `max_retries` (10) times
#   within `retry_timeout` (3 min), its backoff starting at `backoff_config.init_backoff`
#   (100 ms) and growing slowly (a random step between the initial and twice the last wait):
#   10 retries of a 503 took 2.1 s. A timeout or a reset after the request was sent is not
#   retried for a PUT (the commit's create-if-absent PUT is not idempotent): the commit fails,
#   although it may have landed; the sink's commit retries find it landed (isCommitted).
# * pyarrow's S3 client (the sink's data files, its transaction log): AWS's standard strategy,
#   3 attempts within about a second. Some failures it never retries, e.g. "INTERNAL_FAILURE
#   during GetObject operation: Failed to flush response stream" after a connection reset.
#
# So a failure of a few seconds reached the query (integration_tests/test_storage_faults.py):
# a `delta-eos` query on s3a:// ended with QueryStartFailed at the next batch's planning, 6 s
# into a storage outage; with its checkpoint on S3 too, under 20% 5xx answers and 5% resets,
# the query failed at planning 4 times in 4 batches (a GetObject pyarrow does not retry).
# The sink's own steps (its transaction log, reading the table and the checkpoint, the orphan
# sweep) now retry a transient failure for up to STORAGE_RETRY_TIMEOUT_S; the commit keeps
# its own bounded retries (commitRetries / commitTimeout); a task's data file is retried by
# pyarrow, then by Spark's task retries (spark.task.maxFailures).

T = TypeVar("T")

#: How long one of the sinks' own storage operations is retried after a transient failure
#: before its error is the query's (seconds): a store unavailable for longer fails the batch.
STORAGE_RETRY_TIMEOUT_S = 120.0
#: Backoff between those retries: exponential from the first, capped (seconds).
STORAGE_RETRY_FIRST_WAIT_S = 0.5
STORAGE_RETRY_MAX_WAIT_S = 10.0

#: Answers that retrying does not change: the object is not there (or is), access is refused.
_PERMANENT_ERRORS = (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError,
                     NotADirectoryError)
#: ... and the same answers as the clients word them inside a plain OSError (pyarrow's AWS SDK
#: error names, object_store's HTTP statuses).
_PERMANENT_WORDS = (
    "ACCESS_DENIED", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch",
    "NO_SUCH_BUCKET", "NoSuchBucket", "InvalidBucketName", "HTTP status 400",
    "HTTP status 401", "HTTP status 403", "HTTP status 404", "400 Bad Request",
    "401 Unauthorized", "403 Forbidden", "404 Not Found", "412 Precondition Failed",
)

_log = logging.getLogger("kafka_eos.storage")


def is_transient_storage_error(exc: BaseException) -> bool:
    """Whether a storage operation that raised `exc` is worth retrying: an OSError (what
    pyarrow and deltalake raise for a failed request: 5xx, SlowDown, a reset or refused
    connection, a timeout) that is not a definite answer (not found, exists, access denied,
    no such bucket)."""
    if not isinstance(exc, OSError) or isinstance(exc, _PERMANENT_ERRORS):
        return False
    text = str(exc)
    return not any(word in text for word in _PERMANENT_WORDS)


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] + ("..." if len(text) > 300 else "")


def with_storage_retries(
    fn: Callable[[], T], what: str, *, log: logging.Logger | None = None,
    timeout_s: float | None = None,
) -> T:
    """`fn()`, retried while it fails transiently (is_transient_storage_error), with
    exponential backoff, for up to `timeout_s` (STORAGE_RETRY_TIMEOUT_S). Each retry is
    logged as a warning naming `what`; a success after retries is logged once; the last
    error is raised as it is. Only for idempotent operations (reads, listings, deletes,
    writes of an object whose content the name determines)."""
    from tenacity import (
        Retrying,
        retry_if_exception,
        stop_after_delay,
        wait_exponential,
    )

    logger = log or _log
    limit = STORAGE_RETRY_TIMEOUT_S if timeout_s is None else timeout_s
    started = time.monotonic()

    def before_sleep(state) -> None:
        logger.warning(
            "storage: %s failed (attempt %d, retrying in %.1f s, for up to %.0f s in all): %s",
            what, state.attempt_number, state.next_action.sleep if state.next_action else 0.0,
            limit, _first_line(state.outcome.exception()),
        )

    retrying = Retrying(
        retry=retry_if_exception(is_transient_storage_error),
        stop=stop_after_delay(limit),
        wait=wait_exponential(multiplier=STORAGE_RETRY_FIRST_WAIT_S, max=STORAGE_RETRY_MAX_WAIT_S),
        before_sleep=before_sleep,
        reraise=True,
    )
    result = retrying(fn)
    attempts = retrying.statistics.get("attempt_number", 1)
    if attempts > 1:
        logger.warning("storage: %s succeeded after %d attempts (%.1f s)", what, attempts,
                       time.monotonic() - started)
    return result
