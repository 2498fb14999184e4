"""What a database holds and whether it is sound: the queries behind `rrg-review studies`,
`draft` (which studies) and `check`, so the command line builds no queries of its own."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import func, select

from rrg_review.db.engine import Database, integrity_problems
from rrg_review.db.models import Patient, Study
from rrg_review.db.store import StoreCounts, counts, pseudonym_key

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Inventory:
    """Counts of everything stored, and studies per source (sorted by source)."""

    totals: StoreCounts
    per_source: tuple[tuple[str, int], ...]


def inventory(db: Database) -> Inventory:
    """Count the stored studies, patients, images and reference reports (one read).

    Args:
        db: the database.

    Returns:
        The totals and the number of studies per source.
    """
    with db.read() as session:
        totals = counts(session)
        rows = session.execute(select(Study.source, func.count(Study.id))
                               .group_by(Study.source).order_by(Study.source)).all()
    return Inventory(totals, tuple((str(source), int(n)) for source, n in rows))


def study_ids(db: Database, *, split: str | None = None, source: str | None = None,
              limit: int | None = None) -> list[int]:
    """Stored studies in a stable order (source, date, id), optionally of one split and/or
    source, at most `limit` of them: what a batch command (drafting) works through.

    Args:
        db: the database.
        split: only studies of this split (train, valid, test).
        source: only studies of this source (dataset).
        limit: at most this many.

    Returns:
        Study ids.
    """
    stmt = select(Study.id).order_by(Study.source, Study.study_date, Study.id)
    if split:
        stmt = stmt.where(Study.split == split)
    if source:
        stmt = stmt.where(Study.source == source)
    if limit:
        stmt = stmt.limit(limit)
    with db.read() as session:
        return list(session.scalars(stmt))


def health_problems(db: Database, *, full: bool = False) -> list[str]:
    """Everything wrong with a database: schema, SQLite's own check (quick, or full with
    `full`), foreign keys, and a pseudonym key that is missing or does not match.

    Args:
        db: the database (opened read-only by `rrg-review check`).
        full: run `integrity_check` instead of `quick_check`.

    Returns:
        One sentence per problem; empty when the database is sound.
    """
    problems = integrity_problems(db, full=full)
    with db.read() as session:
        if session.scalar(select(func.count(Patient.id))):
            try:
                pseudonym_key(session)
            except Exception as exc:  # reported as a finding, not a crash
                log.debug("pseudonym key check of %s failed", db.name, exc_info=True)
                problems.append(str(exc))
    return problems


__all__: Sequence[str] = ("Inventory", "health_problems", "inventory", "study_ids")
