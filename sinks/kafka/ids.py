"""The `kafka-eos` sink's transactional ids, built and parsed here only.

`<prefix>-<partition>-<attempt>`, the prefix derived from the query's checkpoint path (or the
`transactionalIdPrefix` option): deterministic, so a restart's tasks fence what a crashed run
left open, and a bounded id space (never per batch: ids live in the coordinator for
transactional.id.expiration.ms).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from connectors.core.digest import short_digest

DEFAULT_PREFIX_HEAD = "kafka-eos-"
#: A batch write's transactional ids: `<transactionalIdPrefix or this>-<job id>-<p>-<a>`.
BATCH_PREFIX = "kafka-eos-batch"
_ID = re.compile(r"(?P<prefix>.+)-(?P<partition>\d+)-(?P<attempt>\d+)")


class TransactionalId(NamedTuple):
    prefix: str
    partition: int
    attempt: int


def transactional_id(prefix: str, partition: int, attempt: int) -> str:
    """One id per (partition, attempt): no attempt fences another (a speculative copy's
    init_transactions does not abort the accepted attempt's prepared transaction), and the id
    space stays bounded."""
    return f"{prefix}-{partition}-{attempt}"


def parse_transactional_id(tid: str) -> TransactionalId | None:
    """(prefix, partition, attempt) of an id `transactional_id` built; None for another's."""
    m = _ID.fullmatch(tid)
    if m is None:
        return None
    return TransactionalId(m["prefix"], int(m["partition"]), int(m["attempt"]))


def default_prefix(checkpoint_location: str | None, bootstrap: str, topic: str | None) -> str:
    """Derived from the checkpoint *path*: a query started on a reset (deleted and recreated)
    checkpoint uses the same ids, so its first tasks fence its predecessor's open transactions
    at once instead of leaving them to hold read_committed readers until they time out."""
    origin = checkpoint_location or f"{bootstrap}/{topic}"
    return DEFAULT_PREFIX_HEAD + short_digest(origin)


def batch_prefix(user_prefix: str | None, job_id: str) -> str:
    """A batch job's prefix: one set of ids per job, so concurrent batch jobs never fence each
    other and a failed job's ids can all be fenced (abortJob). Under the user's prefix, if
    set, so the prefixed TransactionalId ACL still covers them."""
    return f"{user_prefix or BATCH_PREFIX}-{job_id}"


def acl_check_id(prefix: str) -> str:
    """An id of the sink's prefix that no task uses (no partition, no attempt): InitProducerId
    on it at start tells whether the principal may write the prefix's ids."""
    return f"{prefix}-acl-check"
