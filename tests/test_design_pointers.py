"""The code, the tests and the docs point into docs/ for the rules they rely on, never to a file
outside the repository: every `docs/<page>.md#<anchor>` written in a source file names a page
that exists and a heading it has, every repository file a source names (`sinks/x.py`,
`integration_tests/y.py`) exists, and nothing cites the old design notes kept outside the
repository, which a clone does not have."""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_docs_links import anchors

ROOT = Path(__file__).resolve().parents[1]
_POINTER = re.compile(r"docs/([\w-]+\.md)#([\w-]+)")
#: The repository's top-level folders: a path starting with one of them names a repository file.
_TOPS = ("connectors", "sources", "sinks", "integration_tests", "tests", "benchmarks", "docs",
         "docker", ".github")
_FILE = re.compile(r"(?<![\w./~-])((?:%s)/(?:[\w.-]+/)*[\w.-]*\w"
                   r"\.(?:py|md|toml|ya?ml|json|png|svg))(?![\w/])"
                   % "|".join(re.escape(top) for top in _TOPS))
#: Paths made up by a test, as a user's own (a page of their own sink), per file.
_MADE_UP = {"tests/test_options.py": {"docs/mine.md"},
            "tests/test_architecture_diagram.py": {"connectors/core/gone.py"}}
_OLD = "DESIGN" + ".md"  # spelt in two pieces, so this file does not cite it
#: Pages and files made up by a test's own fixtures (these files check their checkers on them).
_FIXTURES = {"tests/test_docs_links.py", "tests/test_design_pointers.py"}


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


def stale_paths(text: str, cited_from: Path) -> list[str]:
    """The repository files `text` names that do not exist. A path is taken from the
    repository's root, from the citing file's folder, or from docs/ (a page's relative link,
    `benchmarks/results.json`, quoted in a test)."""
    bases = (ROOT, cited_from.parent, ROOT / "docs")
    return [path for path in _FILE.findall(text)
            if not any((base / path).exists() for base in bases)]


def test_a_stale_path_is_found_and_a_live_one_is_not():
    here = ROOT / "tests" / "test_design_pointers.py"
    text = ("see sinks/delta_log.py and (connectors/_pyspark_python.py), docs/gone.md#x; "
            "but sinks/two_phase_commit.py, `docs/design.md#commit-protocol`, "
            "](benchmarks/results.json) and s3://bucket/sinks/x.py are fine")
    assert stale_paths(text, here) == ["sinks/delta_log.py", "connectors/_pyspark_python.py",
                                       "docs/gone.md"]


def test_every_repository_file_named_in_a_source_exists():
    stale = []
    for path in _sources():
        name = path.relative_to(ROOT).as_posix()
        if name in _FIXTURES:
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            stale += [f"{name}:{n}: {p}" for p in stale_paths(line, path)
                      if p not in _MADE_UP.get(name, ())]
    assert not stale, "paths to files that do not exist:\n" + "\n".join(stale)
