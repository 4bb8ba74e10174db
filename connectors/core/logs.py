"""The structured log lines, for applications that want them: opt in with
`enable_structured_logs()`.

The package configures no logging handlers of its own: where its lines go is the
application's choice. Its structured lines (`batch read {...}` on `kafka_eos.source`,
`batch committed {...}` and recovery on `kafka_eos.sink`) are INFO lines of the `kafka_eos`
loggers, and most are logged in Spark's Python workers, which are processes of their own that
configure no logging: an INFO line there goes nowhere. So opting in is carried by the
environment, which those workers inherit: `enable_structured_logs()` sets KAFKA_EOS_LOG_LEVEL
and configures this process; a worker that finds the variable set configures itself the same
way the first time the package logs there (`from_environment`). Set the variable yourself
where the workers run elsewhere (e.g. `spark.executorEnv.KAFKA_EOS_LOG_LEVEL`).

The CLI and the demo opt in. An application that configures logging itself needs none of this
in its own process: the `kafka_eos` loggers propagate to its handlers.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TextIO

#: Every structured line of the package is logged under this logger.
LOGGER = "kafka_eos"
#: Set (by enable_structured_logs, or by hand) to a level name: Spark's Python workers
#: configure the `kafka_eos` logger from it.
LEVEL_ENV = "KAFKA_EOS_LOG_LEVEL"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: Marks the handler this module installs, so that it is installed once per process.
_MARK = "kafka_eos_structured"


def enable_structured_logs(level: str = "INFO", stream: TextIO | None = None) -> None:
    """Log the package's structured lines at `level` (DEBUG adds the per-partition detail) to
    `stream` (stderr by default): in this process now, and in the Spark Python workers started
    after this call (local sessions; call it before the SparkSession starts)."""
    name = _level_name(level)
    if name is None:
        raise ValueError(f"level must be one of {', '.join(LEVELS)}, not {level!r}")
    os.environ[LEVEL_ENV] = name
    _install(name, stream)


def from_environment() -> None:
    """Configure the `kafka_eos` logger as the application asked through KAFKA_EOS_LOG_LEVEL,
    once per process; nothing when it is unset. Called where the package logs its structured
    lines, so that Spark's Python workers follow the driver's choice. A value that is not a
    level is told once, on the logger, and INFO used: logging never fails a query."""
    if _installed() or not os.environ.get(LEVEL_ENV):
        return
    value = os.environ[LEVEL_ENV]
    name = _level_name(value)
    _install(name or "INFO")
    if name is None:
        logging.getLogger(LOGGER).warning(
            "%s=%r is not a level (%s): logging at INFO", LEVEL_ENV, value, ", ".join(LEVELS))


def _level_name(level: str) -> str | None:
    name = str(level).strip().upper()
    return name if name in LEVELS else None


def _installed() -> bool:
    return any(getattr(h, _MARK, False) for h in logging.getLogger(LOGGER).handlers)


def _install(level: str, stream: TextIO | None = None) -> None:
    logger = logging.getLogger(LOGGER)
    logger.setLevel(level)
    if _installed():
        for h in logger.handlers:
            if getattr(h, _MARK, False) and stream is not None:
                h.setStream(stream)
        return
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    setattr(handler, _MARK, True)
    logger.addHandler(handler)
