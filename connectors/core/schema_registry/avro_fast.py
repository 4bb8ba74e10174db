"""A vectorized path for the Avro records a topic mostly holds: those written with the reader
schema itself. fastavro decodes one record per Python call (tens of thousands a second);
polars' Avro reader (Rust) decodes a whole container block at native speed. So a batch's
payloads go, concatenated, into one block of an in-memory Avro container whose header schema
is the writer's, rewritten only in ways that keep the binary encoding (booleans as 1-byte
fixed, enums and ints as longs, maps as arrays of key/value records, logical types stripped),
and polars' columns are rebuilt into exactly the Arrow the fastavro path builds.

One block has no record boundaries of its own, so they are proven afterwards: each decoded
record's canonical encoded size is computed from its values (varint sizes, lengths, union
indices) and must equal its payload's length. A reader consumes at least the canonical size
of what it returns and cannot read past the block, so equal sizes mean every record consumed
exactly its own payload, with canonical encodings. Union index bytes are then checked where
the sizes place them, ints for their range, enum indices against the symbols, decimals for
their precision. Anything else (a schema the path cannot represent, a record that fails a
check, polars refusing the block) raises `FastPathRefused`, and the caller decodes that batch
with fastavro, which finds the bad records one by one as before.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connectors.core.schema_registry.avro_types import (
    MAX_DECIMAL_PRECISION,
    UTC,
    collect_names,
    full_name,
    resolve_named,
    type_name,
    union_branches,
)

#: The header's sync marker; any 16 bytes do, as the one block is followed by it alone.
SYNC = bytes(range(0x51, 0x61))
HEADER_SIZE = 5  # the wire format's magic byte and schema id


class FastPathRefused(Exception):
    """This schema or batch is not for the fast path; fastavro decodes it."""


@dataclass
class Node:
    """One type of the writer schema, as the fast path decodes and rebuilds it."""

    kind: str  # bool long float double string bytes fixed enum decimal nullable record array map
    build: pa.DataType  # the type the fastavro path builds (avro_types' build_type)
    children: tuple[tuple[str, Node], ...] = ()
    size: int = 0  # fixed: bytes
    symbols: tuple[str, ...] = ()  # enum
    null_index: int = 0  # nullable: the null branch's index (0 or 1)
    has_union: bool = False  # a nullable union below (its index bytes are checked)
    int32: bool = False  # long: an Avro int (range-checked, built as int32 or date)
    name: str = ""  # record, enum, fixed: the full name (resolution matches named types by it)
    header: Any = field(default=None, repr=False)  # the header schema's JSON for this type


class _Names:
    def __init__(self) -> None:
        self.count = 0

    def new(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"


def plan_fast_path(schema: Any) -> Node:
    """The fast path's tree for a reader schema (parsed JSON); FastPathRefused if it has a
    type polars cannot decode here (non-null unions, a bare null)."""
    names: dict[str, Any] = {}
    collect_names(schema, None, names)
    return _node(schema, None, names, (), _Names())


def _node(schema: Any, ns: str | None, names: dict[str, Any], seen: tuple[str, ...],
          uniq: _Names) -> Node:
    schema, ns = resolve_named(schema, ns, names)
    if isinstance(schema, list):
        non_null, has_null = union_branches(schema, ns, names)
        if len(schema) != 2 or not has_null or len(non_null) != 1:
            raise FastPathRefused("a union other than [null, T]")
        child = _node(non_null[0][0], non_null[0][1], names, seen, uniq)
        if child.kind == "nullable":
            raise FastPathRefused("a nested union")
        first, _ = resolve_named(schema[0], ns, names)
        null_index = 0 if type_name(first) == "null" else 1
        header = ["null", child.header] if null_index == 0 else [child.header, "null"]
        return Node("nullable", child.build, (("", child),), null_index=null_index,
                    has_union=True, header=header)
    if isinstance(schema, str):
        return _primitive(schema, uniq)
    t = schema["type"]
    logical = schema.get("logicalType")
    if logical is not None:
        found = _logical(schema, t, logical, uniq)
        if found is not None:
            return found
    if t in ("record", "error"):
        full = full_name(schema["name"], schema.get("namespace", ns))
        if full in seen:
            raise FastPathRefused("a recursive record")
        child_ns = full.rsplit(".", 1)[0] if "." in full else None
        children = tuple((f["name"], _node(f["type"], child_ns, names, (*seen, full), uniq))
                         for f in schema.get("fields", ()))
        build = pa.struct([pa.field(n, c.build) for n, c in children])
        header = {"type": "record", "name": uniq.new("r"),
                  "fields": [{"name": n, "type": c.header} for n, c in children]}
        return Node("record", build, children, has_union=any(c.has_union for _, c in children),
                    name=full, header=header)
    if t == "enum":
        return Node("enum", pa.string(), symbols=tuple(schema["symbols"]), header="long",
                    name=full_name(schema["name"], schema.get("namespace", ns)))
    if t == "fixed":
        size = int(schema["size"])
        return Node("fixed", pa.binary(), size=size,
                    name=full_name(schema["name"], schema.get("namespace", ns)),
                    header={"type": "fixed", "name": uniq.new("f"), "size": size})
    if t == "array":
        item = _node(schema["items"], ns, names, seen, uniq)
        return Node("array", pa.list_(item.build), (("", item),), has_union=item.has_union,
                    header={"type": "array", "items": item.header})
    if t == "map":
        value = _node(schema["values"], ns, names, seen, uniq)
        entry = {"type": "record", "name": uniq.new("m"),
                 "fields": [{"name": "key", "type": "string"},
                            {"name": "value", "type": value.header}]}
        return Node("map", pa.map_(pa.string(), value.build), (("", value),),
                    has_union=value.has_union, header={"type": "array", "items": entry})
    if isinstance(t, str):
        return _primitive(t, uniq)
    return _node(t, ns, names, seen, uniq)


def _primitive(name: str, uniq: _Names) -> Node:
    if name == "boolean":  # 1 byte either way; fastavro reads any non-zero byte as true
        return Node("bool", pa.bool_(), size=1,
                    header={"type": "fixed", "name": uniq.new("b"), "size": 1})
    if name == "int":
        return Node("long", pa.int32(), int32=True, header="long")
    kinds = {"long": pa.int64(), "float": pa.float32(), "double": pa.float64(),
             "string": pa.string(), "bytes": pa.binary()}
    if name not in kinds:
        raise FastPathRefused(f"the Avro type {name!r}")
    return Node(name, kinds[name], header=name)


def _logical(schema: dict, base: Any, logical: str, uniq: _Names) -> Node | None:
    """Logical types as avro_types maps them, decoded from their base type; None: the base."""
    if logical == "decimal" and base in ("bytes", "fixed"):
        precision, scale = int(schema.get("precision", 0)), int(schema.get("scale", 0))
        if not 0 < precision <= MAX_DECIMAL_PRECISION:
            raise FastPathRefused("a decimal beyond Spark's precision")
        size = int(schema["size"]) if base == "fixed" else 0
        if size > 16:  # every value would be refused (decimal128 holds 16 bytes)
            raise FastPathRefused("a decimal on a fixed wider than 16 bytes")
        header = ({"type": "fixed", "name": uniq.new("d"), "size": size} if base == "fixed"
                  else "bytes")
        return Node("decimal", pa.decimal128(precision, scale), size=size, header=header)
    if logical == "date" and base == "int":
        return Node("long", pa.date32(), int32=True, header="long")
    if base == "long" and logical in ("timestamp-millis", "timestamp-micros",
                                      "local-timestamp-millis", "local-timestamp-micros"):
        unit = "ms" if logical.endswith("millis") else "us"
        tz = None if logical.startswith("local") else UTC
        return Node("long", pa.timestamp(unit, tz=tz), header="long")
    return None


# -- decoding -------------------------------------------------------------------------------------


class FastAvroReader:
    """Decodes payloads written with one schema (its parsed JSON) into its build type."""

    def __init__(self, schema: Any) -> None:
        import polars  # the registry extra's; imported here so the fallback needs none of it

        self._polars = polars
        self.root = plan_fast_path(schema)
        # The wire header is read as a 5-byte fixed field of each record: the values' bytes
        # go into the block as they are, with no copy that cuts the headers out.
        top = {"type": "record", "name": "top", "fields": [
            {"name": "h", "type": {"type": "fixed", "name": "h", "size": HEADER_SIZE}},
            {"name": "v", "type": self.root.header}]}
        self._header = _container_header(json.dumps(top))

    def decode(self, values: pa.Array) -> pa.Array:
        """`values` (binary wire-format records, none null, all with this schema's header)
        decoded into an array of the build type; FastPathRefused if any does not verify."""
        n = len(values)
        if n == 0:
            return pa.array([], self.root.build)
        body, lengths = _records(values)
        block = b"".join((self._header, _varint(n), _varint(len(body)), body, SYNC))
        try:
            frame = self._polars.read_avro(io.BytesIO(block), columns=["v"])
        except BaseException as e:  # polars' errors, and its panics (a BaseException)
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            raise FastPathRefused(f"polars: {type(e).__name__}") from None
        if frame.height != n:
            raise FastPathRefused("record count")
        column = frame.to_arrow().column("v").combine_chunks()
        buf = np.frombuffer(body, np.uint8)
        built, sizes, parts = _build(self.root, column)
        if not np.array_equal(sizes + HEADER_SIZE, lengths):
            raise FastPathRefused("a record's size is not its payload's")
        if self.root.has_union:
            starts = np.concatenate(([0], np.cumsum(lengths)[:-1])) + HEADER_SIZE
            _check_unions(self.root, column, parts, starts, np.ones(n, bool), buf)
        return built


def _records(values: pa.Array) -> tuple[memoryview, np.ndarray]:
    """The records' bytes end to end (a view of the array's data) and their lengths."""
    raw = np.frombuffer(values.buffers()[1], np.int64 if pa.types.is_large_binary(values.type)
                        else np.int32)
    offsets = raw[values.offset: values.offset + len(values) + 1].astype(np.int64)
    data = values.buffers()[2]
    body = memoryview(data)[offsets[0]:offsets[-1]] if data is not None else memoryview(b"")
    return body, np.diff(offsets)


def _container_header(schema_json: str) -> bytes:
    meta = {"avro.schema": schema_json.encode(), "avro.codec": b"null"}
    out = [b"Obj\x01", _varint(len(meta))]
    for key, value in meta.items():
        out += [_varint(len(key)), key.encode(), _varint(len(value)), value]
    out += [_varint(0), SYNC]
    return b"".join(out)


def _varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _offsets(array: pa.Array) -> np.ndarray:
    """The value offsets of a large string, binary or list array, as int64."""
    raw = np.frombuffer(array.buffers()[1], np.int64)
    return raw[array.offset: array.offset + len(array) + 1]


def _varint_sizes(values: np.ndarray) -> np.ndarray:
    """Bytes of each value's zig-zag varint (int64 values)."""
    z = ((values << 1) ^ (values >> 63)).view(np.uint64)
    sizes = np.ones(len(z), np.int64)
    if len(z) == 0 or int(z.max()) < 0x80:
        return sizes
    for k in range(1, 10):
        sizes += z >= np.uint64(1 << (7 * k))
    return sizes


