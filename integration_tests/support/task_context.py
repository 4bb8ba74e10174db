"""A stand-in for pyspark.TaskContext, so that a sink's task side (the template's `write()`)
runs in a test without a Spark task around it: `task(batch, partition, attempt)` sets what the
next `write()` sees."""

from __future__ import annotations

import pytest


class FakeTaskContext:
    """What the template's write() asks of pyspark.TaskContext."""

    def __init__(self, batch: int, partition: int, attempt: int) -> None:
        self.batch, self.partition, self.attempt = batch, partition, attempt

    def getLocalProperty(self, key: str) -> str | None:
        return str(self.batch) if key == "streaming.sql.batchId" else None

    def partitionId(self) -> int:
        return self.partition

    def attemptNumber(self) -> int:
        return self.attempt


@pytest.fixture
def task(monkeypatch):
    """task(batch, partition, attempt): the TaskContext the next write() sees."""
    import pyspark

    def set_task(batch: int, partition: int, attempt: int = 0) -> None:
        ctx = FakeTaskContext(batch, partition, attempt)
        monkeypatch.setattr(pyspark.TaskContext, "get", classmethod(lambda cls: ctx))

    return set_task
