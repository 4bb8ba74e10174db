"""Every option the code accepts is documented in the option table of its page in docs/, and
every option those tables name is one the code accepts.

The lists come from the code: the constants each format checks unknown options against
(`reject_unknown` / `reject_unknown_options`), so an option added to a format without a row on
its page fails here, naming the option and the page. Spark lower-cases option keys, so names
are compared case-insensitively; messages use the code's spelling.

An "option table" is a markdown table whose first header cell ends with "option" or "property"
(`| option | default | meaning |`, `| refused property | why |`, `| Java client option | here |`);
the names are the backticked words of its first column (several per row allowed:
`` `commitTimeout`, `commitRetries` ``). A prefix family (`kafka.*`) is documented by a row
naming it with the `*`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from connectors.cli import build_parser
from connectors.core.kafka.java_options import REFUSED_JAVA_OPTIONS
from connectors.core.options import ALWAYS_ACCEPTED_OPTIONS
from sinks.kafka import options as kafka_sink
from sinks.postgres import options as postgres_options
from sinks.delta import options as delta_options
from sinks.two_phase_commit import (
    BATCH_SETTINGS_OPTIONS,
    BATCH_SPARK_OPTIONS,
    SETTINGS_OPTIONS,
    SPARK_OPTIONS,
)
from sources import kafka_options as source_options

ROOT = Path(__file__).resolve().parents[1]


def _streaming_sink(options: tuple[str, ...]) -> tuple[str, ...]:
    """What a streaming sink accepts: its own options, the template's, what Spark adds."""
    return (*options, *SETTINGS_OPTIONS, *SPARK_OPTIONS)


def _batch_sink(options: tuple[str, ...]) -> tuple[str, ...]:
    """What a batch write (df.write) of a sink accepts (reject_unknown_options(batch=True))."""
    return (*options, *BATCH_SETTINGS_OPTIONS, *BATCH_SPARK_OPTIONS)


def _streaming_only(streaming: tuple[str, ...], batch: tuple[str, ...]) -> tuple[str, ...]:
    lowered = {b.lower() for b in batch}
    return tuple(dict.fromkeys(o for o in streaming if o.lower() not in lowered))


def _demo_flags() -> tuple[str, ...]:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.choices and "demo" in a.choices)
    demo = subparsers.choices["demo"]
    return tuple(s for a in demo._actions for s in a.option_strings
                 if s.startswith("--") and s != "--help")


@dataclass(frozen=True)
class Page:
    page: str  # relative to the repository root
    what: str  # for the message: whose options
    names: tuple[str, ...]  # every name the code accepts (or refuses by name, with a reason)
    prefixes: tuple[str, ...] = ()  # families: documented as `<prefix>*`
    word_only: bool = field(default=False)  # first column is `--flag ARG`: keep the first word
    #: the page's option tables name nothing else (False where they also describe settings
    #: passed through under a prefix, e.g. the Java client names the source translates)
    exhaustive: bool = field(default=True)


_DELTA_BATCH = _batch_sink(delta_options.BATCH_OPTIONS)
_KAFKA_BATCH = _batch_sink(kafka_sink.OPTIONS)

PAGES = [
    Page("docs/source.md", "the kafka-eos source",
         (*source_options.KNOWN_OPTIONS, *ALWAYS_ACCEPTED_OPTIONS,
          *source_options.UNSUPPORTED_KAFKA_OPTIONS),
         source_options.OPTION_PREFIXES),
    Page("docs/delta-sink.md", "the delta-eos sink (options and table properties)",
         (*_streaming_sink(delta_options.OPTIONS), *delta_options.TABLE_PROPERTIES,
          *delta_options.REFUSED_TABLE_PROPERTIES),
         delta_options.OPTION_PREFIXES),
    Page("docs/kafka-sink.md", "the kafka-eos sink",
         _streaming_sink(kafka_sink.OPTIONS), kafka_sink.OPTION_PREFIXES),
    Page("docs/postgres-sink.md", "the postgres-eos sink",
         _streaming_sink(postgres_options.OPTIONS)),
    Page("docs/batch-writes.md", "batch writes (options a df.write refuses)",
         (*_streaming_only(_streaming_sink(delta_options.OPTIONS), _DELTA_BATCH),
          *_streaming_only(_streaming_sink(kafka_sink.OPTIONS), _KAFKA_BATCH))),
    Page("docs/secured-clusters.md", "the Java client settings refused",
         REFUSED_JAVA_OPTIONS, exhaustive=False),
    Page("docs/writing-a-sink.md", "the TwoPhaseCommitSink template (every sink built on it)",
         SETTINGS_OPTIONS),
    Page("docs/demo.md", "python -m connectors demo", _demo_flags(), word_only=True),
]