def _valid(array: pa.Array) -> np.ndarray:
    if array.null_count == 0:
        return np.ones(len(array), bool)
    return np.asarray(array.is_valid())


def _ints(array: pa.Array) -> np.ndarray:
    return np.asarray(pc.fill_null(array, 0) if array.null_count else array, np.int64)


def _mask(valid: np.ndarray) -> pa.Array | None:
    return None if valid.all() else pa.array(~valid)


def _build(node: Node, arr: pa.Array) -> tuple[pa.Array, np.ndarray, list]:
    """(`arr` rebuilt as node.build, each element's canonical encoded size, the children's
    results for the union check)."""
    kind = node.kind
    if kind == "nullable":
        child = node.children[0][1]
        built, sizes, parts = _build(child, arr)
        valid = _valid(arr)
        return built, 1 + np.where(valid, sizes, 0), [parts, sizes]
    if kind == "record":
        if arr.type.num_fields != len(node.children):
            raise FastPathRefused("record fields")
        sizes = np.zeros(len(arr), np.int64)
        arrays, parts = [], []
        for i, (_, child) in enumerate(node.children):
            built, child_sizes, child_parts = _build(child, arr.field(i))
            arrays.append(built)
            sizes += child_sizes
            parts.append((child_sizes, child_parts))
        valid = _valid(arr)
        struct = pa.StructArray.from_arrays(arrays, fields=list(node.build), mask=_mask(valid))
        return struct, sizes, parts
    if kind in ("array", "map"):
        return _build_list(node, arr)
    return _build_leaf(node, arr), _leaf_sizes(node, arr), []


