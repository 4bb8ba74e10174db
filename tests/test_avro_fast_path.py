"""The Avro fast path (polars over one container block, sizes proven per record) against the
fastavro path it stands in for: generated schemas across the type mapping and generated
records must give the same Arrow, and corrupted records the same rows and nulls."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import math
import random
import struct
import uuid

import fastavro
import pyarrow as pa
import pytest

from connectors.core.schema_registry.avro_fast import FastAvroReader, FastPathRefused
from connectors.core.schema_registry.decoding import ReaderSchema
from connectors.core.schema_registry.decoders import new_decoder
from connectors.core.schema_registry.options import RegistryOptions

READER_ID = 42
UTC = dt.timezone.utc


class Gen:
    """Random Avro schemas (as JSON) and values that fit them."""

    def __init__(self, seed: int, refs: bool = True) -> None:
        self.r = random.Random(seed)
        self.refs = refs  # types referred to by name (off where fields are moved around)
        self.n = 0
        self.named: list[tuple[str, dict]] = []  # full names defined so far, reusable by name

    def name(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def schema(self, depth: int = 0, union: bool = True) -> object:
        r = self.r
        kinds = ["boolean", "int", "long", "float", "double", "string", "bytes", "logical",
                 "enum", "fixed"] + ["nullable", "nullable"] * union
        if depth < 3:
            kinds += ["record", "array", "map"] + ["nullable"] * union
        if self.refs and self.named and r.random() < 0.15:
            return self.named[r.randrange(len(self.named))][0]  # a reference by name
        kind = r.choice(kinds)
        if kind == "logical":
            return r.choice([
                {"type": "int", "logicalType": "date"},
                {"type": "long", "logicalType": "timestamp-millis"},
                {"type": "long", "logicalType": "timestamp-micros"},
                {"type": "long", "logicalType": "local-timestamp-millis"},
                {"type": "long", "logicalType": "local-timestamp-micros"},
                {"type": "string", "logicalType": "uuid"},
                {"type": "int", "logicalType": "time-millis"},
                {"type": "long", "logicalType": "time-micros"},
                {"type": "bytes", "logicalType": "decimal", "precision": r.choice([4, 18, 38]),
                 "scale": r.choice([0, 2])},
                {"type": "fixed", "name": self.name("D"), "size": 9, "logicalType": "decimal",
                 "precision": 20, "scale": 3},
            ])
        if kind == "enum":
            s = {"type": "enum", "name": self.name("E"),
                 "symbols": [f"S{i}" for i in range(r.randint(1, 5))]}
            self.named.append((s["name"], s))
            return s
        if kind == "fixed":
            s = {"type": "fixed", "name": self.name("F"), "size": r.randint(1, 6)}
            self.named.append((s["name"], s))
            return s
        if kind == "nullable":
            inner = self.schema(depth + 1, union=False)
            return ["null", inner] if r.random() < 0.7 else [inner, "null"]
        if kind == "record":
            s = {"type": "record", "name": self.name("R"),
                 "fields": [{"name": f"f{i}", "type": self.schema(depth + 1)}
                            for i in range(r.randint(1, 4))]}
            self.named.append((s["name"], s))
            return s
        if kind == "array":
            return {"type": "array", "items": self.schema(depth + 1)}
        if kind == "map":
            return {"type": "map", "values": self.schema(depth + 1)}
        return kind

    def value(self, schema: object) -> object:
        r = self.r
        if isinstance(schema, str):
            named = dict(self.named)
            if schema in named:
                return self.value(named[schema])
            return {
                "boolean": lambda: r.random() < 0.5,
                "int": lambda: r.choice([0, -1, 63, -64, 64, 2**31 - 1, -2**31,
                                         r.randint(-2**31, 2**31 - 1)]),
                "long": lambda: r.choice([0, 2**63 - 1, -2**63, r.randint(-2**40, 2**40)]),
                "float": lambda: struct.unpack("f", struct.pack("f", r.uniform(-1e6, 1e6)))[0],
                "double": lambda: r.choice([0.0, -0.0, math.inf, r.uniform(-1e300, 1e300)]),
                "string": lambda: "".join(r.choice("aé€😀z ") for _ in range(r.randint(0, 200))),
                "bytes": lambda: r.randbytes(r.randint(0, 150)),
            }[schema]()
        if isinstance(schema, list):
            if r.random() < 0.3:
                return None
            return self.value(next(s for s in schema if s != "null"))
        t = schema["type"]
        logical = schema.get("logicalType")
        if logical == "date":
            return dt.date(1970, 1, 1) + dt.timedelta(days=r.randint(-100000, 100000))
        if logical in ("timestamp-millis", "timestamp-micros"):
            return dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(
                microseconds=r.randint(-10**15, 10**15) // 1000 * 1000)
        if logical in ("local-timestamp-millis", "local-timestamp-micros"):
            return dt.datetime(2024, 1, 1) + dt.timedelta(microseconds=r.randint(0, 10**14))
        if logical == "uuid":
            return uuid.UUID(int=r.getrandbits(128))
        if logical == "time-millis":
            return dt.time(r.randint(0, 23), r.randint(0, 59), r.randint(0, 59), 1000)
        if logical == "time-micros":
            return dt.time(r.randint(0, 23), r.randint(0, 59), r.randint(0, 59), 7)
        if logical == "decimal":
            digits = schema["precision"]
            unscaled = r.choice([0, -1, 10**digits - 1, -(10**digits - 1),
                                 r.randint(-10**digits + 1, 10**digits - 1)])
            return decimal.Decimal(unscaled).scaleb(-schema["scale"], decimal.Context(prec=80))
        if t in ("record", "error"):
            return {f["name"]: self.value(f["type"]) for f in schema["fields"]}
        if t == "enum":
            return r.choice(schema["symbols"])
        if t == "fixed":
            return r.randbytes(schema["size"])
        if t == "array":
            flat = schema["items"] in ("int", "long", "string", "boolean", "double")
            # 70 items: a count that takes two varint bytes, for flat items only (nested
            # arrays of 70 would multiply)
            return [self.value(schema["items"]) for _ in range(r.choice([0, 1, 3, 70 if flat
                                                                           else 4]))]
        if t == "map":
            return {f"k{i}": self.value(schema["values"]) for i in range(r.choice([0, 1, 4]))}
        return self.value(t)


def generated(seed: int, rows: int = 60, refs: bool = True) -> tuple[dict, list[bytes]]:
    gen = Gen(seed, refs)
    fields = [{"name": f"c{i}", "type": gen.schema()} for i in range(gen.r.randint(1, 8))]
    schema = {"type": "record", "name": "Top", "namespace": "t", "fields": fields}
    parsed = fastavro.parse_schema(schema, named_schemas={})
    records = []
    for _ in range(rows):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, gen.value(schema))
        records.append(b"\x00" + READER_ID.to_bytes(4, "big") + out.getvalue())
    return schema, records


def decoders(schema: dict, mode: str = "FAILFAST"):
    opts = RegistryOptions.parse({"valueformat": "avro", "mode": mode,
                                  "schema.registry.url": "http://127.0.0.1:1"})
    reader = ReaderSchema("avro", "t-value", READER_ID, 1, json.dumps(schema))
    fast, slow = new_decoder(opts, reader), new_decoder(opts, reader)
    slow.fast = None
    return fast, slow


def where(i: int) -> tuple[str, int, int]:
    return ("t", 0, i)


def _plain(t: pa.DataType) -> pa.DataType:
    """`t` with dates and timestamps as their integers: a corrupted record may hold a date
    Python cannot represent, which both paths must still agree on."""
    if pa.types.is_date32(t):
        return pa.int32()
    if pa.types.is_timestamp(t):
        return pa.int64()
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _plain(f.type)) for f in t])
    if pa.types.is_map(t):
        return pa.map_(t.key_type, _plain(t.item_type))
    if pa.types.is_list(t):
        return pa.list_(_plain(t.value_type))
    return t


def rows_of(array: pa.Array) -> list:
    """Rows with NaN made comparable, dates and timestamps as integers."""
    array = array.cast(_plain(array.type))
    def norm(v):
        if isinstance(v, float) and math.isnan(v):
            return "NaN"
        if isinstance(v, dict):
            return {k: norm(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):  # map entries come as (key, value) tuples
            return [norm(x) for x in v]
        return v
    return [norm(v) for v in array.to_pylist()]


@pytest.mark.parametrize("seed", range(40))
def test_generated_records_decode_as_fastavro_decodes_them(seed: int) -> None:
    schema, records = generated(seed)
    fast, slow = decoders(schema)
    if fast.fast is None:
        pytest.fail(f"the fast path refused a schema it is meant to take: {schema}")
    values = pa.array(records, pa.binary())
    expected = slow.decode(values, where)
    direct = fast.fast.decode(values)  # the fast path itself: a refusal fails here
    got = fast._spark(direct)
    assert got.type == expected.type == fast.spark_type
    assert rows_of(got) == rows_of(expected)


@pytest.mark.parametrize("seed", range(12))
def test_corrupted_records_give_the_rows_and_nulls_fastavro_gives(seed: int) -> None:
    """Each record mutated once (a byte changed, cut short, bytes appended): whatever the
    fast path accepts must be what fastavro reads, and a whole batch decodes alike."""
    schema, records = generated(1000 + seed, rows=40)
    r = random.Random(seed)
    fast, slow = decoders(schema, "PERMISSIVE")
    if fast.fast is None:
        pytest.fail(f"the fast path refused a schema it is meant to take: {schema}")
    corrupt, accepted = [], 0
    for data in records:
        data = bytearray(data)
        how = r.random()
        if how < 0.6 and len(data) > 5:
            data[r.randrange(5, len(data))] = r.randrange(256)
        elif how < 0.8 and len(data) > 6:
            del data[r.randrange(6, len(data)):]
        else:
            data += r.randbytes(r.randint(1, 3))
        one = pa.array([bytes(data)], pa.binary())
        try:
            got = fast._spark(fast.fast.decode(one))
        except FastPathRefused:
            pass
        else:
            accepted += 1
            assert rows_of(got) == rows_of(slow.decode(one, where)), bytes(data)
        corrupt.append(bytes(data))
    print(f"seed {seed}: {accepted} of {len(records)} mutated records accepted")
    # else each comparison above was skipped, and the one below compares fastavro with fastavro
    # (a batch the fast path refuses falls back to it)
    assert accepted > 0, "the fast path accepted no mutated record: nothing was compared"
    values = pa.array(corrupt, pa.binary())
    assert rows_of(fast.decode(values, where)) == rows_of(slow.decode(values, where))


def wire(payload: bytes) -> bytes:
    return b"\x00" + READER_ID.to_bytes(4, "big") + payload


@pytest.mark.parametrize(("fields", "payload", "why"), [
    ([{"name": "u", "type": ["null", "int"]}], b"\x04\x02", "index 2 of a 2-branch union"),
    ([{"name": "u", "type": ["null", "int"]}], b"\x03\x02", "index -2 (fastavro: branch 0)"),
    ([{"name": "i", "type": "int"}], b"\x82\x00", "a varint one byte too long"),
    ([{"name": "i", "type": "int"}], b"\x80\x80\x80\x80\x20", "an int beyond 32 bits"),
    ([{"name": "s", "type": "string"}], b"\x04ab!", "a byte after the record"),
    ([{"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A"]}}], b"\x02",
     "an enum index past the symbols"),
    ([{"name": "m", "type": {"type": "map", "values": "int"}}], b"\x04\x02a\x02\x02a\x04\x00",
     "a map key written twice"),
    ([{"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 2,
                             "scale": 0}}], b"\x04\x01\x00", "a decimal beyond its precision"),
    ([{"name": "a", "type": {"type": "array", "items": "int"}}], b"\x03\x04\x02\x04\x00",
     "an array block with its byte size (not what a canonical writer writes)"),
])
def test_records_the_fast_path_cannot_vouch_for_are_refused(fields, payload, why) -> None:
    schema = {"type": "record", "name": "R", "fields": fields}
    reader = FastAvroReader(schema)
    good = {"u": None, "i": 1, "s": "ab", "e": "A", "m": {"a": 1}, "d": decimal.Decimal(1),
            "a": [1]}
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema, named_schemas={}),
                               {f["name"]: good[f["name"]] for f in fields})
    reader.decode(pa.array([wire(out.getvalue())]))  # the canonical record passes
    with pytest.raises(FastPathRefused):
        reader.decode(pa.array([wire(out.getvalue()), wire(payload)]))
    # and the decoder as a whole still gives fastavro's answer for it
    fast, slow = decoders(schema, "PERMISSIVE")
    values = pa.array([wire(out.getvalue()), wire(payload)])
    assert rows_of(fast.decode(values, where)) == rows_of(slow.decode(values, where)), why


def test_a_boolean_byte_other_than_one_is_true_as_fastavro_reads_it() -> None:
    schema = {"type": "record", "name": "R", "fields": [{"name": "b", "type": "boolean"}]}
    fast, slow = decoders(schema)
    values = pa.array([wire(b"\x02"), wire(b"\x00"), wire(b"\xff")])
    assert fast.fast.decode(values).to_pylist() == slow.decode(values, where).to_pylist() == [
        {"b": True}, {"b": False}, {"b": True}]


@pytest.mark.parametrize("schema", [
    ["int", "long"],
    ["null", "string", "long"],
    {"type": "record", "name": "R", "fields": [{"name": "n", "type": "null"}]},
])
def test_schemas_beyond_the_fast_path_go_to_fastavro(schema) -> None:
    with pytest.raises(FastPathRefused):
        FastAvroReader(schema)
    fast, _ = decoders({"type": "record", "name": "W", "fields": [{"name": "x",
                                                                   "type": schema}]})
    assert fast.fast is None


def test_a_mixed_batch_keeps_its_order_and_names_bad_records_where_they_are() -> None:
    """Rows of the reader's id through the fast path, others (tombstones, junk, other ids)
    record by record, put back in place."""
    schema = {"type": "record", "name": "R", "fields": [{"name": "x", "type": "long"}]}
    fast, _ = decoders(schema, "PERMISSIVE")
    values = pa.array([wire(b"\x02"), None, b"junk", wire(b"\x04"), wire(b"\x06")])
    assert fast.decode(values, where).to_pylist() == [{"x": 1}, None, None, {"x": 2}, {"x": 3}]
    strict, _ = decoders(schema)
    from connectors.core.schema_registry.decoding import MalformedRecordError
    with pytest.raises(MalformedRecordError, match="offset 2"):
        strict.decode(values, where)


DEFAULTED = [  # new reader fields, with defaults of each kind the fast path builds
    {"type": ["null", "string"], "default": None},
    {"type": "long", "default": 5},
    {"type": "int", "default": -3},
    {"type": {"type": "int", "logicalType": "date"}, "default": 19000},
    {"type": {"type": "long", "logicalType": "timestamp-millis"}, "default": 1700000000000},
    {"type": "string", "default": "dé"},
    {"type": "boolean", "default": True},
    {"type": "double", "default": 1.5},
    {"type": "float", "default": 2},
    {"type": ["long", "null"], "default": 7},
]


def evolved(seed: int) -> tuple[dict, dict]:
    """A writer schema and a later reader schema: some writer fields dropped, fields with
    defaults added, the rest reordered."""
    schema, _ = generated(seed, rows=0, refs=False)
    r = random.Random(seed)
    writer = json.loads(json.dumps(schema))
    kept = [f for f in writer["fields"] if r.random() < 0.8] or writer["fields"][:1]
    added = [dict(r.choice(DEFAULTED), name=f"new{i}") for i in range(r.randint(1, 3))]
    fields = kept + added
    r.shuffle(fields)
    return writer, dict(writer, fields=fields)


def with_writer(decoder, writer: dict, writer_id: int):
    from confluent_kafka.schema_registry import Schema

    known = {writer_id: Schema(json.dumps(writer), "AVRO")}
    decoder.writer_schema = lambda schema_id, fmt=None: known[schema_id]
    return decoder


@pytest.mark.parametrize("seed", range(15))
def test_records_of_an_older_writer_schema_resolve_as_fastavro_resolves_them(seed: int) -> None:
    writer, reader = evolved(seed)
    gen = Gen(seed)
    gen.named = []
    parsed = fastavro.parse_schema(writer, named_schemas={})
    _collect(gen, writer)
    old = []
    for _ in range(40):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, gen.value(writer))
        old.append(b"\x00" + (7).to_bytes(4, "big") + out.getvalue())
    fast, slow = decoders(reader)
    for d in (fast, slow):
        with_writer(d, writer, 7)
    values = pa.array(old, pa.binary())
    resolving = fast._fast_for(7)
    if resolving is None:
        pytest.fail(f"the fast path refused a trivial resolution: {writer} -> {reader}")
    assert rows_of(fast._spark(resolving.decode(values))) == rows_of(slow.decode(values, where))
    assert rows_of(fast.decode(values, where)) == rows_of(slow.decode(values, where))


def _collect(gen: Gen, schema) -> None:
    """The named types of `schema`, for Gen.value to follow references by name."""
    from connectors.core.schema_registry.avro_types import collect_names

    names: dict = {}
    collect_names(schema, None, names)
    gen.named = [(n.rsplit(".", 1)[-1], s) for n, s in names.items()] + list(names.items())


@pytest.mark.parametrize(("writer_field", "reader_field"), [
    ({"name": "a", "type": "int"}, {"name": "a", "type": "long"}),  # a promotion
    ({"name": "a", "type": "int"}, {"name": "b", "type": "int", "aliases": ["a"]}),
    ({"name": "a", "type": "int"}, {"name": "b", "type": "int"}),  # new, without a default
    ({"name": "a", "type": {"type": "enum", "name": "E", "symbols": ["X", "Y"]}},
     {"name": "a", "type": {"type": "enum", "name": "E", "symbols": ["X"], "default": "X"}}),
])
def test_resolutions_beyond_the_trivial_go_to_fastavro(writer_field, reader_field) -> None:
    writer = {"type": "record", "name": "R", "fields": [writer_field]}
    reader = {"type": "record", "name": "R", "fields": [reader_field]}
    fast, slow = decoders(reader, "PERMISSIVE")
    for d in (fast, slow):
        with_writer(d, writer, 7)
    assert fast._fast_for(7) is None
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(writer, named_schemas={}),
                               {"a": 1 if writer_field["type"] == "int" else "Y"})
    values = pa.array([b"\x00" + (7).to_bytes(4, "big") + out.getvalue()])
    assert rows_of(fast.decode(values, where)) == rows_of(slow.decode(values, where))


def test_a_batch_of_two_schema_ids_decodes_both_in_order() -> None:
    writer = {"type": "record", "name": "R", "fields": [{"name": "x", "type": "long"}]}
    reader = {"type": "record", "name": "R", "fields": [
        {"name": "x", "type": "long"}, {"name": "y", "type": ["null", "string"],
                                        "default": None}]}
    fast, _ = decoders(reader)
    with_writer(fast, writer, 7)
    old = b"\x00" + (7).to_bytes(4, "big")
    new = wire(b"\x02\x02\x02a")  # x=1, y="a"
    values = pa.array([old + b"\x04", new, old + b"\x06", None])
    assert fast.decode(values, where).to_pylist() == [
        {"x": 2, "y": None}, {"x": 1, "y": "a"}, {"x": 3, "y": None}, None]


def test_a_writer_whose_batches_are_always_refused_stays_with_fastavro() -> None:
    """A writer encoding what the fast path never takes (here a varint one byte too long)
    would pay for both paths in every batch: after a few refusals its id stays with fastavro,
    while an id whose batches are refused now and then keeps the fast path."""
    from connectors.core.schema_registry.avro_decoding import REFUSALS_TO_STOP

    schema = {"type": "record", "name": "R", "fields": [{"name": "i", "type": "int"}]}
    fast, slow = decoders(schema)
    odd = pa.array([wire(b"\x82\x00")] * 3)  # i=1, non-canonical: fastavro reads it
    for n in range(REFUSALS_TO_STOP):
        assert fast._fast_by_id[READER_ID] is not None, n
        assert fast.decode(odd, where).to_pylist() == slow.decode(odd, where).to_pylist()
    assert fast._fast_by_id[READER_ID] is None
    assert fast.decode(odd, where).to_pylist() == [{"i": 1}] * 3

    mostly, _ = decoders(schema)
    good = pa.array([wire(b"\x02")] * 3)
    for _ in range(3 * REFUSALS_TO_STOP):
        mostly.decode(good, where)
        mostly.decode(good, where)
        mostly.decode(odd, where)
    assert mostly._fast_by_id[READER_ID] is not None
