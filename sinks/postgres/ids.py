"""The sink's global transaction ids, built and parsed here only.

`<prefix>-<batch>-<partition>-<attempt>`, the prefix derived from the query's checkpoint:
deterministic, so a restart finds in `pg_prepared_xacts` whatever a crashed run prepared.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from connectors.core.digest import short_digest

GID_MAX_BYTES = 200  # PostgreSQL's limit on a prepared transaction's identifier
GID_PREFIX_HEAD = "pg-eos-"
_GID = re.compile(r"(?P<prefix>.+)-(?P<batch>\d+)-(?P<partition>\d+)-(?P<attempt>\d+)")


class Gid(NamedTuple):
    prefix: str
    batch: int
    partition: int
    attempt: int


def gid_prefix(checkpoint_location: str) -> str:
    """This query's gids: one prefix per checkpoint, so two queries never share one."""
    return GID_PREFIX_HEAD + short_digest(checkpoint_location)


def make_gid(prefix: str, batch_id: int, partition: int, attempt: int) -> str:
    """Per (sink, batch, partition), and per attempt so that a task Spark retries (or runs
    speculatively) prepares beside its predecessor instead of colliding with it."""
    gid = f"{prefix}-{batch_id}-{partition}-{attempt}"
    assert len(gid.encode()) <= GID_MAX_BYTES
    return gid


def split_gid(gid: str) -> Gid | None:
    """(prefix, batch, partition, attempt) of a gid `make_gid` built, whatever its prefix;
    None for one of another shape."""
    m = _GID.fullmatch(gid)
    if m is None:
        return None
    return Gid(m["prefix"], int(m["batch"]), int(m["partition"]), int(m["attempt"]))


def parse_gid(prefix: str, gid: str) -> tuple[int, int, int] | None:
    """(batch, partition, attempt) of one of this sink's gids; None for anybody else's."""
    parsed = split_gid(gid)
    if parsed is None or parsed.prefix != prefix:
        return None
    return parsed.batch, parsed.partition, parsed.attempt


def gid_batch(prefix: str, gid: str) -> int | None:
    """The batch of one of this sink's gids; None for anybody else's."""
    parsed = parse_gid(prefix, gid)
    return parsed[0] if parsed else None
