"""Short tasks in reused Python workers: keep PySpark's collection between tasks cheap.

Spark reuses its Python workers (`spark.python.worker.reuse`, true by default), and PySpark's
daemon runs a full `gc.collect()` in a reused worker after every task (pyspark/daemon.py),
before the worker takes its next one. A full collection walks every object the worker holds,
and a worker that has imported pyarrow, PySpark's worker modules and the Kafka client holds
some 56,000: measured on 2 cores, 31-49 ms a collection at a load of 4 and 100-130 ms at 10,
paid by every task after the first on each worker while Spark waits (100-285 ms between two
tasks of a worker, seen). A batch of 8 tasks reading 4 records each took 600-900 ms on 2
workers where each task's Python work was 4-55 ms.

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
