"""SQLite under contention, with real processes on a real file: writers queue within the busy
timeout, and a database busy for longer is refused with one sentence (`DatabaseBusy`), never
the driver's raw "database is locked"."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest
from sqlalchemy import func, select

from rrg_review.app.accounts.service import AccountService
from rrg_review.app.ingest.service import import_records
from rrg_review.app.review.service import ReviewService
from rrg_review.app.settings import Settings
from rrg_review.app.worklist.service import WorklistService
from rrg_review.db.models import Revision
from rrg_review.studies.records import ReportSections, StudyRecord

ROOT = Path(__file__).resolve().parents[1]


def writer(db_path: str, reader: int, study: int, saves: int, busy_timeout: str) -> None:
    """One writer process: `saves` saves of its own section; prints what became of them."""
    from rrg_review.app.review.service import DatabaseBusy

    settings = Settings.from_args(db_path, busy_timeout=busy_timeout)
    review = ReviewService(settings.open_database(upgrade=False, check=False))
    out: dict[str, list] = {"saved": [], "busy": [], "errors": []}
    base = None
    for n in range(saves):
        try:
            base = review.save(reader, study, "findings", f"edit {n}", base).number
            out["saved"].append(base)
        except DatabaseBusy as exc:
            out["busy"].append(str(exc))
        except Exception as exc:  # what the test must never see
            out["errors"].append(f"{type(exc).__name__}: {exc}")
    print(json.dumps(out))


def _start(db_path: Path, reader: int, study: int, saves: int,
           busy_timeout: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    code = ("from tests.test_sqlite_contention import writer; "
            f"writer({str(db_path)!r}, {reader}, {study}, {saves}, {busy_timeout!r})")
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    assert "Traceback" not in err, err[-2000:]
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture
def readers(tmp_path: Path) -> tuple[Path, list[tuple[int, int]]]:
    """A SQLite file with six readers, each with a study of their own."""
    settings = Settings.from_args(str(tmp_path / "busy.sqlite"))
    db = settings.open_database()
    records = [StudyRecord(source="t", study_key=f"S{i}", patient_key=f"P{i}", origin="t",
                           study_date=date(2024, 1, 1 + i), reference=ReportSections("f", "i"))
               for i in range(6)]
    import_records(db, records, blobs=settings.blobs, fmt="test")
    accounts, worklists = AccountService(db), WorklistService(db, include_report_only=True)
    pairs = []
    for i in range(6):
        reader = accounts.add(f"r{i}", None)
        worklists.assign(reader)
        pairs.append((reader, worklists.items(reader)[i].study_id))
    db.dispose()
    return tmp_path / "busy.sqlite", pairs


def test_processes_saving_at_once_all_land_within_the_busy_timeout(readers):
    path, pairs = readers
    procs = [_start(path, reader, study, 12, "30") for reader, study in pairs]
    results = [_result(p) for p in procs]
    assert [r["errors"] for r in results] == [[]] * len(pairs)
    assert [r["busy"] for r in results] == [[]] * len(pairs)
    assert [r["saved"] for r in results] == [list(range(1, 13))] * len(pairs)
    db = Settings.from_args(str(path)).open_database(upgrade=False)
    with db.read() as s:
        assert s.scalar(select(func.count()).select_from(Revision)) == 12 * len(pairs)
    db.dispose()


def test_a_database_busy_longer_than_the_timeout_is_refused_with_one_sentence(readers):
    path, pairs = readers
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another program holding the write lock
    try:
        procs = [_start(path, reader, study, 2, "0.3") for reader, study in pairs[:3]]
        results = [_result(p) for p in procs]
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    for r in results:
        assert r["errors"] == [] and r["saved"] == [] and len(r["busy"]) == 2, r
        message = r["busy"][0]
        assert "busy.sqlite is busy" in message and "nothing was saved" in message
        assert "\n" not in message and "OperationalError" not in message
    db = Settings.from_args(str(path)).open_database(upgrade=False)
    with db.read() as s:
        assert s.scalar(select(func.count()).select_from(Revision)) == 0
    db.dispose()


def test_the_desk_says_not_saved_in_one_sentence_and_keeps_the_text(readers):
    from rrg_review.app.review.desk import Client, Desk, Session
    from rrg_review.app.viewer.service import StudyViewer

    path, pairs = readers
    reader, study = pairs[0]
    settings = Settings.from_args(str(path), busy_timeout="0.2")
    db = settings.open_database(upgrade=False)
    desk = Desk(StudyViewer(db, settings.blobs), ReviewService(db))
    session = Session(reader=reader, study=study)
    texts = {"findings": "A nodule in the right upper lobe.", "impression": ""}
    client = Client(study=study, typed={"findings": (1.0, 2.0)}, seq=1)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        saved = desk.save(session, texts, client)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert not saved.wrote and saved.message.startswith("⚠ Not saved: ")
    assert "is busy" in saved.message and "\n" not in saved.message
    assert desk.pending(session, texts, client) == {"findings": texts["findings"]}  # kept
    again = desk.save(session, texts, Client(study=study, typed=client.typed, seq=2))
    assert again.wrote and "findings saved as revision 1" in again.message
    db.dispose()