def _build_list(node: Node, arr: pa.Array) -> tuple[pa.Array, np.ndarray, list]:
    if not pa.types.is_large_list(arr.type):
        arr = arr.cast(pa.large_list(arr.type.value_type))
    child = node.children[0][1]
    offsets = _offsets(arr)
    items = arr.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    local = offsets - offsets[0]
    counts = np.diff(local)
    valid = _valid(arr)
    if node.kind == "map":
        keys, key_sizes, _ = _build(Node("string", pa.string()), items.field(0))
        values, value_sizes, value_parts = _build(child, items.field(1))
        item_sizes = key_sizes + value_sizes
        parts = [value_sizes, value_parts, key_sizes]
        _check_unique_keys(local, keys)
        offsets32 = pa.array(local.astype(np.int32))
        built = pa.MapArray.from_arrays(offsets32, keys, values, type=node.build,
                                         mask=_mask(valid))
    else:
        values, item_sizes, item_parts = _build(child, items)
        parts = [item_sizes, item_parts]
        built = pa.ListArray.from_arrays(pa.array(local.astype(np.int32)), values,
                                         type=node.build, mask=_mask(valid))
    cumulative = np.concatenate(([0], np.cumsum(item_sizes, dtype=np.int64)))
    summed = cumulative[local[1:]] - cumulative[local[:-1]]
    # one block (count, items) then the 0 that ends the array; an empty array is the 0 alone
    sizes = np.where(counts > 0, _varint_sizes(counts) + summed + 1, 1)
    return built, sizes, [local, counts, valid, parts]


