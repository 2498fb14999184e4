"""Start-up use case: open, check and upgrade the database, seed the demo worklist on an empty
one. Any reason the database cannot be used is a `DatabaseProblem` with one sentence."""

from __future__ import annotations

import logging

from sqlalchemy import func, select

from rrg_review.app.ingest.service import ImportReport, import_records
from rrg_review.app.settings import Settings
from rrg_review.db.engine import Database, DatabaseProblem, integrity_problems
from rrg_review.db.models import Study
from rrg_review.db.store import pseudonymise_folder_study_keys, pseudonymise_stored_patients
from rrg_review.studies.demo import demo_records

log = logging.getLogger(__name__)


def seed_demo(db: Database, settings: Settings) -> ImportReport | None:
    """Add the demo studies when the database has no study at all; None when it has some.

    Args:
        db: the app's database (writable).
        settings: where the demo files and image blobs go.

    Returns:
        The import's report, or None when the database already holds studies.
    """
    with db.read() as session:
        if session.scalar(select(func.count(Study.id))):
            return None
    return import_records(db, demo_records(settings.data_dir), blobs=settings.blobs, fmt="demo")


def prepare(settings: Settings, *, demo: bool = True, read_only: bool = False) -> Database:
    """The database the app serves, checked (schema, writability, PRAGMA quick_check).

    A writable database also gets any patient keys stored as given replaced by pseudonyms.

    Args:
        settings: the database URL and data folders.
        demo: seed the demo studies into an empty database (never on a read-only one).
        read_only: open without writing anything (`--read-only`).

    Returns:
        The open database.

    Raises:
        DatabaseProblem: the database cannot be used (fails quick_check, wrong schema...);
            one sentence saying why.
        RuntimeError: the demo studies could not be imported.
    """
    db = settings.open_database(read_only=read_only)
    problems = integrity_problems(db)
    if problems:
        db.dispose()
        raise DatabaseProblem(f"{db.name} fails SQLite's quick_check ({problems[0]}); restore "
                              "it from a backup or run `rrg-review check`")
    if not read_only:
        with db.write() as session:
            changed = pseudonymise_stored_patients(session)
            folders = pseudonymise_folder_study_keys(session)
        if changed:
            log.info("%d patient keys stored as given were replaced by pseudonyms", changed)
        if folders:
            log.info("%d study keys stored as folder names were replaced by pseudonyms", folders)
    if demo and not read_only:
        report = seed_demo(db, settings)
        if report is not None and report.problems:
            raise RuntimeError("demo studies could not be loaded: "
                               + "; ".join(map(str, report.problems)))
    return db
