"""Short, stable names derived from longer text (a checkpoint path, a configuration).

Sixteen hex digits of SHA-256 name a query's transactional ids, gids, Delta app ids and data
files, and a consumer pool's configurations: deterministic across processes and restarts (unlike
`hash()`), short enough for a broker's or a server's id limits, and they show nothing of the text.
"""

from __future__ import annotations

import hashlib

#: Hex digits kept: 64 bits, so two checkpoints of one cluster never share a name by chance.
SHORT_DIGEST_LENGTH = 16


def short_digest(text: str) -> str:
    """The first SHORT_DIGEST_LENGTH hex digits of the SHA-256 of `text` (UTF-8)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:SHORT_DIGEST_LENGTH]
