"""Per-file statistics for Delta add actions (`numRecords`, `minValues`, `maxValues`,
`nullCount`), read from the Parquet footer the task has just written, so every Delta reader can
skip files. Follows the Delta protocol's "Per-file Statistics" section.

Which columns (as delta-spark's `StatisticsCollection`, the reference writer):
  * the table's data columns only: partition columns carry no statistics and do not count
    toward the column limit (delta-spark and delta-kernel both build the stats schema from the
    data schema, which excludes them);
  * `delta.dataSkippingStatsColumns`, when set, names exactly the columns to index
    (comma-separated, case-insensitive, `a.b` or backquoted parts; a struct includes its leaves);
  * otherwise the first `delta.dataSkippingNumIndexedCols` leaf columns (default 32, negative =
    all), counted depth-first; an array or map column counts as one leaf (delta-spark's
    `truncateSchema`) but gets no statistics (as delta-kernel: not eligible for skipping, and
    the footer only describes its elements).

Which statistics, per leaf: `nullCount` for every selected leaf; `minValues`/`maxValues` for
the types delta-spark skips on (integers, floats, decimals, dates, timestamps, strings) and for
booleans, as delta-rs writes them; never for binary, lists, maps or types Delta cannot order.
A bound is written only when every row group of the file has one (row groups whose values are
all null excepted), so a row group whose statistics were dropped (pyarrow drops them for values
longer than its maximum statistics size) removes the bound instead of making it wrong.

One missing bound drops minValues/maxValues for the whole file (nullCount stays): deltalake
1.6.6's pyarrow reader (`to_pyarrow_dataset`, `to_pyarrow_table(filters=...)`) turns a bound
missing from a file that has others into `col >= null` and prunes the file for every predicate
on that column; with no bounds at all it adds none.

Value forms (protocol and delta-spark's JSON): dates `YYYY-MM-DD`; timestamps at millisecond
precision, `2024-01-02T03:04:05.123Z` (UTC) or without the `Z` for timestamp_ntz; the min is
truncated down and the max rounded *up* to the millisecond so both stay bounds; decimals exact
JSON numbers; strings cut to a 32-character prefix, the max then extended as delta-spark does
(tie-breaker U+FFFD) so it is still >= every value; infinite floats get no bound (JSON has no
infinity).

NaN: Parquet writers leave NaN out of the footer min/max and the footer does not record whether
the file holds any, so a float column's bounds are those of its non-NaN values, as delta-rs
writes them. They hold for readers that compare NaN as false (pyarrow, DataFusion) and polars
does not prune on them; a reader ordering NaN above every number (Spark) could skip a file for a
predicate only its NaN rows match. A column whose values are all NaN has no footer bound, so
none is written.
"""

from __future__ import annotations

import datetime
import decimal
import json
import math
from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

NUM_INDEXED_COLS = "delta.dataSkippingNumIndexedCols"
STATS_COLUMNS = "delta.dataSkippingStatsColumns"
DEFAULT_NUM_INDEXED_COLS = 32
STRING_PREFIX_LENGTH = 32  # delta-spark's spark.databricks.delta.stats.skipping.defaultStringPrefixLength
_TIE_BREAKER = "\ufffd"
_EPOCH = datetime.datetime(1970, 1, 1)
_DATE_EPOCH = datetime.date(1970, 1, 1)
_UNIT_PER_MS = {"milliseconds": 1, "microseconds": 1_000, "nanoseconds": 1_000_000}
_INT64_MAX = 2**63 - 1


