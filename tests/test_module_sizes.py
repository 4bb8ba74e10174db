"""A newcomer reads the wheel a module and a function at a time: no module of connectors/,
sources/ or sinks/ is over MAX_MODULE_LINES lines, and no function or method over
MAX_FUNCTION_LINES (docstring included). A module or function that grows past them is split by
concern, not exempted here."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("connectors", "sources", "sinks")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def module_lengths(root: Path = ROOT) -> dict[str, int]:
    return {str(p.relative_to(root)): len(p.read_text().splitlines())
            for package in PACKAGES for p in sorted((root / package).rglob("*.py"))}


def function_lengths(source: str) -> dict[str, int]:
    """Every function and method of a module (nested ones too) -> its lines, by qualified
    name."""
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    lengths[name] = child.end_lineno - child.lineno + 1
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return lengths


def test_the_lengths_are_measured_as_written():
    source = ("class A:\n    def f(self):\n        def g():\n            pass\n"
              "        return g\n\n\ndef h():\n" + "    x = 1\n" * 81)
    assert function_lengths(source) == {"A.f": 4, "A.f.g": 2, "h": 82}


def test_no_module_of_the_wheel_is_over_600_lines():
    long = {m: n for m, n in module_lengths().items() if n > MAX_MODULE_LINES}
    assert not long, f"split these by concern (lines): {long}"


def test_no_function_of_the_wheel_is_over_80_lines():
    long = {}
    for module in module_lengths():
        for name, n in function_lengths((ROOT / module).read_text()).items():
            if n > MAX_FUNCTION_LINES:
                long[f"{module}:{name}"] = n
    assert not long, f"split these (lines): {long}"
