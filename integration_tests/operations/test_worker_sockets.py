"""The sessions `local_spark()` builds talk to their Python workers over Unix domain sockets.

Over loopback TCP, a read task's Python worker waited about 40 ms for its input in every task
(Spark's two small writes, the second held until the worker's kernel acknowledged the first:
docs/performance.md, "The read task's 40 ms"). This checks, from inside a Python worker of the
suite's shared session, which kind of socket the worker holds: a session that fell back to TCP
fails here, not only in a benchmark.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pyarrow as pa


def _socket_inodes() -> set[str]:
    """The inodes of the sockets this process holds open."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed while listing
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    return inodes


def _table_inodes(path: str, column: int) -> set[str]:
    """The inodes listed in one of /proc/net's socket tables."""
    try:
        with open(path) as f:
            next(f)  # header
            return {line.split()[column] for line in f if len(line.split()) > column}
    except FileNotFoundError:  # no IPv6 on this host
        return set()


def _worker_sockets(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Runs in a Python worker: how many of its sockets are TCP and how many Unix."""
    for _ in batches:
        pass
    mine = _socket_inodes()
    tcp = mine & (_table_inodes("/proc/self/net/tcp", 9) | _table_inodes("/proc/self/net/tcp6", 9))
    unix = mine & _table_inodes("/proc/self/net/unix", 6)
    yield pa.record_batch({"pid": [os.getpid()], "tcp": [len(tcp)], "unix": [len(unix)]})


def test_python_workers_of_a_local_session_talk_over_unix_domain_sockets(spark) -> None:
    assert spark.conf.get("spark.python.unix.domain.socket.enabled") == "true"
    rows = (spark.range(4, numPartitions=2)
            .mapInArrow(_worker_sockets, "pid long, tcp long, unix long").collect())
    assert len(rows) == 2, rows  # one report per task
    for row in rows:
        # The worker's connection to the JVM: a Unix socket, and no TCP one at all (over TCP
        # the worker holds exactly one, to the JVM's loopback port).
        assert row.tcp == 0, f"worker {row.pid} holds {row.tcp} TCP socket(s): {rows}"
        assert row.unix >= 1, f"worker {row.pid} holds no Unix socket: {rows}"
