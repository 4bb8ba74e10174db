"""The command line's argument types and help format (connectors/cli.py): each type refuses a
bad value with one line naming what it expected, and argparse turns that into exit status 2,
never a traceback."""

from __future__ import annotations

import argparse
import re
from typing import NoReturn

#: Bad arguments: one line on stderr, this exit status.
EXIT_USAGE = 2
_HOST_PORT = re.compile(r"^[A-Za-z0-9._\-\[\]:]+:\d{1,5}$")


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


class HelpFormat(argparse.ArgumentDefaultsHelpFormatter):
    """Shows defaults, except where there is none to show (the help says what happens)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None:
            return action.help
        return super()._get_help_string(action)


def whole_number(minimum: int):
    """An argparse type: an int of at least `minimum` (underscores allowed: 1_000_000)."""

    def parse(text: str) -> int:
        try:
            value = int(text.replace("_", ""))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            bound = "0 or more" if minimum == 0 else f"at least {minimum}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return value

    return parse


positive_int, non_negative_int = whole_number(1), whole_number(0)


def events_per_second(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected events per second, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 (as fast as possible) or more, got {text}")
    return value


def bootstrap_servers(text: str) -> str:
    servers = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in servers if not _HOST_PORT.match(s)]
    if not servers or bad:
        raise argparse.ArgumentTypeError(
            f"expected host:port[,host:port...], got {text!r}"
        )
    return ",".join(servers)


def registry_url(text: str) -> str:
    """An http(s) URL with a host, or several comma-separated (as `schema.registry.url`).
    The error never repeats a password the text may hold."""
    from urllib.parse import urlsplit

    from connectors.core.redaction import redact_text

    urls = [u.strip() for u in text.split(",") if u.strip()]
    for url in urls:
        try:
            split = urlsplit(url)
            ok = split.scheme in ("http", "https") and bool(split.hostname) and (
                split.port is None or split.port > 0)
        except ValueError:
            ok = False
        if not ok:
            raise argparse.ArgumentTypeError(
                f"expected http(s)://host[:port][/path], got {redact_text(url)!r}")
    if not urls:
        raise argparse.ArgumentTypeError("expected http(s)://host[:port][/path], got ''")
    return ",".join(urls)


def tcp_port(text: str) -> int:
    value = non_negative_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be a TCP port (0 for any free one), got {value}")
    return value
