"""Copy a single-user database (a SQLite file) into a team's server database (PostgreSQL).

Everything is copied as stored, ids included (so drafts, revisions and ratings keep pointing at
their studies, and the pseudonym salt in `meta` keeps patient keys stable), in one transaction on
the target: it ends with every row copied or with nothing written. The target must be empty.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, DateTime, Integer, Table, func, insert, select, text

from rrg_review.db.engine import Database
from rrg_review.db.models import Base

logger = logging.getLogger(__name__)

_CHUNK = 1000


PER_SERVER = frozenset({"web_session", "login_throttle"})  # never copied


class TransferError(RuntimeError):
    """The copy cannot start (e.g. the target already holds data); nothing was written."""


@dataclass(frozen=True)
class TransferReport:
    rows: dict[str, int]  # table -> rows copied

    @property
    def total(self) -> int:
        return sum(self.rows.values())


def copy_database(source: Database, target: Database,
                  progress: Callable[[str, int], None] | None = None) -> TransferReport:
    """Copy every table of `source` into the empty `target` (both at the latest schema)."""
    every = Base.metadata.sorted_tables  # parents before children (foreign keys)
    # derived tables (worklist_progress) are rebuilt by the target's triggers as rows arrive;
    # sign-ins and login back-off belong to the server they were made on: the copy starts with
    # every reader signed out (a cookie of the old server must not open the new one)
    tables = [t for t in every if not t.info.get("derived") and t.name not in PER_SERVER]
    with target.engine.connect() as conn:
        held = {t.name: n for t in every
                if (n := conn.execute(select(func.count()).select_from(t)).scalar_one())}
    if held:
        listed = ", ".join(f"{n} in {name}" for name, n in held.items())
        raise TransferError(f"the target database already holds data ({listed}); "
                            "migrate-db copies into an empty database only")
    copied: dict[str, int] = {name: 0 for name in PER_SERVER}
    with source.engine.connect() as src, target.engine.begin() as dst:
        for table in tables:
            aware = [c.name for c in table.columns
                     if isinstance(c.type, DateTime) and c.type.timezone]
            order = list(table.primary_key.columns) or list(table.columns)
            count = 0
            result = src.execution_options(stream_results=True).execute(
                select(table).order_by(*order))
            for chunk in result.mappings().partitions(_CHUNK):
                rows = [_with_utc(dict(row), aware) for row in chunk]
                dst.execute(insert(table), rows)
                count += len(rows)
                if progress:
                    progress(table.name, count)
            copied[table.name] = count
        if dst.dialect.name == "postgresql":
            _reset_sequences(dst, tables)
    with source.engine.connect() as conn:  # derived tables: rebuilt by the target's triggers
        for table in every:
            if table.info.get("derived"):
                copied[table.name] = conn.execute(
                    select(func.count()).select_from(table)).scalar_one()
    with target.engine.connect() as conn:  # the proof: the same number of rows on both sides
        for table in every:
            there = conn.execute(select(func.count()).select_from(table)).scalar_one()
            if there != copied[table.name]:
                raise TransferError(f"{table.name}: {copied[table.name]} rows copied but "
                                    f"{there} found in the target")
    return TransferReport(copied)


def _with_utc(row: dict[str, Any], columns: list[str]) -> dict[str, Any]:
    """SQLite returns the UTC timestamps the app stores without their zone: put it back."""
    for name in columns:
        value = row.get(name)
        if isinstance(value, datetime) and value.tzinfo is None:
            row[name] = value.replace(tzinfo=UTC)
    return row


def _reset_sequences(conn: Connection, tables: Iterable[Table]) -> None:
    """Copied ids were given explicitly: move each id sequence past them, or the next row a
    reader saves on the server would collide with a copied one."""
    for table in tables:
        for column in table.primary_key.columns:
            if not isinstance(column.type, Integer) or not column.autoincrement:
                continue
            # table and column names from our own metadata; the values are bound
            conn.execute(text(
                f"SELECT setval(pg_get_serial_sequence(:table, :column), "  # noqa: S608
                f"COALESCE((SELECT MAX({column.name}) FROM {table.name}), 0) + 1, false)"),
                {"table": table.name, "column": column.name})