def file_stats(
    metadata: pq.FileMetaData,
    table_schema: pa.Schema,
    partition_columns: Sequence[str],
    configuration: Mapping[str, str],
    long_value_bounds: Mapping[str, tuple[str, str]] | None = None,
) -> str:
    """The add action's `stats` JSON string for one data file.

    `table_schema` is the table's whole schema (partition columns included, in table order);
    the file holds the other columns. `configuration` is the table's (or the table-to-be's)
    properties: `delta.dataSkippingNumIndexedCols` / `delta.dataSkippingStatsColumns`.
    `long_value_bounds`: (min, max) per top-level string column, computed by the writer over
    every write that held a value too long for the footer's statistics (pyarrow drops a row
    group's min/max over 4 KiB): with them such a column keeps its bounds.
    """
    extra = {k.lower(): v for k, v in (long_value_bounds or {}).items()}
    partitions = {c.lower() for c in partition_columns}
    data_fields = [f for f in table_schema if f.name.lower() not in partitions]
    file_columns = _file_leaf_columns(metadata)
    file_top_level = {n.lower() for n in metadata.schema.to_arrow_schema().names}

    min_values: dict = {}
    max_values: dict = {}
    null_count: dict = {}
    unbounded = False  # a selected column readers bound, with values but no bound here
    for path, arrow_type in _selected_leaves(data_fields, configuration):
        index = file_columns.get(tuple(p.lower() for p in path))
        if index is None:
            if path[0].lower() not in file_top_level:  # the file lacks it: null in every row
                _put(null_count, path, metadata.num_rows)
            else:  # in a list or map, or not where the table says: say nothing, never guess
                unbounded = unbounded or _bounded_type(arrow_type)
            continue
        nulls, low, high = _column_stats(
            metadata, index, arrow_type, extra.get(path[0].lower()) if len(path) == 1 else None
        )
        if nulls is not None:
            _put(null_count, path, nulls)
        if low is not None and high is not None:
            _put(min_values, path, low)
            _put(max_values, path, high)
        elif _bounded_type(arrow_type) and nulls != metadata.num_rows:
            unbounded = True

    stats: dict = {"numRecords": metadata.num_rows}
    if min_values and not unbounded:
        stats["minValues"] = min_values
        stats["maxValues"] = max_values
    if null_count:
        stats["nullCount"] = null_count
    return _to_json(stats)


# -- which columns --------------------------------------------------------------------------


def _leaves(fields: Sequence[pa.Field], prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], pa.DataType]]:
    """Leaf columns depth-first, in schema order; lists and maps are leaves (of no use here)."""
    for f in fields:
        path = prefix + (f.name,)
        if pa.types.is_struct(f.type):
            yield from _leaves([f.type.field(i) for i in range(f.type.num_fields)], path)
        else:
            yield path, f.type


def _selected_leaves(
    data_fields: Sequence[pa.Field], configuration: Mapping[str, str]
) -> list[tuple[tuple[str, ...], pa.DataType]]:
    leaves = list(_leaves(data_fields))
    stats_columns = configuration.get(STATS_COLUMNS)
    if stats_columns is not None:
        wanted = [tuple(p.lower() for p in c) for c in parse_stats_columns(stats_columns)]
        return [
            (path, t)
            for path, t in leaves
            if any(tuple(p.lower() for p in path[: len(w)]) == w for w in wanted)
        ]
    raw = configuration.get(NUM_INDEXED_COLS)
    try:
        n = DEFAULT_NUM_INDEXED_COLS if raw is None else int(str(raw).strip())
    except ValueError:
        raise ValueError(f"{NUM_INDEXED_COLS} must be an integer >= -1, not {raw!r}") from None
    return leaves if n < 0 else leaves[:n]


def parse_stats_columns(value: str) -> list[list[str]]:
    """`delta.dataSkippingStatsColumns` as name paths: `a, b.c, `x.y`.z` ->
    [["a"], ["b", "c"], ["x.y", "z"]] (backquotes quote a part, a doubled one is a backquote)."""
    columns: list[list[str]] = []
    parts: list[str] = []
    part: list[str] = []
    quoted = False
    i = 0
    while i < len(value):
        ch = value[i]
        if quoted:
            if ch == "`" and value[i + 1 : i + 2] == "`":
                part.append("`")
                i += 1
            elif ch == "`":
                quoted = False
            else:
                part.append(ch)
        elif ch == "`":
            quoted = True
        elif ch == ".":
            parts.append("".join(part).strip())
            part = []
        elif ch == ",":
            parts.append("".join(part).strip())
            columns.append(parts)
            parts, part = [], []
        else:
            part.append(ch)
        i += 1
    if quoted:
        raise ValueError(f"{STATS_COLUMNS}: unbalanced backquote in {value!r}")
    parts.append("".join(part).strip())
    columns.append(parts)
    return [c for c in columns if any(c)]


