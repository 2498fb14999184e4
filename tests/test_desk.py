"""The workstation's handler logic without a browser (app/review/desk.py), on a real SQLite file,
the real demo radiographs and the real retrieval drafter."""

from __future__ import annotations

import asyncio
import copy
import html
import json
import re
import threading

import gradio as gr
import numpy as np
import pytest
from sqlalchemy import select

from rrg_review.app.accounts.service import LOCAL_READER, AccountService
from rrg_review.app.deps import Reader, Tab
from rrg_review.app.drafting.service import DraftingService
from rrg_review.app.evaluation.study_metrics import StudyMetrics
from rrg_review.app.review.desk import (
    FIRST_ROWS_S,
    IDLE_AFTER_S,
    ROWS_EVERY_S,
    WINDOW_PRESETS,
    Client,
    Desk,
    Saved,
    Session,
    TabRefused,
)
from rrg_review.app.review.panel import Editor, ReviewPanel, rating_line
from rrg_review.app.review.service import ReviewError, ReviewService
from rrg_review.app.setup import seed_demo
from rrg_review.app.viewer.service import StudyViewer
from rrg_review.app.worklist.service import WorklistService
from rrg_review.core.vocabulary import SECTIONS
from rrg_review.db.models import AuditEvent, Image, Study
from rrg_review.db.store import pseudonym
from rrg_review.metrics.bleu import Bleu4
from rrg_review.metrics.rouge import RougeL
from tests.conftest import TEST_PASSWORD_COST

pytestmark = pytest.mark.both_databases  # SQLite and a real PostgreSQL server


def _words(message: str) -> str:
    """A status line's words as the page shows them (its markup left out)."""
    return re.sub(r"<[^>]+>", "", message)


@pytest.fixture
def desk(drafted_db, settings):
    """The desk on a copy of the demo studies, assigned to the local reader and drafted by the
    retrieval preset (tests/db_templates.py)."""
    db = drafted_db
    viewer = StudyViewer(db, settings.blobs)
    review = ReviewService(db)
    drafting = DraftingService(db, settings, decoded=viewer.decoded)
    reader = AccountService(review.db).local_reader()
    ids = [w.study_id for w in WorklistService(review.db).items(reader)]
    return Desk(viewer, review, drafting, None, "retrieval",
                StudyMetrics(db, [Bleu4(), RougeL()])), reader, ids


def typed(study: int, *sections: str, seq: int = 1, **kw) -> Client:
    return Client(study, {s: (1.7e12, 1.7e12 + 500) for s in sections}, seq, **kw)


def opened(d: Desk, reader: int, study: int) -> tuple[Session, dict[str, str]]:
    session = Session()
    d.bind(session, LOCAL_READER)
    return session, d.open(session, reader, study, now=0.0).texts


def unsent(d: Desk, session: Session, comment: str | None,
           score: object = None) -> str | None:
    """`Desk.unsent` asked by a page that shows the open study."""
    return d.unsent(session, comment, score, page_study=session.study)


def test_open_shows_the_draft_then_the_readers_own_text(desk):
    d, reader, ids = desk
    session = Session()
    d.bind(session, LOCAL_READER)
    first = d.open(session, reader, ids[0], now=0.0)
    draft = first.drafts["findings"].text
    assert first.texts["findings"] == draft and first.status.startswith("Showing the draft")
    assert "Offline default (retrieval)" in first.model_note
    assert "revision" not in first.model_note  # (no hub revision: none named)
    # (untouched: said as when it was opened)
    assert d.save(session, first.texts, typed(ids[0])).message == first.status
    assert d.review.timing(reader, ids[0]) == {}
    edited = {**first.texts, "findings": draft + " Edited."}
    assert d.save(session, edited, typed(ids[0], "findings")).message == (
        "findings saved as revision 1")
    assert d.save(session, edited, typed(ids[0], "findings")).message == (
        "Everything is saved (findings revision 1).")
    assert d.review.timing(reader, ids[0])["findings"].submitted_at is not None
    again = d.open(Session(), reader, ids[0], now=0.0)
    assert again.texts["findings"] == draft + " Edited."
    assert again.status == "Editing your saved text (findings revision 1)."
    assert d.review.status(reader, ids[1]) != "in_review"  # opening changes nothing


def test_a_tab_belongs_to_the_reader_who_created_it(desk):
    d, reader, _ids = desk
    accounts = AccountService(d.review.db, password_cost=TEST_PASSWORD_COST)
    other = accounts.add("dr.b", "a long password")
    session = Session()
    assert d.bind(session, LOCAL_READER) == reader
    with pytest.raises(TabRefused, match="another reader"):
        d.bind(session, "dr.b")
    with pytest.raises(TabRefused, match="unknown reader"):
        d.bind(Session(), "nobody")
    fresh = Session()
    assert d.bind(fresh, "dr.b") == other and fresh.owner == "dr.b"
    # Gradio copies the initial state per tab: a copy is fresh, unbound, with its own lock
    clone = copy.deepcopy(session)
    assert clone.owner is None and clone.lock is not session.lock


def test_leaving_saves_the_typed_text_and_only_for_its_own_study(desk):
    d, reader, ids = desk
    session, texts = opened(d, reader, ids[0])
    typed_text = {**texts, "impression": "Typed just before Alt+N."}
    saved = d.leave(session, typed_text, typed(ids[0], "impression"), now=1.0)
    assert saved.ok and saved.message == "impression saved as revision 1 (autosave)"
    rev = d.review.current(reader, ids[0])["impression"]
    assert rev.text == "Typed just before Alt+N." and rev.autosave
    # text that the page says belongs to another study (a stale screen) is never saved here
    d.open(session, reader, ids[1], now=2.0)
    stale = d.save(session, {"findings": "old screen", "impression": ""}, typed(ids[0]))
    assert not stale.wrote and d.review.current(reader, ids[1]) == {}


def test_empty_text_is_saved_only_when_the_reader_cleared_it(desk):
    d, reader, ids = desk
    session, texts = opened(d, reader, ids[2])
    assert texts["findings"]  # the draft is on screen
    loading = {"findings": "", "impression": ""}  # boxes not filled in yet
    assert d.save(session, loading, typed(ids[2]), autosave=True).wrote is False
    assert d.tick(session, loading, typed(ids[2]), now=1.0) is None
    assert d.review.current(reader, ids[2]) == {}
    cleared = d.save(session, {**texts, "findings": ""}, typed(ids[2], "findings"))
    assert cleared.wrote and d.review.current(reader, ids[2])["findings"].text == ""


def test_an_older_edit_never_lands_after_a_newer_one(desk):
    d, reader, ids = desk
    session, texts = opened(d, reader, ids[0])
    d.save(session, {**texts, "findings": "newer"}, typed(ids[0], "findings", seq=5))
    late_tick = d.tick(session, {**texts, "findings": "older"}, typed(ids[0], "findings", seq=3),
                       now=1.0)
    assert late_tick is None or not late_tick.wrote
    assert d.review.current(reader, ids[0])["findings"].text == "newer"


