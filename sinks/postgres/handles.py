"""The `postgres-eos` sink's handles: one prepared transaction each (sinks/postgres/kind.py shows
and settles them for `kafka-eos inspect` and `resolve`).

A handle names its prepared transaction by gid (sinks/postgres/ids.py) and by the transaction's
id (`txid_current()`): once the gid is gone from pg_prepared_xacts, the server's record of that
id says whether it was committed or rolled back.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

from sinks.postgres.options import FORMAT_NAME

KIND = FORMAT_NAME


class PostgresHandle(TypedDict):
    #: Absent from handles written before handles recorded their kind.
    kind: NotRequired[Literal["postgres-eos"]]
    gid: str
    xid: int


def postgres_handle(gid: str, xid: int) -> PostgresHandle:
    return {"kind": KIND, "gid": gid, "xid": xid}