def _file_leaf_columns(metadata: pq.FileMetaData) -> dict[tuple[str, ...], int]:
    """Parquet column index of each non-repeated leaf of the file, by (lower-cased) name path.

    Walks the file's Arrow schema in the order Parquet lays out its leaf columns, so names with
    dots in them are not confused with nesting."""
    out: dict[tuple[str, ...], int] = {}
    counter = iter(range(metadata.num_columns))

    def walk(t: pa.DataType, path: tuple[str, ...] | None) -> None:
        # path None: inside a list or map, counted but not addressable
        if pa.types.is_struct(t):
            for i in range(t.num_fields):
                child = t.field(i)
                walk(child.type, None if path is None else path + (child.name.lower(),))
        elif pa.types.is_map(t):
            walk(t.key_type, None)
            walk(t.item_type, None)
        elif (
            pa.types.is_list(t)
            or pa.types.is_large_list(t)
            or pa.types.is_fixed_size_list(t)
            or pa.types.is_list_view(t)
            or pa.types.is_large_list_view(t)
        ):
            walk(t.value_type, None)
        else:
            index = next(counter)
            if path is not None:
                out[path] = index

    for f in metadata.schema.to_arrow_schema():
        walk(f.type, (f.name.lower(),))
    # trust the walk only where Parquet's own column path agrees
    return {
        path: i for path, i in out.items()
        if metadata.schema.column(i).path.lower() == ".".join(path)
    }


# -- the statistics of one column -----------------------------------------------------------


def _column_stats(metadata: pq.FileMetaData, index: int, arrow_type: pa.DataType,
                  long_values: tuple[str, str] | None = None):
    """(nullCount, min, max) of one leaf column over all row groups; None where unknown.
    `long_values`: the writer's own bounds of every write too long for the footer."""
    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    orderable = _bounded_type(arrow_type)
    nulls: int | None = 0
    low = high = None
    bounds_ok = orderable
    for r in range(metadata.num_row_groups):
        group = metadata.row_group(r)
        st = group.column(index).statistics
        if st is None or not st.has_null_count:
            nulls = None
            bounds_ok = False
            continue
        if nulls is not None:
            nulls += st.null_count
        if not bounds_ok:
            continue
        if st.null_count >= group.num_rows:
            continue  # all null here: nothing to bound
        if not st.has_min_max:
            bounds_ok = long_values is not None  # those rows are within the writer's bounds
            continue
        try:
            lo, hi = _bounds(st, arrow_type)
        except Exception:  # a footer value this code cannot read: no bound, never a wrong one
            bounds_ok = False
            continue
        if lo is None or hi is None:
            bounds_ok = False
            continue
        low = lo if low is None or lo < low else low
        high = hi if high is None or hi > high else high
    if bounds_ok and long_values is not None:
        lo, hi = long_values
        low = lo if low is None or lo < low else low
        high = hi if high is None or hi > high else high
    if not bounds_ok or low is None:
        return nulls, None, None
    try:
        return nulls, _json_value(low, arrow_type, upper=False), _json_value(high, arrow_type, upper=True)
    except (OverflowError, ValueError):  # e.g. a date beyond what the JSON form can say
        return nulls, None, None


