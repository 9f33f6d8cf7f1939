"""Typed records: a row read as a frozen msgspec.Struct of its table, decoded once where it is read. The one home of
the row helpers both domains use (hosted/ and identity/)."""

from __future__ import annotations

import functools
import sqlite3
from typing import Any, TypeVar

import msgspec

from emulator.core.store.db import Db, many, one

T = TypeVar("T", bound=msgspec.Struct)

# The schema's JSON columns (migrations/): a record's field of that name gets the decoded value.
_JSON_COLUMNS = {"target", "current", "receipt", "desired", "fingerprint", "grants", "events"}


@functools.cache
def _fields(kind: type[msgspec.Struct]) -> frozenset[str]:
    return frozenset(kind.__struct_fields__)


def record(row: sqlite3.Row, kind: type[T]) -> T:
    """A row as a record: JSON columns decoded, unknown columns (hashes, joins) left out."""
    fields = _fields(kind)
    values: dict[str, object] = {}  # a column's value, or a JSON column's decoded: msgspec.convert reads them
    for name in row.keys():
        if name not in fields:
            continue
        value = row[name]
        if name in _JSON_COLUMNS and isinstance(value, str | bytes):
            value = msgspec.json.decode(value)
        values[name] = value
    return msgspec.convert(values, kind, strict=False)


async def fetch_one(db: Db, kind: type[T], sql: str, params: tuple[Any, ...] = ()) -> T | None:
    row = await one(db, sql, params)
    return None if row is None else record(row, kind)


async def fetch_all(db: Db, kind: type[T], sql: str, params: tuple[Any, ...] = ()) -> list[T]:
    return [record(r, kind) for r in await many(db, sql, params)]
