"""Databases made once per test session and copied for each test that asks for one.

Migrating a new database with Alembic, rendering and importing the demo radiographs and drafting
them cost a review test several seconds of set-up (10-14 s on a loaded machine) before it tested
anything. Each of those states is built here once per session, through the same real code the
app runs (`open_database`, `seed_demo`, `DraftingService.draft`), and every test gets its own
copy: a SQLite file copy (with its pseudonym key file), or on PostgreSQL `CREATE DATABASE ...
TEMPLATE`. A test therefore still owns a database nobody else writes; nothing mutable is shared.

Kinds (each built from the one before it):
- `migrated`: what `open_database` makes of a new database (the latest schema, no rows);
- `demo`: plus the demo studies, imported by `seed_demo`, and their films' preview files;
- `drafted`: plus the local reader with the demo studies assigned and drafted by the offline
  retrieval preset (the cheapest real drafter);
- `review_session`: the demo studies drafted by the retrieval preset and a tiny seeded
  encoder-decoder and reviewed by two readers (tests/export_session.py; what the export tests
  read), built from `demo`.

Shared read-only: the demo's 16-bit PNG (rendered from pydicom's RG1 once, in the session's
template folder, as pydicom's own test files are shared by every test) and, copied into each
test's data folder, the retrieval drafter's feature cache.

Under pytest-xdist each template is built once for all the run's workers, under a file lock in
a folder they share (the first worker that wants a kind builds it, the others wait and copy
it): the SQLite files in that folder, the PostgreSQL databases on the run's one server
(tests/postgres_server.py), recorded in that folder. Each worker built the same ones before:
about 11 CPU-s for the SQLite four, most of it the review session's drafting, and 6 for the
PostgreSQL ones.

The migration code itself stays exercised for real: test_db.py and test_db_faults.py open and
upgrade new and old databases themselves, and `tests/test_cli_and_app.py` seeds a new database
through `prepare`.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock
from sqlalchemy import select

from rrg_review.app.settings import Settings
from rrg_review.core.files import atomic_write
from rrg_review.db.engine import Database
from rrg_review.db.models import Study

KINDS = ("migrated", "demo", "drafted", "review_session")
# what the PostgreSQL half of the tests sets as the pseudonym key (a server database has no
# key file beside it): the templates are seeded with the same key
POSTGRES_KEY = "ab" * 32


def _seed_demo(db: Database, settings: Settings) -> None:
    """The demo seeded, and its films' preview files written, as an app leaves them after
    its first run: each browser test's app wrote the first study's at its start (0.4 CPU-s)
    and each other study's when the test opened it, the same files every time. The app's own
    writer makes them (`StudyViewer.preview_file`, the path `serve` gives it)."""
    from rrg_review.app.setup import seed_demo
    from rrg_review.app.viewer.service import StudyViewer

    report = seed_demo(db, settings)
    assert report is not None and not report.problems, report
    viewer = StudyViewer(db, settings.blobs, preview_dir=settings.data_dir / "previews")
    with db.read() as session:
        studies = list(session.scalars(select(Study.id)))
    for study in studies:
        for image in viewer.open(study).images:
            viewer.preview_file(image)


def _review_session(db: Database, settings: Settings) -> object:
    from tests.export_session import build_review_session

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        return build_review_session(db, settings, settings.data_dir.parent / "session",
                                    seeded=True)


def _draft_demo(db: Database, settings: Settings) -> None:
    from rrg_review.app.accounts.service import AccountService
    from rrg_review.app.drafting.service import DraftingService
    from rrg_review.app.worklist.service import WorklistService

    reader = AccountService(db).local_reader()
    worklists = WorklistService(db)
    worklists.assign(reader)
    drafting = DraftingService(db, settings)
    drafting.draft([w.study_id for w in worklists.items(reader)], "retrieval")
    drafting.unload()


# each kind: (the kind it starts from, what is done to it)
_STEPS: dict[str, tuple[str | None, Callable[[Database, Settings], object] | None]] = {
    "migrated": (None, None),
    "demo": ("migrated", _seed_demo),
    "drafted": ("demo", _draft_demo),
    "review_session": ("demo", _review_session),
}


def _built_once(folder: Path, build: Callable[[], Any]) -> Any:
    """What `build` returned when it made what lies in `folder` (JSON: tuples come back as
    lists): run by the first of the run's workers that asks, under a file lock, and recorded
    beside the folder once whole; the next workers read the record. A build cut off (a killed
    worker: its folder but no record) is thrown away and made again."""
    record = folder.with_name(folder.name + ".built.json")
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(folder.with_name(folder.name + ".lock")):
        if not record.exists():
            shutil.rmtree(folder, ignore_errors=True)
            atomic_write(record, json.dumps(build()))
        return json.loads(record.read_text())


def _settle_sqlite(path: Path) -> None:
    """Fold the write-ahead log into the file, so that the file alone is the database."""
    with sqlite3.connect(path) as con:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        con.execute("PRAGMA journal_mode=DELETE")
    con.close()


def copy_tree(source: Path, target: Path) -> None:
    if source.is_dir():
        shutil.copytree(source, target, dirs_exist_ok=True)


@dataclass
class Templates:
    """The session's template databases, built on first use (a run that needs none builds
    none)."""

    folder: Path
    postgres: Callable[[], Any]  # the postgres_server fixture's value, started on demand
    # a folder the run's workers share: the SQLite templates are built there, and the
    # PostgreSQL ones (on the run's one server) recorded there; else each is this worker's own
    shared: Path | None = None
    _sqlite: dict[str, Path] = field(default_factory=dict)
    _postgres: dict[str, str] = field(default_factory=dict)  # kind -> template database name
    _data: dict[tuple[str, str], Path] = field(default_factory=dict)  # its data folder
    _server: Any = None  # kept: the server fixture is torn down before this one
    # what a kind's step returned (the review session's study ids and texts), per backend;
    # a shared one as JSON has it (lists for tuples), read back from the shared folder
    results: dict[tuple[str, str], object] = field(default_factory=dict)

    # -- SQLite ---------------------------------------------------------------------------
    def sqlite(self, kind: str) -> Path:
        """The template file of `kind` (its key file, if any, beside it)."""
        if kind in self._sqlite:
            return self._sqlite[kind]
        base = _STEPS[kind][0]
        if base is not None:
            self.sqlite(base)
        folder = (self.shared or self.folder) / "sqlite" / kind
        path = folder / "template.sqlite"

        def build() -> object:
            self._build_sqlite(kind, path)
            return self.results.get(("sqlite", kind))

        self.results[("sqlite", kind)] = _built_once(folder, build)
        self._sqlite[kind] = path
        self._data[("sqlite", kind)] = Settings.from_args(str(path)).data_dir
        return path

    def _build_sqlite(self, kind: str, path: Path) -> None:
        base, step = _STEPS[kind]
        path.parent.mkdir(parents=True)
        if base is not None:
            self._copy_sqlite(self._sqlite[base], path)
            copy_tree(self._data[("sqlite", base)], Settings.from_args(str(path)).data_dir)
        settings = Settings.from_args(str(path))
        db = settings.open_database()
        try:
            if step is not None:
                self.results[("sqlite", kind)] = step(db, settings)
        finally:
            db.dispose()
        _settle_sqlite(path)

    @staticmethod
    def _copy_sqlite(source: Path, target: Path) -> None:
        shutil.copy(source, target)  # the mode too: the app makes its files 0600
        key = source.with_name(source.name + ".key")
        if key.is_file():
            shutil.copy(key, target.with_name(target.name + ".key"))

    def copy_sqlite(self, kind: str, settings: Settings) -> None:
        """Put a copy of the template of `kind` where `settings` says the database is."""
        path = Path(settings.db_url.removeprefix("sqlite:///"))
        assert not path.exists(), f"{path} exists already"
        self._copy_sqlite(self.sqlite(kind), path)
        copy_tree(self._data[("sqlite", kind)], settings.data_dir)

    # -- PostgreSQL -----------------------------------------------------------------------
    def postgres_template(self, kind: str) -> str:
        """The name of the template database of `kind` on the session's server."""
        if kind in self._postgres:
            return self._postgres[kind]
        if self._server is None:
            self._server = self.postgres()
        base = _STEPS[kind][0]
        if base is not None:
            self.postgres_template(base)
        # shared only on the run's own server (one given by RRG_TEST_POSTGRES_URL outlives
        # the run: each worker makes its own there and drops them at its end)
        if self.shared is None or self._server.folder is None:
            name, data, result = self._build_postgres(kind,
                                                      self.folder / "postgresql" / kind / "data")
        else:
            folder = self.shared / "postgresql" / kind

            def build() -> object:
                name, data, result = self._build_postgres(kind, folder / "data")
                return {"name": name, "data": str(data), "result": result}

            found = _built_once(folder, build)
            name, data, result = found["name"], Path(found["data"]), found["result"]
        self.results[("postgresql", kind)] = result
        self._postgres[kind] = name
        self._data[("postgresql", kind)] = data
        return name

    def _build_postgres(self, kind: str, data_dir: Path) -> tuple[str, Path, Any]:
        """Make the template database of `kind` (its data folder `data_dir`): its name, data
        folder and what its step returned."""
        server = self._server
        base, step = _STEPS[kind]
        template = self._postgres[base] if base is not None else None
        url = server.create_database(f"rrg_template_{kind}", template=template)
        result = None
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("RRG_REVIEW_KEY", POSTGRES_KEY)  # read by Settings, as in the tests
            settings = Settings.from_args(url, str(data_dir))
            if base is not None:
                copy_tree(self._data[("postgresql", base)], settings.data_dir)
            db = settings.open_database()
            try:
                if step is not None:
                    result = step(db, settings)
            finally:
                db.dispose()
        name = url.rsplit("/", 1)[1]
        server.mark_template(name)  # nobody may connect to it (or a copy would fail)
        return name, settings.data_dir, result

    def postgres_data(self, kind: str) -> Path:
        self.postgres_template(kind)
        return self._data[("postgresql", kind)]

    def drop_postgres_templates(self) -> None:
        """Drop the templates from a server given by RRG_TEST_POSTGRES_URL (the session's own
        server is removed with its folder)."""
        server = self._server
        if server is not None and server.folder is None:
            for name in reversed(list(self._postgres.values())):
                server.drop_template(name)
