"""`--kafka-config FILE`: every CLI command's Kafka client settings for a secured cluster,
read from a Java-style properties file (as Kafka's own tools take with `--command-config`), so
that no secret is ever in a command's argv.

The file is read once, by the command line (`demo`, `resolve`); its settings, in librdkafka's
names (`connectors.core.kafka.java_options.translate`), go to every Kafka client of the command.
The demo's: the event producer, the topic set-up, the pipeline's `kafka-eos` source and sink
(as `kafka.<key>` options; the pipeline process gets them in the environment variable `ENV`,
never in its argv) and the verification's reader. Nothing here echoes the value of a secret.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping

from connectors.core.kafka.cloud_tokens import without_cloud_settings
from connectors.core.kafka.java_options import translate
from connectors.core.options import OptionError, is_secret, redact

#: The environment variable that hands the translated settings (JSON) to the pipeline process.
ENV = "KAFKA_EOS_DEMO_KAFKA_CONFIG"

#: A Kafka client property name, in either client's spelling.
_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]*$")
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


class KafkaConfigError(ValueError):
    """A properties file that cannot be used: the message names the file (and the line, or the
    setting), never the value of a secret."""


def _continues(line: str) -> bool:
    """A natural line ending with an odd number of backslashes continues on the next one."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _unescape(text: str, where: str) -> str:
    """java.util.Properties' escapes: \\t \\n \\r \\f, \\uXXXX; any other \\c is c."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c != "\\" or i + 1 == len(text):
            out.append(c)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2:i + 6]
            if not re.fullmatch(r"[0-9A-Fa-f]{4}", digits):
                raise KafkaConfigError(f"{where}: malformed \\uXXXX escape (four hex digits "
                                       f"expected)")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def _split(line: str) -> tuple[str, str | None, str]:
    """(raw key, separator '=' / ':' / None, raw value) of a logical line, as Java splits it:
    the key ends at the first unescaped '=', ':' or whitespace."""
    i = 0
    while i < len(line):
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=: \t\f":
            break
        i += 1
    key, rest = line[:i], line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        return key, rest[0], rest[1:].lstrip(" \t\f")
    return key, None, rest


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """The settings of a Java-style properties file: `key=value` or `key: value` lines,
    whitespace around the separator ignored, `#` and `!` comment lines, blank lines, values that
    contain '=' or ':', lines continued by a trailing backslash, Java's escapes.

    Stricter than java.util.Properties where a mistake would otherwise pass silently: every
    setting needs '=' or ':', keys are property names (letters, digits, '.', '_', '-'), and a
    key given twice is refused. Errors name `source` and the line; they show a key only when it
    is a property name that does not look secret, and never a value.
    """
    settings: dict[str, str] = {}
    first_line: dict[str, int] = {}
    lines = text.splitlines()
    n = 0
    while n < len(lines):
        start = n + 1
        natural = lines[n].lstrip(" \t\f")
        n += 1
        if not natural or natural[0] in "#!":
            continue
        logical = natural
        while _continues(logical):
            logical = logical[:-1]
            if n == len(lines):
                break
            logical += lines[n].lstrip(" \t\f")
            n += 1
        where = f"{source}, line {start}"
        raw_key, separator, raw_value = _split(logical)
        key = _unescape(raw_key, where)
        # A key is shown only when it is clearly one: never a stray word (a value's fragment?)
        shown = (f" {key!r}" if _KEY.match(key) and not is_secret(key)
                 and (separator is not None or ("." in key and raw_value)) else "")
        if not key:
            raise KafkaConfigError(f"{where}: a setting with no name: expected key=value")
        if separator is None:
            continued = (" (a value spanning several lines needs a backslash at the end of "
                         "each line but the last)" if raw_value else "")
            raise KafkaConfigError(
                f"{where}: expected key=value (or key: value), found{shown or ' a line'} "
                f"with no '=' or ':'{continued}")
        if not _KEY.match(key):
            raise KafkaConfigError(
                f"{where}: expected key=value with a Kafka client property name as the key "
                f"(letters, digits, '.', '_', '-'), e.g. security.protocol=SASL_SSL")
        lowered = key.lower()
        if lowered in first_line:
            raise KafkaConfigError(
                f"{where}: {key!r} is already set on line {first_line[lowered]}; keep one")
        first_line[lowered] = start
        settings[key] = _unescape(raw_value, where)
    return settings


def read_properties(path: str) -> dict[str, str]:
    """parse_properties of the file at `path`; a file that cannot be read is a
    KafkaConfigError naming it."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise KafkaConfigError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise KafkaConfigError(f"{path}: is a directory, not a properties file") from None
    except UnicodeDecodeError:
        raise KafkaConfigError(f"{path}: not a UTF-8 text file") from None
    except OSError as e:
        raise KafkaConfigError(f"{path}: cannot read it: {e.strerror}") from None
    return parse_properties(text, path)


