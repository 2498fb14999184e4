"""A reader-study reading on the page's Desk (app/review/desk.py, reading mode), without a
browser, on a real copy of the demo studies (SQLite and PostgreSQL): what the page is given is
blinded (no preset, model, provenance, reference report or metrics), saves, heartbeats,
keystroke counts and ratings go to the reading (not to the plain review of the case), and the
hostile cases: another reader's reading, a second tab of the same reader, signing twice, saving
after signing."""

from __future__ import annotations

import html
import json
import re
from datetime import timedelta

import pytest
from sqlalchemy import select, update

from rrg_review.app.accounts.service import AccountService
from rrg_review.app.deps import sync_json
from rrg_review.app.reader_study.panel import StudyLists
from rrg_review.app.reader_study.reading import ReadingDesk
from rrg_review.app.reader_study.service import ReaderStudyError
from rrg_review.app.review.desk import Client, Desk, Session, has_draft_actions
from rrg_review.app.review.service import ReviewService
from rrg_review.app.viewer.service import StudyViewer
from rrg_review.app.worklist.panel import WorklistPanelLogic
from rrg_review.db.models import (
    AuditEvent,
    Draft,
    Rating,
    ReaderStudy,
    Reading,
    ReadingSection,
    Revision,
    Study,
    WorklistItem,
)
from tests.test_reader_study_service import T0, _design, _service

pytestmark = pytest.mark.both_databases  # SQLite and a real PostgreSQL server

MODEL_ID = "secret-org/rrg-model-7b"


@pytest.fixture
def desk(demo_db, settings, tmp_path):
    """The Desk with readings, a 2-reader crossover of the demo's four studies with images
    (unassisted with a template, and a model's drafts), and ann's first reading of each arm."""
    db = demo_db
    accounts = AccountService(db)
    for name in ("ann", "bob"):
        accounts.add(name, None)
    with db.write() as s:
        cases = list(s.scalars(select(Study).where(Study.image_count > 0)))
        for c in cases:
            for section in ("findings", "impression"):
                s.add(Draft(study_id=c.id, section=section, preset="rrg24-baseline",
                            text=f"Model {section} of {c.study_key}.", model_id=MODEL_ID,
                            generation={"neighbour_study_id": 1}))
    studies = _service(db)
    studies.create(_design(tmp_path, cases=[c.study_key for c in cases],
                           arms=[{"arm": "unassisted", "template": "Template."},
                                 "draft:rrg24-baseline"]))
    viewer = StudyViewer(db, settings.blobs)
    review = ReviewService(db, accounts.audit)
    desk = Desk(viewer, review, accounts=accounts, readings=ReadingDesk(studies, accounts.audit))
    first = {}
    for r in studies.worklist("s1", "ann", T0).readings:
        first.setdefault(r.arm_code, r)
    return desk, first


def tab(desk, login):
    session = Session()
    reader = desk.bind(session, login)
    return session, reader


def keys(study, seq=1, pressed=3, edits=2, **sections):
    """What page.js reports: first and last keystroke, keystroke events, edit operations."""
    return Client(study, {s: (1.7e12, 1.7e12 + 500) for s in sections}, seq,
                  counts={s: (pressed, edits) for s in sections})


