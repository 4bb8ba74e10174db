"""The PySpark versions the package runs on, checked before it imports any PySpark API.

`pyspark>=4.2,<4.4` (pyproject.toml). PySpark 4.2 is the oldest whose Python Data Source API has
what the formats use: `pyspark.sql.streaming.datasource` (admission control and
`SupportsTriggerAvailableNow` for Python stream readers) is new in 4.2, and
`DataSourceStreamArrowWriter` in 4.1. On an older PySpark those imports would fail with a bare
`ModuleNotFoundError: No module named 'pyspark.sql.streaming.datasource'`; the modules PySpark
imports to find the formats (`pyspark_*`, `connectors.formats`) and `connectors.register()` call
`require()` first, so the error names the versions needed instead.
"""

from __future__ import annotations

#: The oldest PySpark (major, minor) supported, and the range as pip spells it.
MINIMUM = (4, 2)
SUPPORTED = ">=4.2,<4.4"


class UnsupportedPySpark(ImportError):
    """The installed PySpark is older than the package needs."""


def _major_minor(version: str) -> tuple[int, int] | None:
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def check(version: str, where: str = "") -> None:
    """Raise `UnsupportedPySpark` if `version` (PySpark's `__version__`) is older than 4.2."""
    found = _major_minor(version)
    if found is None or found >= MINIMUM:
        return  # a development build's odd version string is given the benefit of the doubt
    at = f" ({where})" if where else ""
    raise UnsupportedPySpark(
        f"kafka-eos needs PySpark 4.2 or 4.3 (pyspark{SUPPORTED}); this is PySpark {version}"
        f"{at}, whose Python Data Source API lacks what the kafka-eos, delta-eos and "
        f"postgres-eos formats use: pip install 'pyspark{SUPPORTED}'")


def require() -> None:
    """Check the PySpark that `import pyspark` finds."""
    import pyspark

    check(getattr(pyspark, "__version__", ""), getattr(pyspark, "__file__", "") or "")