def _bounded_type(t: pa.DataType) -> bool:
    """Types given min/max: delta-spark's SkippingEligibleDataType, plus booleans as delta-rs
    (whose reader expects them, see the module docstring)."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    return (
        pa.types.is_integer(t)
        or pa.types.is_float32(t)
        or pa.types.is_float64(t)
        or pa.types.is_boolean(t)
        or pa.types.is_decimal(t)
        or pa.types.is_date(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_string_view(t)
    )


def _bounds(st, t: pa.DataType):
    """min and max of one row group, in a comparable form (ints for dates and timestamps)."""
    if pa.types.is_timestamp(t):
        logical = json.loads(st.logical_type.to_json())
        unit = _UNIT_PER_MS.get(logical.get("timeUnit")) if logical.get("Type") == "Timestamp" else None
        if unit is None:
            return None, None  # INT96 or not a timestamp at all
        # raw physical values: integer units since the epoch, UTC (or wall clock for ntz)
        return st.min_raw // unit, -((-st.max_raw) // unit)  # ms: floor the min, ceil the max
    if pa.types.is_date(t):
        if st.physical_type != "INT32":
            return None, None
        return st.min_raw, st.max_raw  # days since the epoch
    if pa.types.is_decimal(t):
        if t.precision > 38:
            return None, None  # wider than any Delta decimal
        lo, hi = st.min, st.max
        if not isinstance(lo, decimal.Decimal) or not isinstance(hi, decimal.Decimal):
            return None, None
        return lo, hi
    if pa.types.is_integer(t):
        lo, hi = st.min, st.max
        if not isinstance(lo, int) or not isinstance(hi, int) or isinstance(lo, bool):
            return None, None
        if hi > _INT64_MAX:
            return None, None  # uint64 beyond Delta's long
        return lo, hi
    if pa.types.is_boolean(t):
        lo, hi = st.min, st.max
        if not isinstance(lo, bool) or not isinstance(hi, bool):
            return None, None
        return lo, hi
    if pa.types.is_floating(t):
        lo, hi = st.min, st.max
        if not isinstance(lo, float) or not isinstance(hi, float) or not (math.isfinite(lo) and math.isfinite(hi)):
            return None, None  # JSON has no infinity (nor NaN)
        return lo, hi
    lo, hi = st.min, st.max  # strings: pyarrow decodes UTF-8
    if not isinstance(lo, str) or not isinstance(hi, str):
        return None, None
    return lo, hi


def _json_value(v, t: pa.DataType, *, upper: bool):
    if pa.types.is_timestamp(t):
        text = (_EPOCH + datetime.timedelta(milliseconds=v)).isoformat(timespec="milliseconds")
        return text + "Z" if t.tz is not None else text
    if pa.types.is_date(t):
        return (_DATE_EPOCH + datetime.timedelta(days=v)).isoformat()
    if isinstance(v, str):
        return _truncate_max(v) if upper else v[:STRING_PREFIX_LENGTH]
    return v


def _truncate_max(s: str, prefix: int = STRING_PREFIX_LENGTH) -> str:
    """delta-spark's `truncateMaxStringAgg`, over code points: the prefix, then every following
    character >= U+FFFD, then U+FFFD, which is >= every string the original max bounds (strings
    compare by code point, as UTF-8 bytes)."""
    if len(s) <= prefix:
        return s
    out = s[:prefix]
    for ch in s[prefix:]:
        if ch < _TIE_BREAKER:
            break
        out += ch
    return out + _TIE_BREAKER


def _put(tree: dict, path: tuple[str, ...], value) -> None:
    for name in path[:-1]:
        tree = tree.setdefault(name, {})
    tree[path[-1]] = value


def _to_json(v) -> str:
    """Compact JSON; decimals as exact numbers (json would need floats)."""
    if isinstance(v, dict):
        return "{" + ",".join(f"{_to_json(str(k))}:{_to_json(x)}" for k, x in v.items()) + "}"
    if isinstance(v, decimal.Decimal):
        return format(v, "f")
    return json.dumps(v, ensure_ascii=False)
