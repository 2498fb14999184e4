"""The workstation's handler logic without a browser (app/ui/desk.py)."""

from __future__ import annotations

import pytest

from app.services.drafting import DraftingService
from app.services.evaluation import StudyMetrics
from app.services.review import ReviewService
from app.services.setup import seed_demo
from app.services.viewer import StudyViewer
from app.ui.desk import IDLE_AFTER_S, Desk, Session
from metrics.bleu import Bleu4
from metrics.rouge import RougeL

pytestmark = pytest.mark.both_databases  # SQLite and a real PostgreSQL server


@pytest.fixture
def desk(db, settings):
    seed_demo(db, settings)
    viewer = StudyViewer(db, settings.blobs)
    review = ReviewService(db)
    drafting = DraftingService(db, settings, decoded=viewer.decoded)
    reader = review.local_reader()
    review.assign(reader)
    ids = [w.study_id for w in review.worklist(reader)]
    drafting.draft(ids, "retrieval")
    return Desk(viewer, review, drafting, None, "retrieval",
                StudyMetrics(db, [Bleu4(), RougeL()])), reader, ids


def test_open_shows_the_draft_then_the_readers_own_text(desk):
    d, reader, ids = desk
    session = Session()
    opened = d.open(session, reader, ids[0], now=0.0)
    draft = opened.drafts["findings"].text
    assert opened.texts["findings"] == draft and opened.status.startswith("Showing the draft")
    assert "Offline default (retrieval)" in opened.model_note
    assert d.save(session, draft, opened.texts["impression"]) == "Everything is saved."
    assert d.save(session, draft + " Edited.", opened.texts["impression"]) == (
        "findings saved as revision 1")
    again = d.open(Session(), reader, ids[0], now=0.0)
    assert again.texts["findings"] == draft + " Edited." and "revision 1" in again.status


def test_autosave_only_after_typing_and_time_only_while_active(desk):
    d, reader, ids = desk
    session = Session()
    opened = d.open(session, reader, ids[1], now=100.0)
    findings, impression = opened.texts["findings"], opened.texts["impression"]
    # a tick before any typing saves nothing, even with empty boxes (page still loading)
    assert d.tick(session, "", "", now=104.0) is None
    assert d.review.current(reader, ids[1]) == {}
    d.typed(session, now=105.0)
    assert d.tick(session, findings + " x", impression, now=108.0) == (
        "findings saved as revision 1 (autosave)")
    assert d.tick(session, findings + " x", impression, now=112.0) is None
    # idle for longer than IDLE_AFTER_S: no time is added
    before = d.review.worklist(reader)[1].active_seconds
    d.tick(session, findings + " x", impression, now=112.0 + IDLE_AFTER_S + 500)
    assert d.review.worklist(reader)[1].active_seconds == before == pytest.approx(12.0)


def test_conflicting_tabs_and_accept_and_rate(desk):
    d, reader, ids = desk
    one, two = Session(), Session()
    opened = d.open(one, reader, ids[2], now=0.0)
    d.open(two, reader, ids[2], now=0.0)
    assert "revision 1" in d.save(one, "tab one", opened.texts["impression"])
    message = d.save(two, "tab two", opened.texts["impression"])
    assert message.startswith("⚠ **Not saved") and "tab one" in message and two.dirty
    assert d.accept(Session()) == "No draft to accept."
    three = Session()
    d.open(three, reader, ids[3], now=0.0)
    assert d.accept(three) == "Draft accepted as is and rated acceptable."
    assert d.review.latest_rating(reader, ids[3]).acceptable
    ok, msg = d.rate(three, 9, False, {}, None)
    assert not ok and "1-5" in msg
    ok, msg = d.rate(three, 4, False, {"wrong_severity": {"significant": 1}}, "c")
    assert ok and msg.startswith("Rated (#2")


def test_metrics_view_and_worklist_rows(desk):
    d, reader, ids = desk
    session = Session()
    d.open(session, reader, ids[0], now=0.0)
    view = d.metrics_view(session)
    assert view.headers == ["section", "comparison", "bleu4", "rougeL"]
    assert {tuple(r[:2]) for r in view.rows} >= {("findings", "draft vs reference")}
    rows, progress = d.worklist_rows(reader, "all", "all")
    assert len(rows) == 4 and progress == "**0 / 4 done**"
    assert d.worklist_rows(reader, "done", "all")[0] == []
    findings, impression = d.revert(session)
    assert findings == session.drafts["findings"][1] and session.dirty
