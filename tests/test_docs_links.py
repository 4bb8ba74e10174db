"""Every relative link of README.md and docs/*.md points to a file that exists and, into a
markdown page, to a heading that page has; every page of docs/ can be reached from the index."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: Pages written on other branches, linked from README.md and docs/index.md before
#: they are merged. Remove each from this list once it exists: from then on its links and
#: headings are checked like any other page's.
ARRIVING: set[str] = set()

_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_CODE_SPAN = re.compile(r"`[^`\n]*`")


def links(markdown: str) -> list[str]:
    """Link and image targets outside code blocks and code spans."""
    found: list[str] = []
    in_code = False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        if not in_code:
            found += _LINK.findall(_CODE_SPAN.sub("", line))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    seen: dict[str, int] = {}
    result: set[str] = set()
    in_code = False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        m = None if in_code else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            result.add(base if n == 0 else f"{base}-{n}")
    return result


def broken_links(page: Path) -> list[str]:
    problems: list[str] = []
    for target in links(page.read_text()):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
            continue  # http:, https:, mailto:
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        rel = dest.relative_to(ROOT).as_posix() if dest.is_relative_to(ROOT) else str(dest)
        if rel in ARRIVING:
            continue
        if not dest.exists():
            problems.append(f"{target} (no file {rel})")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
            problems.append(f"{target} (no heading #{anchor} in {rel})")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_relative_links_point_to_existing_files_and_headings(page: Path):
    problems = broken_links(page)
    assert not problems, f"{page.relative_to(ROOT)}: broken links: {'; '.join(problems)}"


def test_a_broken_link_or_anchor_is_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## `delta-eos` over 1,000 batches\n")
    page = tmp_path / "README.md"
    page.write_text(
        "[ok](docs/a.md#a-page) [ok](docs/a.md#delta-eos-over-1000-batches) "
        "`[not a link](nowhere.md)` [web](https://x.org)\n"
        "[gone](docs/b.md) [bad anchor](docs/a.md#nope) ![img](docs/missing.png)\n"
        "```\n[in code](nowhere.md)\n```\n"
    )
    assert broken_links(page) == [
        "docs/b.md (no file docs/b.md)",
        "docs/a.md#nope (no heading #nope in docs/a.md)",
        "docs/missing.png (no file docs/missing.png)",
    ]


def test_every_docs_page_is_listed_in_the_index_and_the_index_on_the_front_page():
    index = (ROOT / "docs" / "index.md").read_text()
    listed = {t.partition("#")[0] for t in links(index)}
    unlisted = [p.name for p in sorted((ROOT / "docs").glob("*.md"))
                if p.name != "index.md" and p.name not in listed]
    assert not unlisted, f"docs/index.md does not link to: {', '.join(unlisted)}"
    assert "docs/index.md" in links((ROOT / "README.md").read_text())
    arriving = {f"docs/{t}" for t in listed} & ARRIVING
    assert arriving == ARRIVING, "docs/index.md links to the pages arriving from other branches"
