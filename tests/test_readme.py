"""The README is the project's contract: its set-up, main-job and test commands are on the front
page as written, and `.ci/run` runs exactly its set-up and test commands. The reference lives in
docs/ (tests/test_docs_options.py, tests/test_docs_links.py); the README stays a front page."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()

SET_UP = 'pip install -e ".[test]"'
MAIN_JOB = "python -m connectors demo"
TESTS = "python -m pytest"


def quickstart_commands() -> list[str]:
    """The commands of the first bash block under '## Quickstart', comments removed."""
    section = README.split("\n## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "README.md: the Quickstart section has no ```bash block"
    return [line.split("#", 1)[0].strip() for line in block.group(1).splitlines() if line.strip()]


def test_quickstart_holds_the_three_commands_in_order():
    assert quickstart_commands() == [SET_UP, MAIN_JOB, TESTS]


def test_ci_runs_exactly_the_readme_set_up_and_test_commands():
    run = (ROOT / ".ci" / "run").read_text()
    commands = [line.strip() for line in run.splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    assert SET_UP in commands and TESTS in commands
    assert commands.index(SET_UP) < commands.index(TESTS)
    assert MAIN_JOB not in run  # the demo is the main job, not part of CI's set-up and tests


def test_readme_is_a_front_page():
    assert len(README.encode()) < 12_000, "README.md grew past a front page: move reference to docs/"
    assert re.search(r"^## A first pipeline$", README, re.M)
    assert "](docs/index.md)" in README
