"""Secrets out of what the operator commands print: handles and options may carry connection
strings with passwords (a PostgreSQL URL, a SASL setting), and a terminal or a ticket is no
place for them.

`redact` walks any JSON-like value: a value under a key that names a secret
(connectors.core.options.is_secret: password, secret, jaas, token, ...) becomes "***"; in any
string, the password of a URL (`scheme://user:PASSWORD@host`) and of libpq's `password=...`
form are masked, wherever they appear.
"""

from __future__ import annotations

import re
from typing import Any

from connectors.core.options import is_secret

MASK = "***"
#: scheme://user:password@ -> the password part (up to the last @ before the host).
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]*:)(?P<pw>[^\s@/]*)@")
#: key=value pairs naming a secret (libpq's password=..., a JAAS line's password="...").
_KV_SECRET = re.compile(
    r"(?P<key>\b[\w.\-]*(?:password|secret|token|passwd)[\w.\-]*\s*=\s*)"
    r"(?P<val>\"[^\"]*\"|'[^']*'|[^\s,;&]+)",
    re.IGNORECASE,
)


def redact_text(text: str) -> str:
    """`text` with URL passwords and `password=...`-style values masked."""
    text = _URL_PASSWORD.sub(lambda m: f"{m.group('head')}{MASK}@", text)
    return _KV_SECRET.sub(lambda m: f"{m.group('key')}{MASK}", text)


def redact(value: Any, key: str | None = None) -> Any:
    """A copy of `value` safe to print (see the module doc)."""
    if key is not None and is_secret(key) and value not in (None, ""):
        return MASK
    if isinstance(value, dict):
        return {k: redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    return value