def test_a_reading_is_blinded_and_its_work_goes_to_the_reading(desk):
    d, first = desk
    db = d.review.db
    texts_of = {}
    for code, item in first.items():
        session, reader = tab(d, "ann")
        opened = d.open_reading(session, reader, item.reading_id, now=0.0)
        assert opened.view.reference is None and opened.drafts == {}
        # named by the number of the study worklist's "#" (and of ?reading=N), with its place
        # in the session, counted from 1 as allocated (the first said "reading 2")
        assert item.position >= 1 and (f": reading {item.reading_id} ({item.position} of "
                                       f"your session {item.session}). ") in opened.status
        assert session.label == f"reading {item.reading_id}"
        shown = repr(opened) + opened.model_note + sync_json("ann", session)
        for secret in ("rrg24", MODEL_ID, "neighbour", "unassisted", "draft:", "retrieval"):
            assert secret not in shown
        assert f"arm {code}" in opened.model_note
        assert has_draft_actions(session)  # a draft or a template: Revert and Accept apply
        assert json.loads(sync_json("ann", session))["drafts"] in ({}, {"findings": 0},
                                                                    {"findings": 0,
                                                                     "impression": 0})
        texts_of[code] = opened.texts
        assert d.metrics_view(session).notes == ["Metrics are not shown in a reader study "
                                                 "reading."]
        assert "signing it unchanged" in d.accept(session, opened.texts,
                                                  Client(session.study)).message
    assert sorted(t["findings"].split(" of ")[0] for t in texts_of.values()) == \
        ["Model findings", "Template."]
    # save twice: the counts the page reports are totals since the study was shown
    item = first["A"]
    session, reader = tab(d, "ann")
    d.open_reading(session, reader, item.reading_id, now=0.0)
    case = session.study
    saved = d.save(session, {"findings": "Mine.", "impression": ""}, keys(case, findings=1))
    assert saved.wrote, saved.message
    saved = d.save(session, {"findings": "Mine, more.", "impression": ""},
                   keys(case, seq=2, pressed=10, edits=6, findings=1))
    assert saved.wrote, saved.message
    d.tick(session, {"findings": "Mine, more.", "impression": ""}, Client(case, seq=2),
           now=20.0)
    ok, message = d.rate(session, 4, False, {}, "fine", None)
    assert ok, message
    with db.read() as s:
        row = s.get_one(ReadingSection, (item.reading_id, "findings"))
        assert (row.keystrokes, row.edits) == (10, 6)  # 3 + 7 and 2 + 4: never twice
        assert row.first_keystroke_at is not None
        assert s.get_one(Reading, item.reading_id).active_seconds == pytest.approx(20.0)
        assert {r.reading_id for r in s.scalars(select(Revision).where(
            Revision.study_id == case))} == {item.reading_id}
        assert s.scalar(select(Rating.reading_id).where(Rating.study_id == case)) == \
            item.reading_id
    assert d.review.current(reader, case) == {}  # the plain review of the case: untouched


