"""Option parsing and validation shared by every format.

Spark hands a data source its options with lower-cased keys, so every lookup here is by the
lower-cased name while every message names the option as the user spelled it in the docs.
Errors are raised when the DataSource is constructed, i.e. at `.load()` / query start, and
never echo the value of a secret.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

#: Substrings of librdkafka property names whose values must never be logged or shown.
SECRET_MARKERS = (
    "password",
    "secret",
    "jaas",
    "sasl.oauthbearer.config",
    "ssl.key.pem",
    "ssl.keystore",
    "ssl_key",
    "token",
)


#: Options no format refuses: Spark passes `path` from `.load(path)`, `start(path)` and
#: `save(path)` whether or not the format uses it.
ALWAYS_ACCEPTED_OPTIONS = ("path",)


class OptionError(ValueError):
    """An invalid or missing option; the message names the option and what it accepts."""

    def __init__(self, option: str, message: str) -> None:
        self.option = option
        super().__init__(f"Option '{option}': {message}")


def is_secret(key: str) -> bool:
    k = key.lower()
    return any(marker in k for marker in SECRET_MARKERS)


def redact(conf: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `conf` that is safe to log: secret values replaced by '***'."""
    return {k: ("***" if is_secret(k) else v) for k, v in conf.items()}


class Options:
    """Case-insensitive, typed access to a data source's string options."""

    def __init__(self, raw: Mapping[str, str]) -> None:
        self._raw = {str(k).lower(): v for k, v in dict(raw).items()}

    def __contains__(self, name: str) -> bool:
        return name.lower() in self._raw

    def raw(self) -> dict[str, str]:
        return dict(self._raw)

    def get(self, name: str, default: str | None = None) -> str | None:
        value = self._raw.get(name.lower())
        if value is None:
            return default
        value = str(value)
        return value

    def require(self, name: str, hint: str = "") -> str:
        value = self.get(name)
        if value is None or not value.strip():
            raise OptionError(name, f"is required{': ' + hint if hint else ''}")
        return value.strip()

    def get_bool(self, name: str, default: bool) -> bool:
        value = self.get(name)
        if value is None:
            return default
        v = value.strip().lower()
        if v in ("true", "1", "yes"):
            return True
        if v in ("false", "0", "no"):
            return False
        raise OptionError(name, f"expected 'true' or 'false', got {value!r}")

    def get_int(
        self, name: str, default: int | None = None, *, minimum: int | None = None
    ) -> int | None:
        value = self.get(name)
        if value is None:
            return default
        try:
            parsed = int(value.strip())
        except ValueError:
            raise OptionError(name, f"expected a whole number, got {value!r}") from None
        if minimum is not None and parsed < minimum:
            raise OptionError(name, f"must be at least {minimum}, got {parsed}")
        return parsed

    def get_choice(self, name: str, choices: tuple[str, ...], default: str) -> str:
        value = self.get(name)
        if value is None:
            return default
        v = value.strip().lower()
        if v not in choices:
            raise OptionError(name, f"expected one of {', '.join(choices)}; got {value!r}")
        return v

    def get_duration_ms(self, name: str, default_ms: int) -> int:
        value = self.get(name)
        if value is None:
            return default_ms
        return parse_duration_ms(name, value)

    def get_size_bytes(self, name: str, default: int) -> int:
        value = self.get(name)
        if value is None:
            return default
        return parse_size_bytes(name, value)

    def get_json(self, name: str) -> Any:
        value = self.get(name)
        if value is None:
            return None
        try:
            return json.loads(value)
        except json.JSONDecodeError as e:
            raise OptionError(name, f"is not valid JSON ({e.msg} at position {e.pos})") from None

    def reject_unknown(
        self, known: Iterable[str], *, prefixes: Iterable[str] = (), format_name: str,
        docs: str | None = None,
    ) -> None:
        """Fail on the first option that is neither in `known` nor under one of `prefixes`: a
        misspelt option must not be silently ignored. The message names the three closest known
        options as the docs spell them (Spark hands the key over lower-cased, so the user's own
        spelling is lost) and the page listing every option (`docs`), not the whole list: a
        list of thirty names buries the one the user meant."""
        by_lower = {k.lower(): k for k in known}
        lowered = tuple(p.lower() for p in prefixes)
        for key in sorted(self._raw):
            if (key in by_lower or (lowered and key.startswith(lowered))
                    or key in ALWAYS_ACCEPTED_OPTIONS):
                continue
            raise OptionError(key, unknown_option_message(key, by_lower, prefixes=tuple(prefixes),
                                                          format_name=format_name, docs=docs))

    def with_prefix(self, prefix: str) -> dict[str, str]:
        """Options under `prefix` with the prefix removed (e.g. `kafka.` -> librdkafka)."""
        p = prefix.lower()
        return {k[len(p) :]: v for k, v in self._raw.items() if k.startswith(p)}


def closest_names(key: str, by_lower: Mapping[str, str], n: int = 3) -> list[str]:
    """The `n` known names closest to `key` (difflib's ratio on the lower-cased names, ties
    broken alphabetically), spelt as the docs spell them."""
    ranked = sorted(by_lower, key=lambda k: (-difflib.SequenceMatcher(None, key, k).ratio(), k))
    return [by_lower[k] for k in ranked[:n]]


def unknown_option_message(key: str, by_lower: Mapping[str, str], *, prefixes: tuple[str, ...],
                           format_name: str, docs: str | None) -> str:
    """`is not an option of X; did you mean 'A'? (closest: 'A', 'B', 'C'; every option: docs)`.
    "Did you mean" only for a close match (difflib's 0.6 cutoff): a far-off name gets the
    three closest without a guess."""
    close = difflib.get_close_matches(key, list(by_lower), n=1, cutoff=0.6)
    guess = f"; did you mean '{by_lower[close[0]]}'?" if close else ""
    nearest = ", ".join(f"'{n}'" for n in closest_names(key, by_lower))
    scopes = ", ".join(f"'{p}*'" for p in prefixes)
    tail = [f"closest: {nearest}"] if nearest else []
    if scopes:
        tail.append(f"client settings go under {scopes}")
    if docs:
        tail.append(f"every option: {docs}")
    return f"is not an option of {format_name}{guess} ({'; '.join(tail)})"


_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(name: str, value: str) -> int:
    """'500ms', '30s', '15m', '1h' or a bare number of milliseconds."""
    m = _DURATION.match(value)
    if not m:
        raise OptionError(
            name, f"expected a duration such as '500ms', '30s', '15m' or '1h'; got {value!r}"
        )
    unit = (m.group(2) or "ms").lower()
    return int(m.group(1)) * _UNIT_MS[unit]


_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)
_UNIT_BYTES = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size_bytes(name: str, value: str) -> int:
    """'134217728', '128k', '128m', '1g' (or '128MB', '128MiB'): powers of 1024, as Spark's
    byte-size settings read them."""
    m = _SIZE.match(value)
    if not m:
        raise OptionError(name, f"expected a size such as '64m', '128MB' or '1g'; got {value!r}")
    unit = (m.group(2) or "").lower()[:1]
    return int(m.group(1)) * _UNIT_BYTES[unit]
