"""Sections that run on their own refuse company, naming themselves, instead of being skipped.

`--only kafka-sink-main,source` would otherwise run the source section and silently drop the
Kafka sink's comparison (benchmarks/__main__.py, `_run_alone`).
"""

from __future__ import annotations

import pytest

from benchmarks.__main__ import main


@pytest.mark.parametrize("section", ["kafka-sink-main", "partitions", "cluster"])
def test_a_section_that_runs_alone_refuses_other_sections(section, tmp_path) -> None:
    with pytest.raises(SystemExit) as refused:
        main(["--only", f"{section},source", "--output-dir", str(tmp_path)])
    assert f"--only {section} runs on its own" in str(refused.value)