def _check_unique_keys(local: np.ndarray, keys: pa.Array) -> None:
    """fastavro reads a map into a dict: a key written twice would keep one entry there."""
    if len(keys) < 2:
        return
    owner = np.repeat(np.arange(len(local) - 1), np.diff(local))
    pairs = pa.table({"o": owner, "k": keys})
    if pairs.group_by(["o", "k"]).aggregate([]).num_rows != len(keys):
        raise FastPathRefused("a map key written twice")


def _build_leaf(node: Node, arr: pa.Array) -> pa.Array:
    kind = node.kind
    if kind == "long":
        if node.int32:
            values = _ints(arr)
            if len(values) and (values.min() < -2**31 or values.max() >= 2**31):
                raise FastPathRefused("an int out of range")
            arr = arr.cast(pa.int32())
        return arr.cast(node.build)
    if kind == "bool":
        bytes_ = _fixed_bytes(arr, 1)
        return pa.array(bytes_[:, 0] != 0, pa.bool_(), mask=~_valid(arr))
    if kind == "enum":
        index = _ints(arr)
        if len(index) and (index.min() < 0 or index.max() >= len(node.symbols)):
            raise FastPathRefused("an enum index out of range")
        return pa.array(node.symbols, pa.string()).take(
            pa.array(index, mask=~_valid(arr)))
    if kind == "decimal":
        return _decimals(node, arr)
    return arr.cast(node.build)  # float, double; string, bytes, fixed: large to small offsets


def _fixed_bytes(arr: pa.Array, size: int) -> np.ndarray:
    """The values of a fixed-size binary column as rows of `size` bytes (nulls as zeros)."""
    arr = arr.cast(pa.large_binary()) if not pa.types.is_large_binary(arr.type) else arr
    offsets = _offsets(arr)
    data = np.frombuffer(arr.buffers()[2], np.uint8) if arr.buffers()[2] else np.zeros(0, np.uint8)
    out = np.zeros((len(arr), size), np.uint8)
    valid = _valid(arr)
    if valid.any():
        rows = np.nonzero(valid)[0]
        out[rows] = data[offsets[rows, None] + np.arange(size)]
    return out


