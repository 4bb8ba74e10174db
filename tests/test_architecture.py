"""The layers of docs/architecture.md hold in the code: the import contracts of pyproject.toml
([tool.importlinter]) are kept, no modules import each other in a circle, nothing below the
façade imports the package root, and what the wheel ships imports no test plumbing."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
#: Where circles are looked for: the three packages of the wheel, the benchmarks and the
#: integration tests.
PACKAGES = ("connectors", "sources", "sinks", "benchmarks", "integration_tests")
#: The project's own top-level packages: a private name (`_x`) of one of their modules is that
#: module's business; another module that needs it gets it made public.
PROJECT = ("connectors", "sources", "sinks", "benchmarks", "integration_tests")
#: What no module of the wheel may import: the test runners, their servers, the tests'
#: plumbing (the certificate generator included) and the tests themselves.
TEST_ONLY = ("pytest", "moto", "testcontainers", "docker", "integration_tests", "tests")


def test_the_import_contracts_are_kept():
    """`lint-imports` in a process of its own (it configures logging for the whole process),
    on this checkout's packages."""
    path = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
    run = subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; "
         "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True,
        timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    contracts = len(tomllib.loads(open(os.path.join(ROOT, "pyproject.toml")).read())
                    ["tool"]["importlinter"]["contracts"])
    assert contracts >= 3
    # "0 kept, 0 broken." would pass a bare " kept, 0 broken." test: every contract counted
    assert f"Contracts: {contracts} kept, 0 broken." in run.stdout, run.stdout


def circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Every group of two or more modules that import each other, directly or through others
    (the strongly connected components of the import graph, by Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, imported = work[-1]
            step = next(imported, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph.find_modules_directly_imported_by(step)))))
                elif step in on_stack:
                    low[module] = min(low[module], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == index[module]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == module:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def _graph(*imports: tuple[str, str]) -> grimp.ImportGraph:
    graph = grimp.ImportGraph()
    for importer, imported in imports:
        graph.add_import(importer=importer, imported=imported)
    return graph


def test_circles_are_found_however_long_and_only_circles():
    graph = _graph(("a", "b"), ("b", "a"), ("c", "d"), ("d", "e"), ("e", "c"), ("e", "f"),
                   ("f", "g"), ("b", "c"))
    assert sorted(circles(graph)) == [["a", "b"], ["c", "d", "e"]]
    assert circles(_graph(("a", "b"), ("b", "c"), ("a", "c"))) == []


def test_no_modules_import_each_other_in_a_circle():
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    found = circles(graph)
    described = []
    for group in found:
        first, *rest = group
        chain = graph.find_shortest_chain(importer=first, imported=rest[0]) or ()
        back = graph.find_shortest_chain(importer=rest[0], imported=first) or ()
        described.append(f"{' <-> '.join(group)} (e.g. {' -> '.join(chain)}, then "
                         f"{' -> '.join(back)})")
    assert not found, "import circles:\n" + "\n".join(described)


def test_nothing_below_the_facade_imports_the_package_root():
    """`import connectors` runs the façade's __init__ (register, formats): the source, the
    sinks and the base must not depend on it."""
    graph = grimp.build_graph("connectors", "sources", "sinks", cache_dir=None)
    below = [m for m in graph.find_modules_that_directly_import("connectors")
             if m.split(".")[0] in ("sources", "sinks") or m.startswith("connectors.core")]
    assert below == []


def _wheel_files() -> list[Path]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    included = config["tool"]["hatch"]["build"]["targets"]["wheel"]["only-include"]
    files: list[Path] = []
    for name in included:
        path = ROOT / name
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return files


def imported_tops(source: str) -> set[str]:
    """The top-level names of every module `source` imports, anywhere in it."""
    tops = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            tops |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            tops.add(node.module.split(".")[0])
    return tops


def test_imports_are_found_in_functions_and_type_checking_blocks():
    source = ("import os\nif TYPE_CHECKING:\n    from moto import server\n"
              "def f():\n    import integration_tests.support.certs\n")
    assert imported_tops(source) == {"os", "moto", "integration_tests"}


def test_the_wheel_imports_no_test_plumbing():
    files = _wheel_files()
    assert ROOT / "connectors" / "local" / "apache_kafka.py" in files
    offending = {}
    for path in files:
        bad = sorted(imported_tops(path.read_text()) & set(TEST_ONLY))
        if bad:
            offending[str(path.relative_to(ROOT))] = bad
    assert offending == {}


def private_imports(source: str) -> list[str]:
    """`from <project module> import _name` anywhere in `source`, as `module._name`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level \
                and node.module.split(".")[0] in PROJECT:
            found += [f"{node.module}.{a.name}" for a in node.names
                      if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_private_imports_are_found():
    source = ("from benchmarks.latency import run_batches, _stamp\n"
              "def f():\n    from confluent_kafka.x import _pool\n    from .y import _z\n"
              "    from integration_tests.support import __doc__\n")
    assert private_imports(source) == ["benchmarks.latency._stamp"]


def test_no_module_imports_another_modules_private_names():
    """The wheel's packages, the benchmarks and the integration tests (the unit tests may reach
    into the module they test)."""
    offending = {}
    for package in PROJECT:
        for path in sorted((ROOT / package).rglob("*.py")):
            found = private_imports(path.read_text())
            if found:
                offending[str(path.relative_to(ROOT))] = found
    assert offending == {}


def _integration_modules() -> list[Path]:
    return sorted((ROOT / "integration_tests").rglob("test_*.py"))


def test_integration_test_modules_are_grouped_in_packages_with_unique_names():
    """Each test module sits in a sub-package (support/ holds no tests), and no two share a
    basename: conftest.py's LONGEST_FIRST ranks them by it."""
    modules = _integration_modules()
    assert len(modules) > 50
    for path in modules:
        folder = path.parent
        assert folder.parent == ROOT / "integration_tests" and folder.name != "support", path
        assert (folder / "__init__.py").is_file(), f"{folder} lacks __init__.py"
    names = [p.stem for p in modules]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def test_every_module_ranked_longest_first_exists():
    conftest = ast.parse((ROOT / "integration_tests" / "conftest.py").read_text())
    [ranked] = [ast.literal_eval(node.value) for node in conftest.body
                if isinstance(node, ast.Assign)
                and any(getattr(t, "id", None) == "LONGEST_FIRST" for t in node.targets)]
    assert set(ranked) - {p.stem for p in _integration_modules()} == set()
    assert len(set(ranked)) == len(ranked)