def test_other_readers_second_tabs_signing_twice_and_saving_after_signing(desk):
    d, first = desk
    item = first["A"]
    bob, bob_id = tab(d, "bob")
    with pytest.raises(ReaderStudyError, match="is not one of the readings of 'bob'"):
        d.open_reading(bob, bob_id, item.reading_id, now=0.0)
    assert bob.study is None and bob.reading is None  # nothing of it on bob's tab
    one, reader = tab(d, "ann")
    two, _ = tab(d, "ann")
    d.open_reading(one, reader, item.reading_id, now=0.0)
    d.open_reading(two, reader, item.reading_id, now=0.0)
    case = one.study
    assert d.save(one, {"findings": "Tab one.", "impression": ""}, keys(case, findings=1)).wrote
    clash = d.save(two, {"findings": "Tab two.", "impression": ""}, keys(case, findings=1))
    # (the quote of the saved text marks its words unlike the tab's: "Tab <ins>one.</ins>")
    assert "findings" in clash.conflicts and "Tab one." in re.sub("<[^>]+>", "", clash.message)
    kept = d.keep_mine(two, {"findings": "Tab two.", "impression": ""},
                       keys(case, seq=2, findings=1))
    assert kept.wrote, kept.message
    # tab one, refused in turn, takes tab two's text: its own words stay in the reading's
    # history, under the newer text stored again, and the plain review of the case is untouched
    clash = d.save(one, {"findings": "Tab one again.", "impression": ""},
                   keys(case, seq=2, findings=1))
    assert "findings" in clash.conflicts
    shown, taken = d.take_theirs(one, {"findings": "Tab one again.", "impression": ""})
    assert shown["findings"] == "Tab two." and taken.wrote and not taken.conflicts
    with d.review.db.read() as s:
        rows = list(s.execute(select(Revision.number, Revision.text).where(
            Revision.reading_id == item.reading_id).order_by(Revision.number)))
        audited = list(s.scalars(select(AuditEvent.target).where(
            AuditEvent.action == "take_theirs")))
    assert [text for _, text in rows[-3:]] == ["Tab two.", "Tab one again.", "Tab two."]
    assert audited == [f"reading {item.reading_id} findings revision {rows[-1][0]} "
                       f"(yours kept as {rows[-2][0]})"]
    assert d.review.current(reader, case) == {}
    # a third tab, open before the reading is signed, that never saves after it
    early, _ = tab(d, "ann")
    d.open_reading(early, reader, item.reading_id, now=0.0)
    # and a fourth that only looks: its heartbeat finds the signing by itself (it looked
    # editable until the reader's next save was refused)
    looking, _ = tab(d, "ann")
    d.open_reading(looking, reader, item.reading_id, now=0.0)
    assert d.check_signed(looking, Client(case)) is None
    with pytest.raises(ReaderStudyError, match="findings: revision 99 does not exist"):
        d.readings.set_aside(item.reading_id, "ann", {"findings": ("x", 99)})
    with pytest.raises(ReaderStudyError, match="press Sign reading first"):
        d.sign(one)
    d.sign_preview(one)
    # tab two saved after tab one's preview: what tab one confirmed is not what is stored
    d.save(two, {"findings": "Tab two again.", "impression": ""}, keys(case, seq=3, findings=1))
    with pytest.raises(ReaderStudyError, match="changed since you were asked to confirm"):
        d.sign(one)
    preview = d.sign_preview(one)
    assert preview.report["findings"] == "Tab two again."
    signed = d.sign(one)
    assert signed.signed_at == T0 and one.signed
    assert d.check_signed(one, Client(case)) is None  # its own signing: nothing to tell
    assert d.check_signed(looking, Client(case + 1)) is None  # (the tab is on its way away)
    seen = d.check_signed(looking, Client(case))
    assert seen is not None and seen.closed and seen.ok and not seen.wrote
    assert seen.message == (f"Reading {item.reading_id} was signed in another tab or window; "
                            "it is read-only now.")
    assert looking.signed and json.loads(sync_json("ann", looking))["signed"]
    assert d.check_signed(looking, Client(case)) is None  # told once
    # tab two, still editable, saves after the signing: refused, and read-only from now on,
    # which its sync tells its page (drawn again as signed, static/page.js): it stayed
    # editable, every save refused (a new-user trial)
    assert not two.signed and not json.loads(sync_json("ann", two))["signed"]
    later = d.save(two, {"findings": "After signing.", "impression": ""},
                   keys(case, seq=4, findings=1))
    assert later.closed and later.ok and not later.wrote and not later.conflicts
    assert later.message == (f"⚠ Not saved: {two.label} was signed in another tab or window; "
                             "it is read-only now.")
    assert two.signed and two.sign_token is None and json.loads(sync_json("ann", two))["signed"]
    again = d.save(two, {"findings": "After signing, again.", "impression": ""},
                   keys(case, seq=5, findings=1))
    assert again.closed and again.message == f"⚠ Not saved: {two.label} is signed; it is " \
                                             "read-only now."
    # the third tab learns it at Sign reading; signing twice, from any tab, and rating after
    # signing: refused, one sentence
    assert not early.signed
    for session in (one, two, early):
        with pytest.raises(ReaderStudyError, match="is signed"):
            d.sign_preview(session)
        assert session.signed and session.sign_token is None
    ok, message = d.rate(two, 3, False, {}, None, None)
    assert not ok and "is signed" in message
    with d.review.db.read() as s:
        texts = list(s.scalars(select(Revision.text).where(
            Revision.reading_id == item.reading_id).order_by(Revision.number)))
    assert texts[-1] == "Tab two again." and not [t for t in texts if "After" in t]
    # a signed reading opens read-only
    three, _ = tab(d, "ann")
    opened = d.open_reading(three, reader, item.reading_id, now=0.0)
    assert three.signed and "read-only" in opened.status


def test_the_prior_beside_a_reading_comes_without_its_report(desk):
    from rrg_review.app.viewer.panel import film_html

    d, _ = desk
    viewer = d.viewer
    views = [viewer.open(i) for i in d.readings.studies.case_keys(
        set(range(1, 20))) if viewer.open(i).prior_ids]
    assert views, "the demo has a study with a prior"
    view = views[0]
    prior = viewer.open(view.prior_ids[0])
    assert prior.reference is not None and prior.reference.findings
    assert prior.reference.findings in film_html(viewer, view, prior)  # a plain review
    blinded = film_html(viewer, view, prior, prior_report=False)
    assert prior.reference.findings not in blinded and "not shown" in blinded


