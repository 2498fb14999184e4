"""Concurrent writers on SQLite and a real PostgreSQL server: saves of one reader's section
still conflict, saves of different studies do not wait for each other (PostgreSQL: row-scoped
writes), and a whole-database write still excludes every save."""

from __future__ import annotations

import threading
from datetime import date

import pytest
from sqlalchemy import func, select

from rrg_review.app.accounts.service import AccountService
from rrg_review.app.ingest.service import import_records
from rrg_review.app.review.service import EditConflict, ReviewService
from rrg_review.app.worklist.service import WorklistService
from rrg_review.db.engine import ROWS
from rrg_review.db.models import Revision, WorklistItem
from rrg_review.studies.records import ReportSections, StudyRecord

pytestmark = pytest.mark.both_databases

WAIT_S = 30.0  # a bound for what must finish, never a measured time


@pytest.fixture
def two(db, settings):
    """Readers a and b, each with a study of their own on their worklist: (review, a, sa, b, sb)."""
    records = [StudyRecord(source="t", study_key=f"S{i}", patient_key=f"P{i}", origin="t",
                           study_date=date(2024, 1, 1 + i), reference=ReportSections("f", "i"))
               for i in range(2)]
    import_records(db, records, blobs=settings.blobs, fmt="test")
    review = ReviewService(db)
    accounts, worklists = AccountService(db), WorklistService(db, include_report_only=True)
    a, b = accounts.add("a", None), accounts.add("b", None)
    worklists.assign(a)
    worklists.assign(b)
    sa, sb = (worklists.items(r)[i].study_id for r, i in ((a, 0), (b, 1)))
    return review, a, sa, b, sb


def _in_thread(fn):
    """Run fn in a thread; returns (thread, box) where box gets ("ok", value) or ("error", e)."""
    box: list = []

    def run():
        try:
            box.append(("ok", fn()))
        except BaseException as exc:  # handed to the test
            box.append(("error", exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def test_concurrent_saves_of_one_section_conflict_and_never_duplicate(two, db):
    review, a, sa, _, _ = two
    for round_ in range(4):
        base = review.current(a, sa).get("findings")
        number = base.number if base else None
        start = threading.Barrier(4)  # three tabs and this thread

        def save(tab: int, number=number, start=start, round_=round_):
            start.wait(WAIT_S)
            return review.save(a, sa, "findings", f"round {round_} tab {tab}", number)

        runs = [_in_thread(lambda tab=tab: save(tab)) for tab in range(3)]
        start.wait(WAIT_S)
        for thread, _ in runs:
            thread.join(WAIT_S)
        outcomes = [box[0] for _, box in runs]
        saved = [v for kind, v in outcomes if kind == "ok"]
        conflicts = [v for kind, v in outcomes if isinstance(v, EditConflict)]
        assert len(saved) == 1 and len(conflicts) == 2, outcomes
        assert all(c.current.number == saved[0].number for c in conflicts)
        assert saved[0].number == (number or 0) + 1
    with db.read() as s:
        numbers = list(s.scalars(select(Revision.number).where(
            Revision.reader_id == a, Revision.study_id == sa).order_by(Revision.number)))
        assert numbers == [1, 2, 3, 4]
        assert s.scalar(select(func.count()).select_from(Revision)) == 4


def _hold_entry(db, reader: int, study: int, held: threading.Event,
                release: threading.Event) -> None:
    """A row-scoped write transaction holding one reader's worklist entry of one study (what
    a save of it holds) until `release` is set."""
    with db.write(scope=ROWS) as s:
        s.scalar(select(WorklistItem).where(WorklistItem.reader_id == reader,
                                            WorklistItem.study_id == study).with_for_update())
        held.set()
        release.wait(WAIT_S)


def test_a_save_of_another_study_does_not_wait_for_a_held_one(two, db, db_backend):
    if db_backend == "sqlite":
        pytest.skip("SQLite has one writer at a time: every save waits for a held one")
    review, a, sa, b, sb = two
    # a's second study, assigned first: an assignment is a whole-database write, which waits
    # for every held entry
    WorklistService(review.db, include_report_only=True).assign(a, [sb])
    held, release = threading.Event(), threading.Event()
    holder, _ = _in_thread(lambda: _hold_entry(db, a, sa, held, release))
    assert held.wait(WAIT_S)
    try:
        # another reader's study, and the same reader's other study: neither waits
        for reader, words in ((b, "b's words"), (a, "a's words on the other study")):
            other, box = _in_thread(lambda r=reader, w=words: review.save(r, sb, "findings", w,
                                                                          None))
            other.join(WAIT_S)
            assert not other.is_alive(), "a save of another study waited for the held one"
            assert box and box[0][0] == "ok" and box[0][1].number == 1, box
    finally:
        release.set()
        holder.join(WAIT_S)


def test_a_save_of_the_held_study_waits_and_then_lands(two, db, db_backend):
    review, a, sa, _, _ = two
    held, release = threading.Event(), threading.Event()
    holder, _ = _in_thread(lambda: _hold_entry(db, a, sa, held, release))
    assert held.wait(WAIT_S)
    same, box = _in_thread(lambda: review.save(a, sa, "impression", "after the hold", None))
    try:
        same.join(0.5)
        assert same.is_alive() and not box  # still waiting for the holder, not refused
    finally:
        release.set()
        holder.join(WAIT_S)
    same.join(WAIT_S)
    assert box and box[0][0] == "ok" and box[0][1].number == 1, box


def test_a_whole_database_write_excludes_every_save(two, db, db_backend):
    review, _a, _sa, b, sb = two
    held, release = threading.Event(), threading.Event()

    def hold_all():
        with db.write():
            held.set()
            release.wait(WAIT_S)

    holder, _ = _in_thread(hold_all)
    assert held.wait(WAIT_S)
    other, box = _in_thread(lambda: review.save(b, sb, "findings", "waits", None))
    try:
        other.join(0.5)
        assert other.is_alive() and not box
    finally:
        release.set()
        holder.join(WAIT_S)
    other.join(WAIT_S)
    assert box and box[0][0] == "ok", box
