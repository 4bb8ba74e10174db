"""docs/architecture.md matches the tree: its picture of the layers is the one the import graph
draws (tests/architecture_diagram.py; a new package, a module moved or an import added or
removed between packages changes it, and this fails until the page is redrawn), and its "Where
each concept lives" names every module of the wheel, in its folder's entry."""

from __future__ import annotations

import grimp

from tests.architecture_diagram import (
    PAGE,
    contract_layers,
    current,
    diagram,
    layout_entries,
    on_page,
    unplaced_modules,
)

LAYERS = [["top.cli", "top.local"], ["a", "b"], ["top.core"]]


def _graph(*imports: tuple[str, str]) -> grimp.ImportGraph:
    graph = grimp.ImportGraph()
    for importer, imported in imports:
        graph.add_import(importer=importer, imported=imported)
    return graph


def test_packages_are_boxed_in_their_layer_and_arrows_count_module_imports():
    graph = _graph(("top.cli", "a.x"), ("top.cli", "a.y"), ("top.cli", "top.core.opts"),
                   ("a.x", "top.core.opts"), ("a.y", "a.x"), ("b.sub.m", "top.core.opts"),
                   ("b.sub.m", "b.n"), ("top.local.run", "top.cli"), ("top", "top.cli"))
    drawn = diagram(graph, LAYERS, ("up", "mid", "down"))
    boxes = {line.split("[")[0].strip(): line for line in drawn.splitlines() if "modules" in line}
    assert boxes["top"].endswith('["top/<br/>2 modules"]')  # top and top.cli
    assert boxes["a"].endswith('["a/<br/>2 modules"]')
    assert boxes["b_sub"].endswith('["b/sub/<br/>1 modules"]')
    assert boxes["top_core"].endswith('["top/core/<br/>1 modules"]')
    order = [line.strip() for line in drawn.splitlines()]
    assert (order.index('subgraph layer1["mid"]') < order.index('a["a/<br/>2 modules"]')
            < order.index('subgraph layer2["down"]')
            < order.index('top_core["top/core/<br/>1 modules"]'))
    arrows = [line.strip() for line in drawn.splitlines() if "-->" in line]
    assert arrows == ["a -->|1| top_core", "b_sub -->|1| b", "b_sub -->|1| top_core",
                      "top -->|2| a", "top -->|1| top_core", "top_local -->|1| top"]


def test_an_import_added_between_packages_changes_the_picture():
    graph = _graph(("top.cli", "a.x"), ("a.x", "top.core.opts"))
    before = diagram(graph, LAYERS)
    graph.add_import(importer="a.y", imported="top.core.opts")
    assert diagram(graph, LAYERS) != before
    assert "a -->|2| top_core" in diagram(graph, LAYERS)


def test_the_page_shows_the_layers_the_code_has():
    assert len(contract_layers()) == 3
    shown = on_page(PAGE.read_text())
    assert shown is not None, "docs/architecture.md lost its diagram's markers"
    assert shown == current(), ("docs/architecture.md's diagram is not the code's: run "
                                "`python -m tests.architecture_diagram --write`")


def test_a_module_missing_from_its_entry_or_named_but_gone_is_found(tmp_path):
    for name in ("connectors/__init__.py", "connectors/cli.py", "connectors/core/__init__.py",
                 "connectors/core/paths.py", "sources/__init__.py", "sources/offsets.py",
                 "sinks/__init__.py", "sinks/delta/__init__.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    page = ("## Where each concept lives\n\n```\nconnectors/   cli.py (the command line),\n"
            "              core/paths.py\nconnectors/core/  paths.py, gone.py\n"
            "sources/      the source\nsinks/        delta/\n```\n")
    entries = layout_entries(page)
    assert entries["connectors/"] == "   cli.py (the command line), core/paths.py"
    assert unplaced_modules(entries, tmp_path) == [
        "connectors/core/gone.py: named, no such module",
        "sources/offsets.py: not named in its entry",
        "sinks/delta/: no entry"]


def test_every_module_of_the_wheel_is_placed_on_the_page():
    assert unplaced_modules(layout_entries(PAGE.read_text())) == []
