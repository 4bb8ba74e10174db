"""Fault injection for the crash matrix (docs/design.md#crash-matrix). Inert unless the
environment variable `KAFKA_EOS_FAULTS` names a point, so production runs never reach it.

    KAFKA_EOS_FAULTS="after_decision@3"              kill the pipeline at that point of batch 3
    KAFKA_EOS_FAULTS="task_write@2/1,task_fail@4"    several points; `/1`: only partition 1
    KAFKA_EOS_FAULTS="ck-pg:after_some_commits@4"    only the query whose checkpoint folder is
                                                     named `ck-pg`

Kill points SIGKILL the pipeline's whole process group (named by `KAFKA_EOS_KILL_PGID`, set by
the pipeline's launcher; PySpark's worker daemon lives in a group of its own, so both groups
are killed). `task_fail` raises in the first attempt of a task instead, so Spark retries it.

Several queries of one pipeline can be killed together, each at its own point of the same
batch: with `KAFKA_EOS_FAULTS_RENDEZVOUS=DIR:N`, a query that reaches its kill point leaves a
mark in DIR and waits there until N queries have reached theirs in that batch; then the
process group dies with all N parked at their points (one Spark start for every sink's row of
the crash matrix, instead of one each).
"""

from __future__ import annotations

import hashlib
import os
import signal
import sys
import time

ENV = "KAFKA_EOS_FAULTS"
PGID_ENV = "KAFKA_EOS_KILL_PGID"
RENDEZVOUS_ENV = "KAFKA_EOS_FAULTS_RENDEZVOUS"
#: How long a parked query waits for the others before it kills anyway, saying so: a query
#: that never reaches its point must not hang the test.
RENDEZVOUS_TIMEOUT_S = 240.0

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


def _scope_name(scope: str | None) -> str | None:
    return os.path.basename(scope.rstrip("/")) if scope else None


def _armed(point: str, batch_id: int, partition: int | None, scope: str | None = None) -> bool:
    spec = os.environ.get(ENV, "")
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, _, where = item.partition("@")
        only, colon, name = name.rpartition(":")
        if colon and only != _scope_name(scope):
            continue
        if name != point:
            continue
        batch, _, part = where.partition("/")
        if batch and int(batch) != batch_id:
            continue
        if part and partition is not None and int(part) != partition:
            continue
        return True
    return False


def _rendezvous(point: str, batch_id: int, scope: str | None) -> None:
    """Mark this query as parked at its point of `batch_id`; wait for the others."""
    folder, _, parties = os.environ[RENDEZVOUS_ENV].rpartition(":")
    who = hashlib.sha1((scope or "").encode()).hexdigest()[:12]
    mark = os.path.join(folder, f"{batch_id}.{who}")
    if not os.path.exists(mark):
        # Written aside, then renamed: the other parties count marks, and the last one kills
        # the process group at once, so a mark must never be seen before its words are in it
        # (the crash matrix once found one empty).
        with open(f"{mark}.tmp", "w") as f:
            f.write(f"{_scope_name(scope)} {point}\n")
        os.replace(f"{mark}.tmp", mark)
    deadline = time.monotonic() + RENDEZVOUS_TIMEOUT_S
    while True:
        here = [n for n in os.listdir(folder)
                if n.startswith(f"{batch_id}.") and not n.endswith(".tmp")]
        if len(here) >= int(parties):
            return
        if time.monotonic() > deadline:
            print(f"fault rendezvous timed out at batch {batch_id}: {len(here)} of {parties} "
                  "queries reached their kill point", file=sys.stderr, flush=True)
            return
        time.sleep(0.05)


def inject(point: str, batch_id: int, partition: int | None = None, attempt: int = 0,
           scope: str | None = None) -> None:
    """`scope`: the writer's checkpoint location, which a spec item can name (`name:`)."""
    if ENV not in os.environ or not _armed(point, batch_id, partition, scope):
        return
    if point == "task_fail":
        if attempt == 0:
            whose = f" ({_scope_name(scope)})" if scope else ""
            raise InjectedFault(
                f"injected task failure at batch {batch_id} partition {partition}{whose}")
        return
    if os.environ.get(RENDEZVOUS_ENV):
        _rendezvous(point, batch_id, scope)
    pgid = os.environ.get(PGID_ENV)
    if pgid:
        try:
            os.killpg(int(pgid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    os.killpg(os.getpgrp(), signal.SIGKILL)
