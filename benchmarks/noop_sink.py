"""`bench-noop`: a Python streaming sink that takes the Arrow batches and does nothing.

The baseline for a Python sink: the same pipeline into it costs what Spark spends before any
sink code runs (reading the input, the JVM-to-Python Arrow transfer, task scheduling), so the
sinks' own cost is the difference.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage


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
