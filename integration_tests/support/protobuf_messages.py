"""Protobuf message classes for tests, built at run time from a compact spec (no `protoc` on
these machines): a FileDescriptorProto in a pool of its own with the well-known types, then
`GetMessageClass`. confluent-kafka's ProtobufSerializer takes these classes as it takes
generated ones.

Fields are `(name, type, number)` plus optional flags: `"repeated"`, `"optional"` (proto3
explicit presence) or `"oneof:<name>"`. A type is a scalar name (`int64`, `string`, ...), a
message or enum of the file by its short name, a well-known type's full name with a leading dot
(`.google.protobuf.Timestamp`), or `map<K,V>`.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka.schema_registry.common.protobuf import _init_pool
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor_pool import DescriptorPool
from google.protobuf.message_factory import GetMessageClass

F = descriptor_pb2.FieldDescriptorProto
SCALARS = {
    "double": F.TYPE_DOUBLE, "float": F.TYPE_FLOAT, "int64": F.TYPE_INT64,
    "uint64": F.TYPE_UINT64, "int32": F.TYPE_INT32, "fixed64": F.TYPE_FIXED64,
    "fixed32": F.TYPE_FIXED32, "bool": F.TYPE_BOOL, "string": F.TYPE_STRING,
    "bytes": F.TYPE_BYTES, "uint32": F.TYPE_UINT32, "sfixed32": F.TYPE_SFIXED32,
    "sfixed64": F.TYPE_SFIXED64, "sint32": F.TYPE_SINT32, "sint64": F.TYPE_SINT64,
}
WELL_KNOWN_FILES = {
    ".google.protobuf.Timestamp": "google/protobuf/timestamp.proto",
    ".google.protobuf.Duration": "google/protobuf/duration.proto",
}


def _wk_file(type_name: str) -> str | None:
    if type_name in WELL_KNOWN_FILES:
        return WELL_KNOWN_FILES[type_name]
    if type_name.startswith(".google.protobuf.") and type_name.endswith("Value"):
        return "google/protobuf/wrappers.proto"
    return None


def message_classes(file_name: str, package: str, messages: dict[str, list[tuple]],
                    enums: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """Message classes by short name, of one proto3 file built from the spec."""
    fdp = descriptor_pb2.FileDescriptorProto(name=file_name, package=package, syntax="proto3")
    enums = enums or {}
    deps: set[str] = set()
    for name, values in enums.items():
        e = fdp.enum_type.add(name=name)
        for i, v in enumerate(values):
            e.value.add(name=v, number=i)
    for name, fields in messages.items():
        m = fdp.message_type.add(name=name)
        oneofs: dict[str, int] = {}
        for spec in fields:
            fname, ftype, number, *flags = spec
            f = m.field.add(name=fname, number=number, label=F.LABEL_OPTIONAL)
            if ftype.startswith("map<"):
                k, v = (x.strip() for x in ftype[4:-1].split(","))
                entry = m.nested_type.add(name=f"{fname.title().replace('_', '')}Entry")
                entry.options.map_entry = True
                entry.field.add(name="key", number=1, label=F.LABEL_OPTIONAL, type=SCALARS[k])
                vf = entry.field.add(name="value", number=2, label=F.LABEL_OPTIONAL)
                _set_type(vf, v, package, messages, enums, deps)
                f.label = F.LABEL_REPEATED
                f.type = F.TYPE_MESSAGE
                f.type_name = f".{package}.{name}.{entry.name}"
                continue
            _set_type(f, ftype, package, messages, enums, deps)
            for flag in flags:
                if flag == "repeated":
                    f.label = F.LABEL_REPEATED
                elif flag == "optional":
                    f.proto3_optional = True
                    oneofs[f"_{fname}"] = len(m.oneof_decl)
                    m.oneof_decl.add(name=f"_{fname}")
                    f.oneof_index = oneofs[f"_{fname}"]
                elif flag.startswith("oneof:"):
                    group = flag.split(":", 1)[1]
                    if group not in oneofs:
                        oneofs[group] = len(m.oneof_decl)
                        m.oneof_decl.add(name=group)
                    f.oneof_index = oneofs[group]
        # proto3 synthetic oneofs must come after real ones
        _order_oneofs(m)
    fdp.dependency.extend(sorted(deps))
    pool = DescriptorPool()
    _init_pool(pool)
    pool.Add(fdp)
    return {name: GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}"))
            for name in messages}


def _set_type(f: Any, ftype: str, package: str, messages: dict, enums: dict,
              deps: set[str]) -> None:
    if ftype in SCALARS:
        f.type = SCALARS[ftype]
    elif ftype in enums:
        f.type = F.TYPE_ENUM
        f.type_name = f".{package}.{ftype}"
    elif ftype in messages:
        f.type = F.TYPE_MESSAGE
        f.type_name = f".{package}.{ftype}"
    elif ftype.startswith("."):
        f.type = F.TYPE_MESSAGE
        f.type_name = ftype
        dep = _wk_file(ftype)
        if dep:
            deps.add(dep)
    else:
        raise ValueError(f"unknown type {ftype!r}")


def _order_oneofs(m: Any) -> None:
    """Real oneofs first, then proto3-optional synthetic ones (protoc's order)."""
    decls = [(d.name, i) for i, d in enumerate(m.oneof_decl)]
    synthetic = {i for i, f in ((f.oneof_index, f) for f in m.field
                                if f.HasField("oneof_index")) if f.proto3_optional}
    order = [i for _, i in decls if i not in synthetic] + [i for _, i in decls if i in synthetic]
    if order == list(range(len(decls))):
        return
    names = [m.oneof_decl[i].name for i in order]
    remap = {old: new for new, old in enumerate(order)}
    del m.oneof_decl[:]
    for n in names:
        m.oneof_decl.add(name=n)
    for f in m.field:
        if f.HasField("oneof_index"):
            f.oneof_index = remap[f.oneof_index]