def _decimals(node: Node, arr: pa.Array) -> pa.Array:
    """Big-endian two's complement bytes (Avro's decimal) into decimal128, checked for the
    schema's precision as Arrow checks fastavro's Decimals."""
    arr = arr.cast(pa.large_binary())
    offsets = _offsets(arr)
    lengths = np.diff(offsets)
    if len(lengths) and lengths.max() > 16:
        raise FastPathRefused("a decimal wider than 16 bytes")
    data = np.frombuffer(arr.buffers()[2], np.uint8) if arr.buffers()[2] else np.zeros(0, np.uint8)
    n = len(arr)
    wide = np.zeros((n, 16), np.uint8)
    has = lengths > 0
    negative = np.zeros(n, bool)
    negative[has] = data[offsets[:-1][has]] >= 0x80
    wide[negative] = 0xFF
    # byte j of a value (big-endian) lands at little-endian position length-1-j
    owner = np.repeat(np.arange(n), lengths)
    j = np.arange(int(lengths.sum())) - np.repeat(offsets[:-1] - offsets[0], lengths)
    wide[owner, lengths[owner] - 1 - j] = data[offsets[0] + np.arange(len(owner))]
    buffers = [None, pa.py_buffer(wide.tobytes())]
    full = pa.Array.from_buffers(pa.decimal128(MAX_DECIMAL_PRECISION, node.build.scale), n,
                                 buffers)
    try:  # through decimal256, so that precision 38 is checked too
        built = full.cast(pa.decimal256(76, node.build.scale)).cast(node.build)
    except (pa.ArrowInvalid, OverflowError):
        raise FastPathRefused("a decimal beyond its precision") from None
    valid = _valid(arr)
    return built if valid.all() else pc.if_else(pa.array(valid), built,
                                                pa.scalar(None, node.build))


def _leaf_sizes(node: Node, arr: pa.Array) -> np.ndarray:
    kind = node.kind
    n = len(arr)
    if kind in ("long", "enum"):
        return _varint_sizes(_ints(arr))
    if kind in ("bool", "fixed"):
        return np.full(n, node.size if kind == "fixed" else 1, np.int64)
    if kind == "float":
        return np.full(n, 4, np.int64)
    if kind == "double":
        return np.full(n, 8, np.int64)
    if kind == "decimal" and node.size:
        return np.full(n, node.size, np.int64)
    large = arr.cast(pa.large_binary()) if not pa.types.is_large_binary(arr.type) else arr
    lengths = np.diff(_offsets(large))
    return _varint_sizes(lengths) + lengths  # string, bytes, decimal on bytes


def _check_unions(node: Node, arr: pa.Array, parts: list, starts: np.ndarray,
                  present: np.ndarray, buf: np.ndarray) -> None:
    """Every nullable union's index byte, where the sizes place it, is the canonical one
    (0x00 or 0x02) of the branch polars decoded; fastavro refuses, or reads otherwise,
    other indices that polars takes for the value."""
    kind = node.kind
    if kind == "nullable":
        child_parts, _ = parts
        valid = _valid(arr)
        expected = np.where(valid, 2 * (1 - node.null_index), 2 * node.null_index)
        at = starts[present]
        if at.size and (at.max() >= len(buf) or not np.array_equal(buf[at], expected[present])):
            raise FastPathRefused("a union index that is not the branch decoded")
        child = node.children[0][1]
        if child.has_union:
            _check_unions(child, arr, child_parts, starts + 1, present & valid, buf)
        return
    if kind == "record":
        valid = _valid(arr)
        offset = starts.copy()
        for i, (_, child) in enumerate(node.children):
            child_sizes, child_parts = parts[i]
            if child.has_union:
                _check_unions(child, arr.field(i), child_parts, offset, present & valid, buf)
            offset = offset + child_sizes
        return
    if kind in ("array", "map"):
        local, counts, valid, list_parts = parts
        if not pa.types.is_large_list(arr.type):
            arr = arr.cast(pa.large_list(arr.type.value_type))
        offsets = _offsets(arr)
        items = arr.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
        owner = np.repeat(np.arange(len(counts)), counts)
        item_sizes = list_parts[0] if kind == "array" else list_parts[0] + list_parts[2]
        cumulative = np.concatenate(([0], np.cumsum(item_sizes, dtype=np.int64)))
        # an item starts after its list's count and the items before it in that list
        list_first = starts + _varint_sizes(counts) - cumulative[local[:-1]]
        item_starts = list_first[owner] + cumulative[:-1]
        item_present = (present & valid)[owner]
        child = node.children[0][1]
        if kind == "array":
            _check_unions(child, items, list_parts[1], item_starts, item_present, buf)
        else:  # the value follows its key
            value_starts = item_starts + list_parts[2]
            _check_unions(child, items.field(1), list_parts[1], value_starts, item_present, buf)