def load_kafka_config(path: str) -> dict[str, str]:
    """The file's settings in librdkafka's names: Java client names translated (JAAS line to
    sasl.username/sasl.password, PKCS#12 stores to PEM, ...); what has no librdkafka
    counterpart is refused, naming the setting."""
    settings = read_properties(path)
    if not settings:
        raise KafkaConfigError(f"{path}: no settings in it (key=value lines expected)")
    try:
        conf = translate(settings)
    except OptionError as e:
        prefix = f"Option '{e.option}': "
        message = str(e)[len(prefix):] if str(e).startswith(prefix) else str(e)
        key = e.option.removeprefix("kafka.")
        raise KafkaConfigError(f"{path}: {key}: {unprefixed(message)}") from None
    check_with_librdkafka(conf, path)
    return conf


def unprefixed(text: str) -> str:
    """A message naming the connectors' `kafka.*` options, with the names as this file spells
    them (no prefix); org.apache.kafka.* class names untouched."""
    return re.sub(r"(?<![\w.])kafka\.", "", text)


def check_with_librdkafka(conf: Mapping[str, str], source: str) -> None:
    """Refuse what librdkafka refuses (an unknown property, a CA file that does not load...)
    now, naming `source`, rather than when the demo's first client starts. Connects nowhere."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    try:
        # a cloud token method's settings are this package's, not librdkafka's; no token is
        # fetched here (nothing connects)
        AdminClient({**without_cloud_settings(conf), "log_level": 0})
    except (KafkaException, ValueError, TypeError) as e:
        error = e.args[0] if e.args else e
        text = error.str() if hasattr(error, "str") else str(error)
        for key, value in conf.items():  # librdkafka quotes values it refuses: never a secret
            if is_secret(key) and value:
                text = text.replace(value, "***")
        raise KafkaConfigError(f"{source}: {text}") from None


def describe(conf: Mapping[str, str]) -> str:
    """The settings as one line safe to print: secrets as ***, inline PEM by its size."""
    shown = []
    for key, value in sorted(redact(conf).items()):
        if key.endswith(".pem") and value != "***":
            value = f"<PEM, {len(value)} characters>"
        shown.append(f"{key}={value}")
    return ", ".join(shown)


def to_env(conf: Mapping[str, str]) -> dict[str, str]:
    """The environment entry handing `conf` to the pipeline process (empty for no settings)."""
    return {ENV: json.dumps(dict(conf))} if conf else {}


def from_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The settings handed over by `to_env`, removed from the environment so that the
    processes this one starts (Spark's JVM, its Python workers) do not inherit them."""
    environ = os.environ if environ is None else environ
    text = environ.pop(ENV, None)
    if not text:
        return {}
    conf = json.loads(text)
    if not isinstance(conf, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in conf.items()):
        raise KafkaConfigError(f"{ENV}: expected a JSON object of strings")
    return conf