# -- plain review beside reader studies: only the cases of an unfinished blinded study are held


@pytest.fixture
def beside(demo_db, settings, tmp_path):
    """The demo's four cases with images (c0..c3 in key order) in three studies: 'blind'
    (c0, c1; ann and bob), 'blind2' (c3; ann and cy) and 'open' (c2, not blinded; ann and
    bob); ann in three studies, and an admin who reads in none."""
    db = demo_db
    accounts = AccountService(db)
    for name in ("ann", "bob", "cy"):
        accounts.add(name, None)
    accounts.add("root", None, role="admin")
    with db.write() as s:
        cases = list(s.scalars(select(Study).where(Study.image_count > 0)
                               .order_by(Study.sort_key)))
        for c in cases:
            for section in ("findings", "impression"):
                s.add(Draft(study_id=c.id, section=section, preset="rrg24-baseline",
                            text=f"Model {section} of {c.study_key}.", model_id=MODEL_ID))
    assert len(cases) == 4
    keys = [c.study_key for c in cases]
    studies = _service(db)
    arms = [{"arm": "unassisted", "template": "Template."}, "draft:rrg24-baseline"]
    for name, picked, readers, blinded in (("blind", keys[:2], ["ann", "bob"], True),
                                           ("blind2", keys[3:], ["ann", "cy"], True),
                                           ("open", keys[2:3], ["ann", "bob"], False)):
        studies.create(_design(tmp_path, name=name, cases=picked, readers=readers, arms=arms,
                               blinded=blinded))
    desk = Desk(StudyViewer(db, settings.blobs), ReviewService(db, accounts.audit),
                accounts=accounts, readings=ReadingDesk(studies, accounts.audit))
    ids = {name: desk.bind(Session(), name) for name in ("ann", "bob", "cy", "root")}
    for reader in ids.values():
        desk.prepare(reader)
    return desk, studies, ids, [c.id for c in cases], keys


def _sign(db, study, reader, session):
    with db.write() as s:
        s.execute(update(Reading).where(
            Reading.reader_study_id == select(ReaderStudy.id).where(
                ReaderStudy.name == study).scalar_subquery(),
            Reading.reader_id == reader, Reading.session == session).values(signed_at=T0))


def test_plain_review_refuses_only_the_cases_of_an_unfinished_blinded_study(beside):
    d, studies, ids, c, keys = beside
    ann = StudyLists(studies).view("ann", ids["ann"])
    assert ann.blinded.ids == {c[0], c[1], c[3]}
    with pytest.raises(ReaderStudyError, match=f"{keys[0]} is a case of your blinded reader "
                                               "study 'blind': read it there"):
        ann.refuse_plain(c[0])
    with pytest.raises(ReaderStudyError, match="study 'blind2'"):
        ann.refuse_plain(c[3])
    ann.refuse_plain(c[2])  # a case of a study that is not blinded: plain review as before
    lines = ann.head.split("**Reader study")
    assert "its 2 cases are left off your worklist" in next(x for x in lines if "`blind`" in x)
    assert "its case is left off" in next(x for x in lines if "`blind2`" in x)
    assert "left off" not in next(x for x in lines if "`open`" in x)
    assert StudyLists(studies).view("bob", ids["bob"]).blinded.ids == {c[0], c[1]}
    root = StudyLists(studies).view("root", ids["root"])  # the admin reads in no study
    assert (root.head, root.blinded.ids) == ("", frozenset())
    for case in c:
        root.refuse_plain(case)
    # ann signs session 1 of 'blind': during the washout its cases are still held
    db = d.review.db
    _sign(db, "blind", ids["ann"], 1)
    waiting = StudyLists(_service(db, T0 + timedelta(days=1))).view("ann", ids["ann"])
    assert "session 2 opens" in waiting.head and "its 2 cases are left off" in waiting.head
    assert waiting.blinded.ids == {c[0], c[1], c[3]}
    # every reading of 'blind' signed: its cases open in plain review again (ann's only)
    _sign(db, "blind", ids["ann"], 2)
    done = StudyLists(_service(db, T0 + timedelta(days=20))).view("ann", ids["ann"])
    assert done.blinded.ids == {c[3]} and "its 2 cases" not in done.head
    done.refuse_plain(c[0])
    assert StudyLists(studies).view("bob", ids["bob"]).blinded.ids == {c[0], c[1]}