def option_tables(markdown: str) -> list[list[str]]:
    """The first-column cells of every option table in `markdown` (code blocks skipped)."""
    tables: list[list[str]] = []
    rows: list[str] | None = None  # the table being read; None: none, or not an option table
    in_table = in_code = False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("|"):
            in_table = False
            continue
        first = line.split("|")[1].strip()
        if not in_table:  # a header row
            in_table = True
            rows = [] if first.lower().endswith(("option", "property")) else None
            if rows is not None:
                tables.append(rows)
        elif rows is not None and not re.fullmatch(r":?-+:?", first):
            rows.append(first)
    return tables


def documented_names(markdown: str, *, word_only: bool = False) -> dict[str, str]:
    """lower-cased name -> name as written, from the first column of every option table."""
    names: dict[str, str] = {}
    for table in option_tables(markdown):
        for cell in table:
            for name in re.findall(r"`([^`]+)`", cell):
                name = name.split()[0] if word_only else name.strip()
                names[name.lower()] = name
    return names


def undocumented(page: Page, markdown: str) -> list[str]:
    documented = documented_names(markdown, word_only=page.word_only)
    wanted = [*page.names, *(f"{p}*" for p in page.prefixes)]
    return [name for name in dict.fromkeys(wanted) if name.lower() not in documented]


def unknown(page: Page, markdown: str) -> list[str]:
    accepted = {n.lower() for n in page.names} | {f"{p}*".lower() for p in page.prefixes}
    prefixes = tuple(p.lower() for p in page.prefixes)
    return [written for lower, written in documented_names(markdown, word_only=page.word_only).items()
            if lower not in accepted and not (prefixes and lower.startswith(prefixes))]


def check_documented(page: Page, markdown: str) -> None:
    missing = undocumented(page, markdown)
    assert not missing, (
        f"{page.page} does not document these options of {page.what} in an option table "
        f"(a `| option | default | meaning |` row each): {', '.join(missing)}"
    )


@pytest.mark.parametrize("page", PAGES, ids=[p.page for p in PAGES])
def test_every_accepted_option_has_a_row_on_its_page(page: Page):
    check_documented(page, (ROOT / page.page).read_text())


EXHAUSTIVE = [p for p in PAGES if p.exhaustive]


@pytest.mark.parametrize("page", EXHAUSTIVE, ids=[p.page for p in EXHAUSTIVE])
def test_every_documented_option_is_one_the_code_accepts(page: Page):
    stale = unknown(page, (ROOT / page.page).read_text())
    assert not stale, (
        f"{page.page} documents options {page.what} does not know (misspelt, or removed from "
        f"the code): {', '.join(stale)}"
    )


def test_a_deleted_row_fails_naming_the_option_and_the_page():
    page = PAGES[0]
    text = (ROOT / page.page).read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `maxTriggerDelay` |"))
    with pytest.raises(AssertionError, match=r"(?m)^docs/source\.md does not document .*: maxTriggerDelay$"):
        check_documented(page, text.replace(row + "\n", ""))
    # a row naming two options, one of them the code's canonical spelling in another case
    row = next(line for line in text.splitlines() if line.startswith("| `kafka.auto.offset.reset`"))
    with pytest.raises(AssertionError, match=r": kafka\.auto\.offset\.reset, kafka\.enable"):
        check_documented(page, text.replace(row + "\n", ""))
    # a prefix family
    with pytest.raises(AssertionError, match=r"(?m): kafka\.\*$"):
        check_documented(page, text.replace("| `kafka.*` |", "| kafka settings |"))


def test_names_are_compared_case_insensitively_and_tables_of_other_kinds_are_ignored():
    text = (
        "| option | default | meaning |\n|---|---|---|\n| `MAXOFFSETSPERTRIGGER` | | |\n\n"
        "| failure | what |\n|---|---|\n| `subscribe` | |\n\n"
        "```\n| option |\n|---|\n| `assign` |\n```\n"
        "| refused property | why |\n|---|---|\n| `a`, `b` | |\n"
    )
    assert documented_names(text) == {"maxoffsetspertrigger": "MAXOFFSETSPERTRIGGER", "a": "a", "b": "b"}
