"""The reader-study status panel for admins (app/reader_study/status_panel.py) on a real SQLite
database: three studies (none signed, one in a reader's washout, one finished) read by the
server's clock, the rows a coordinator sees, no arm key anywhere, and the handlers: an admin is
shown the panel and every study, a reader is refused on the server with one sentence and is
given nothing of any study."""

from __future__ import annotations

from datetime import timedelta

import gradio as gr
import pytest
from sqlalchemy import select, update

from rrg_review.app.accounts.service import AccountService
from rrg_review.app.deps import Reader
from rrg_review.app.reader_study.status_panel import (
    REFUSAL,
    ReaderRow,
    StudyAdmin,
    StudyAdminPanel,
    boards_html,
    status_boards,
)
from rrg_review.app.review.desk import Session
from rrg_review.db.models import ReaderStudy, Reading
from rrg_review.reader_study.sessions import describe_wait
from tests.test_reader_study_service import T0, _design, _service, study_db  # noqa: F401

NOW = T0 + timedelta(days=3)  # 2026-11-05 08:00 UTC
ARM_NAMES = ("rrg24", "unassisted", "draft:", "reference", "retrieval")


def _sign(db, study, at, reader=None, session=1, limit=None):
    """Sign readings of a study at `at` (as `ReadingDesk.sign` leaves them: a time only)."""
    with db.write() as s:
        query = (select(Reading.id).join(ReaderStudy, ReaderStudy.id == Reading.reader_study_id)
                 .where(ReaderStudy.name == study, Reading.session == session)
                 .order_by(Reading.reader_id, Reading.position))
        if reader is not None:
            from rrg_review.db.models import Reader as Account

            query = query.where(Reading.reader_id == s.scalar(
                select(Account.id).where(Account.name == reader)))
        ids = list(s.scalars(query))[:limit]
        s.execute(update(Reading).where(Reading.id.in_(ids)).values(signed_at=at))


@pytest.fixture
def three(study_db, tmp_path):  # noqa: F811
    """'fresh' (nothing signed, its draft arm has no drafts), 'mid' (ann signed session 1 two
    hours in and waits for the washout; bob signed 3 of 7) and 'done' (parallel, all
    signed)."""
    service = _service(study_db, NOW)
    service.create(_design(tmp_path, "fresh"))
    service.create(_design(tmp_path, "mid", arms=["unassisted", "reference"]))
    service.create(_design(tmp_path, "done", arms=["unassisted", "reference"],
                           design="parallel", sessions=1, washout_days=0))
    _sign(study_db, "mid", T0 + timedelta(hours=2), "ann")
    _sign(study_db, "mid", T0 + timedelta(hours=3), "bob", limit=3)
    _sign(study_db, "done", T0 + timedelta(hours=1))
    return study_db, service


def test_the_boards_of_a_fresh_a_mid_washout_and_a_finished_study(three):
    _, service = three
    now, boards = status_boards(service)  # the service's clock decides
    assert now == NOW
    assert [b.name for b in boards] == ["done", "fresh", "mid"]
    done, fresh, mid = boards
    assert fresh.rows == (ReaderRow("ann", ("0 / 7", "0 / 7"), "session 1 open", "-"),
                          ReaderRow("bob", ("0 / 7", "0 / 7"), "session 1 open", "-"))
    assert fresh.summary.replace("\u00a0", " ") == (
        "crossover, 2 sessions, washout 14 d, blinded · 2 readers x 7 cases · 0 / 28 signed")
    assert len(fresh.warnings) == 1
    assert fresh.warnings[0].startswith("arm ")
    assert "7 cases without a draft" in fresh.warnings[0]
    assert mid.rows == (
        ReaderRow("ann", ("7 / 7", "0 / 7"),
                  "session 2 opens 2026-11-16 10:00 UTC (11 d 2 h left)",
                  "2026-11-02 10:00 UTC"),
        ReaderRow("bob", ("3 / 7", "0 / 7"), "session 1 open", "2026-11-02 11:00 UTC"))
    assert mid.warnings == ()
    assert done.rows == (
        ReaderRow("ann", ("7 / 7",), "finished: every session signed", "2026-11-02 09:00 UTC"),
        ReaderRow("bob", ("7 / 7",), "finished: every session signed", "2026-11-02 09:00 UTC"))
    assert done.summary.replace("\u00a0", " ").startswith("parallel, 1 session, washout 0 d")
    # past ann's washout the same board says her session 2 is open
    _, later = status_boards(service, T0 + timedelta(days=14, hours=2))
    assert later[2].rows[0].state == "session 2 open"
    # what the page is given: every study, arm codes only, names escaped
    page = boards_html(now, boards)
    assert page.count("<section") == 3 and "<th>S2</th>" in page
    assert "Status at 2026-11-05 08:00 UTC (server clock) · 3 studies" in page
    assert "11 d 2 h left" in page
    for secret in ARM_NAMES:
        assert secret not in page, secret
    assert "No reader studies yet" in boards_html(now, ())


def test_only_an_admin_is_shown_the_panel_and_given_the_status(three):
    db, service = three
    accounts = AccountService(db)
    with gr.Blocks():
        panel = StudyAdminPanel.build()
    admin = StudyAdmin(panel, service, accounts)
    ann = Reader("ann", accounts.account("ann").id, Session())
    local = Reader("local", accounts.local_reader(), Session())  # no-login mode: an admin
    boss = Reader("boss", accounts.add("boss", None, role="admin"), Session())

    refused = admin.on_study_status(ann, {})
    assert refused == {panel.body: REFUSAL}  # one sentence; nothing of any study
    assert admin.on_page_loaded(ann, {})[panel.accordion]["visible"] is False
    for who in (local, boss):
        assert admin.on_page_loaded(who, {})[panel.accordion]["visible"] is True
        shown = admin.on_study_status(who, {})[panel.body]
        assert all(f'data-study="{name}"' in shown for name in ("done", "fresh", "mid"))


@pytest.mark.parametrize(("wait", "words"), [
    (timedelta(days=3, hours=4, minutes=59), "3 d 4 h"),
    (timedelta(hours=5, minutes=12, seconds=30), "5 h 12 min"),
    (timedelta(minutes=12), "12 min"),
    (timedelta(seconds=20), "under 1 min"),
])
def test_the_time_left_reads_in_days_and_hours(wait, words):
    assert describe_wait(wait) == words
