"""Review services on a real SQLite file: readers, worklists, revisions, conflicts, ratings."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import select

from rrg_review.app.accounts.service import (
    AccountError,
    AccountService,
    hash_password,
    verify_password,
)
from rrg_review.app.evaluation.panel import notes_markdown
from rrg_review.app.review.service import (
    MAX_ACTIVE_GAP_S,
    EditConflict,
    ReviewError,
    ReviewService,
)
from rrg_review.app.setup import seed_demo
from rrg_review.app.worklist.service import WorklistService
from rrg_review.core.vocabulary import REXVAL_CATEGORIES
from rrg_review.db.models import Rating, Revision
from rrg_review.metrics.edits import word_diff, word_error_rate
from tests.conftest import TEST_PASSWORD_COST

pytestmark = pytest.mark.both_databases  # SQLite and a real PostgreSQL server


@pytest.fixture
def review(demo_db):
    """The review service on a copy of the demo studies (tests/db_templates.py)."""
    return ReviewService(demo_db)


def test_passwords_are_scrypt_hashed_and_verified(review):
    stored = hash_password("s3cret-pass")
    assert stored.startswith("scrypt$") and "s3cret-pass" not in stored
    assert verify_password("s3cret-pass", stored) and not verify_password("nope", stored)
    assert hash_password("s3cret-pass") != stored  # salted
    accounts = AccountService(review.db, password_cost=TEST_PASSWORD_COST)
    rid = accounts.add("dr.lee", "s3cret-pass")
    assert accounts.authenticate("dr.lee", "s3cret-pass").account.id == rid
    assert accounts.authenticate("dr.lee", "wrong").account is None
    assert accounts.authenticate("nobody", "s3cret-pass").account is None
    assert accounts.has_logins()
    with pytest.raises(AccountError, match="already exists"):
        accounts.add("dr.lee", "another-pass")
    with pytest.raises(AccountError, match="reader name"):
        accounts.add("bad name!", "another-pass")


def test_each_reader_has_an_own_worklist_and_never_sees_others_edits(review):
    accounts = AccountService(review.db, password_cost=TEST_PASSWORD_COST)
    a, b = accounts.add("a", "pw-a-123456"), accounts.add("b", "pw-b-123456")
    assert WorklistService(review.db).assign(a) == 4 and WorklistService(review.db).assign(a) == 0
    study = WorklistService(review.db).items(a)[0].study_id
    WorklistService(review.db).assign(b, [study])
    review.save(a, study, "findings", "reader A text", None)
    assert review.current(b, study) == {}
    review.save(b, study, "findings", "reader B text", None)
    assert review.current(a, study)["findings"].text == "reader A text"
    assert review.current(b, study)["findings"].number == 1
    with pytest.raises(ReviewError, match="not on this reader's worklist"):
        review.save(b, WorklistService(review.db).items(a)[1].study_id, "findings", "x", None)


def test_every_save_is_a_revision_and_stale_saves_conflict(review, db):
    r = AccountService(review.db).local_reader()
    WorklistService(review.db).assign(r)
    study = WorklistService(review.db).items(r)[0].study_id
    first = review.save(r, study, "findings", "Lungs clear.", None, autosave=True)
    second = review.save(r, study, "findings", "Lungs clear. No effusion.", first.number)
    assert (first.number, second.number, first.autosave) == (1, 2, True)
    assert review.save(r, study, "findings", "Lungs clear. No effusion.", 2).number == 2
    # a second tab still editing from revision 1
    with pytest.raises(EditConflict) as conflict:
        review.save(r, study, "findings", "Tab two text", first.number)
    assert conflict.value.current.text == "Lungs clear. No effusion."
    assert [h.text for h in review.history(r, study, "findings")] == [
        "Lungs clear.", "Lungs clear. No effusion."]
    assert WorklistService(review.db).items(r)[0].status == "in_review"
    with db.read() as s:
        assert len(s.scalars(select(Revision)).all()) == 2


def test_concurrent_saves_from_the_same_base_never_both_land(review):
    r = AccountService(review.db).local_reader()
    WorklistService(review.db).assign(r)
    study = WorklistService(review.db).items(r)[0].study_id
    outcomes: list[str] = []

    def save(text: str) -> None:
        try:
            review.save(r, study, "impression", text, None)
            outcomes.append("saved")
        except EditConflict:
            outcomes.append("conflict")

    threads = [threading.Thread(target=save, args=(f"text {i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["conflict", "conflict", "conflict", "saved"]
    assert len(review.history(r, study, "impression")) == 1


def test_ratings_with_the_rexval_taxonomy(review, db):
    r = AccountService(review.db).local_reader()
    WorklistService(review.db).assign(r)
    study = WorklistService(review.db).items(r)[0].study_id
    rating = review.rate(r, study, likert=3, acceptable=False, comment="  misses effusion ",
                         errors={"missing_finding": {"significant": 1, "insignificant": 2}},
                         preset="retrieval")
    assert rating.errors["missing_finding"] == {"significant": 1, "insignificant": 2}
    assert set(rating.errors) == set(REXVAL_CATEGORIES) and rating.comment == "misses effusion"
    assert WorklistService(review.db).items(r)[0].status == "done"
    assert review.rate(r, study, likert=4, acceptable=True).number == 2  # append-only
    assert review.latest_rating(r, study).likert == 4
    with db.read() as s:
        assert len(s.scalars(select(Rating)).all()) == 2
    with pytest.raises(ReviewError, match="1-5"):
        review.rate(r, study, likert=6, acceptable=None)
    with pytest.raises(ReviewError, match="overall quality score"):
        review.rate(r, study, likert=None, acceptable=True)
    with pytest.raises(ReviewError, match="unknown ReXVal category"):
        review.rate(r, study, likert=3, acceptable=None, errors={"typo": {"significant": 1}})
    with pytest.raises(ReviewError, match="negative"):
        review.rate(r, study, likert=3, acceptable=None,
                    errors={"wrong_severity": {"significant": -1}})


def test_a_rating_keeps_the_suggested_counts_beside_the_confirmed_ones(review, db):
    """Issue #22: what was suggested from the edit is stored with the reader's own counts (every
    category, 0 included), readable back; no suggestion stays NULL, a bad one stores nothing."""
    r = AccountService(review.db).local_reader()
    WorklistService(review.db).assign(r)
    study = WorklistService(review.db).items(r)[0].study_id
    plain = review.rate(r, study, likert=4, acceptable=False)
    assert plain.suggested is None
    rated = review.rate(r, study, likert=3, acceptable=False,
                        errors={"false_finding": {"significant": 0, "insignificant": 1}},
                        suggested={"false_finding": 2, "omitted_comparison": 1})
    assert rated.suggested == {**dict.fromkeys(REXVAL_CATEGORIES, 0), "false_finding": 2,
                               "omitted_comparison": 1}
    assert review.latest_rating(r, study).suggested == rated.suggested
    with db.read() as s:
        stored = [x.suggested for x in s.scalars(select(Rating).order_by(Rating.number))]
    assert stored == [None, rated.suggested]
    for bad in ({"typo": 1}, {"false_finding": -1}, {"false_finding": 1.5}):
        with pytest.raises(ReviewError, match="suggest"):
            review.rate(r, study, likert=3, acceptable=None, suggested=bad)
    with db.read() as s:
        assert len(s.scalars(select(Rating)).all()) == 2


def test_active_time_is_capped_per_heartbeat(review):
    r = AccountService(review.db).local_reader()
    WorklistService(review.db).assign(r)
    study = WorklistService(review.db).items(r)[0].study_id
    review.heartbeat(r, study, 12.5, at=1_000.0)
    total = review.heartbeat(r, study, 8 * 3600, at=1_000.0 + 8 * 3600)  # open overnight
    assert total == pytest.approx(12.5 + MAX_ACTIVE_GAP_S)


@pytest.mark.both_databases
def test_three_tabs_on_one_study_count_its_time_once(review):
    """Each open tab beats every 4 s; their beats overlap in wall-clock time, and a reader
    can only spend a minute once (seen in a trial: three tabs credited ~3x the time)."""
    r = AccountService(review.db).local_reader()
    WorklistService(review.db).assign(r)
    study = WorklistService(review.db).items(r)[0].study_id
    beats = sorted((1_000.0 + 4 * i + offset, 4.0) for i in range(1, 16)
                   for offset in (0.0, 1.3, 2.9))  # three tabs, 60 s
    for at, gap in beats:
        total = review.heartbeat(r, study, gap, at=at)
    assert total == pytest.approx(beats[-1][0] - 1_000.0)  # 62.9 s of wall clock, not ~180
    # a late beat (a slow request) covering time already counted adds nothing
    assert review.heartbeat(r, study, 4.0, at=1_030.0) == pytest.approx(total)


def test_active_time_is_per_reader_and_study(review):
    """The dedupe is per (reader, study): another study, or another reader on the same
    study, counts its own time over the same minutes."""
    r = AccountService(review.db).local_reader()
    bob = AccountService(review.db, password_cost=TEST_PASSWORD_COST).add(
        "bob", "a long enough password")
    WorklistService(review.db).assign(r)
    WorklistService(review.db).assign(bob)
    first, second = (w.study_id for w in WorklistService(review.db).items(r)[:2])
    assert review.heartbeat(r, first, 10.0, at=2_000.0) == pytest.approx(10.0)
    assert review.heartbeat(r, second, 10.0, at=2_000.0) == pytest.approx(10.0)
    assert review.heartbeat(bob, first, 10.0, at=2_000.0) == pytest.approx(10.0)


def test_a_reload_resumes_where_the_reader_worked_not_where_a_tab_beats(review):
    """Found in a new-user trial: a re-login opened the study another open tab was merely
    showing (its heartbeats counted as work), not the one just edited."""
    r = AccountService(review.db).local_reader()
    WorklistService(review.db).assign(r)
    a, b = (w.study_id for w in WorklistService(review.db).items(r)[:2])
    review.save(r, b, "findings", "Worked on first.", None)
    review.save(r, a, "findings", "Worked on last.", None)
    assert WorklistService(review.db).resume(r) == a
    review.heartbeat(r, b, 4.0)  # a tab shows b meanwhile
    assert WorklistService(review.db).resume(r) == a
    # a later save of a study already in review counts too (not only a status change)
    review.save(r, b, "findings", "Worked on again.", 1)
    assert WorklistService(review.db).resume(r) == b


def test_next_and_previous_unfinished_study(review):
    r = AccountService(review.db).local_reader()
    WorklistService(review.db).assign(r)
    ids = [i.study_id for i in WorklistService(review.db).items(r)]
    review.rate(r, ids[1], likert=5, acceptable=True)
    assert WorklistService(review.db).next_unfinished(r) == ids[0]
    assert WorklistService(review.db).next_unfinished(r, ids[0]) == ids[2]  # done: skipped
    assert WorklistService(review.db).next_unfinished(r, ids[2], step=-1) == ids[0]
    assert WorklistService(review.db).next_unfinished(r, ids[3]) is None


def test_word_diff_and_word_error_rate():
    pieces = word_diff("small left pleural effusion", "small right pleural effusion noted")
    assert [(p.op, p.text) for p in pieces] == [
        ("equal", "small"), ("delete", "left"), ("insert", "right"),
        ("equal", "pleural effusion"), ("insert", "noted")]
    assert word_error_rate("a b c d", "a b c d") == 0.0
    # one substitution (left -> right) and one insertion over four draft words: WER 0.5, not
    # 0.75 (a substitution is one edit, not a delete plus an insert)
    assert word_error_rate("small left pleural effusion",
                           "small right pleural effusion noted") == 0.5
    assert word_error_rate("no acute disease", "") == 1.0  # everything deleted
    assert word_error_rate("a b", "b a") == 1.0  # two substitutions, no transpositions
    assert word_error_rate("", "new text") == 2.0  # an empty draft counts as one word
    assert word_error_rate("Heart  normal.\n", "Heart normal.") == 0.0  # whitespace only


def _drafted(review, db, settings):
    from rrg_review.app.drafting.service import DraftingService

    r = AccountService(review.db).local_reader()
    WorklistService(review.db).assign(r)
    study = WorklistService(review.db).items(r)[0].study_id
    drafting = DraftingService(db, settings)
    drafting.draft([study], "retrieval")
    drafts = {s: (d.id, d.text) for s, d in drafting.latest(study, "retrieval").items()}
    return r, study, drafts


def test_accept_draft_records_acceptable_and_invents_no_likert(review, db, settings):
    r, study, drafts = _drafted(review, db, settings)
    rating = review.accept_draft(r, study, drafts, {"findings": None, "impression": None},
                                 preset="retrieval")
    assert rating.acceptable and rating.likert is None  # the score is the reader's to give
    current = review.current(r, study)
    assert current["findings"].text == drafts["findings"][1]
    assert current["findings"].draft_id == drafts["findings"][0]
    assert review.status(r, study) == "in_review"  # not done without a score
    timing = review.timing(r, study)
    assert timing["findings"].submitted_at is not None
    review.rate(r, study, likert=4, acceptable=True)
    assert review.status(r, study) == "done"


def test_accept_draft_is_one_transaction(review, db, settings):
    """A stale base for the impression refuses the whole accept: no findings revision and no
    rating are left behind (as a kill midway would leave nothing either)."""
    r, study, drafts = _drafted(review, db, settings)
    review.save(r, study, "impression", "saved in another tab", None)
    with pytest.raises(EditConflict):
        review.accept_draft(r, study, drafts, {"findings": None, "impression": None})
    assert review.history(r, study, "findings") == []
    assert review.latest_rating(r, study) is None


@pytest.mark.parametrize(("likert", "errors", "message"), [
    (None, {}, "choose an overall quality score"),
    ("", {}, "choose an overall quality score"),
    (0, {}, "1-5"), (2.5, {}, "1-5"), (float("nan"), {}, "1-5"), (True, {}, "1-5"),
    (3, {"false_finding": {"significant": 1.5}}, "whole number"),
    (3, {"false_finding": {"significant": float("nan")}}, "whole number"),
    (3, {"false_finding": {"insignificant": "two"}}, "whole number"),
    (3, {"false_finding": {"insignificant": -2}}, "negative"),
])
def test_an_empty_or_malformed_rating_is_refused(review, likert, errors, message):
    r = AccountService(review.db).local_reader()
    WorklistService(review.db).assign(r)
    study = WorklistService(review.db).items(r)[0].study_id
    with pytest.raises(ReviewError, match=message):
        review.rate(r, study, likert=likert, acceptable=None, errors=errors)
    assert review.latest_rating(r, study) is None and review.status(r, study) == "new"
    ok = review.rate(r, study, likert=3.0, acceptable=None,
                     errors={"false_finding": {"significant": 2.0}})
    assert ok.likert == 3 and ok.errors["false_finding"]["significant"] == 2


def test_every_bad_count_is_named_at_once_by_the_label_the_reader_sees(review):
    """Found in a new-user trial: only the first bad box was named, by its internal key
    ("false_finding significant"), and the reader fixed one box at a time."""
    r = AccountService(review.db).local_reader()
    WorklistService(review.db).assign(r)
    study = WorklistService(review.db).items(r)[0].study_id
    with pytest.raises(ReviewError) as refused:
        review.rate(r, study, likert=3, acceptable=None,
                    errors={"false_finding": {"significant": 1.5},
                            "wrong_severity": {"insignificant": -2}})
    message = str(refused.value)
    assert "(1) false report of a finding, clinically significant" in message
    assert "1.5" in message
    assert "(4) wrong severity, insignificant: a count cannot be negative" in message
    assert "false_finding" not in message and "wrong_severity" not in message
    assert review.latest_rating(r, study) is None


def test_status_changes_only_on_save_or_rate(review):
    r = AccountService(review.db).local_reader()
    WorklistService(review.db).assign(r)
    study = WorklistService(review.db).items(r)[0].study_id
    review.heartbeat(r, study, 30)  # open and active for a while: time, not work
    review.heartbeat(r, study, float("nan"))
    assert review.status(r, study) == "new"
    assert WorklistService(review.db).items(r)[0].active_seconds == pytest.approx(30)
    review.save(r, study, "findings", "Lungs clear.", None, autosave=True)
    assert review.status(r, study) == "in_review"


def test_keystroke_timing_and_draft_on_screen(review):
    from datetime import UTC, datetime, timedelta

    from rrg_review.app.review.service import Keystrokes

    r = AccountService(review.db).local_reader()
    WorklistService(review.db).assign(r)
    study = WorklistService(review.db).items(r)[0].study_id
    t0 = datetime(2026, 1, 1, 8, 0, tzinfo=UTC)
    review.save(r, study, "findings", "a", None, autosave=True,
                timing=Keystrokes(t0, t0 + timedelta(seconds=5), draft_on_screen=True))
    t = review.timing(r, study)["findings"]
    assert t.draft_on_screen is True and t.submitted_at is None
    assert t.first_keystroke_at.replace(tzinfo=UTC) == t0
    review.save(r, study, "findings", "ab", 1,
                timing=Keystrokes(t0 + timedelta(seconds=60), t0 + timedelta(seconds=70),
                                  draft_on_screen=False))
    t = review.timing(r, study)["findings"]
    # the first keystroke and what was on screen then stay; the last one and submit move on
    assert t.first_keystroke_at.replace(tzinfo=UTC) == t0 and t.draft_on_screen is True
    assert t.last_keystroke_at.replace(tzinfo=UTC) == t0 + timedelta(seconds=70)
    assert t.submitted_at is not None
    assert "impression" not in review.timing(r, study)


def test_readers_command(settings, db, capsys, monkeypatch):
    import io

    from rrg_review.app.cli import main as cli

    seed_demo(db, settings)
    monkeypatch.setattr("sys.stdin", io.StringIO("long-enough-pw\n"))
    assert cli(["readers", "add", "dr.kim", "--password-stdin", "--db", settings.db_url]) == 0
    assert "dr.kim added (4 studies" in capsys.readouterr().out
    monkeypatch.setattr("sys.stdin", io.StringIO("short\n"))
    assert cli(["readers", "add", "dr.x", "--password-stdin", "--db", settings.db_url]) == 2
    assert cli(["readers", "list", "--db", settings.db_url]) == 0
    assert "dr.kim\treader\tlogin" in capsys.readouterr().out
    assert AccountService(db).authenticate("dr.kim", "long-enough-pw").account is not None


def test_metrics_panel_for_an_open_study(db, monkeypatch, tmp_path):
    import huggingface_hub.constants as constants

    from rrg_review.app.evaluation.study_metrics import StudyMetrics

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    panel = StudyMetrics(db).panel({
        "findings": {"draft": "lungs are clear", "final": "lungs are clear . small effusion",
                     "reference": "small left effusion"},
        "impression": {"draft": "normal", "final": "normal", "reference": None}})
    rows = {(r.section, r.comparison): r.values for r in panel.rows}
    assert set(rows) == {("findings", "draft vs reference"), ("findings", "final vs reference"),
                         ("findings", "draft vs final"), ("impression", "draft vs final")}
    assert rows[("impression", "draft vs final")]["rougeL"] == 1.0
    assert rows[("findings", "final vs reference")]["rougeL"] > rows[
        ("findings", "draft vs reference")]["rougeL"]
    assert "bertscore" in panel.unavailable and "no reference impression" in panel.notes[0]
    # the reader reads one line of it; the keys, reasons and fetch command are folded under it
    shown = notes_markdown(panel.notes, [f"unavailable: {k} — {w}"
                                         for k, w in panel.unavailable.items()])
    line, folded = shown.split("<details>")
    assert "no reference impression" in line and "bertscore" not in line
    assert "not computed on this machine" in folded and "unavailable: bertscore" in folded
