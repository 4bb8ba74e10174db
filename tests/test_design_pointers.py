"""The code, the tests and the docs point into docs/ for the rules they rely on, never to a file
outside the repository: every `docs/<page>.md#<anchor>` written in a source file names a page
that exists and a heading it has, and nothing cites the old design notes kept outside the repository,
which a clone does not have."""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_docs_links import anchors

ROOT = Path(__file__).resolve().parents[1]
_POINTER = re.compile(r"docs/([\w-]+\.md)#([\w-]+)")
_OLD = "DESIGN" + ".md"  # spelt in two pieces, so this file does not cite it
#: Pages made up by a test's own fixtures (tests/test_docs_links.py checks its checker on them).
_FIXTURES = {"tests/test_docs_links.py"}


def _sources() -> list[Path]:
    found = []
    for pattern in ("**/*.py", "**/*.md", "**/*.toml", "**/*.yml", "**/*.yaml"):
        found += [p for p in ROOT.glob(pattern)
                  if ".git" not in p.parts and "node_modules" not in p.parts
                  and not any(part.startswith(".venv") for part in p.parts)]
    return sorted(set(found))


def test_nothing_cites_the_design_notes_outside_the_repository():
    citing = [f"{p.relative_to(ROOT)}:{n}" for p in _sources()
              for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
              if _OLD in line]
    assert not citing, (f"{_OLD} is not part of the repository; point into docs/design.md or "
                        f"docs/architecture.md instead: {', '.join(citing)}")


def test_every_pointer_into_docs_names_an_existing_heading():
    broken = []
    for path in _sources():
        if path.relative_to(ROOT).as_posix() in _FIXTURES:
            continue
        for page, anchor in _POINTER.findall(path.read_text(errors="replace")):
            target = ROOT / "docs" / page
            if not target.exists():
                broken.append(f"{path.relative_to(ROOT)}: docs/{page} (no such page)")
            elif anchor not in anchors(target.read_text()):
                broken.append(f"{path.relative_to(ROOT)}: docs/{page}#{anchor} (no such heading)")
    assert not broken, "; ".join(broken)
