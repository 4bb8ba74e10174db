"""Short tasks in reused Python workers: keep PySpark's collection between tasks cheap.

Spark reuses its Python workers (`spark.python.worker.reuse`, true by default), and PySpark's
daemon runs a full `gc.collect()` in a reused worker after every task (pyspark/daemon.py),
before the worker takes its next one. A full collection walks every object the worker holds,
tens of thousands once pyarrow, PySpark and the Kafka client are imported, and Spark waits for
it between two tasks (docs/design.md#full-collections-in-reused-python-workers).

`freeze_long_lived()` at the start of a task moves what the worker holds by then (its imported
modules, mostly) to the permanent generation, once per process (`gc.freeze()`): later
collections walk only what was allocated since, so they still collect every task's garbage,
in about a millisecond. The objects frozen are never collected, which is what modules are
anyway; what the first task itself has allocated by then is frozen with them, once.
"""

from __future__ import annotations

import gc
import os

_frozen_in_pid: int | None = None


def freeze_long_lived() -> bool:
    """Freeze the objects this process holds now, the first time it is called in this process
    (a forked child calls it afresh). Returns whether it froze."""
    global _frozen_in_pid
    pid = os.getpid()
    if _frozen_in_pid == pid:
        return False
    _frozen_in_pid = pid
    gc.freeze()
    return True
