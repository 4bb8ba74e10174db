"""kafka-python's connection logs, demoted to DEBUG while the commit client runs, and only then.

kafka-python logs every dropped connection as an ERROR (a broker restarting, or the embedded
demo broker's answer to a refused EndTxn); what matters of them reaches the sink's own log as
the exception the commit client raises. A library must not change another library's logging
for the whole application, so nothing is set at import: for the length of a commit client's
call, a filter sits on kafka-python's connection loggers and demotes the records *that call's
thread* emits (kafka-python does its I/O in the thread that polls) to DEBUG. Records of any
other thread (the application's own kafka-python clients) pass untouched, and once no call is
running the filter is gone.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

#: The loggers of kafka-python's connection layer that the commit client's I/O logs on.
NET_LOGGERS = ("kafka.net.transport", "kafka.net.connection", "kafka.net.manager")

P = ParamSpec("P")
R = TypeVar("R")


class _DemoteOwnThreads(logging.Filter):
    """Demotes to DEBUG the records of the threads inside a commit client call."""

    def __init__(self) -> None:
        super().__init__("kafka_eos.commit_client")
        self.threads: dict[int, int] = {}  # thread ident -> depth of nested calls

    def filter(self, record: logging.LogRecord) -> bool:
        if record.thread in self.threads and record.levelno > logging.DEBUG:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


_FILTER = _DemoteOwnThreads()
_LOCK = threading.Lock()


@contextmanager
def demoted() -> Iterator[None]:
    """kafka-python's connection records of this thread demoted to DEBUG, for the block."""
    ident = threading.get_ident()
    with _LOCK:
        if not _FILTER.threads:
            for name in NET_LOGGERS:
                logging.getLogger(name).addFilter(_FILTER)
        _FILTER.threads[ident] = _FILTER.threads.get(ident, 0) + 1
    try:
        yield
    finally:
        with _LOCK:
            depth = _FILTER.threads.pop(ident) - 1
            if depth:
                _FILTER.threads[ident] = depth
            elif not _FILTER.threads:
                for name in NET_LOGGERS:
                    logging.getLogger(name).removeFilter(_FILTER)


def demoting(fn: Callable[P, R]) -> Callable[P, R]:
    """`fn` run inside `demoted()`."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with demoted():
            return fn(*args, **kwargs)

    return run