def test_the_plain_worklist_leaves_them_off_and_next_previous_pass_over_them(beside):
    d, studies, ids, c, keys = beside
    ann, bob = ids["ann"], ids["bob"]
    with d.review.db.write() as s:  # ann worked on c0 in plain review before the study
        s.execute(update(WorklistItem).where(WorklistItem.reader_id == ann,
                                             WorklistItem.study_id == c[0])
                  .values(status="in_review"))
    held = studies.blinded_cases(ann).ids
    # page load: neither the study last worked on nor one with unsaved text in the browser
    assert d.start(ann, "ann", (("ann", c[0]),), held) == c[2]
    assert d.start(ann, "ann", (("ann", c[2]),), held) == c[2]
    logic = WorklistPanelLogic(d.worklists, page_size=10,
                               left_off=lambda r: studies.blinded_cases(r).ids)
    view = logic.view(ann)
    assert [row[0] for row in view.rows] == [c[2]] and view.label.startswith("1-1 of 1 ")
    # the progress line counts the list shown, the held cases apart ("1 / 4 done · 3 to go"
    # above an empty list misled a trial)
    assert view.progress == ("**0 / 1 done** · 1 to go (0 in review) · 3 in your blinded "
                             "reader study (its study worklist)"), view.progress
    in_review = logic.view(ann, status="in_review")  # c0 is in review, but held
    assert (in_review.rows, in_review.label) == ([], "No study matches.")
    # a search for a held case says why it finds nothing (a trial took it for a wrong key)
    held_key = logic.view(ann, search=keys[0])
    assert held_key.rows == [] and held_key.label == (
        "No study on this list matches: 1 matching study is a case of your blinded reader "
        "study (read in its study worklist above)."), held_key.label
    assert logic.view(ann, search="no-such-key").label == "No study matches."
    assert logic.target(ann, c[2], 1) is None and logic.target(ann, c[2], -1) is None
    assert logic.target(ann, None, 1) == logic.target(ann, c[0], -1) == c[2]
    assert logic.page_showing(ann, c[0]) is None
    assert [row[0] for row in logic.view(bob).rows] == [c[2], c[3]]
    assert logic.target(bob, c[2], 1) == c[3] and logic.target(bob, c[3], 1) == c[2]
    assert [row[0] for row in logic.view(ids["root"]).rows] == c  # the admin: every study
    # once ann has signed 'blind' its cases are back on her list, in their place
    _sign(d.review.db, "blind", ann, 1)
    _sign(d.review.db, "blind", ann, 2)
    assert [row[0] for row in logic.view(ann).rows] == c[:3]
    assert logic.target(ann, c[0], 1) == c[1]


def test_a_tab_open_on_a_case_when_its_blinded_study_is_created_stores_no_more(beside,
                                                                             tmp_path):
    d, studies, _, c, keys = beside
    AccountService(d.review.db).add("dee", None)
    session, dee = tab(d, "dee")
    d.prepare(dee)
    opened = d.open(session, dee, c[2], now=0.0)
    assert d.save(session, {"findings": "Before.", "impression": ""}, Client(c[2], seq=1)).wrote
    studies.create(_design(tmp_path, name="late", cases=[keys[2]], readers=["dee", "bob"],
                           arms=[{"arm": "unassisted", "template": "Template."},
                                 "draft:rrg24-baseline"]))
    texts = {"findings": "After.", "impression": ""}
    saved = d.save(session, texts, Client(c[2], seq=2))
    assert not saved.wrote and saved.ok  # refused, and Next/Previous still leave the study
    assert html.unescape(saved.message).startswith(
        f"⚠ Not saved: {keys[2]} is a case of your blinded reader study 'late'")
    assert f"Not rated: {keys[2]}" in d.rate(session, 4, False, {}, None)[1]
    assert f"Not accepted: {keys[2]}" in d.accept(session, opened.texts, Client(c[2], seq=3),
                                            confirmed=True).message
    assert not d.leave(session, texts, Client(c[2], seq=4), now=5.0).wrote
    with d.review.db.read() as s:
        assert [r.text for r in s.scalars(select(Revision).where(
            Revision.reader_id == dee, Revision.study_id == c[2]))] == ["Before."]
        assert s.scalar(select(Rating.id).where(Rating.reader_id == dee)) is None
    # another reader's plain review of the case is not held ('open' is not blinded for ann)
    other, ann = tab(d, "ann")
    d.open(other, ann, c[2], now=0.0)
    assert d.save(other, {"findings": "Ann's.", "impression": ""}, Client(c[2], seq=1)).wrote


