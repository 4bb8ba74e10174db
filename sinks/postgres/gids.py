"""The sink's global transaction ids, built and parsed here only.

`<prefix>-<batch>-<partition>-<attempt>`, the prefix derived from the query's checkpoint:
deterministic, so a restart finds in `pg_prepared_xacts` whatever a crashed run prepared.
"""

from __future__ import annotations

import hashlib
import re

GID_MAX_BYTES = 200  # PostgreSQL's limit on a prepared transaction's identifier


def gid_prefix(checkpoint_location: str) -> str:
    """This query's gids: one prefix per checkpoint, so two queries never share one."""
    return "pg-eos-" + hashlib.sha256(checkpoint_location.encode()).hexdigest()[:16]


def make_gid(prefix: str, batch_id: int, partition: int, attempt: int) -> str:
    """Per (sink, batch, partition), and per attempt so that a task Spark retries (or runs
    speculatively) prepares beside its predecessor instead of colliding with it."""
    gid = f"{prefix}-{batch_id}-{partition}-{attempt}"
    assert len(gid.encode()) <= GID_MAX_BYTES
    return gid


def parse_gid(prefix: str, gid: str) -> tuple[int, int, int] | None:
    """(batch, partition, attempt) of one of this sink's gids; None for anybody else's."""
    m = re.fullmatch(re.escape(prefix) + r"-(\d+)-(\d+)-(\d+)", gid)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def gid_batch(prefix: str, gid: str) -> int | None:
    """The batch of one of this sink's gids; None for anybody else's."""
    parsed = parse_gid(prefix, gid)
    return parsed[0] if parsed else None
