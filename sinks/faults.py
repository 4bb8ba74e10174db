"""Fault injection for the crash matrix (docs/design.md#crash-matrix). Inert unless the
environment variable `KAFKA_EOS_FAULTS` names a point, so production runs never reach it.

    KAFKA_EOS_FAULTS="after_decision@3"              kill the pipeline at that point of batch 3
    KAFKA_EOS_FAULTS="task_write@2/1,task_fail@4"    several points; `/1`: only partition 1

Kill points SIGKILL the pipeline's whole process group (named by `KAFKA_EOS_KILL_PGID`, set by
the pipeline's launcher; PySpark's worker daemon lives in a group of its own, so both groups
are killed). `task_fail` raises in the first attempt of a task instead, so Spark retries it.
"""

from __future__ import annotations

import os
import signal

ENV = "KAFKA_EOS_FAULTS"
PGID_ENV = "KAFKA_EOS_KILL_PGID"

#: In protocol order. `task_*` run in tasks, the rest on the driver.
POINTS = (
    "task_write",        # a task has written part of its data
    "task_fail",         # a task raises (first attempt only): Spark retries it
    "after_precommit",   # every task prepared; no decision yet
    "after_decision",    # decision logged; nothing committed
    "after_store_commit",  # the store committed (a partition, or the whole batch); no marker yet
    "after_some_commits",  # some partitions committed (stores that commit per partition)
    "after_commit",      # all committed and logged; Spark has not yet written its commit log
)


class InjectedFault(RuntimeError):
    """Raised by `task_fail`: a task failure Spark is expected to retry."""


def _armed(point: str, batch_id: int, partition: int | None) -> bool:
    spec = os.environ.get(ENV, "")
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, _, where = item.partition("@")
        if name != point:
            continue
        batch, _, part = where.partition("/")
        if batch and int(batch) != batch_id:
            continue
        if part and partition is not None and int(part) != partition:
            continue
        return True
    return False


def inject(point: str, batch_id: int, partition: int | None = None, attempt: int = 0) -> None:
    if ENV not in os.environ or not _armed(point, batch_id, partition):
        return
    if point == "task_fail":
        if attempt == 0:
            raise InjectedFault(f"injected task failure at batch {batch_id} partition {partition}")
        return
    pgid = os.environ.get(PGID_ENV)
    if pgid:
        try:
            os.killpg(int(pgid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    os.killpg(os.getpgrp(), signal.SIGKILL)