def test_save_and_autosave_of_one_tab_never_conflict(desk):
    """The Save click and the autosave tick of one tab arrive together, many times."""
    d, reader, ids = desk
    session, texts = opened(d, reader, ids[1])
    messages: list[str] = []

    def run(kind: str, i: int) -> None:
        edit = {**texts, "findings": f"edit {i}"}
        client = typed(ids[1], "findings", seq=i)
        with session.lock:
            result = (d.save(session, edit, client) if kind == "save"
                      else d.tick(session, edit, client, now=float(i)))
        if result is not None:
            messages.append(result.message)

    for i in range(1, 13):
        threads = [threading.Thread(target=run, args=(k, i)) for k in ("save", "tick")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not any("not saved" in m for m in messages)
    assert d.review.current(reader, ids[1])["findings"].text == "edit 12"


def test_conflict_keeps_my_words_and_offers_keep_mine_or_take_theirs(desk):
    d, reader, ids = desk
    one, texts = opened(d, reader, ids[2])
    two, _ = opened(d, reader, ids[2])
    assert d.save(one, {**texts, "impression": "tab one"}, typed(ids[2], "impression")).ok
    mine = {**texts, "impression": "tab two"}
    refused = d.save(two, mine, typed(ids[2], "impression"))
    # (the quote marks the saved words unlike the box's: "tab <ins>one</ins>")
    assert not refused.ok and "tab one" in _words(refused.message)
    assert "Keep mine" in refused.message
    # the choice before the saved text: the status box scrolls, and a long quote pushed the
    # choice out of sight at 1366 px (a new-user trial)
    shown = _words(refused.message)
    assert shown.index("Keep mine") < shown.index("tab one")
    # the autosave does not retry into the same conflict every few seconds
    assert d.tick(two, mine, typed(ids[2], "impression"), now=1.0) is None
    kept = d.keep_mine(two, mine, typed(ids[2], "impression"))
    assert kept.ok and kept.message == "impression saved as revision 2"
    history = [r.text for r in d.review.history(reader, ids[2], "impression")]
    assert history == ["tab one", "tab two"]
    # the other tab is now behind: it takes theirs
    assert not d.save(one, {**texts, "impression": "tab one again"},
                      typed(ids[2], "impression")).ok
    shown, taken = d.take_theirs(one, {**texts, "impression": "tab one again"})
    assert shown["impression"] == "tab two" and taken.ok
    # the refused words are not dropped: kept in the history, the newer text current again
    history = [r.text for r in d.review.history(reader, ids[2], "impression")]
    assert history == ["tab one", "tab two", "tab one again", "tab two"]
    assert "kept in the history (impression revision 3)" in taken.message
    with d.review.db.read() as s:
        assert list(s.scalars(select(AuditEvent.target).where(
            AuditEvent.action == "take_theirs"))) == [
            f"study {ids[2]} impression revision 4 (yours kept as 3)"]
    assert one.base["impression"] == 4 and not one.conflicts
    assert d.review.current(reader, ids[2])["impression"].text == "tab two"
    assert d.save(one, {**texts, "impression": "tab two, edited"},
                  typed(ids[2], "impression", seq=5)).ok  # editing on from there


def test_after_the_other_tab_takes_theirs_this_tab_saves_on(desk):
    """Found in a third new-user trial: tab two took tab one's text ("take theirs" stores it
    again on top of tab two's words), and tab one's next save was refused as a conflict with
    its own words. Newer revisions that end on the text an edit started from are no conflict."""
    d, reader, ids = desk
    one, texts = opened(d, reader, ids[2])
    two, _ = opened(d, reader, ids[2])
    assert d.save(one, {**texts, "findings": "R1"}, typed(ids[2], "findings")).ok
    assert not d.save(two, {**texts, "findings": "R2"}, typed(ids[2], "findings")).ok
    _, taken = d.take_theirs(two, {**texts, "findings": "R2"})
    assert taken.ok
    saved = d.save(one, {**texts, "findings": "R3"}, typed(ids[2], "findings", seq=2))
    assert saved.ok and "revision 4" in saved.message, saved.message
    assert [r.text for r in d.review.history(reader, ids[2], "findings")] == [
        "R1", "R2", "R1", "R3"]
    # a real change in between still stops it
    assert not d.save(two, {**texts, "findings": "R4"}, typed(ids[2], "findings", seq=3)).ok


def test_a_tab_saved_over_is_told_and_chooses(desk):
    """Found in a new-user trial: the tab whose revision another tab saved over kept saying
    "saved as revision 1" until its own next save was refused. Its heartbeat now tells it."""
    d, reader, ids = desk
    one, texts = opened(d, reader, ids[2])
    assert d.save(one, {**texts, "findings": "one"}, typed(ids[2], "findings")).ok
    two, two_texts = opened(d, reader, ids[2])
    assert d.check_newer(two, typed(ids[2])) is None  # up to date
    assert d.check_newer(one, typed(ids[2])) is None
    assert d.save(two, {**two_texts, "findings": "two"}, typed(ids[2], "findings")).ok
    mine = {**texts, "findings": "one"}  # tab one shows its own stored text, nothing typed
    assert d.tick(one, mine, typed(ids[2]), now=1.0) is None
    told = d.check_newer(one, typed(ids[2]))
    assert told is not None and not told.ok and "“two”" in _words(told.message)
    assert d.check_newer(one, typed(ids[2])) is None  # told once; the choice is open
    assert "You have not changed it" in told.message
    # typing in it after being told: the notice says the choice is the reader's now (once),
    # not "you have not changed it" (new-user trial 19), and nothing is saved over "two"
    typing = {**texts, "findings": "one, and more"}
    now_mine = d.tick(one, typing, typed(ids[2], "findings", seq=2), now=2.0)
    assert now_mine is not None and not now_mine.ok and "Keep mine" in now_mine.message
    assert "You have not changed" not in now_mine.message
    assert d.tick(one, typing, typed(ids[2], "findings", seq=3), now=3.0) is None  # once
    assert [r.text for r in d.review.history(reader, ids[2], "findings")] == ["one", "two"]
    shown, taken = d.take_theirs(one, mine)
    assert taken.ok and shown["findings"] == "two" and "kept" not in taken.message
    # nothing stored for a tab that had typed nothing: its text is revision 1 already
    assert [r.text for r in d.review.history(reader, ids[2], "findings")] == ["one", "two"]
    assert one.base["findings"] == 2
    # a save of this tab's own that outlived a reload is not "elsewhere"
    assert d.save(two, {**two_texts, "findings": "two, later"},
                  typed(ids[2], "findings", seq=2)).ok
    own = typed(ids[2], own={"findings": ("two, later",)})
    assert d.check_newer(one, own) is None and one.base["findings"] == 3


def test_another_tabs_save_of_a_section_this_tab_left_untouched_holds_nothing(desk):
    """Found in a new-user trial: tab one edited the findings only; tab two saved the
    impression. Tab one was then held on the study by a "conflict" over the impression it never
    touched, and its Keep mine saved its stale draft impression over tab two's save. A newer
    save of a section the tab still shows as it was is told, never held, and never saved over;
    a section the reader changed still conflicts."""
    d, reader, ids = desk
    one, texts = opened(d, reader, ids[2])
    two, two_texts = opened(d, reader, ids[2])
    mine = {**texts, "findings": "Tab one's findings."}
    assert d.save(one, mine, typed(ids[2], "findings")).ok
    theirs = texts["impression"] + " T2IMPR"
    assert d.save(two, {**two_texts, "impression": theirs}, typed(ids[2], "impression")).ok
    told = d.check_newer(one, typed(ids[2], "findings"))
    assert told is not None and "T2IMPR" in told.message
    # leaving (an autosave of what is on screen) is not held, and sends nothing of the impression
    left = d.leave(one, {**mine, "findings": "Tab one's findings, more."},
                   typed(ids[2], "findings", seq=2), now=1.0)
    assert left.ok and left.wrote and "findings saved as revision 2" in left.message, left
    assert "impression" in left.conflicts and "A newer version of the impression" in left.message
    assert [r.text for r in d.review.history(reader, ids[2], "impression")] == [theirs]
    assert "Keep mine" not in told.message  # (it would save nothing of the impression)
    # the autosave of the findings goes on meanwhile
    more = {**mine, "findings": "Tab one's findings, more and more."}
    ticked = d.tick(one, more, typed(ids[2], "findings", seq=3), now=2.0)
    assert ticked is not None and ticked.ok and ticked.wrote, ticked
    # Keep mine keeps what tab one changed; the impression it never touched shows theirs
    kept = d.keep_mine(one, {**more, "findings": "Tab one's findings, kept."},
                       typed(ids[2], "findings", seq=4))
    assert kept.ok and kept.texts is not None and kept.texts["impression"] == theirs, kept
    assert "showing the newer saved impression revision 1" in kept.message
    assert [r.text for r in d.review.history(reader, ids[2], "impression")] == [theirs]
    assert d.review.current(reader, ids[2])["findings"].text == "Tab one's findings, kept."
    assert one.shown["impression"] == theirs and one.base["impression"] == 1
    # a request sent before that answer carries the old impression: it stores nothing
    stale = d.tick(one, {**more, "findings": "Tab one's findings, kept."},
                   typed(ids[2], "findings", seq=4), now=3.0)
    assert stale is None or not stale.wrote
    assert [r.text for r in d.review.history(reader, ids[2], "impression")] == [theirs]
    # a section the reader did change still conflicts, and holds the study
    assert d.save(two, {**two_texts, "impression": theirs + " again"},
                  typed(ids[2], "impression", seq=2)).ok
    changed = {**kept.texts, "impression": theirs + " T1"}
    held = d.leave(one, changed, typed(ids[2], "impression", seq=5), now=4.0)
    assert not held.ok and held.held == {"impression"} and "not saved" in held.message
    assert d.keep_mine(one, changed, typed(ids[2], "impression", seq=6)).ok
    assert d.review.current(reader, ids[2])["impression"].text == theirs + " T1"


def test_take_theirs_when_yet_another_save_came_in_offers_the_choice_again(desk):
    d, reader, ids = desk
    one, texts = opened(d, reader, ids[2])
    two, _ = opened(d, reader, ids[2])
    three, _ = opened(d, reader, ids[2])
    assert d.save(one, {**texts, "findings": "one"}, typed(ids[2], "findings")).ok
    assert not d.save(two, {**texts, "findings": "two"}, typed(ids[2], "findings")).ok
    assert not d.save(three, {**texts, "findings": "three"}, typed(ids[2], "findings")).ok
    assert d.keep_mine(three, {**texts, "findings": "three"}, typed(ids[2], "findings")).ok
    # tab two saw "one" as the newer text; "three" came in since: nothing is stored, it asks
    shown, taken = d.take_theirs(two, {**texts, "findings": "two"})
    assert not taken.ok and "three" in taken.message and shown["findings"] == "two"
    assert [r.text for r in d.review.history(reader, ids[2], "findings")] == ["one", "three"]
    # an empty box or the same words as theirs store nothing extra
    shown, taken = d.take_theirs(two, {**texts, "findings": ""})
    assert taken.ok and shown["findings"] == "three"
    assert [r.text for r in d.review.history(reader, ids[2], "findings")] == ["one", "three"]


def test_accept_asks_first_when_the_reader_has_edits_and_invents_no_likert(desk):
    d, reader, ids = desk
    session, texts = opened(d, reader, ids[3])
    mine = {**texts, "findings": texts["findings"] + " My addition."}
    asked = d.accept(session, mine, typed(ids[3], "findings"))
    assert asked.needs_confirm and "Your findings differ from the draft" in asked.message
    alone = d.accept(session, {**texts, "impression": texts["impression"] + " Mine."},
                     typed(ids[3], "impression"))
    assert "Your impression differs from the draft" in alone.message  # (not "differ")
    assert d.review.current(reader, ids[3]) == {} and d.review.latest_rating(reader, ids[3]) \
        is None
    done = d.accept(session, mine, typed(ids[3], "findings"), confirmed=True)
    assert done.texts == d.draft_texts(session)
    # an autosave of the replaced text, already on its way, does not land after the accept
    late = d.tick(session, mine, typed(ids[3], "findings"), now=5.0)
    assert late is None or not late.wrote
    assert d.review.current(reader, ids[3])["findings"].text == d.draft_texts(session)["findings"]
    # ...and only such a request hears that a newer edit is saved: leaving with the accepted
    # text, nothing typed since (a new-user trial was told so on every row click)
    stale = d.save(session, mine, typed(ids[3], "findings"))
    assert stale.message == "A newer edit of this tab is already saved.", stale
    left = d.leave(session, d.draft_texts(session), Client(ids[3], {}, 1), now=6.0)
    assert "newer edit" not in left.message and left.message.startswith("Everything is saved")
    rating = d.review.latest_rating(reader, ids[3])
    assert rating.acceptable and rating.likert is None
    assert d.review.status(reader, ids[3]) == "in_review"
    # untouched draft: accepted at once, no question
    other, texts = opened(d, reader, ids[0])
    assert not d.accept(other, texts, typed(ids[0])).needs_confirm
    assert d.accept(Session(), {}, Client()).message == "Open a study first."


def test_rating_needs_a_likert_and_whole_counts(desk):
    d, reader, ids = desk
    session, _ = opened(d, reader, ids[0])
    ok, msg = d.rate(session, None, False, {}, None)
    assert not ok and "overall quality score" in msg
    assert d.review.status(reader, ids[0]) != "done"
    ok, msg = d.rate(session, 4, False, {"wrong_severity": {"significant": -1}}, "c")
    assert not ok and "negative" in msg
    # what Gradio hands over when no minimum/precision rounds it first (a new-user trial
    # typed 1.5 and saw it stored as 2)
    ok, msg = d.rate(session, 4, False, {"wrong_severity": {"significant": 1.5}}, "c")
    assert not ok and "whole number" in msg
    ok, msg = d.rate(session, 4, False, {"wrong_severity": {"significant": 1}}, "c")
    assert ok and msg.startswith("Rated 4/5 at") and d.review.status(reader, ids[0]) == "done"


def test_a_move_away_holds_once_for_a_comment_never_sent(desk):
    """The comment goes with a rating: a move away from words typed in it and never sent
    holds once and says so; a second move with the same words leaves them; a sent comment,
    an emptied box or the stored comment holds nothing (a new-user trial lost a comment to
    Alt+N without a word)."""
    d, reader, ids = desk
    session, _ = opened(d, reader, ids[0])
    assert unsent(d, session, "") is None and unsent(d, session, None) is None
    why = unsent(d, session, "  misses the effusion ")
    assert why is not None and "your comment is not sent" in why and "Alt+R" in why
    assert unsent(d, session, "misses the effusion") is None  # moved on again: left unsent
    assert unsent(d, session, "misses the effusion, and the line") is not None  # new words
    ok, _ = d.rate(session, 4, False, {}, "misses the effusion, and the line")
    assert ok and unsent(d, session, "misses the effusion, and the line") is None
    # the stored comment, reopened, is not "unsent"; a fresh edit of it is
    session, _ = opened(d, reader, ids[0])
    assert unsent(d, session, "misses the effusion, and the line") is None
    assert unsent(d, session, "misses the effusion") is not None


def test_a_move_away_holds_once_for_rexval_counts_typed_and_never_sent(desk):
    """The ReXVal counts go with a rating too: counts the reader typed and did not send hold a
    move once (with an unsent comment, one notice names both); a rating sends them, a reopened
    study starts clean (a new-user trial's counts were dropped by a move without a word)."""
    d, reader, ids = desk
    session, _ = opened(d, reader, ids[1])
    assert unsent(d, session, "") is None
    d.count_typed(session, "false_finding")
    why = unsent(d, session, "")
    assert why is not None and "your ReXVal counts are not sent" in why and "them" in why
    assert unsent(d, session, "") is None  # moved on again: left unsent
    assert "false_finding" in session.own_rows  # the row stays the reader's
    session, _ = opened(d, reader, ids[1])
    d.count_typed(session, "missing_finding")
    why = unsent(d, session, "no effusion")
    assert why is not None and "your comment and ReXVal counts are" in why
    assert unsent(d, session, "no effusion") is None
    session, _ = opened(d, reader, ids[1])
    d.count_typed(session, "missing_finding")
    ok, _ = d.rate(session, 3, False, {"missing_finding": {"significant": 1}}, None)
    assert ok and unsent(d, session, "") is None  # sent with the rating


def test_a_move_away_holds_once_for_a_score_picked_and_never_sent(desk):
    """A hurried reader pressed 4, then Alt+N, and took the study for scored (a new-user
    trial): a score picked and not sent holds a move once, named with whatever else is
    unsent; the stored score, a sent one or the same pick again holds nothing."""
    d, reader, ids = desk
    session, _ = opened(d, reader, ids[1])
    assert unsent(d, session, "", None) is None and unsent(d, session, "", "") is None
    why = unsent(d, session, "", 4)
    assert why == ("your score is not sent. Submit rating (Alt+R) sends it; moving again "
                   "discards it.")
    assert unsent(d, session, "", 4) is None  # moved on again: left
    d.count_typed(session, "false_finding")
    why = unsent(d, session, "too long", 2)
    assert why is not None and why.startswith("your score, comment and ReXVal counts are ")
    ok, _ = d.rate(session, 2, False, {}, "too long")
    assert ok and unsent(d, session, "too long", 2) is None  # sent
    session, _ = opened(d, reader, ids[1])  # reopened: the stored score is no pick
    assert unsent(d, session, "too long", 2) is None
    assert unsent(d, session, "too long", "5") is not None


def test_a_second_move_says_what_it_left_unsent(desk):
    """The hold said "moving again discards them"; the move made again says after it what it
    discarded (a new-user trial moved again and heard nothing of them): only what was held
    and is still as held, nothing once sent, nothing from a page out of step."""
    d, reader, ids = desk
    session, _ = opened(d, reader, ids[1])
    label = session.label

    def dropped(comment: str | None, score: object = None) -> str | None:
        return d.discarded(session, comment, score, page_study=session.study)

    assert dropped("too long", 2) is None  # never held: nothing was said yet
    d.count_typed(session, "false_finding")
    assert unsent(d, session, "too long", 2) is not None  # held once
    # with what they were, to give again if meant (a trial was not told which words)
    assert dropped("too long", 2) == (f"⚠ Your score, comment and ReXVal counts for {label} "
                                      "were not sent: discarded as you moved on again. "
                                      "(Score 2; comment “too long”.)")
    assert dropped("", 2) == (f"⚠ Your score and ReXVal counts for {label} were not sent: "
                              "discarded as you moved on again. (Score 2.)")
    assert d.discarded(session, "too long", 2, page_study=ids[0]) is None
    ok, _ = d.rate(session, 2, False, {}, "too long")
    assert ok and dropped("too long", 2) is None  # sent
    session, _ = opened(d, reader, ids[1])
    assert unsent(d, session, "", 5) is not None
    assert dropped("", 5) == (f"⚠ Your score for {label} was not sent: discarded as you "
                              "moved on again. (Score 5.)")
    # held for the score, then for a comment: the second notice names both, as the move
    # after it discards both (a new-user trial was told of the comment only)
    why = unsent(d, session, "no effusion", 5)
    assert why is not None and why.startswith("your score and comment are not sent"), why
    assert unsent(d, session, "no effusion", 5) is None
    assert dropped("no effusion", 5) is not None and "score and comment" in dropped(
        "no effusion", 5)
    # the words quoted as typed, on one line, shortened, nothing in them read as Markdown/HTML
    hostile = "**Bold** <img src=x onerror=alert(1)> [link](http://x)\n" + "long " * 30
    assert unsent(d, session, hostile, 5) is not None
    quoted = dropped(hostile, 5) or ""
    assert "comment “\\*\\*Bold\\*\\* &lt;img src=x onerror=alert\\(1\\)&gt; " in quoted, quoted
    assert "<img" not in quoted and "\n" not in quoted and "long " * 29 + "long”" in quoted


def test_a_page_out_of_step_holds_no_move_for_another_studys_rating(desk):
    """During quick steps a step can go out from a page that still shows the study before
    (`Client.study`): its score and comment are that study's, so they hold nothing (a step
    held for them stopped the reader's queued steps) and are not taken as held."""
    d, reader, ids = desk
    session, _ = opened(d, reader, ids[1])
    assert d.unsent(session, "too long", 4, page_study=ids[0]) is None
    assert d.unsent(session, "too long", 4, page_study=None) is None
    assert unsent(d, session, "too long", 4) is not None  # the open study's own: held once


def test_a_score_given_before_the_readers_latest_text_says_so(desk):
    """A reader who edits a rated study is told once that the score came before (the study
    stayed "done", "Rated 4/5 at 07:08" beside a report edited since: a new-user trial); the
    study reopened says it too, and a new rating clears it."""
    d, reader, ids = desk
    session, texts = opened(d, reader, ids[2])
    ok, _ = d.rate(session, 4, False, {}, None)
    assert ok and session.rated is not None and not session.edited_since_rated
    edited = {**texts, "findings": "Edited after the score."}
    saved = d.save(session, edited, typed(ids[2], "findings"))
    assert saved.wrote and d.edited_after_rating(session, saved)
    assert not d.edited_after_rating(session, saved)  # said once
    line = rating_line(session.rated, edited=True)
    assert line.startswith("Rated 4/5 at ") and "before your later edits" in line
    session, _ = opened(d, reader, ids[2])  # reopened: known from the revision's time
    assert session.edited_since_rated
    ok, _ = d.rate(session, 3, False, {}, None)
    assert ok and not session.edited_since_rated and session.rated.likert == 3
    session, _ = opened(d, reader, ids[2])
    assert not session.edited_since_rated


def test_acceptable_without_changes_is_refused_once_the_text_differs_from_the_draft(desk):
    """Found in a new-user trial: accept, then edit, then rate 2 stored acceptable=yes on an
    edited report."""
    d, reader, ids = desk
    session, texts = opened(d, reader, ids[3])
    edited = {**texts, "findings": texts["findings"] + " Size 4 cm."}
    ok, msg = d.rate(session, 2, True, {}, None, edited)
    assert not ok and "Acceptable without changes" in msg and "findings" in msg
    assert d.review.latest_rating(reader, ids[3]) is None
    ok, _ = d.rate(session, 2, False, {}, None, edited)
    assert ok and not d.review.latest_rating(reader, ids[3]).acceptable
    ok, _ = d.rate(session, 5, True, {}, None, texts)  # the draft as is: acceptable
    assert ok and d.review.latest_rating(reader, ids[3]).acceptable
    # ... and with no clinically significant error counted (a trial stored 5/5, acceptable,
    # 2 significant errors left in the form below the fold); insignificant ones may stand
    ok, msg = d.rate(session, 5, True, {"wrong_location": {"significant": 2}}, None, texts)
    assert not ok and "2 clinically significant errors" in msg and "untick" in msg
    ok, _ = d.rate(session, 5, True, {"wrong_location": {"insignificant": 1}}, None, texts)
    assert ok and d.review.latest_rating(reader, ids[3]).errors["wrong_location"] == {
        "significant": 0, "insignificant": 1}


def test_time_counts_only_while_open_visible_and_active(desk):
    d, reader, ids = desk
    session, texts = opened(d, reader, ids[1])

    def minutes() -> float:
        return next(w for w in d.worklists.items(reader) if w.study_id == ids[1]).active_seconds

    d.tick(session, texts, typed(ids[1]), now=10.0)
    assert minutes() == pytest.approx(10.0)
    # the heartbeat sends the worklist rows (the minutes column) once time was counted: first
    # when 0.1 min could show, then every ROWS_EVERY_S
    assert not d.rows_due(session, 10.0)  # (the first beat starts the clock)
    assert not d.rows_due(session, 9.0 + FIRST_ROWS_S)
    assert d.rows_due(session, 10.0 + FIRST_ROWS_S)
    assert not d.rows_due(session, 9.0 + FIRST_ROWS_S + ROWS_EVERY_S)
    session.counted = True
    assert d.rows_due(session, 10.0 + FIRST_ROWS_S + ROWS_EVERY_S)
    d.tick(session, texts, typed(ids[1], visible=False), now=20.0)  # tab hidden
    d.tick(session, texts, typed(ids[1], idle_s=IDLE_AFTER_S + 1), now=30.0)  # reader away
    d.tick(session, texts, typed(ids[0]), now=40.0)  # page still shows another study
    assert minutes() == pytest.approx(10.0)
    assert d.review.status(reader, ids[1]) != "in_review"
    assert not d.rows_due(session, 200.0)  # nothing counted since the last rows: no query
    d.tick(session, texts, typed(ids[1]), now=204.0)
    assert d.rows_due(session, 204.0)


def test_regenerate_keeps_the_readers_text(desk):
    d, reader, ids = desk
    session, texts = opened(d, reader, ids[0])
    mine = {**texts, "findings": "My own findings."}
    d.leave(session, mine, typed(ids[0], "findings"), now=1.0)
    came = d.refresh_drafts(session, mine)
    # the reader's findings stay (the draft goes beside them); the impression they left as
    # drafted takes the new draft
    assert came.new and came.fresh == {"impression": d.draft_texts(session)["impression"]}
    assert came.own == {"findings"}
    assert d.review.current(reader, ids[0])["findings"].text == "My own findings."
    fresh, untouched = opened(d, reader, ids[1])
    assert d.refresh_drafts(fresh, untouched).fresh == d.draft_texts(fresh)


def test_a_draft_arriving_after_the_reader_saved_one_box_fills_the_other(desk):
    """CI under load: a reader wrote the impression of a study whose draft was on its way
    and it was autosaved before the draft came; the draft then went only beside the boxes,
    and the findings box the reader had not touched stayed empty. Per box now."""
    d, reader, ids = desk
    session, _ = opened(d, reader, ids[2])
    draft = d.draft_texts(session)
    session.drafts, session.shown = {}, dict.fromkeys(SECTIONS, "")  # opened undrafted
    empty = {"findings": "", "impression": ""}
    mine = {**empty, "impression": "Typed while the model ran."}
    d.leave(session, mine, typed(ids[2], "impression"), now=1.0)  # (an autosave)
    # the request gathered the boxes before the reader typed: both empty
    came = d.refresh_drafts(session, empty)
    assert came.fresh == {"findings": draft["findings"]} and came.own == {"impression"}
    assert d.review.current(reader, ids[2])["impression"].text == "Typed while the model ran."
    assert "findings" not in d.review.current(reader, ids[2])
    # nothing of the reader's anywhere: both boxes take it
    other, _ = opened(d, reader, ids[3])
    other.drafts, other.shown = {}, dict.fromkeys(SECTIONS, "")
    came = d.refresh_drafts(other, empty)
    assert came.fresh == d.draft_texts(other) and all(came.fresh.values()) and not came.own


def test_client_report_parsing_never_raises():
    assert Client.parse(None) == Client()
    assert Client.parse("not json") == Client()
    assert Client.parse('{"keys": {"findings": "x"}}') == Client()
    report = json.dumps({"study": 3, "keys": {"findings": [1, 2], "evil": [0, 0]}, "seq": 7,
                         "visible": False, "idle_ms": 1500})
    assert Client.parse(report) == Client(3, {"findings": (1.0, 2.0)}, 7, False, 1.5)


def test_window_presets(desk):
    d, reader, ids = desk
    session, _ = opened(d, reader, ids[0])
    image = session.image
    r = d.viewer.value_range(image)
    lo, hi = r.lo, r.hi
    for name in WINDOW_PRESETS:
        center, width = d.window_preset(image, name)
        assert width > 0 and lo - (hi - lo) <= center <= hi + (hi - lo)
    # (whole raw units: the Level box read 13657.5 for the full range, a new-user trial)
    assert d.window_preset(image, "full range") == pytest.approx(((lo + hi) / 2, hi - lo),
                                                                 abs=0.5)
    assert all(v.is_integer() for v in d.window_preset(image, "full range"))
    with pytest.raises(ReviewError, match="unknown window preset"):
        d.window_preset(image, "disco")


def test_window_presets_show_the_same_tissue_on_monochrome1_and_monochrome2(desk):
    """The demo holds one radiograph as MONOCHROME1 DICOMs (bone has the low raw values) and
    as a MONOCHROME2 PNG. A new-user trial found "bone" and "lung" swapped on the DICOMs: the
    presets were placed on the raw range as if bone were always high. Each preset must now
    render the same picture from both files."""
    d, reader, ids = desk
    images = [opened(d, reader, study)[0].image for study in ids]
    kinds = {d.viewer.value_range(i).inverted: i for i in images}
    assert set(kinds) == {True, False}, "the demo should hold both polarities"
    m1, m2 = kinds[True], kinds[False]

    def shown(image: int, preset: str) -> np.ndarray:
        return d.viewer.window(image, *d.window_preset(image, preset)).astype(float)

    for preset in ("bone", "lung", "soft tissue", "full range"):
        a, b = shown(m1, preset), shown(m2, preset)
        assert a.shape == b.shape
        assert np.corrcoef(a.ravel(), b.ravel())[0, 1] > 0.9, preset
    # each preset grades its part of the film instead of burning most of it white or black
    # (the lung preset left 78 % of this film pure white: a second new-user trial); the lung
    # window sits on the dark part of the film, so it shows the film brightest of the three;
    # the bone window keeps the ribs over the lungs (a third trial found the lungs black)
    for image in (m1, m2):
        means = {}
        for preset in ("lung", "soft tissue", "bone"):
            img = shown(image, preset)
            assert (img == 255).mean() < 0.5 and (img == 0).mean() < 0.5, preset
            means[preset] = img.mean()
        assert means["lung"] > max(means["soft tissue"], means["bone"])
        assert (shown(image, "bone") == 0).mean() < 0.15


def test_metrics_view_and_worklist_rows(desk):
    d, reader, ids = desk
    session, _ = opened(d, reader, ids[0])
    view = d.metrics_view(session)
    assert view.headers == ["section", "comparison", "bleu4", "rougeL"]
    assert {tuple(r[:2]) for r in view.rows} >= {("findings", "draft vs reference")}
    rows, progress = d.worklist_rows(reader, "all", "all")
    assert len(rows) == 4 and progress == "**0 / 4 done**"
    assert d.worklist_rows(reader, "done", "all")[0] == []
    assert d.start(reader) in ids


def test_a_load_resumes_where_this_browser_keeps_unsaved_text_of_its_own_reader(desk):
    d, reader, ids = desk
    login = LOCAL_READER
    resume = d.start(reader)
    assert d.start(reader, login, ((login, ids[2]), (login, ids[1]))) == ids[2]  # newest
    assert d.start(reader, login, (("someone-else", ids[3]),)) == resume  # not theirs
    assert d.start(reader, login, ((login, 10**9),)) == resume  # not on the worklist
    # a reloaded tab stays on the study it showed (not the one edited last: a new-user
    # trial), unless unsaved text elsewhere is to be restored or it is not on the worklist
    assert d.start(reader, login, (), was=ids[3]) == ids[3]
    assert d.start(reader, login, ((login, ids[2]),), was=ids[3]) == ids[2]
    assert d.start(reader, login, (), was=10**9) == resume
    assert d.start(reader, login, (), frozenset({ids[3]}), was=ids[3]) == resume
    assert Client.parse('{"was": 7}').was == 7 and Client.parse('{"was": "x"}') == Client()
    raw = json.dumps({"study": None, "left": [{"reader": login, "study": ids[3], "at": 5}]})
    assert Client.parse(raw).left == ((login, ids[3]),)
    assert Client.parse('{"left": [{"reader": "x"}]}') == Client()  # malformed: nothing


def test_film_puts_frontal_before_lateral_side_by_side_and_escapes_everything(
        desk, db, settings, tmp_path):
    """A study stored lateral first shows its frontal first, and each film is numbered as it
    is shown: the first film said "2: PA" (a new-user trial), while the keys 1, 2 pick films in
    the order shown."""
    import dataclasses

    from rrg_review.app.ingest.service import import_path
    from rrg_review.app.viewer.panel import film_html
    from tests.layouts import dicom_file

    uid = "1.2.826.0.1.3680043.8.498.77"
    dicom_file(tmp_path / "ex" / "A-lateral", study_uid=uid, series=1, view="LL")
    dicom_file(tmp_path / "ex" / "B-frontal", study_uid=uid, series=2, view="PA")
    assert import_path(db, tmp_path / "ex", blobs=settings.blobs, workers=1).added == 1
    viewer = StudyViewer(db, settings.blobs)
    with db.read() as s:
        study_id = s.scalar(select(Study.id).where(Study.study_key == pseudonym(s, uid)))
        stored = [i.view_position for i in s.scalars(
            select(Image).where(Image.study_id == study_id).order_by(Image.position))]
    assert stored == ["LL", "PA"]
    view = viewer.open(study_id)
    assert [i.label for i in view.images] == ["1: PA · frontal", "2: LL · lateral"]
    html = film_html(viewer, view)
    assert html.index('alt="1: PA') < html.index('alt="2: LL')
    assert html.count("<figure") == 2 and html.count('class="film-images"') == 1
    d, _reader, ids = desk
    view = d.viewer.open(ids[0])
    hostile = dataclasses.replace(view, study_key="<b>K</b>", patient_key="<script>x</script>")
    html = film_html(d.viewer, hostile)
    assert "<script>" not in html and "&lt;b&gt;K&lt;/b&gt;" in html
    empty = film_html(d.viewer, dataclasses.replace(view, images=()))
    assert "No images: this study is a report only" in empty
    beside = film_html(d.viewer, view, d.viewer.open(ids[0]))
    assert 'id="prior-panel"' in beside and "PRIOR (read-only)" in beside
    assert "Reference report of the prior (as imported)" in beside  # not the reader's own
    # the prior enlarges too, as its own viewport (issue #21, defect 3)
    assert beside.count("data-index") == 2 * len(view.images)


def test_a_save_of_both_sections_is_one_transaction(desk, db):
    """Both sections in one commit (one fsync), with a conflict in one section still saving
    the other, and a killed commit saving neither."""
    from sqlalchemy import event

    d, reader, ids = desk
    session, _texts = opened(d, reader, ids[1])
    commits = []
    listener = (db.engine, "commit", lambda conn: commits.append(1))
    event.listen(*listener)
    try:
        both = {"findings": "Both one.", "impression": "Both two."}
        saved = d.save(session, both, typed(ids[1], "findings", "impression"))
    finally:
        event.remove(*listener)
    assert saved.ok and len(commits) == 1
    assert {s: r.text for s, r in d.review.current(reader, ids[1]).items()} == both
    # another tab saved findings meanwhile: findings is refused, impression still saved
    other, _ = opened(d, reader, ids[1])
    assert d.save(other, {**both, "findings": "Other tab."}, typed(ids[1], "findings")).ok
    mixed = d.save(session, {"findings": "Mine.", "impression": "Mine too."},
                   typed(ids[1], "findings", "impression"))
    assert set(mixed.conflicts) == {"findings"} and mixed.wrote
    current = d.review.current(reader, ids[1])
    assert (current["findings"].text, current["impression"].text) == ("Other tab.", "Mine too.")


def test_a_failed_save_of_two_sections_stores_neither(desk, monkeypatch):
    d, reader, ids = desk
    session, _texts = opened(d, reader, ids[2])
    review = d.review
    original = review._timing_in

    def die_on_impression(s, reader_id, study_id, section, *args, **kwargs):
        if section == "impression":
            raise RuntimeError("killed mid-save")
        return original(s, reader_id, study_id, section, *args, **kwargs)

    monkeypatch.setattr(review, "_timing_in", die_on_impression)
    with pytest.raises(RuntimeError):
        d.save(session, {"findings": "F.", "impression": "I."},
               typed(ids[2], "findings", "impression"))
    assert review.current(reader, ids[2]) == {}
    assert review.status(reader, ids[2]) != "in_review"


def test_a_newer_revision_holding_this_tabs_own_text_is_no_conflict(desk):
    """After a reload, the old page's save of part of the text lands late: the reloaded tab
    reports that text as its own and saves on top; a text it never sent stays a conflict."""
    d, reader, ids = desk
    old_page, texts = opened(d, reader, ids[2])
    reloaded, _ = opened(d, reader, ids[2])  # loaded before the old page's save arrived
    assert d.save(old_page, {**texts, "impression": "My part"},
                  typed(ids[2], "impression")).ok
    whole = {**texts, "impression": "My part and the rest."}
    saved = d.save(reloaded, whole, typed(ids[2], "impression",
                                          own={"impression": ("My part",)}))
    assert saved.ok and saved.wrote and "revision 2" in saved.message, saved
    assert [r.text for r in d.review.history(reader, ids[2], "impression")] == [
        "My part", "My part and the rest."]
    # another tab's text is never taken for this tab's own
    other, _ = opened(d, reader, ids[2])
    assert d.save(other, {**texts, "impression": "Someone else."},
                  typed(ids[2], "impression")).ok
    refused = d.save(reloaded, {**whole, "impression": "Mine again."},
                     typed(ids[2], "impression", seq=2, own={"impression": ("My part",)}))
    assert not refused.ok and "Someone else." in refused.message


def test_client_reports_its_own_texts():
    report = Client.parse('{"study": 3, "own": {"impression": ["a", "b"], "bogus": ["x"], '
                          '"findings": "not a list"}}')
    assert report.own == {"impression": ("a", "b")}


def test_a_page_load_opens_at_once_and_its_draft_follows(db, settings):
    """The page load never waits for the model (it waited up to 8 s): the study opens with
    "Drafting…", the follow-up event waits for the pre-drafter and fills the boxes, unless the
    reader typed meanwhile (then the draft goes beside their text)."""
    from rrg_review.app.drafting.service import PreDrafter

    seed_demo(db, settings)
    viewer = StudyViewer(db, settings.blobs)
    review = ReviewService(db)
    drafting = DraftingService(db, settings, decoded=viewer.decoded)
    pre = PreDrafter(drafting, "retrieval")
    d = Desk(viewer, review, drafting, pre, "retrieval")
    reader = AccountService(review.db).local_reader()
    try:
        # a reader's Draft request holds the model: pre-drafting waits its turn meanwhile
        with drafting._gate.reader():
            study = d.start(reader, LOCAL_READER)
            assert study is not None and pre.queued(study)
            session, texts = opened(d, reader, study)
            assert texts == {"findings": "", "impression": ""}
            assert d.status_line(session).startswith("Drafting this study")
            # a second tab on the next study, where the reader types before its draft comes
            after = WorklistService(d.review.db).undrafted(reader, study, 1)[0]
            other, other_texts = opened(d, reader, after)
            # still held: timed out
            assert asyncio.run(d.await_draft(session, timeout=0.2)) == study
            # a room of tabs waiting at once takes no worker thread each: 200 waits on one
            # event loop, and no thread is started for them
            threads = threading.active_count()

            async def room() -> list[int | None]:
                waits = asyncio.gather(*[d.await_draft(session, timeout=0.5)
                                         for _ in range(200)])
                await asyncio.sleep(0.2)  # all of them are waiting now
                assert threading.active_count() == threads
                return await waits

            assert asyncio.run(room()) == [study] * 200
            assert not drafting.latest(study, "retrieval")
        assert asyncio.run(d.await_draft(session, timeout=120)) == study
        came = d.refresh_drafts(session, texts)
        assert came.fresh["findings"] == came.drafts["findings"].text != ""
        assert d.status_line(session).startswith("Showing the draft")
        # a study with a draft: nothing to wait for
        assert asyncio.run(d.await_draft(session)) is None

        assert asyncio.run(d.await_draft(other, timeout=120)) == after
        typed_texts = {**other_texts, "impression": "Mine, typed while the model ran."}
        came = d.refresh_drafts(other, typed_texts)
        assert came.drafts and "impression" not in came.fresh and came.own == {"impression"}
    finally:
        pre.stop()


def _import_while_running(db, settings, rg1_small, count: int) -> list[int]:
    """New studies stored as `rrg-review import` stores them while the app runs (onto every
    worklist, at its end); their ids in worklist order."""
    from datetime import date

    from rrg_review.app.ingest.service import import_records
    from rrg_review.studies.records import ImageSource, StudyRecord
    from tests.layouts import png_bytes

    records = [StudyRecord(source="later", study_key=f"L{i}", patient_key=f"LP{i}",
                           origin=f"L{i}", study_date=date(2025, 2, 1 + i),
                           indication="Cough.",
                           images=(ImageSource(name=f"L{i}.png", data=png_bytes(
                               np.roll(rg1_small, 7 * i, axis=1)), view_position="PA"),))
               for i in range(count)]
    assert import_records(db, records, blobs=settings.blobs, fmt="test").added == count
    worklists = WorklistService(db)
    worklists.extend_every_worklist()
    reader = AccountService(db).local_reader()
    return [w.study_id for w in worklists.items(reader, source="later")]


def predrafting_desk(db, settings):
    """A desk with the retrieval drafter and a running pre-drafter, as the app has them:
    (desk, drafting service, pre-drafter, the local reader)."""
    from rrg_review.app.drafting.service import PreDrafter

    viewer = StudyViewer(db, settings.blobs)
    drafting = DraftingService(db, settings, decoded=viewer.decoded)
    pre = PreDrafter(drafting, "retrieval")
    desk = Desk(viewer, ReviewService(db), drafting, pre, "retrieval")
    return desk, drafting, pre, AccountService(db).local_reader()


def test_studies_imported_while_running_are_drafted_the_one_opened_first(drafted_db,
                                                                         settings, rg1_small):
    """A new-user trial imported studies while the app ran and opened one of them from the
    worklist: the opened study was never drafted ("No draft yet" for minutes: only the
    studies after it were queued), nor were the new studies above it on the list. The opened
    study is drafted first, saying so, and every new study is drafted in the background."""
    db = drafted_db
    d, drafting, pre, reader = predrafting_desk(db, settings)
    try:
        d.predraft_first(reader)  # the app's start
        assert pre.wait_idle(120)
        new = _import_while_running(db, settings, rg1_small, 4)
        assert drafting.pending(new, "retrieval") == new
        with drafting._gate.reader():  # the model busy: nothing is drafted meanwhile
            session, texts = opened(d, reader, new[1])  # a row click, not a page load
            assert texts == {"findings": "", "impression": ""}
            assert d.status_line(session).startswith("Drafting this study")
            # the reader leaves while its draft is on its way, and comes back
            other, _ = opened(d, reader, new[0])
            assert d.status_line(other).startswith("Drafting this study")
        assert asyncio.run(d.await_draft(session, timeout=120)) == new[1]
        came = d.refresh_drafts(session, texts)
        assert came.fresh["findings"] == came.drafts["findings"].text != ""
        assert d.status_line(session).startswith("Showing the draft")
        assert pre.wait_idle(120)
        assert drafting.pending(new, "retrieval") == []  # the ones above it too
    finally:
        pre.stop()


def test_a_draft_done_that_never_reached_the_page_is_waited_for_again(drafted_db, settings,
                                                                      rg1_small):
    """A CI run's page said "Drafting this study…" for 60 s beside a draft stored 3 s after
    the app started: the page's wait (a request of its own) never ran. Once the pre-draft is
    done, a page still without it is told to wait again `DRAFT_AGAIN_S` after it was last
    told, and at most that often; not while the draft is being made, not once it arrived."""
    from rrg_review.app.review.desk import DRAFT_AGAIN_S

    db = drafted_db
    d, drafting, pre, reader = predrafting_desk(db, settings)
    new = _import_while_running(db, settings, rg1_small, 1)
    try:
        with drafting._gate.reader():  # the model busy: the draft is on its way
            session, texts = opened(d, reader, new[0])
            at = session.draft_asked_at
            assert not d.draft_missed(session, at + DRAFT_AGAIN_S * 3)
        assert pre.wait_idle(120)
        assert not d.draft_missed(session, at + DRAFT_AGAIN_S / 2)
        assert d.draft_missed(session, at + DRAFT_AGAIN_S)
        assert not d.draft_missed(session, at + DRAFT_AGAIN_S * 1.5)  # asked just now
        assert d.draft_missed(session, at + DRAFT_AGAIN_S * 2)
        d.refresh_drafts(session, texts)  # the draft reached the page
        assert not d.draft_missed(session, at + DRAFT_AGAIN_S * 10)
    finally:
        pre.stop()


def test_a_draft_done_before_the_page_asks_still_reaches_the_boxes(drafted_db, settings,
                                                                   rg1_small):
    """CI under load: the pre-drafter drafted a study opened from the worklist 0.1 s after
    it was queued, before the page asked whether to wait for it; the page then never waited,
    and said "No draft yet: press Draft" beside a stored draft. A study queued when opened is
    waited for (and its draft taken) however soon the pre-drafter is done with it."""
    db = drafted_db
    d, _, pre, reader = predrafting_desk(db, settings)
    new = _import_while_running(db, settings, rg1_small, 1)
    try:
        session, texts = opened(d, reader, new[0])
        assert pre.wait_idle(120) and not pre.queued(new[0])  # done before the page asks
        assert d.awaits_draft(session)
        assert d.status_line(session).startswith("Drafting this study")
        assert asyncio.run(d.await_draft(session, timeout=5)) == new[0]
        came = d.refresh_drafts(session, texts)
        assert came.fresh["findings"] == came.drafts["findings"].text != ""
        assert not d.awaits_draft(session)
        assert d.status_line(session).startswith("Showing the draft")
    finally:
        pre.stop()


def test_waiting_for_a_draft_ends_when_the_reader_leaves_the_study(drafted_db, settings,
                                                                   rg1_small):
    """A tab waiting for the open study's draft stops waiting once the reader opens another
    study (its draft still comes, for when they return), instead of polling for its whole
    time limit."""
    db = drafted_db
    d, drafting, pre, reader = predrafting_desk(db, settings)
    new = _import_while_running(db, settings, rg1_small, 2)
    try:
        with drafting._gate.reader():
            session, _ = opened(d, reader, new[0])

            async def leave_while_waiting() -> int | None:
                waiting = asyncio.create_task(d.await_draft(session, timeout=600))
                while not waiting.done() and session.study == new[0]:
                    await asyncio.sleep(0.05)
                    d.open(session, reader, new[1], now=0.0)
                return await asyncio.wait_for(waiting, 10)

            assert asyncio.run(leave_while_waiting()) == new[0]
            assert pre.queued(new[0])
        assert pre.wait_idle(120)
        assert drafting.pending(new, "retrieval") == []
    finally:
        pre.stop()


def test_a_report_only_study_says_there_is_nothing_to_draft(desk):
    d, reader, ids = desk
    session, _ = opened(d, reader, ids[0])
    session.images, session.drafts = (), {}  # as a study imported without images opens
    assert "report-only" in d.status_line(session) and "nothing to draft" in d.status_line(session)
    ok, message = d.rate(session, 3, False, {}, None)
    assert not ok and "no draft" in message


def test_suggested_counts_are_refused_unconfirmed_and_stored_beside_the_readers(desk):
    """Issue #22: a rating whose edit suggests ReXVal counts is refused until the reader says
    they checked them; then the suggestion (every category) is stored beside the reader's own
    counts, which may differ from it. An edit that changes no finding suggests nothing."""
    d, reader, ids = desk
    session, texts = opened(d, reader, ids[0])
    draft = d.draft_texts(session)
    edited = {**texts, "findings": draft["findings"] + " Large left pleural effusion."}
    ok, message = d.rate(session, 3, False, {}, None, edited)
    assert not ok and "I checked the suggested counts" in message
    assert d.review.latest_rating(reader, ids[0]) is None
    mine = {"missing_finding": {"significant": 0, "insignificant": 2}}
    ok, _ = d.rate(session, 3, False, mine, None, edited, checked=True)
    rating = d.review.latest_rating(reader, ids[0])
    assert ok and rating.suggested["missing_finding"] == 1
    assert sum(rating.suggested.values()) == 1
    assert rating.errors["missing_finding"] == {"significant": 0, "insignificant": 2}
    # spacing and case only: no suggestion, so no tick needed; stored as all 0
    other, texts = opened(d, reader, ids[1])
    calm = {s: "  " + t.upper() for s, t in d.draft_texts(other).items()}
    ok, message = d.rate(other, 4, False, {}, None, calm)
    assert ok, message
    assert set(d.review.latest_rating(reader, ids[1]).suggested.values()) == {0}


def test_the_prior_beside_shows_the_readers_own_report_of_it_above_the_reference(desk):
    """A new-user trial signed a patient's earlier study, opened the later one with the prior
    beside it and found only "No reference report stored for the prior study": a PACS shows
    the prior's signed report. The reader's own saved text of the prior now comes first,
    labelled as theirs; never in a reader-study reading, never another reader's."""
    from rrg_review.app.viewer.panel import prior_film

    d, reader, ids = desk
    view = next(v for v in map(d.viewer.open, ids) if v.prior_ids)
    prior = view.prior_ids[0]
    before, texts = opened(d, reader, prior)
    session, _ = opened(d, reader, view.study_id)
    session.prior = prior
    plain = prior_film(d.viewer, view, session, d.prior_report)
    assert "Your report of the prior" not in plain
    # the findings saved, the impression's draft left as it was: that draft is the report's
    # impression (it read "IMPRESSION: —": a new-user trial)
    assert d.save(before, {**texts, "findings": "My signed prior findings."},
                  typed(prior, "findings")).ok
    shown = prior_film(d.viewer, view, session, d.prior_report)
    draft = html.escape(d.draft_texts(before)["impression"])
    assert draft and (f"FINDINGS: My signed prior findings.\nIMPRESSION (the draft, left as "
                      f"it was): {draft}") in shown
    mine = {**texts, "findings": "My signed prior findings.", "impression": "My impression."}
    assert d.save(before, mine, typed(prior, "findings", "impression")).ok
    shown = prior_film(d.viewer, view, session, d.prior_report)
    assert "Your report of the prior (saved " in shown
    assert "FINDINGS: My signed prior findings.\nIMPRESSION: My impression." in shown
    below = "prior (as imported)" if "as imported" in shown else "No reference report stored"
    assert shown.index("Your report of the prior") < shown.index(below)
    accounts = AccountService(d.review.db, password_cost=TEST_PASSWORD_COST)
    session.reader = accounts.add("someone", "a long enough pw")
    # another reader's tab: their own report only (none)
    assert "My signed prior" not in prior_film(d.viewer, view, session, d.prior_report)
    session.reader, session.reading = reader, object()  # type: ignore[assignment]
    blinded = prior_film(d.viewer, view, session, d.prior_report)
    assert "My signed prior" not in blinded and "not shown during a reader-study" in blinded


def test_revert_right_after_an_accept_is_stored_at_once(desk):
    """Found by a new-user trial: Accept on one study, then Revert to draft on the next with
    no key typed between. The page never typed the reverted text, so its edit counter was
    still the one the Accept had made stale: the autosave of the draft was refused ("A newer
    edit of this tab is already saved") and a reload brought back the replaced text. The
    draft is now stored by the revert itself; a request on its way with the old text is
    stale after it."""
    d, reader, ids = desk
    mine_on_b, texts_b = opened(d, reader, ids[1])
    own = {**texts_b, "findings": "My own findings of B."}
    assert d.save(mine_on_b, own, typed(ids[1], "findings", seq=1)).ok
    session, texts_a = opened(d, reader, ids[0])
    assert d.accept(session, texts_a, typed(ids[0], seq=5), confirmed=True).texts is not None
    d.open(session, reader, ids[1], now=0.0)
    drafts = d.draft_texts(session)
    # the autosave alone could never store it: it is stale, and says nothing (its "a newer
    # edit is already saved" had replaced what the Accept said: a CI run)
    assert d.tick(session, drafts, Client(ids[1], {}, 5), now=1.0) is None
    assert d.review.current(reader, ids[1])["findings"].text == "My own findings of B."
    put = d.put_draft(session, Client(ids[1], {}, 5))
    assert put.ok and put.wrote, put.message
    # (the impression was the draft already: only the findings needed storing)
    assert d.review.current(reader, ids[1])["findings"].text == drafts["findings"]
    late = d.save(session, own, typed(ids[1], "findings", seq=5), autosave=True)
    assert not late.wrote  # the replaced text, on its way before the revert: stale
    assert d.review.current(reader, ids[1])["findings"].text == drafts["findings"]
    after = d.save(session, {**drafts, "findings": "Typed after."},
                   typed(ids[1], "findings", seq=6))
    assert after.wrote  # the next key typed saves as usual


def test_an_edit_after_accept_withdraws_acceptable_without_changes(desk):
    """Found by a new-user trial: Accept, then an edit and Save, left "acceptable without
    changes" standing, and the export reported it beside a report that differs from the
    draft. The save that makes the text differ now stores a rating without the claim (its
    score and counts kept), in the same transaction, and says so."""
    d, reader, ids = desk
    session, texts = opened(d, reader, ids[2])
    assert d.accept(session, texts, typed(ids[2], seq=1)).texts is not None
    assert d.review.latest_rating(reader, ids[2]).acceptable is True
    same = d.save(session, d.draft_texts(session), typed(ids[2], "findings", seq=3))
    assert "withdrawn" not in same.message  # nothing differs from the draft yet
    edited = {**d.draft_texts(session), "findings": "Actually the nodule is new."}
    saved = d.save(session, edited, typed(ids[2], "findings", seq=4))
    assert saved.wrote and "“Acceptable without changes” is withdrawn" in saved.message
    latest = d.review.latest_rating(reader, ids[2])
    assert latest.acceptable is False and latest.likert is None and latest.number == 2
    again = d.save(session, {**edited, "findings": "Actually the nodule is new. More."},
                   typed(ids[2], "findings", seq=5))
    assert again.wrote and "withdrawn" not in again.message  # once
    assert d.review.latest_rating(reader, ids[2]).number == 2


def test_an_autosave_stores_no_text_the_reader_did_not_put_in_the_box(desk):
    """A new-user trial: during fast Alt+N / Alt+P and row clicks, nothing typed, DEMO-0002's
    draft was autosaved into DEMO-0003 (the page's report named 0003 while its boxes still
    held 0002's text). An autosave now stores only sections the page saw the reader edit;
    the other text is left unstored (and logged), and Save still stores what is on screen."""
    d, reader, ids = desk
    session, _ = opened(d, reader, ids[2])
    other = opened(d, reader, ids[1])[1]  # another study's draft, in this study's boxes
    assert other != d.draft_texts(session)
    assert d.tick(session, other, Client(ids[2], {}, 1), now=1.0) is None
    assert d.review.current(reader, ids[2]) == {}
    # typed in the findings only: the findings are stored, the impression not
    mixed = {"findings": "Typed by the reader.", "impression": other["impression"]}
    saved = d.tick(session, mixed, typed(ids[2], "findings", seq=2), now=2.0)
    assert saved is not None and saved.wrote, saved
    stored = d.review.current(reader, ids[2])
    assert stored["findings"].text == "Typed by the reader." and "impression" not in stored
    # leaving the study (Next, a row click) autosaves by the same rule: the untyped text of
    # another study is not stored on the way out either
    session3, _ = opened(d, reader, ids[3])
    assert other != d.draft_texts(session3)
    left = d.leave(session3, other, Client(ids[3], {}, 3), now=3.0)
    assert not left.wrote and d.review.current(reader, ids[3]) == {}
    # Save, the reader's own act, stores what is on screen
    pressed = d.save(session3, other, Client(ids[3], {}, 4))
    assert pressed.wrote and d.review.current(reader, ids[3])["findings"].text == \
        other["findings"]


def test_an_answer_that_leaves_the_boxes_alone_never_moves_the_pages_study(desk):
    """A save or tick answered after the tab had moved on (sent from one study, the server
    already on the next) told the page the next study was open while its boxes still held
    the last one's text; the page's next request carried that text as the new study's (a race
    script: row clicks and Alt+N within 50 ms). Its `sync` now names the study only when the
    request came from it."""
    d, reader, ids = desk
    with gr.Blocks():
        tab, panel = Tab.build(), ReviewPanel.build()
    editor = Editor(panel, d, tab)
    session, _ = opened(d, reader, ids[1])  # the server is on the second study
    r = Reader(LOCAL_READER, reader, session)
    texts = opened(d, reader, ids[0])[1]  # the first study's text, sent from the first study
    told = Saved("Nothing to save.", {}, False)
    elsewhere = editor.after_save(r, told, texts, Client(ids[0]))
    assert tab.sync not in elsewhere and panel.diff not in elsewhere
    here = editor.after_save(r, told, d.draft_texts(session), Client(ids[1]))
    assert json.loads(here[tab.sync])["study"] == ids[1]


def test_status_lines_are_numbered_in_the_order_their_handlers_ran():
    """Each new status text carries its answer's number after the text (the page puts back
    the newest when an older one lands after it: static/page.js `rrgStatusSet`), counted with
    the sync's; an update with no new text is left as it is."""
    import gradio as gr

    from rrg_review.app.deps import numbered, sync_json, with_number
    from rrg_review.app.review.desk import Session

    session, status = Session(), object()
    first = with_number(session, {status: "Saved.", "other": 1}, status)
    assert first == {status: 'Saved.<span data-n="1"></span>', "other": 1}
    assert '"n": 2' in sync_json("ann", session)
    update = numbered(session, gr.update(value="Not accepted."))
    assert update["value"] == 'Not accepted.<span data-n="3"></span>'
    unchanged = gr.update()
    assert numbered(session, unchanged) is unchanged and session.answers == 3
    assert with_number(session, {"other": 1}, status) == {"other": 1}


def test_a_conflict_on_screen_follows_a_yet_newer_save_before_keep_mine(desk):
    """Found in a new-user trial: tab B's notice quoted revision 1 after tab A had saved
    revision 2, and Keep mine then saved over words the reader had never been shown. The
    heartbeat now replaces the quote with the newest revision (once per revision), and Keep
    mine saves on top of what the notice shows."""
    d, reader, ids = desk
    a, texts = opened(d, reader, ids[2])
    b, _ = opened(d, reader, ids[2])
    assert d.save(a, {**texts, "findings": "A1"}, typed(ids[2], "findings")).ok
    mine = {**texts, "findings": "B1"}
    refused = d.save(b, mine, typed(ids[2], "findings"))
    assert not refused.ok and "“A1”" in _words(refused.message)
    assert d.check_newer(b, typed(ids[2], "findings"), mine) is None  # nothing newer yet
    assert d.save(a, {**texts, "findings": "A1 A2"}, typed(ids[2], "findings", seq=2)).ok
    assert d.tick(b, mine, typed(ids[2], "findings", seq=2), now=1.0) is None  # held
    again = d.check_newer(b, typed(ids[2], "findings", seq=2), mine)
    assert again is not None and not again.ok and "revision 2" in again.message
    assert "A2" in _words(again.message) and "Keep mine" in again.message
    assert "You have not changed" not in again.message  # still the reader's own words
    assert d.check_newer(b, typed(ids[2], "findings", seq=2), mine) is None  # told once
    kept = d.keep_mine(b, mine, typed(ids[2], "findings", seq=3))
    assert kept.ok and kept.message == "findings saved as revision 3"
    assert [r.text for r in d.review.history(reader, ids[2], "findings")] == [
        "A1", "A1 A2", "B1"]
