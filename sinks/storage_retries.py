"""Retrying the sinks' own storage operations that failed for a while.

Shared by every sink: the transaction log (sinks/txn_log.py), the reads of Spark's checkpoint
(sinks/query_identity.py) and the Delta sink's reads and orphan sweep (sinks/delta/sink.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

# The clients retry a failed request for about a second (pyarrow) or a few (delta-rs), and
# some failures not at all, so a short outage reached the query at its next planning; the
# sinks' own steps therefore retry for up to STORAGE_RETRY_TIMEOUT_S, the commit keeps its own
# bounded retries (docs/design.md#what-the-storage-clients-retry-themselves).

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
