"""Which Delta tables `delta-eos` may append to: the table's protocol and metadata are checked
at query start, and a feature the sink's own Parquet files and add actions do not honour is
refused, naming it. NOT NULL columns are enforced before a file is written.

The sink writes Parquet files with pyarrow (display column names, no field ids, no row ids,
statistics from the footers) and commits them as plain `add` actions (dataChange=true, no
deletion vector) through deltalake 1.6.6. So a feature is allowed only when both hold:

* the Delta protocol (PROTOCOL.md) asks nothing of a writer of such appends, or asks only
  what this module enforces (NOT NULL), and
* deltalake 1.6.6 commits to a table that lists it (its ProtocolChecker refuses, at commit
  time, a table listing a feature it does not know: identityColumns, rowTracking,
  domainMetadata, clustering, inCommitTimestamp, typeWidening, vacuumProtocolCheck,
  allowColumnDefaults, icebergCompatV1/V2, and legacy writer version 6, which implies
  identity columns). Refusing those here fails the query at start, before any task writes a
  file and before a batch is decided, instead of at the batch's commit.

Features whose only effect is metadata the table may or may not carry (invariants, CHECK
constraints, generated columns, column mapping) are allowed while inactive ("a feature is
active when it is supported *and* its metadata requirements are satisfied", PROTOCOL.md,
Active Features) and refused, naming the column or constraint, once the metadata uses them:
the sink evaluates no SQL.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from typing import TYPE_CHECKING

import pyarrow as pa

from connectors.core.options import OptionError
from sinks.delta.errors import NotNullViolation

if TYPE_CHECKING:  # read by the driver only; tasks import this module for check_not_null
    from deltalake import DeltaTable

#: Highest protocol versions whose meaning is known here (PROTOCOL.md, Reader/Writer Version
#: Requirements); a table asking for more than that is refused.
MAX_READER_VERSION = 3
MAX_WRITER_VERSION = 7

#: Table features (reader or writer) an append of the sink's files honours as is.
#: Each entry: why (from PROTOCOL.md), and that deltalake 1.6.6 commits to a table listing it.
SAFE_FEATURES: dict[str, str] = {
    # Append-only Tables: "New log entries MUST NOT change or remove data"; the sink only adds.
    "appendOnly": "the sink only adds files",
    # Change Data Feed: "If an operation only adds new data ... a writer can write only data
    # files and commit them in add actions without duplicating the data into change data
    # files" (Change Data Files); a CDF reader reads a version without cdc actions from its
    # adds as inserts.
    "changeDataFeed": "appends need no change data files",
    # Deletion Vectors: "Writers must only write new DVs when delta.enableDeletionVectors is
    # true" is a permission, not a duty; the only writer requirement ("When adding a logical
    # file with a deletion vector ... numRecords") concerns adds that carry a DV, and the
    # sink's adds carry none (they do carry numRecords). Readers read such a file whole.
    "deletionVectors": "the sink's add actions carry no deletion vector",
    # TimestampNtz: the feature only licenses a column type; the sink writes the table's
    # types (open() refuses a type change), deltalake checks ntz columns against the feature.
    "timestampNtz": "it only allows a column type",
    # V2 Checkpoint: concerns checkpoints only ("A table could use classic checkpoints which
    # can follow V1 or V2 spec"; never multi-part); the sink writes none itself and
    # deltalake's own checkpoints are single-file classic ones, which it supports here.
    "v2Checkpoint": "it concerns checkpoints only",
}

#: Allowed while inactive; what makes them active is checked on the metadata (see below).
CONDITIONAL_FEATURES = (
    "invariants", "checkConstraints", "generatedColumns", "columnMapping", "variantType",
)

#: Refused outright, with the reason (PROTOCOL.md) and the way out.
REFUSED_FEATURES: dict[str, str] = {
    "identityColumns": (
        "identity columns need values generated and a high-water mark kept in the schema on "
        "every write (Identity Columns), and deltalake cannot commit to such a table"
    ),
    "rowTracking": (
        "row tracking requires every add action to carry baseRowId and "
        "defaultRowCommitVersion and a delta.rowTracking high-water mark to be kept (Writer "
        "Requirements for Row Tracking); the sink's add actions have neither"
    ),
    "domainMetadata": (
        "deltalake cannot commit to a table listing domainMetadata (the features that rely "
        "on it, row tracking and clustering, impose writer duties the sink does not meet)"
    ),
    "clustering": (
        "a clustered table depends on domainMetadata (which deltalake 1.6.6 cannot commit to) "
        "and needs statistics for its clustering columns in every add action, whichever "
        "columns delta.dataSkippingNumIndexedCols leaves out (Writer Requirements for "
        "Clustered Table)"
    ),
    "icebergCompatV1": (
        "Iceberg compatibility requires column mapping, partition values materialized in the "
        "Parquet files and field ids (Writer Requirements for IcebergCompatV1)"
    ),
    "icebergCompatV2": (
        "Iceberg compatibility requires column mapping, partition values materialized in the "
        "Parquet files and field ids (Writer Requirements for IcebergCompatV2)"
    ),
    "inCommitTimestamp": (
        "every commit must start with a commitInfo carrying a monotonic inCommitTimestamp "
        "(Writer Requirements for In-Commit Timestamps), which deltalake does not write"
    ),
    "typeWidening": (
        "deltalake cannot commit to a table listing typeWidening (the appends themselves "
        "would be harmless: the sink changes no type)"
    ),
    "vacuumProtocolCheck": (
        "deltalake cannot commit to a table listing vacuumProtocolCheck (the appends "
        "themselves would be harmless: the feature concerns VACUUM only)"
    ),
    "allowColumnDefaults": (
        "columns with DEFAULT values must be filled by the writer when a row lacks them "
        "(Default Columns); the sink evaluates no SQL"
    ),
    "catalogManaged": (
        "a catalog-managed table is committed through its catalog, never by writing the "
        "log directly (Writer Requirements for Catalog-managed tables)"
    ),
    "variantShredding": "shredded variant columns are not written by the sink",
}

#: Legacy protocol (no feature lists): what each writer version implies (Writer Version
#: Requirements). Version 6 is identity columns, which deltalake cannot commit to.
LEGACY_WRITER_FEATURES = {
    2: ("appendOnly", "invariants"),
    3: ("checkConstraints",),
    4: ("changeDataFeed", "generatedColumns"),
    5: ("columnMapping",),
    6: ("identityColumns",),
}

RETENTION_KEY = "delta.settransactionretentionduration"

WAY_OUT = "append to it with delta-spark, or use a table without this feature"


def check_writable(table: DeltaTable, path: str) -> None:
    """Raise OptionError("path", ...) naming the first table feature the sink cannot honour.

    Every problem found is named (the first one leads); the message says what to do."""
    problems = list(_problems(table))
    if not problems:
        return
    raise OptionError(
        "path",
        f"delta-eos cannot append to the Delta table at {path}: " + "; ".join(problems),
    )


def _problems(table: DeltaTable) -> Iterator[str]:
    """Why the sink may not write to `table`, one reason per line (none: it may): the protocol's
    versions, then the table features it supports, the columns that make a conditional feature
    active, and the table properties the sink cannot honour."""
    protocol = table.protocol()
    reader = protocol.min_reader_version
    writer = protocol.min_writer_version
    configuration = dict(table.metadata().configuration or {})
    config = {k.lower(): (k, v) for k, v in configuration.items() if v is not None}
    fields = json.loads(table.schema().to_json()).get("fields", [])

    if reader > MAX_READER_VERSION or writer > MAX_WRITER_VERSION:
        yield (
            f"its protocol (minReaderVersion={reader}, minWriterVersion={writer}) is newer "
            f"than delta-eos knows (reader {MAX_READER_VERSION}, writer {MAX_WRITER_VERSION}); "
            f"{WAY_OUT}"
        )
        return
    yield from _feature_problems(protocol)
    yield from _column_problems(fields)
    yield from _property_problems(config)


def _feature_problems(protocol: Any) -> Iterator[str]:
    """The table features the protocol supports that the sink refuses."""
    reader = protocol.min_reader_version
    writer = protocol.min_writer_version
    # Which features the table supports: listed (reader 3 / writer 7), else implied by the
    # legacy versions, each of which includes the ones below it.
    features: set[str] = set()
    if writer >= 7:
        features.update(protocol.writer_features or ())
    else:
        for version, implied in LEGACY_WRITER_FEATURES.items():
            if writer >= version:
                features.update(implied)
    if reader >= 3:
        features.update(protocol.reader_features or ())
    elif reader == 2:
        features.add("columnMapping")  # Reader Version 2: Respect Column Mapping

    legacy = "" if writer >= 7 else f" (implied by minWriterVersion={writer})"
    for feature in sorted(features):
        if feature in SAFE_FEATURES or feature in CONDITIONAL_FEATURES:
            continue
        reason = REFUSED_FEATURES.get(
            feature, "a table feature delta-eos does not know, so cannot honour")
        drop = (f" (or drop it where Delta allows: ALTER TABLE ... DROP FEATURE {feature})"
                if feature not in ("identityColumns", "catalogManaged") and not legacy else "")
        yield f"it uses the table feature '{feature}'{legacy}: {reason}; {WAY_OUT}{drop}"


def _column_problems(fields: list[dict[str, Any]]) -> Iterator[str]:
    """The conditional features: what makes them active, whatever the protocol says (a table
    carrying the metadata on a protocol that does not list the feature is refused too)."""
    for name, field in _walk(fields):
        meta = field.get("metadata") or {}
        if "delta.invariants" in meta:
            yield (
                f"column '{name}' carries a column invariant (table feature 'invariants': "
                f"{_invariant_expression(meta['delta.invariants'])}), which delta-eos does not "
                f"evaluate; {WAY_OUT}, or drop the invariant"
            )
        if "delta.generationExpression" in meta:
            yield (
                f"column '{name}' is a generated column (table feature 'generatedColumns': "
                f"{meta['delta.generationExpression']}), which delta-eos does not compute; "
                f"append to it with delta-spark, which computes generated columns"
            )
        identity = sorted(k for k in meta if k.startswith("delta.identity."))
        if identity:
            yield (
                f"column '{name}' is an identity column (table feature 'identityColumns': "
                f"{', '.join(identity)}), whose values delta-eos does not generate; append "
                "to it with delta-spark"
            )
        if "CURRENT_DEFAULT" in meta:
            yield (
                f"column '{name}' has a DEFAULT value (table feature 'allowColumnDefaults'), "
                f"which delta-eos does not fill in; {WAY_OUT}"
            )
        if _is_variant(field.get("type")):
            yield (
                f"column '{name}' is of type variant (table feature 'variantType'), which "
                f"delta-eos does not write; {WAY_OUT}"
            )


def _property_problems(config: dict[str, tuple[str, str]]) -> Iterator[str]:
    """CHECK constraints, column mapping and a txn retention: table properties the sink
    cannot honour."""
    constraints = sorted(
        (key[len("delta.constraints."):], value)
        for low, (key, value) in config.items() if low.startswith("delta.constraints.")
    )
    for constraint, expression in constraints:
        yield (
            f"it has the CHECK constraint '{constraint}' ({expression}) (table feature "
            "'checkConstraints'); delta-eos does not evaluate SQL, so it cannot guarantee every "
            "row satisfies it. Append to it with delta-spark, which enforces CHECK "
            f"constraints, or drop the constraint: ALTER TABLE ... DROP CONSTRAINT {constraint}"
        )

    mode = config.get("delta.columnmapping.mode", (None, "none"))[1]
    if str(mode).strip().lower() != "none":
        yield (
            f"it uses column mapping (table feature 'columnMapping', delta.columnMapping.mode="
            f"{mode}): readers resolve columns by physical name or field id, and delta-eos "
            "writes Parquet files with display names and no field ids, so its rows would read "
            f"back as nulls; {WAY_OUT}"
        )

    if RETENTION_KEY in config:
        key, value = config[RETENTION_KEY]
        yield (
            f"it sets {key}={value}: delta-eos's exactly-once check is the table's txn action "
            "for the query's appId, and once that expires a restarted query would find no "
            "record of its last batch and commit it again (duplicates). Unset it: ALTER TABLE "
            f"... UNSET TBLPROPERTIES ('{key}')"
        )


def _walk(fields: list[dict[str, Any]], prefix: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every struct field of a Delta schema (JSON), nested ones too (in structs, arrays and
    maps), with its dotted path."""
    for field in fields:
        name = f"{prefix}{field['name']}"
        yield name, field
        yield from _walk_type(field.get("type"), name)


