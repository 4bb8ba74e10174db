"""`bench-noop`: a Python streaming sink that takes the Arrow batches and does nothing; and
`bench-ready-batches`: a Python streaming source that yields ready-made Arrow batches.

The baseline for a Python sink: the same pipeline into it costs what Spark spends before any
sink code runs (reading the input, the JVM-to-Python Arrow transfer, task scheduling), so the
sinks' own cost is the difference. The source's counterpart: what Spark takes in from a Python
source that spends nothing on getting its data, the ceiling of any Python source.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)


class _Done(WriterCommitMessage):
    pass


class NoopArrowWriter(DataSourceStreamArrowWriter):
    def write(self, iterator):
        for _ in iterator:
            pass
        return _Done()

    def commit(self, messages, batchId) -> None:
        pass

    def abort(self, messages, batchId) -> None:
        pass


class NoopDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench-noop"

    def streamWriter(self, schema, overwrite):
        return NoopArrowWriter()


def register(spark) -> None:
    from pyspark import cloudpickle

    import benchmarks.noop_sink as me

    cloudpickle.register_pickle_by_value(me)  # workers need not import the benchmarks
    spark.dataSource.register(NoopDataSource)
    spark.dataSource.register(ReadyBatchesSource)
    spark.dataSource.register(TicksSource)


# -- the source-side ceiling --------------------------------------------------------------------


class _Slice(InputPartition):  # how many ready-made batches one task yields
    def __init__(self, batches: int, rows: int, value_bytes: int) -> None:
        self.batches, self.rows, self.value_bytes = batches, rows, value_bytes


class ReadyBatchesReader(DataSourceStreamReader):
    """Yields the same ready-made Arrow batch (kafka-eos's schema) over and over: what Spark
    takes in from a Python source that spends nothing on getting its data."""

    def __init__(self, options: dict) -> None:
        self.tasks = int(options.get("tasks", 2))
        self.batches = int(options.get("batchesPerTask", 10))
        self.rows = int(options.get("rowsPerBatch", 20000))
        self.value_bytes = int(options.get("valueBytes", 100))

    def initialOffset(self) -> dict:
        return {"done": 0}

    def latestOffset(self) -> dict:
        return {"done": 1}

    def partitions(self, start: dict, end: dict):
        if start["done"] >= end["done"]:
            return []
        return [_Slice(self.batches, self.rows, self.value_bytes) for _ in range(self.tasks)]

    def read(self, partition):
        import pyarrow as pa

        from sources.range_reader import TIMESTAMP_TYPE, arrow_schema

        n, blob = partition.rows, b"x" * partition.value_bytes
        batch = pa.RecordBatch.from_arrays([
            pa.array([b"k%d" % i for i in range(n)], pa.binary()),
            pa.array([blob] * n, pa.binary()),
            pa.array(["t"] * n, pa.string()),
            pa.array([0] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
            pa.array([0] * n, pa.int64()).cast(TIMESTAMP_TYPE),
            pa.array([0] * n, pa.int32()),
        ], schema=arrow_schema(False))
        for _ in range(partition.batches):
            yield batch

    def commit(self, end: dict) -> None:
        pass


class ReadyBatchesSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench-ready-batches"

    def schema(self) -> str:
        from sources.range_reader import SPARK_SCHEMA_DDL

        return SPARK_SCHEMA_DDL

    def streamReader(self, schema):
        return ReadyBatchesReader(self.options)


# -- the latency floor of a Python source -------------------------------------------------------


class TicksReader(ReadyBatchesReader):
    """A new micro-batch at every trigger, each task yielding one ready-made batch of
    `rowsPerBatch / tasks` rows: what a micro-batch costs Spark's Python source path when the
    source spends nothing on its data (the latency benchmark's `python_floor`). Reads and
    commits as ReadyBatchesReader does."""

    def __init__(self, options: dict) -> None:
        super().__init__({"tasks": options.get("tasks", 2), "batchesPerTask": 1,
                          "valueBytes": 100})
        self.rows = max(1, int(options.get("rowsPerBatch", 200)) // self.tasks)
        self.ticks = 0

    def initialOffset(self) -> dict:
        return {"tick": 0}

    def latestOffset(self) -> dict:
        self.ticks += 1
        return {"tick": self.ticks}

    def partitions(self, start: dict, end: dict):
        return [_Slice(self.batches, self.rows, self.value_bytes) for _ in range(self.tasks)]


class TicksSource(ReadyBatchesSource):
    @classmethod
    def name(cls) -> str:
        return "bench-ticks"

    def streamReader(self, schema):
        return TicksReader(self.options)
