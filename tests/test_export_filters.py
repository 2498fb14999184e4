"""Export filters on a real database: `since` keeps the work reviewed on or after a day (by the
later of a reader's rating and edit), `source` keeps one dataset, and both reach every part of
the evaluation (rows, review, time on task)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from sqlalchemy import update

from bench.synthetic import add_studies
from rrg_review.app.accounts.service import AccountService
from rrg_review.app.evaluation.results import ExportFilters
from rrg_review.app.evaluation.rows import collect_rows
from rrg_review.app.evaluation.steps import evaluate
from rrg_review.app.review.service import ReviewService
from rrg_review.app.worklist.service import WorklistService
from rrg_review.db.models import Draft, Rating, WorklistItem
from rrg_review.metrics.bleu import Bleu4
from tests.conftest import TEST_PASSWORD_COST

LONG_AGO = datetime(2020, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def reviewed(db, monkeypatch) -> dict[str, list[int]]:
    """Studies of two sources with one model's drafts; reader a rates them all, reader b rates
    the first of each source; a's ratings of source 'old' are dated 2020, b edits one of them
    today."""
    monkeypatch.setattr(db, "configured_key", "12" * 32)
    ids = {"new": add_studies(db, 3, source="new", prefix="N"),
           "old": add_studies(db, 3, source="old", prefix="O")}
    with db.write() as s:
        for sid in ids["new"] + ids["old"]:
            for section in ("findings", "impression"):
                s.add(Draft(study_id=sid, section=section, preset="m", model_id="m",
                            text=f"{section} draft of {sid}."))
    review = ReviewService(db)
    accounts = AccountService(review.db, password_cost=TEST_PASSWORD_COST)
    a, b = accounts.add("a", "pw-a-123456"), accounts.add("b", "pw-b-123456")
    for reader in (a, b):
        WorklistService(review.db).assign(reader, ids["new"] + ids["old"], include_report_only=True)
    for sid in ids["new"] + ids["old"]:
        review.heartbeat(a, sid, 30.0)
        review.rate(a, sid, likert=4, acceptable=True, preset="m")
    for source in ("new", "old"):
        review.rate(b, ids[source][0], likert=2, acceptable=False, preset="m")
    with db.write() as s:
        s.execute(update(Rating).where(Rating.reader_id == a, Rating.study_id.in_(ids["old"]))
                  .values(created_at=LONG_AGO))
        s.execute(update(Rating).where(Rating.reader_id == b, Rating.study_id == ids["old"][0])
                  .values(created_at=LONG_AGO))
    review.save(b, ids["old"][0], "findings", "b's edit today", None)
    return ids


def _who(rows) -> set[tuple[str, str | None]]:
    return {(r.source, r.reader) for r in rows}


def test_since_keeps_work_reviewed_on_or_after_the_day(db, reviewed):
    today = datetime.now(UTC).date()
    everything = collect_rows(db, ExportFilters())
    assert _who(everything) == {("new", "a"), ("new", "b"), ("old", "a"), ("old", "b")}
    recent = collect_rows(db, ExportFilters(since=today))
    # a's ratings of 'old' are from 2020: gone; b's old rating counts because b edited today
    assert _who(recent) == {("new", "a"), ("new", "b"), ("old", "b")}
    old_b = [r for r in recent if r.source == "old"]
    assert {r.section: r.final for r in old_b}["findings"] == "b's edit today"
    assert all(r.likert == 2 for r in old_b)
    assert collect_rows(db, ExportFilters(since=today + timedelta(days=1))) == []
    assert _who(collect_rows(db, ExportFilters(since=date(2020, 3, 1)))) == _who(everything)
    # drafts nobody reviewed never pass a `since` filter (nobody reviewed them since)
    assert all(r.reader for r in collect_rows(db, ExportFilters(since=date(2000, 1, 1))))


def test_source_narrows_rows_review_and_time_on_task(db, reviewed):
    rows = collect_rows(db, ExportFilters(source="old"))
    assert {r.source for r in rows} == {"old"} and len(rows) == 3 * 2 + 1 * 2
    ev = evaluate(db, ExportFilters(source="new"), metrics=[Bleu4()], n_resamples=0)
    assert set(ev.sources) == {"new"} and {r.source for r in ev.rows} == {"new"}
    assert ev.review.models["m"].ratings == 3 + 1
    # a finished 3 'new' studies ('done' needs a score): b's rating made one more 'done'
    with db.read() as s:
        done = s.query(WorklistItem).filter(WorklistItem.status == "done").count()
    assert done == 6 + 2
    assert ev.review.time_on_task.n_with_draft == 3 + 1
    assert evaluate(db, ExportFilters(source="none"), metrics=[Bleu4()],
                    n_resamples=0).rows == ()
    both = evaluate(db, ExportFilters(source="old", reader="b", since=datetime.now(UTC).date()),
                    metrics=[Bleu4()], n_resamples=0)
    assert _who(both.rows) == {("old", "b")}
    assert {r.study_key for r in both.rows} == {r.study_key for r in rows if r.reader == "b"}


def test_unreviewed_drafts_appear_only_without_reader_and_since(db, reviewed):
    extra = add_studies(db, 1, source="new", prefix="X", start=100)
    with db.write() as s:
        s.add(Draft(study_id=extra[0], section="findings", preset="m", model_id="m",
                    text="unreviewed."))
    unreviewed = [r for r in collect_rows(db, ExportFilters(source="new")) if r.reader is None]
    assert [(r.draft, r.final, r.likert) for r in unreviewed] == [("unreviewed.", None, None)]
    for narrowed in (ExportFilters(reader="a"), ExportFilters(since=date(2000, 1, 1))):
        assert all(r.reader for r in collect_rows(db, narrowed))


def test_a_section_left_as_drafted_is_final_as_drafted_before_the_rating(db, reviewed):
    """Found in a third new-user trial: a reader who saved the findings and had not rated
    yet exported an empty final impression, though the draft's impression was in the box."""
    review = ReviewService(db)
    c = AccountService(review.db, password_cost=TEST_PASSWORD_COST).add("c", "pw-c-123456")
    study = reviewed["new"][1]
    WorklistService(review.db).assign(c, [study], include_report_only=True)
    with db.read() as s:
        draft = s.query(Draft).filter_by(study_id=study, section="findings").one().id
    review.save(c, study, "findings", "c's findings.", None, draft_id=draft)
    rows = {r.section: r for r in collect_rows(db, ExportFilters(reader="c"))}
    assert rows["findings"].final == "c's findings."
    assert rows["impression"].final == rows["impression"].draft != ""
    assert rows["impression"].likert is None


def test_a_report_written_before_any_draft_is_the_readers_final(db):
    """A reader saves both sections of a study that has no draft yet, then the study is
    drafted: the export pairs the reader's text with the draft at once (its final read as
    empty until the reader's next save: a new-user trial)."""
    (sid,) = add_studies(db, 1, prefix="B")
    review = ReviewService(db)
    reader = AccountService(review.db, password_cost=TEST_PASSWORD_COST).add("r", "pw-r-123456")
    WorklistService(review.db).assign(reader, [sid], include_report_only=True)
    review.save(reader, sid, "findings", "MARK findings by hand", None)
    review.save(reader, sid, "impression", "MARK impression by hand", None)
    with db.write() as s:
        for section in ("findings", "impression"):
            s.add(Draft(study_id=sid, section=section, preset="m", model_id="m",
                        text=f"{section} drafted later."))
    rows = collect_rows(db, ExportFilters())
    assert {(r.section, r.reader, r.final) for r in rows} == {
        ("findings", "r", "MARK findings by hand"),
        ("impression", "r", "MARK impression by hand")}
