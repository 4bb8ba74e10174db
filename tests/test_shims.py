"""Zero-config registration: PySpark registers every top-level `pyspark_*` module's
DefaultSource, so each format must have a shim, and the wheel must ship it."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

from connectors.formats import ALL

ROOT = Path(__file__).resolve().parents[1]
WHEEL = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]


def test_every_format_has_a_shim_in_the_wheel():
    shipped = [p for p in WHEEL["wheel"]["only-include"] if p.startswith("pyspark_")]
    shims = {p.removesuffix(".py"): importlib.import_module(p.removesuffix(".py")) for p in shipped}
    assert sorted(m.DefaultSource.name() for m in shims.values()) == sorted(f.name() for f in ALL)
    for module in shims.values():
        assert module.DefaultSource in ALL, f"{module.__name__} registers a class other than ALL's"
    assert sorted(p.name for p in ROOT.glob("pyspark_*.py")) == sorted(shipped)
