"""`readMode=driver`: the driver reads each micro-batch itself.

A micro-batch read by Spark tasks costs a Python task per range whatever its size, and most
of a small batch's time is that task, not Kafka (docs/design.md#a-python-tasks-fixed-cost). PySpark's SimpleDataSourceStreamReader reads on the driver instead:
its Arrow batches go to the JVM with the batch's plan, and no Python task runs to read them.
For a trickle (hundreds of records per trigger) that is the faster path; for large batches it is
not (one process reads everything, and holds the batch until Spark plans it), hence an option,
off by default.

Nothing of the source's semantics changes: the same KafkaStreamReader decides every batch's
offsets (limits, new partitions, data loss, metrics lines, group commits) and its plan names the
same ranges, read by the same range reader (pooled consumers, kept in the driver's Python
source process between batches). A batch logged but not committed before a restart is read
again from its logged offsets (`readBetweenOffsets`, in a Spark task): exactly the same records.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import SimpleDataSourceStreamReader

from sources.kafka_options import KafkaSourceOptions
from sources.kafka_source import KafkaStreamReader, read_partition
from sources.registry_columns import RegistryColumns


class KafkaDriverStreamReader(SimpleDataSourceStreamReader):
    def __init__(self, options: KafkaSourceOptions, columns: RegistryColumns | None = None) -> None:
        self.options = options
        self.columns = columns
        self._reader = KafkaStreamReader(options, columns)

    def initialOffset(self) -> dict:
        return self._reader.initialOffset()

    def read(self, start: dict) -> tuple[Iterator[pa.RecordBatch], dict]:
        """The records from `start` to the end the source's rules choose now, and that end."""
        end = self._reader.latestOffset(start, self._reader.getDefaultReadLimit())
        if end == start:
            return iter(()), start  # nothing new: Spark runs no batch
        return iter(self._batches(start, end)), end

    def readBetweenOffsets(self, start: dict, end: dict) -> Iterator[pa.RecordBatch]:
        """A logged batch replayed after a restart: its logged offsets, nothing else."""
        return iter(self._batches(start, end))

    def commit(self, end: dict) -> None:
        self._reader.commit(end)

    def _batches(self, start: dict, end: dict) -> list[pa.RecordBatch]:
        """The batch's Arrow record batches, read now (PySpark copies the iterator it caches,
        so a list, not a generator). PySpark takes record batches from simple readers as they
        are (`records_to_arrow_batches`): no row becomes a Python object."""
        return [batch for partition in self._reader.partitions(start, end)
                for batch in read_partition(self.options, partition, self.columns)]