def test_a_held_case_is_never_the_prior_beside_a_study_in_plain_review(demo_db, settings,
                                                                         tmp_path):
    """A new-user trial opened, in plain review, the later study of a patient whose earlier
    study was a case of the reader's unfinished blinded study: Show prior beside showed that
    case's film and its reference report."""
    from rrg_review.app.viewer.panel import film_html

    db = demo_db
    accounts = AccountService(db)
    for name in ("dee", "eve"):
        accounts.add(name, None)
    viewer = StudyViewer(db, settings.blobs)
    with db.read() as s:
        imaged = list(s.scalars(select(Study.id).where(Study.image_count > 0)))
    later = next(v for v in map(viewer.open, imaged) if v.prior_ids)
    case = viewer.open(later.prior_ids[0])
    studies = _service(db)
    studies.create(_design(tmp_path, name="held", cases=[case.study_key], readers=["dee"],
                           arms=[{"arm": "unassisted", "template": "Template."}],
                           design="parallel", sessions=1, blinded=True))
    desk = Desk(viewer, ReviewService(db, accounts.audit), accounts=accounts,
                readings=ReadingDesk(studies, accounts.audit))
    session = Session()
    dee = desk.bind(session, "dee")
    desk.prepare(dee)
    held = studies.blinded_cases(dee).ids
    assert held == {case.study_id}
    opened = desk.open(session, dee, later.study_id, 0.0, hidden=held)
    assert opened.view.prior_ids == () and session.priors == ()
    page = film_html(viewer, opened.view)
    assert case.study_key not in page and case.reference.findings not in page
    # a reader not in the study is shown the prior as before
    other = Session()
    eve = desk.bind(other, "eve")
    assert desk.open(other, eve, later.study_id, 0.0).view.prior_ids == (case.study_id,)
    assert other.priors == (case.study_id,)


def test_a_reading_without_a_draft_never_asks_for_one(demo_db, settings, tmp_path):
    """Found in a new-user trial: a reading of an unassisted arm (no template) said "No draft
    yet: press Draft (Alt+D)" (a reading has no Draft button, and Alt+D does nothing there)
    and "draft of arm B" over empty boxes. It says there is no draft, and what to do."""
    db = demo_db
    accounts = AccountService(db)
    accounts.add("dee", None)
    viewer = StudyViewer(db, settings.blobs)
    with db.read() as s:
        keys_ = list(s.scalars(select(Study.study_key).where(Study.image_count > 0)))[:1]
    studies = _service(db)
    studies.create(_design(tmp_path, name="bare", cases=keys_, readers=["dee"],
                           arms=["unassisted"], design="parallel", sessions=1))
    desk = Desk(viewer, ReviewService(db, accounts.audit), accounts=accounts,
                readings=ReadingDesk(studies, accounts.audit))
    session = Session()
    dee = desk.bind(session, "dee")
    reading = studies.worklist("bare", "dee", T0).readings[0]
    opened = desk.open_reading(session, dee, reading.reading_id, now=0.0)
    assert opened.texts == {"findings": "", "impression": ""}
    assert opened.status.endswith("No draft in this reading: write the report, then Sign "
                                  "reading."), opened.status
    assert "Draft (Alt+D)" not in opened.status
    assert opened.model_note == (f"**Reader study reading**, arm {reading.arm_code}: no draft;"
                                 " the report is yours to write.")
    # and no "Revert to draft" or "Accept draft" over its empty boxes (they were shown)
    assert not has_draft_actions(session)