# -- writer schemas other than the reader's --------------------------------------------------------


class ResolvingReader:
    """Records of another writer schema whose resolution to the reader schema is trivial: the
    reader's fields are the writer's (same types, same names) or new ones with a plain
    default, and the writer's other fields are dropped. The writer's fields are decoded as
    above and put in the reader's order, a new field filled with its default, as fastavro's
    resolution gives. FastPathRefused at construction for anything else (promotions,
    aliases, changed types or symbols): fastavro resolves those record by record."""

    def __init__(self, writer: Any, reader: Any) -> None:
        self.inner = FastAvroReader(writer)
        reader_root = plan_fast_path(reader)
        writer_root = self.inner.root
        if (writer_root.kind, reader_root.kind) != ("record", "record") or \
                writer_root.name != reader_root.name:
            raise FastPathRefused("not two records of one name")
        names: dict[str, Any] = {}
        collect_names(reader, None, names)
        fields = resolve_named(reader, None, names)[0]["fields"]
        by_name = {n: i for i, (n, _) in enumerate(writer_root.children)}
        self.steps: list[tuple[int, pa.Array | None]] = []
        for (name, node), spec in zip(reader_root.children, fields):
            if "aliases" in spec:
                raise FastPathRefused("a field with aliases")
            if name in by_name:
                if not _same(writer_root.children[by_name[name]][1], node):
                    raise FastPathRefused(f"field {name} changed")
                self.steps.append((by_name[name], None))
            elif "default" in spec:
                self.steps.append((-1, _default(node, spec["default"])))
            else:
                raise FastPathRefused(f"new field {name} without a default")
        self.build = reader_root.build

    def decode(self, values: pa.Array) -> pa.Array:
        written = self.inner.decode(values)
        n = len(written)
        columns = [written.field(i) if default is None
                   else default.take(pa.array(np.zeros(n, np.int64)))
                   for i, default in self.steps]
        return pa.StructArray.from_arrays(columns, fields=list(self.build))


def _same(a: Node, b: Node) -> bool:
    """Whether two types decode to the same values (the null branch's place aside)."""
    return (a.kind == b.kind and a.build == b.build and a.size == b.size
            and a.symbols == b.symbols and a.int32 == b.int32 and a.name == b.name
            and len(a.children) == len(b.children)
            and all(an == bn and _same(ac, bc)
                    for (an, ac), (bn, bc) in zip(a.children, b.children)))


def _default(node: Node, value: Any) -> pa.Array:
    """A field's default as a one-element array of its build type (null, numbers, booleans
    and strings; other defaults are refused)."""
    if node.kind == "nullable":
        child = node.children[0][1]
        if value is None and node.null_index == 0:
            return pa.nulls(1, node.build)
        if value is not None and node.null_index == 1:
            return _default(child, value)
        raise FastPathRefused("a union default not of its first branch")
    plain = {"long": (int, pa.int32() if node.int32 else pa.int64()),
             "double": ((int, float), pa.float64()), "float": ((int, float), pa.float32()),
             "string": (str, pa.string()), "bool": (bool, pa.bool_())}
    if node.kind not in plain or not isinstance(value, plain[node.kind][0]) or (
            node.kind != "bool" and isinstance(value, bool)):
        raise FastPathRefused("a default the fast path does not build")
    return pa.array([value], plain[node.kind][1]).cast(node.build)
