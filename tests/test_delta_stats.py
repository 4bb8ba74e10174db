"""Per-file Delta statistics from Parquet footers (sinks/delta/file_stats.py).

The files are real Parquet files written by pyarrow; the expected values come from the data
(pyarrow.compute over what was written) and, end to end, from deltalake's reading of the stats
and from which files its readers open."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import re

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, Schema
from deltalake.transaction import AddAction, create_table_with_add_actions

from sinks.delta.file_stats import file_stats, parse_stats_columns

UTC = dt.timezone.utc


# -- helpers --------------------------------------------------------------------------------


def _write(tmp_path, table: pa.Table, name: str = "f.parquet", **kw) -> pq.FileMetaData:
    path = tmp_path / name
    pq.write_table(table, path, **kw)
    return pq.read_metadata(path)


def _stats(meta, schema, partition_columns=(), configuration=None) -> dict:
    text = file_stats(meta, schema, list(partition_columns), configuration or {})
    return json.loads(text, parse_float=decimal.Decimal)


def _leaves(table: pa.Table) -> dict[tuple[str, ...], pa.Array]:
    """Every non-nested leaf column of the data, parent nulls folded in (StructArray.flatten)."""
    out = {}

    def walk(path, arr):
        if pa.types.is_struct(arr.type):
            for f, child in zip(arr.type, arr.flatten()):
                walk(path + (f.name,), child)
        else:
            out[path] = arr

    for name in table.column_names:
        walk((name,), table[name].combine_chunks())
    return out


def _get(tree: dict, path):
    for p in path:
        tree = tree[p]
    return tree


def _has(tree: dict, path) -> bool:
    try:
        _get(tree, path)
        return True
    except (KeyError, TypeError):
        return False


def _stat_paths(tree: dict, prefix=()) -> set[tuple[str, ...]]:
    out = set()
    for k, v in tree.items():
        if isinstance(v, dict):
            out |= _stat_paths(v, prefix + (k,))
        else:
            out.add(prefix + (k,))
    return out


def _ts(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _commit(root, schema, files, stats_for, partition_by=None, configuration=None):
    """Commit the Parquet files under `root` with `stats_for(relative_path, metadata)`."""
    adds = []
    for rel, part_values in files:
        full = os.path.join(root, rel)
        adds.append(AddAction(rel, os.path.getsize(full), part_values, 0, True,
                              stats_for(rel, pq.read_metadata(full))))
    create_table_with_add_actions(
        str(root), Schema.from_arrow(schema), adds,
        partition_by=partition_by, configuration=configuration,
    )
    return DeltaTable(str(root))


# -- values by type -------------------------------------------------------------------------


def test_numbers_dates_and_decimals_equal_the_data(tmp_path):
    schema = pa.schema([
        ("i8", pa.int8()), ("i16", pa.int16()), ("i32", pa.int32()), ("i64", pa.int64()),
        ("u32", pa.uint32()), ("f32", pa.float32()), ("f64", pa.float64()),
        ("d", pa.date32()), ("dec", pa.decimal128(12, 3)), ("dec_big", pa.decimal128(38, 10)),
    ])
    rows = 50
    table = pa.table({
        "i8": pa.array([(-1) ** i * i for i in range(rows)], pa.int8()),
        "i16": pa.array([i * 300 - 7000 if i % 7 else None for i in range(rows)], pa.int16()),
        "i32": pa.array([i * 40_000 for i in range(rows)], pa.int32()),
        "i64": pa.array([-(2**62) + i for i in range(rows)], pa.int64()),
        "u32": pa.array([2**32 - 1 - i for i in range(rows)], pa.uint32()),
        "f32": pa.array([i / 7 - 3 for i in range(rows)], pa.float32()),
        "f64": pa.array([-0.1 * i if i % 5 else None for i in range(rows)], pa.float64()),
        "d": pa.array([dt.date(1969, 12, 25) + dt.timedelta(days=i * 3) for i in range(rows)]),
        "dec": pa.array([decimal.Decimal(i * 1001 - 20_000) / 1000 for i in range(rows)], pa.decimal128(12, 3)),
        "dec_big": pa.array([decimal.Decimal("12345678901234567890.0123456789") - i for i in range(rows)],
                            pa.decimal128(38, 10)),
    }, schema=schema)
    for kw in ({}, {"store_decimal_as_integer": True}):
        stats = _stats(_write(tmp_path, table, **kw), schema)
        assert stats["numRecords"] == rows
        for name in schema.names:
            col = table[name]
            lo, hi = pc.min_max(col).values()
            got_lo, got_hi = stats["minValues"][name], stats["maxValues"][name]
            if name == "d":
                got_lo, got_hi = dt.date.fromisoformat(got_lo), dt.date.fromisoformat(got_hi)
            elif pa.types.is_floating(col.type):
                got_lo, got_hi = float(got_lo), float(got_hi)
            assert (got_lo, got_hi) == (lo.as_py(), hi.as_py()), name
            assert stats["nullCount"][name] == col.null_count, name


def test_decimals_are_exact_json_numbers(tmp_path):
    schema = pa.schema([("dec", pa.decimal128(38, 18))])
    values = [decimal.Decimal("0.000000000000000001"), decimal.Decimal("-99999999999999999999.999999999999999999")]
    text = file_stats(_write(tmp_path, pa.table({"dec": pa.array(values, schema[0].type)})), schema, [], {})
    parsed = json.loads(text, parse_float=decimal.Decimal)
    assert parsed["minValues"]["dec"] == min(values) and parsed["maxValues"]["dec"] == max(values)
    assert '"dec":0.000000000000000001' in text  # a number, not a string nor a rounded float


@pytest.mark.parametrize("unit", ["us", "ns", "ms"])
@pytest.mark.parametrize("tz", ["UTC", "America/New_York", None])
def test_timestamps_are_millisecond_bounds(tmp_path, unit, tz):
    base = dt.datetime(2024, 1, 2, 3, 4, 5)
    # sub-millisecond parts on both ends, and a value on an exact millisecond
    ticks = {"ms": [0, 123, 999_000], "us": [123_456, 999, 777_000_001 // 1000], "ns": [123_456_789, 1, 987_654_321]}[unit]
    per_s = {"ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}[unit]
    epoch = int((base.replace(tzinfo=UTC) - dt.datetime(1970, 1, 1, tzinfo=UTC)).total_seconds()) * per_s
    raw = [epoch + t + i * 3 * per_s for i, t in enumerate(ticks)] + [None]
    typ = pa.timestamp(unit, tz=tz)
    table = pa.table({"ts": pa.array(raw, pa.int64()).cast(typ)})
    stats = _stats(_write(tmp_path, table), table.schema)
    lo_text, hi_text = stats["minValues"]["ts"], stats["maxValues"]["ts"]
    assert lo_text.endswith("Z") == (tz is not None) == hi_text.endswith("Z")
    assert len(lo_text.rstrip("Z").split(".")[1]) == 3  # milliseconds, as the protocol's JSON
    to_ms = per_s // 1000
    true_lo, true_hi = min(r for r in raw if r is not None), max(r for r in raw if r is not None)
    epoch_dt = dt.datetime(1970, 1, 1)
    got_lo = (_ts(lo_text).replace(tzinfo=None) - epoch_dt) // dt.timedelta(milliseconds=1)
    got_hi = (_ts(hi_text).replace(tzinfo=None) - epoch_dt) // dt.timedelta(milliseconds=1)
    # min truncated down, max rounded up: still bounds, and at most 1 ms away
    assert got_lo * to_ms <= true_lo < (got_lo + 1) * to_ms
    assert (got_hi - 1) * to_ms < true_hi <= got_hi * to_ms
    assert stats["nullCount"]["ts"] == 1


def test_strings_are_truncated_prefixes_that_still_bound(tmp_path):
    values = [
        "a" * 40,
        "é" * 31 + "éz" + "x" * 20,  # non-ASCII, cut at 32 characters, not bytes
        "é" * 31 + "é\uffff\U0001f600tail",  # characters >= the tie-breaker right after the cut
        "Zürich",
        None,
    ]
    schema = pa.schema([("s", pa.string()), ("ls", pa.large_string())])
    table = pa.table({"s": values, "ls": values}, schema=schema)
    stats = _stats(_write(tmp_path, table), schema)
    present = [v for v in values if v is not None]
    for name in ("s", "ls"):
        lo, hi = stats["minValues"][name], stats["maxValues"][name]
        assert lo == min(present)[:32]
        assert len(hi) < 40
        # bounds by code point, which is how readers compare (UTF-8 bytes)
        for v in present:
            assert lo.encode() <= v.encode() <= hi.encode(), (name, v)
        assert stats["nullCount"][name] == 1
    # the truncated max had to run past the \uffff and the emoji to stay an upper bound
    assert stats["maxValues"]["s"].startswith("é" * 32 + "\uffff\U0001f600")


def test_dictionary_strings(tmp_path):
    table = pa.table({"s": pa.array(["pear", "apple", None, "fig"]).dictionary_encode()})
    stats = _stats(_write(tmp_path, table), table.schema)
    assert (stats["minValues"]["s"], stats["maxValues"]["s"]) == ("apple", "pear")


def test_booleans_have_bounds_binary_lists_and_maps_do_not(tmp_path):
    schema = pa.schema([
        ("b", pa.bool_()), ("bin", pa.binary()), ("l", pa.list_(pa.int64())),
        ("m", pa.map_(pa.string(), pa.int64())), ("x", pa.int64()),
    ])
    table = pa.table({
        "b": [True, None, True], "bin": [b"\x00", b"\xff", None], "l": [[1, 2], None, []],
        "m": [[("k", 1)], None, None], "x": [1, 2, 3],
    }, schema=schema)
    stats = _stats(_write(tmp_path, table), schema)
    # booleans: delta-rs writes them and deltalake's reader expects them (see the e2e test)
    assert (stats["minValues"]["b"], stats["maxValues"]["b"]) == tuple(v.as_py() for v in pc.min_max(table["b"]).values())
    assert stats["nullCount"] == {"b": 1, "bin": 1, "x": 0}  # binary: null count only
    assert "bin" not in stats["minValues"] and "l" not in stats["minValues"] and "m" not in stats["minValues"]


def test_nulls_and_all_null_columns(tmp_path):
    schema = pa.schema([("some", pa.int64()), ("none", pa.string()), ("nonef", pa.float64())])
    table = pa.table({"some": [None, 5, None, -3], "none": [None] * 4, "nonef": [None] * 4}, schema=schema)
    stats = _stats(_write(tmp_path, table), schema)
    assert stats["nullCount"] == {c: table[c].null_count for c in schema.names}
    assert stats["minValues"] == {"some": -3} and stats["maxValues"] == {"some": 5}


def test_nan_only_column_has_no_bounds_and_nan_is_left_out_of_mixed_ones(tmp_path):
    nan = float("nan")
    schema = pa.schema([("mixed", pa.float64()), ("allnan", pa.float64()), ("x", pa.int64())])
    table = pa.table({"mixed": [1.5, nan, -2.0, None], "allnan": [nan, nan, None, nan], "x": [1, 2, 3, 4]}, schema=schema)
    stats = _stats(_write(tmp_path, table), schema)
    # a column with values but no bound: no min/max in the whole file (deltalake's reader)
    assert "minValues" not in stats and "maxValues" not in stats
    assert stats["nullCount"] == {"mixed": 1, "allnan": 1, "x": 0}
    # without the all-NaN column, the mixed one has the bounds of its numbers (pyarrow's too)
    schema2 = pa.schema([schema.field("mixed"), schema.field("x")])
    stats = _stats(_write(tmp_path, table.select(["mixed", "x"]), "g.parquet"), schema2)
    lo, hi = pc.min_max(table["mixed"]).values()
    assert (float(stats["minValues"]["mixed"]), float(stats["maxValues"]["mixed"])) == (lo.as_py(), hi.as_py())


def test_infinite_floats_give_no_bounds_and_json_stays_valid(tmp_path):
    table = pa.table({"f": [1.0, float("inf")], "x": [1, 2]})
    text = file_stats(_write(tmp_path, table), table.schema, [], {})
    stats = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert "minValues" not in stats and stats["nullCount"] == {"f": 0, "x": 0}


def test_nested_structs_are_nested_objects(tmp_path):
    inner = pa.struct([("c", pa.int64()), ("s", pa.string())])
    schema = pa.schema([("a", pa.struct([("b", inner), ("n", pa.int32())])), ("top", pa.int64())])
    table = pa.table({
        "a": [
            {"b": {"c": 5, "s": "x"}, "n": 1},
            {"b": None, "n": 2},
            None,
            {"b": {"c": None, "s": "y"}, "n": None},
            {"b": {"c": -4, "s": None}, "n": 7},
        ],
        "top": [1, 2, 3, 4, 5],
    }, schema=schema)
    stats = _stats(_write(tmp_path, table), schema)
    leaves = _leaves(table)
    assert _stat_paths(stats["nullCount"]) == set(leaves)
    for path, arr in leaves.items():
        assert _get(stats["nullCount"], path) == arr.null_count, path  # parent nulls count
        lo, hi = pc.min_max(arr).values()
        assert (_get(stats["minValues"], path), _get(stats["maxValues"], path)) == (lo.as_py(), hi.as_py()), path


def test_multiple_row_groups_aggregate(tmp_path):
    n = 1000
    schema = pa.schema([("id", pa.int64()), ("s", pa.string()), ("late", pa.int32())])
    table = pa.table({
        "id": [(i * 7919) % n for i in range(n)],
        "s": [f"k{(i * 31) % 977:04d}" if i % 3 else None for i in range(n)],
        "late": [None] * 900 + list(range(100)),  # the first row groups all null
    }, schema=schema)
    meta = _write(tmp_path, table, row_group_size=100)
    assert meta.num_row_groups == 10
    stats = _stats(meta, schema)
    for name in schema.names:
        lo, hi = pc.min_max(table[name]).values()
        assert (stats["minValues"][name], stats["maxValues"][name]) == (lo.as_py(), hi.as_py()), name
        assert stats["nullCount"][name] == table[name].null_count, name


def test_row_group_without_statistics_removes_the_bound(tmp_path):
    big = "m" * 5000  # over pyarrow's maximum statistics size: that row group has none
    schema = pa.schema([("s", pa.string()), ("x", pa.int64())])
    table = pa.table({"s": ["b", "c", big, "a"], "x": [1, 2, 3, 4]}, schema=schema)
    meta = _write(tmp_path, table, row_group_size=2)
    assert not meta.row_group(1).column(0).statistics.has_min_max  # the premise
    stats = _stats(meta, schema)
    # never a max from the other row group ("c" < big): no bounds in this file at all
    assert "maxValues" not in stats and "minValues" not in stats
    assert stats["nullCount"] == {"s": 0, "x": 0}
    # the same data in row groups that all kept statistics: bounds
    stats = _stats(_write(tmp_path, table.slice(0, 2), "g.parquet"), schema)
    assert stats["maxValues"] == {"s": "c", "x": 2}


# -- which columns --------------------------------------------------------------------------


def _wide(n_before_struct=10, struct_leaves=5, after=30):
    fields = [pa.field("p", pa.string())]  # a partition column first
    fields += [pa.field(f"c{i}", pa.int64()) for i in range(n_before_struct)]
    fields.append(pa.field("arr", pa.list_(pa.int64())))
    fields.append(pa.field("st", pa.struct([(f"x{i}", pa.int64()) for i in range(struct_leaves)])))
    fields += [pa.field(f"d{i}", pa.int64()) for i in range(after)]
    schema = pa.schema(fields)
    data = {}
    for f in schema:
        if f.name == "p":
            continue
        if f.name == "arr":
            data["arr"] = [[1], [2]]
        elif f.name == "st":
            data["st"] = [{f"x{i}": i for i in range(struct_leaves)}] * 2
        else:
            data[f.name] = [1, 2]
    return schema, pa.table(data, schema=pa.schema([f for f in schema if f.name != "p"]))


def _data_leaf_order(schema, partition):
    """Leaf paths of the data schema in order, lists counted as a leaf (delta-spark)."""
    out = []
    for f in schema:
        if f.name in partition:
            continue
        if pa.types.is_struct(f.type):
            out += [(f.name, c.name) for c in f.type]
        else:
            out.append((f.name,))
    return out


@pytest.mark.parametrize("setting, expected_count", [(None, 32), ("5", 5), ("0", 0), ("-1", None), ("100", None)])
def test_first_n_leaf_columns_partition_columns_not_counted(tmp_path, setting, expected_count):
    schema, table = _wide()
    conf = {} if setting is None else {"delta.dataSkippingNumIndexedCols": setting}
    stats = _stats(_write(tmp_path, table), schema, ["p"], conf)
    order = _data_leaf_order(schema, {"p"})
    selected = order if expected_count is None else order[:expected_count]
    expected = {p for p in selected if p != ("arr",)}  # the list counts, but has no stats
    assert _stat_paths(stats.get("nullCount", {})) == expected
    assert _stat_paths(stats.get("minValues", {})) == expected
    assert not _has(stats.get("nullCount", {}), ("p",))


def test_stats_columns_property_names_exactly_the_columns(tmp_path):
    schema, table = _wide()
    conf = {"delta.dataSkippingStatsColumns": " C3 , st.X1,`d29`, st , p", "delta.dataSkippingNumIndexedCols": "1"}
    stats = _stats(_write(tmp_path, table), schema, ["p"], conf)
    expected = {("c3",), ("d29",)} | {("st", f"x{i}") for i in range(5)}
    assert _stat_paths(stats["nullCount"]) == expected == _stat_paths(stats["minValues"])


def test_parse_stats_columns():
    assert parse_stats_columns("a, b.c ,`x.y`.z, `we``ird`,") == [["a"], ["b", "c"], ["x.y", "z"], ["we`ird"]]
    assert parse_stats_columns("") == []
    with pytest.raises(ValueError):
        parse_stats_columns("`open")


def test_dotted_names_are_not_nesting(tmp_path):
    schema = pa.schema([("a.b", pa.int64()), ("a", pa.struct([("b", pa.int64())]))])
    table = pa.table({"a.b": [1, 2], "a": [{"b": 10}, {"b": 20}]}, schema=schema)
    stats = _stats(_write(tmp_path, table), schema)
    assert stats["minValues"] == {"a.b": 1, "a": {"b": 10}}
    stats = _stats(_write(tmp_path, table), schema, configuration={"delta.dataSkippingStatsColumns": "`a.b`"})
    assert stats["minValues"] == {"a.b": 1}


def test_invalid_num_indexed_cols(tmp_path):
    table = pa.table({"x": [1]})
    with pytest.raises(ValueError, match="dataSkippingNumIndexedCols"):
        file_stats(_write(tmp_path, table), table.schema, [], {"delta.dataSkippingNumIndexedCols": "lots"})


# -- end to end with deltalake --------------------------------------------------------------


def _ten_files(root, schema, make):
    os.makedirs(root, exist_ok=True)
    files = []
    for i in range(10):
        rel = f"part-{i:02d}.parquet"
        pq.write_table(make(i), os.path.join(root, rel))
        files.append((rel, {}))
    return files


E2E_SCHEMA = pa.schema([
    ("id", pa.int64()),
    ("name", pa.string()),
    ("ts", pa.timestamp("us", tz="UTC")),
    ("day", pa.date32()),
    ("amount", pa.decimal128(10, 2)),
    ("score", pa.float64()),
    ("flag", pa.bool_()),
    ("meta", pa.struct([("n", pa.int32())])),
    ("blob", pa.binary()),
])


def _e2e_file(i):
    ids = list(range(i * 10, i * 10 + 10))
    return pa.table({
        "id": ids,
        "name": [f"name-{v:03d}" if v % 4 else None for v in ids],
        "ts": pa.array([dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(hours=v, microseconds=v * 1001) for v in ids],
                       pa.timestamp("us", tz="UTC")),
        "day": [dt.date(2024, 1, 1) + dt.timedelta(days=v) for v in ids],
        "amount": pa.array([decimal.Decimal(v) / 4 for v in ids], pa.decimal128(10, 2)),
        "score": [v / 3 for v in ids],
        "flag": [v % 2 == 0 for v in ids],
        "meta": [{"n": v * 2} for v in ids],
        "blob": [bytes([v]) for v in ids],
    }, schema=E2E_SCHEMA)


def _new_stats(rel, meta):
    return file_stats(meta, E2E_SCHEMA, [], {})


def _old_stats(rel, meta):
    return '{"numRecords":%d}' % meta.num_rows


def test_deltalake_reads_the_stats_as_the_data_says(tmp_path):
    root = tmp_path / "t"
    files = _ten_files(root, E2E_SCHEMA, _e2e_file)
    table = _commit(root, E2E_SCHEMA, files, _new_stats)
    actions = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    assert len(actions) == 10
    for action in actions:
        data = pq.read_table(root / action["path"])
        assert action["num_records"] == data.num_rows
        for path, arr in _leaves(data).items():
            key = ".".join(path)
            assert action[f"null_count.{key}"] == arr.null_count, key
            if path == ("blob",):
                assert action.get("min.blob") is None
                continue
            lo, hi = (v.as_py() for v in pc.min_max(arr).values())
            got_lo, got_hi = action[f"min.{key}"], action[f"max.{key}"]
            if path == ("ts",):  # milliseconds: the min at or below, the max at or above
                assert got_lo <= lo < got_lo + dt.timedelta(milliseconds=1)
                assert got_hi - dt.timedelta(milliseconds=1) < hi <= got_hi
            else:
                assert (got_lo, got_hi) == (lo, hi), key


def _fragments_read(table: DeltaTable, expr) -> list[str]:
    return sorted(os.path.basename(f.path) for f in table.to_pyarrow_dataset().get_fragments(filter=expr))


def _polars_scan(root, expr) -> tuple[int, list[str]]:
    """How many files polars' plan scans for the filter, and the ones it names
    (`Parquet SCAN [a.parquet, ... 9 other sources]`)."""
    plan = pl.scan_delta(str(root)).filter(expr).explain()
    scan = next(line for line in plan.splitlines() if "SCAN [" in line)
    listed = scan[scan.index("[") + 1 : scan.rindex("]")]
    names = sorted(os.path.basename(p.strip()) for p in listed.split(",") if p.strip().endswith(".parquet"))
    others = re.search(r"(\d+) other sources", listed)
    return len(names) + (int(others.group(1)) if others else 0), names


@pytest.mark.parametrize("stats_for, pruned", [(_new_stats, True), (_old_stats, False)], ids=["stats", "numRecords-only"])
def test_filtered_reads_open_only_the_matching_file(tmp_path, stats_for, pruned):
    root = tmp_path / "t"
    files = _ten_files(root, E2E_SCHEMA, _e2e_file)
    table = _commit(root, E2E_SCHEMA, files, stats_for)
    # which file holds id 57, from the data itself
    holder = [rel for rel, _ in files if 57 in pq.read_table(root / rel, columns=["id"])["id"].to_pylist()]
    assert len(holder) == 1
    everything = sorted(rel for rel, _ in files)

    for expr in (ds.field("id") == 57, ds.field("day") == pa.scalar(dt.date(2024, 1, 1) + dt.timedelta(days=57)),
                 ds.field("name") == "name-057"):
        assert _fragments_read(table, expr) == (holder if pruned else everything), expr
        assert table.to_pyarrow_dataset().to_table(filter=expr)["id"].to_pylist() == [57]
    if pruned:
        assert _polars_scan(root, pl.col("id") == 57) == (1, holder)
    else:
        assert _polars_scan(root, pl.col("id") == 57)[0] == len(everything)
    assert pl.scan_delta(str(root)).filter(pl.col("id") == 57).collect()["id"].to_list() == [57]

    # a timestamp whose microseconds the millisecond max would lose if it were truncated down
    last = pq.read_table(root / holder[0])["ts"]
    newest = pc.max(last)
    assert newest.value % 1000 != 0  # the premise: sub-millisecond precision
    assert table.to_pyarrow_dataset().to_table(filter=ds.field("ts") == newest).num_rows == 1
    assert pl.scan_delta(str(root)).filter(pl.col("ts") == newest.as_py()).collect().height == 1

    # predicates on every column still return exactly the rows the data has
    every_row = pa.concat_tables(pq.read_table(root / rel) for rel in everything)
    for expr in (ds.field("flag") == True, ds.field("score") > 20.5, ds.field("name").is_null(),  # noqa: E712
                 ds.field("amount") < decimal.Decimal("3.5"), ds.field("meta", "n") == 114,
                 ds.field("blob") == b"\x05"):
        assert table.to_pyarrow_dataset().to_table(filter=expr).num_rows == every_row.filter(expr).num_rows, expr


def test_partition_columns_carry_no_stats_end_to_end(tmp_path):
    root = tmp_path / "t"
    schema = pa.schema([("region", pa.string()), ("id", pa.int64())])
    files = []
    for i, region in enumerate(["eu", "us", "eu", "ap"]):
        rel = f"region={region}/part-{i}.parquet"
        os.makedirs(root / f"region={region}", exist_ok=True)
        pq.write_table(pa.table({"id": list(range(i * 5, i * 5 + 5))}), root / rel)
        files.append((rel, {"region": region}))
    table = _commit(root, schema, files, lambda rel, meta: file_stats(meta, schema, ["region"], {}),
                    partition_by=["region"])
    actions = pa.table(table.get_add_actions(flatten=True))
    assert not [c for c in actions.column_names if c.startswith(("min.region", "max.region", "null_count.region"))]
    assert _fragments_read(table, (ds.field("region") == "eu") & (ds.field("id") == 12)) == ["part-2.parquet"]
    assert table.to_pyarrow_dataset().to_table(filter=ds.field("region") == "eu").num_rows == 10


def test_a_missing_bound_would_hide_rows_from_deltalakes_pyarrow_reader(tmp_path):
    """Why one unbounded column drops min/max for its whole file: deltalake 1.6.6's pyarrow
    reader makes a bound missing from a file that has others into `col >= null` and skips the
    file for any predicate on that column. If deltalake stops doing that, the first assertion
    fails and the per-file fallback in delta_stats can become per-column."""
    schema = pa.schema([("id", pa.int64()), ("s", pa.string())])
    big = "z" * 5000  # no footer statistics for this row group's strings
    data = pa.table({"id": [1, 2, 3], "s": ["a", big, "b"]}, schema=schema)

    per_column = tmp_path / "per_column"
    os.makedirs(per_column)
    pq.write_table(data, per_column / "f.parquet")
    table = _commit(per_column, schema, [("f.parquet", {})], lambda rel, meta: json.dumps(
        {"numRecords": 3, "minValues": {"id": 1}, "maxValues": {"id": 3}, "nullCount": {"id": 0, "s": 0}}))
    assert table.to_pyarrow_dataset().to_table(filter=ds.field("s") == "a").num_rows == 0  # the bug

    ours = tmp_path / "ours"
    os.makedirs(ours)
    pq.write_table(data, ours / "f.parquet")
    table = _commit(ours, schema, [("f.parquet", {})], lambda rel, meta: file_stats(meta, schema, [], {}))
    for value in ("a", big, "b"):
        assert table.to_pyarrow_dataset().to_table(filter=ds.field("s") == value).num_rows == 1
    assert pl.scan_delta(str(ours)).filter(pl.col("s") == big).collect().height == 1


def test_timestamp_ntz_round_trips_through_deltalake(tmp_path):
    root = tmp_path / "t"
    schema = pa.schema([("ts", pa.timestamp("us"))])
    values = [dt.datetime(2024, 5, 6, 7, 8, 9, 999_999), dt.datetime(2023, 1, 1, 0, 0, 0, 1)]
    os.makedirs(root)
    pq.write_table(pa.table({"ts": pa.array(values, schema[0].type)}), root / "f.parquet")
    stats = json.loads(file_stats(pq.read_metadata(root / "f.parquet"), schema, [], {}))
    assert not stats["maxValues"]["ts"].endswith("Z")
    table = _commit(root, schema, [("f.parquet", {})], lambda rel, meta: file_stats(meta, schema, [], {}))
    action = pa.table(table.get_add_actions(flatten=True)).to_pylist()[0]
    assert action["min.ts"] <= min(values) and action["max.ts"] >= max(values)
    assert table.to_pyarrow_dataset().to_table(filter=ds.field("ts") == pa.scalar(max(values), schema[0].type)).num_rows == 1


def test_truncated_non_ascii_strings_through_deltalake(tmp_path):
    root = tmp_path / "t"
    schema = pa.schema([("s", pa.string())])
    values = ["ü" * 40 + "\U0001f600", "ü" * 32 + "\uffff\uffff" + "a", "Ärger"]
    os.makedirs(root)
    pq.write_table(pa.table({"s": values}), root / "f.parquet")
    table = _commit(root, schema, [("f.parquet", {})], lambda rel, meta: file_stats(meta, schema, [], {}))
    action = pa.table(table.get_add_actions(flatten=True)).to_pylist()[0]
    assert action["min.s"].encode() <= min(values).encode()
    assert all(v.encode() <= action["max.s"].encode() for v in values)
    for v in values:
        assert table.to_pyarrow_dataset().to_table(filter=ds.field("s") == v).num_rows == 1
        assert pl.scan_delta(str(root)).filter(pl.col("s") == v).collect().height == 1


def test_a_table_column_the_file_lacks_is_null_in_every_row_and_keeps_the_others_bounds(tmp_path):
    """The stream lacks a column the table has: its rows read as null (nullCount = numRecords,
    as delta-spark writes), and that is no reason to drop the other columns' bounds."""
    data = pa.table({"id": [3, 1, 2]})
    schema = pa.schema([("id", pa.int64()), ("later", pa.string())])
    stats = _stats(_write(tmp_path, data), schema)
    assert stats["nullCount"] == {"id": 0, "later": 3}
    assert (stats["minValues"], stats["maxValues"]) == ({"id": 1}, {"id": 3})
