"""The source's `value` and `key` columns in a Schema Registry format: a struct of the reader
schema's fields in place of the bytes, decoded in the task that read them (no UDF pass), with
`rawValue` / `rawKey` keeping the bytes when asked.

The reader schemas are resolved once, on the driver, when the query starts (`.load()`): the
subject's latest version, or `valueSchemaVersion`. So a restarted query picks up a schema that
evolved meanwhile, and its row schema may change (a new field): `delta-eos` takes it with
`mergeSchema=true`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_type, to_arrow_schema
from pyspark.sql.types import BinaryType, StructField, StructType

from connectors.core.options import OptionError
from connectors.core.schema_registry.options import RegistryOptions

if TYPE_CHECKING:  # the decoders need the [registry] extra: imported only when a side uses it
    from connectors.core.schema_registry.decoding import ReaderSchema


@dataclass(frozen=True)
class SideColumn:
    """One side (`value` or `key`) read through the registry."""

    opts: RegistryOptions
    reader: ReaderSchema
    arrow_type: pa.DataType  # exactly what Spark expects for the column's struct

    @property
    def name(self) -> str:
        return self.opts.side


@dataclass(frozen=True)
class RegistryColumns:
    """What a task does to each Arrow batch it read: the sides to decode, the raw columns to
    add. Picklable (options and schema text only); decoders are built per worker process."""

    sides: tuple[SideColumn, ...] = ()
    raw: tuple[str, ...] = ()  # "value" / "key": sides whose bytes are kept

    @property
    def active(self) -> bool:
        return bool(self.sides or self.raw)

    def spark_schema(self, base: StructType) -> StructType:
        """`base` (the source's binary row) with the decoded sides' types and the raw columns."""
        by_side = {s.name: s for s in self.sides}
        fields = []
        for f in base.fields:
            side = by_side.get(f.name)
            if side is None:
                fields.append(f)
            else:
                fields.append(StructField(f.name, from_arrow_type(side.arrow_type,
                                                                  prefer_timestamp_ntz=True), True))
        for side in self.raw:
            fields.append(StructField(_raw_name(side), BinaryType(), True))
        return StructType(fields)

    def apply(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The batch with its sides decoded (and the raw bytes kept where asked)."""
        if not self.active:
            return batch
        names = batch.schema.names
        columns = list(batch.columns)
        fields = list(batch.schema)
        topics, partitions, offsets = (batch.column(names.index(n))
                                       for n in ("topic", "partition", "offset"))

        def where(i: int) -> tuple[str, int, int]:
            return topics[i].as_py(), partitions[i].as_py(), offsets[i].as_py()

        if self.sides:
            from connectors.core.schema_registry.decoders import decoder_for
        for side in self.sides:
            at = names.index(side.name)
            decoded = decoder_for(side.opts, side.reader).decode(batch.column(at), where)
            if decoded.type != side.arrow_type:
                decoded = decoded.cast(side.arrow_type)
            columns[at] = decoded
            fields[at] = pa.field(side.name, side.arrow_type)
        for side in self.raw:
            columns.append(batch.column(names.index(side)))
            fields.append(pa.field(_raw_name(side), pa.binary()))
        return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields))


def _raw_name(side: str) -> str:
    return "rawValue" if side == "value" else "rawKey"


def resolve_columns(value: RegistryOptions, key: RegistryOptions, kind: str,
                    topics: tuple[str, ...]) -> RegistryColumns:
    """The reader schemas of both sides, looked up in the registry now (query start)."""
    sides = []
    for opts in (key, value):
        if not opts.enabled:
            continue
        from connectors.core.schema_registry.decoders import new_decoder
        from connectors.core.schema_registry.decoding import resolve_reader_schema

        reader = resolve_reader_schema(opts, single_topic(topics, kind, opts))
        decoder = new_decoder(opts, reader)  # refuses schemas with no Spark type, at .load()
        spark = from_arrow_type(decoder.spark_type, prefer_timestamp_ntz=True)
        expected = to_arrow_schema(StructType([StructField(opts.side, spark, True)]),
                                   timezone="UTC").field(opts.side).type
        sides.append(SideColumn(opts, reader, expected))
    raw = tuple(o.side for o in (key, value) if o.include_raw)
    return RegistryColumns(tuple(sides), raw)


def single_topic(topics: tuple[str, ...], kind: str, side: RegistryOptions) -> str | None:
    """The topic a subject is named after, when the subscription names exactly one."""
    if side.subject is not None or side.subject_strategy == "record":
        return None
    if kind == "subscribe" and len(topics) == 1:
        return topics[0]
    if kind == "assign" and len(set(topics)) == 1:
        return topics[0]
    raise OptionError(side.format_option.replace("Format", "Subject"),
                      "is required when the query reads a pattern or several topics: name the "
                      "subject whose schema the rows are read with (with "
                      f"{side.format_option.replace('Format', 'SubjectNameStrategy')}="
                      f"{side.subject_strategy} its name depends on the topic)")