def _walk_type(dtype: Any, name: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if not isinstance(dtype, dict):
        return
    kind = dtype.get("type")
    if kind == "struct":
        yield from _walk(dtype.get("fields", []), f"{name}.")
    elif kind == "array":
        yield from _walk_type(dtype.get("elementType"), f"{name}.element")
    elif kind == "map":
        yield from _walk_type(dtype.get("keyType"), f"{name}.key")
        yield from _walk_type(dtype.get("valueType"), f"{name}.value")


def _is_variant(dtype: Any) -> bool:
    if dtype == "variant":
        return True
    if isinstance(dtype, dict):
        if dtype.get("type") == "variant":
            return True
        return any(_is_variant(dtype.get(k)) for k in ("elementType", "keyType", "valueType"))
    return False


def _invariant_expression(raw: Any) -> str:
    try:
        return str(json.loads(raw)["expression"]["expression"])
    except (TypeError, ValueError, KeyError):
        return str(raw)


def not_null_columns(table: DeltaTable) -> tuple[str, ...]:
    """The table's columns declared NOT NULL (non-nullable top-level fields).

    Also non-nullable fields nested in structs, as dotted paths ("address.city"), reached
    through struct fields only, as delta-spark does (its NOT NULL constraints stop at arrays
    and maps). As in delta-spark, a nested path is null when the field or any struct around
    it is null. A top-level name containing a dot is matched as a whole first."""
    fields = json.loads(table.schema().to_json()).get("fields", [])
    found: list[str] = []

    def visit(fs: list[dict[str, Any]], parents: tuple[str, ...]) -> None:
        for f in fs:
            path = parents + (f["name"],)
            if not f.get("nullable", True):
                found.append(".".join(path))
            dtype = f.get("type")
            if isinstance(dtype, dict) and dtype.get("type") == "struct":
                visit(dtype.get("fields", []), path)

    visit(fields, ())
    return tuple(found)


def check_not_null(
    data: pa.RecordBatch | pa.Table, columns: Sequence[str], batch_id: int, partition_id: int
) -> None:
    """Raise before anything is written when a NOT NULL column holds a null.

    `data` is the batch as the stream delivers it (partition columns included). A NOT NULL
    column the stream does not have is a violation too (every row would read null), unless
    the batch is empty. Cost: the null counts Arrow keeps per column; a nested path takes
    one struct_field extraction per level."""
    if not columns or data.num_rows == 0:
        return
    names = data.schema.names
    lowered = {n.lower(): n for n in names}
    for column in columns:
        values = _resolve(data, column, names, lowered)
        if values is None:
            raise NotNullViolation(
                column, data.num_rows, batch_id, partition_id,
                detail=f"no such column ({data.num_rows} row(s) would have it null; the "
                       f"stream's columns: {', '.join(names)})",
            )
        nulls = values.null_count
        if nulls:
            raise NotNullViolation(column, nulls, batch_id, partition_id)


def _resolve(data: pa.RecordBatch | pa.Table, column: str, names: list[str],
             lowered: dict[str, str]) -> pa.Array | pa.ChunkedArray | None:
    """The values at a column name or dotted struct path (Delta resolves names
    case-insensitively); a null struct makes its fields null (pc.struct_field)."""
    exact = column if column in names else lowered.get(column.lower())
    if exact is not None:
        return data.column(exact)
    parts = column.split(".")
    for i in range(len(parts) - 1, 0, -1):  # the longest top-level prefix first
        head = ".".join(parts[:i])
        top = head if head in names else lowered.get(head.lower())
        if top is None:
            continue
        values = data.column(top)
        for part in parts[i:]:
            if not pa.types.is_struct(values.type):
                return None
            child = {values.type.field(j).name.lower(): j for j in range(values.type.num_fields)}
            idx = child.get(part.lower())
            if idx is None:
                return None
            import pyarrow.compute as pc  # only for nested NOT NULL paths

            values = pc.struct_field(values, [idx])
        return values
    return None


def _arrow_fields(fields: Sequence[pa.Field]) -> Iterator[pa.Field]:
    """Every field of an Arrow schema, nested ones (struct fields, map and list items) too:
    every list kind (list, large, fixed-size, view) has a `value_field`."""
    for f in fields:
        yield f
        t = f.type
        if pa.types.is_struct(t):
            yield from _arrow_fields([t.field(i) for i in range(t.num_fields)])
        elif pa.types.is_map(t):
            yield from _arrow_fields([t.key_field, t.item_field])
        elif isinstance(getattr(t, "value_field", None), pa.Field):
            yield from _arrow_fields([t.value_field])


def has_not_null(schema: pa.Schema) -> bool:
    """A NOT NULL column (or nested field): delta-spark counts it as a column invariant."""
    return any(not f.nullable for f in _arrow_fields(schema))


def needs_listed_invariants(schema: pa.Schema) -> bool:
    """A table delta-rs creates for this schema is at writer version 7 (a timestamp_ntz column
    needs the timestampNtz feature) without `invariants` among its writer features, though it
    has a NOT NULL column; delta-spark then refuses the table
    (DELTA_FEATURES_PROTOCOL_METADATA_MISMATCH). Measured with deltalake 1.6.6 and
    delta-spark 4.4.0: integration_tests/peers/test_peers_delta.py."""
    ntz = any(pa.types.is_timestamp(f.type) and f.type.tz is None for f in _arrow_fields(schema))
    return ntz and has_not_null(schema)
