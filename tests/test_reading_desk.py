"""A reading is the unit (issue #20), in a real database (SQLite and PostgreSQL): opening a
reading shows its arm's text, blinded; edits are revisions of the reading (the same case read in
two sessions keeps two histories, conflicts as on the review screen, nothing outside studies
sees them); active time and keystroke counts per reading; signing only after a confirmation;
the long-format table and `study analyze NAME` from the database."""

from __future__ import annotations

import csv
import json
from datetime import timedelta

import pytest
from sqlalchemy import select

from rrg_review.app.cli import main
from rrg_review.app.reader_study.reading import ReadingDesk, ReadingEdit, ReadingKeys
from rrg_review.app.reader_study.service import ReaderStudyError
from rrg_review.app.reader_study.table import readings_table
from rrg_review.app.review.service import EditConflict, ReviewService
from rrg_review.db.models import Draft, Reader, Revision, Study
from tests.test_reader_study_service import T0, _cases, _design, _readers, _service

pytestmark = pytest.mark.both_databases

SECRET_MODEL = "secret-org/rrg-model-7b"


@pytest.fixture
def study_db(db):
    _cases(db, 6)
    _readers(db, "ann", "bob")
    with db.write() as s:
        for study in s.scalars(select(Study)):
            for section in ("findings", "impression"):
                s.add(Draft(study_id=study.id, section=section, preset="rrg24-baseline",
                            text=f"Model {section} of {study.study_key}.",
                            model_id=SECRET_MODEL, generation={"retrieval": "nearest CXR9"}))
    return db


def _desk(db, now=T0):
    return ReadingDesk(_service(db, now))


def _arm(db, reading_id):
    from rrg_review.db.models import ReaderStudyArm, Reading

    with db.read() as s:
        return s.scalar(select(ReaderStudyArm.spec).join(
            Reading, Reading.arm_id == ReaderStudyArm.id).where(Reading.id == reading_id))


def _key(db, study_id):
    with db.read() as s:
        return s.get_one(Study, study_id).study_key


def _sign(desk, reading_id, reader, now):
    preview = desk.sign_preview(reading_id, reader, now)
    return desk.sign(reading_id, reader, preview.token, now)


def test_opening_shows_the_arms_text_and_nothing_that_names_it(study_db, tmp_path):
    arms = [{"arm": "unassisted", "template": "Heart normal."}, "draft:rrg24-baseline",
            "reference"]
    _service(study_db).create(_design(tmp_path, design="parallel", sessions=1,
                                      washout_days=0, arms=arms))
    desk = _desk(study_db)
    seen = set()
    for item in desk.studies.worklist("s1", "ann", T0).readings:
        opened = desk.open(item.reading_id, "ann", T0)
        texts = {s.section: s.draft for s in opened.sections}
        key, spec = _key(study_db, item.study_id), _arm(study_db, item.reading_id)
        seen.add(spec)
        expected = {"unassisted": {"findings": "Heart normal.", "impression": ""},
                    "draft:rrg24-baseline": {"findings": f"Model findings of {key}.",
                                             "impression": f"Model impression of {key}."},
                    "reference": {"findings": f"Findings {int(key[1:])}.",
                                  "impression": "No acute disease."}}[spec]
        assert texts == expected
        assert [s.text for s in opened.sections] == list(expected.values())
        shown = repr(opened)
        for secret in ("rrg24", SECRET_MODEL, "retrieval", "CXR9", "unassisted", "reference",
                       "draft:"):
            assert secret not in shown
    assert seen == {"unassisted", "draft:rrg24-baseline", "reference"}


def test_two_sessions_keep_two_histories_and_the_washout_is_the_servers(study_db, tmp_path):
    _service(study_db).create(_design(tmp_path))  # crossover, 2 sessions, 14 days
    desk = _desk(study_db)
    first = desk.studies.worklist("s1", "ann", T0).readings
    case = first[0].study_id
    for i, item in enumerate(first):
        desk.open(item.reading_id, "ann", T0)
        desk.save(item.reading_id, "ann", {"findings": ReadingEdit(f"Session one {i}.", None)},
                  now=T0)
        _sign(desk, item.reading_id, "ann", T0 + timedelta(hours=1))
    second = {r.study_id: r for r in desk.studies.worklist(
        "s1", "ann", T0 + timedelta(days=15)).readings}[case]
    with pytest.raises(ReaderStudyError, match="after the washout"):
        desk.open(second.reading_id, "ann", T0 + timedelta(days=14))
    opened = desk.open(second.reading_id, "ann", T0 + timedelta(days=15))
    findings = opened.sections[0]
    assert findings.revision is None and "Session one" not in findings.text
    saved = desk.save(second.reading_id, "ann",
                      {"findings": ReadingEdit("Session two.", None)},
                      now=T0 + timedelta(days=15))["findings"]
    assert not isinstance(saved, EditConflict) and saved.number == 2  # one sequence
    assert [r.text for r in desk.history(first[0].reading_id, "ann", "findings")] == \
        ["Session one 0."]
    later = T0 + timedelta(days=15)
    assert [r.text for r in _desk(study_db, later).history(second.reading_id, "ann",
                                                           "findings")] == ["Session two."]
    # reading outside studies sees none of it
    with study_db.read() as s:
        ann = s.scalar(select(Reader.id).where(Reader.name == "ann"))
    assert ReviewService(study_db).current(ann, case) == {}


def test_conflicts_signing_and_refusals(study_db, tmp_path):
    _service(study_db).create(_design(tmp_path))
    desk = _desk(study_db)
    item = desk.studies.worklist("s1", "ann", T0).readings[0]
    with pytest.raises(ReaderStudyError, match="not been opened"):
        desk.save(item.reading_id, "ann", {"findings": ReadingEdit("x", None)}, now=T0)
    with pytest.raises(ReaderStudyError, match="not one of the readings of 'bob'"):
        desk.open(item.reading_id, "bob", T0)
    desk.open(item.reading_id, "ann", T0)
    one = desk.save(item.reading_id, "ann", {"findings": ReadingEdit("Tab one.", None)},
                    now=T0)["findings"]
    two = desk.save(item.reading_id, "ann", {"findings": ReadingEdit("Tab two.", None)},
                    now=T0)["findings"]
    assert isinstance(two, EditConflict) and two.current.text == "Tab one."
    preview = desk.sign_preview(item.reading_id, "ann", T0)
    assert preview.report["findings"] == "Tab one."
    assert not isinstance(one, EditConflict)
    desk.save(item.reading_id, "ann", {"findings": ReadingEdit("Tab one, more.", one.number)},
              now=T0)
    with pytest.raises(ReaderStudyError, match="changed since you were asked to confirm"):
        desk.sign(item.reading_id, "ann", preview.token, T0)
    assert desk.studies.worklist("s1", "ann", T0).readings[0].signed_at is None
    signed = _sign(desk, item.reading_id, "ann", T0 + timedelta(minutes=5))
    assert signed.signed_at == T0 + timedelta(minutes=5)
    with pytest.raises(ReaderStudyError, match="is signed"):
        desk.save(item.reading_id, "ann", {"findings": ReadingEdit("late", None)}, now=T0)
    # the impression, never saved, was signed as shown: the final report is in revisions
    with study_db.read() as s:
        final = {r.section: r.text for r in s.scalars(
            select(Revision).where(Revision.reading_id == item.reading_id)
            .order_by(Revision.number))}
    assert final["findings"] == "Tab one, more."
    assert final["impression"] == desk.open(item.reading_id, "ann", T0).sections[1].draft


def test_timing_and_the_table_from_the_database(study_db, tmp_path, settings, capsys):
    _service(study_db).create(_design(tmp_path, sessions=2))
    desk = _desk(study_db)
    at = T0.timestamp()
    for reader in ("ann", "bob"):
        for i, item in enumerate(desk.studies.worklist("s1", reader, T0).readings):
            start = T0 + timedelta(minutes=10 * i)
            opened = desk.open(item.reading_id, reader, start)
            base = opened.sections[0]
            for beat in range(3):  # 3 beats of 20 s, then one after a 10-minute pause
                desk.heartbeat(item.reading_id, reader, 20, at=at + 600 * i + 20 * (beat + 1),
                               now=start)
            total = desk.heartbeat(item.reading_id, reader, 600, at=at + 600 * i + 660,
                                   now=start)
            assert total == pytest.approx(120.0)
            keys = ReadingKeys(start + timedelta(seconds=5), start + timedelta(seconds=50),
                               keystrokes=40, edits=7)
            text = (base.text or "Lungs clear.") if i % 2 else base.text + " Small effusion."
            desk.save(item.reading_id, reader, {"findings": ReadingEdit(text, None, keys)},
                      now=start)
            if i < 5:  # one reading of each reader stays unsigned
                _sign(desk, item.reading_id, reader, start + timedelta(minutes=2))
    table = readings_table(study_db, "s1", unblind=False)
    cols = table.columns
    assert len(table) == 2 * 6 * 2
    assert set(cols["reader"]) == {"R01", "R02"} and set(cols["arm"]) == {"A", "B"}
    assert all(c.startswith("C") for c in cols["case"])
    opened_rows = [i for i, v in enumerate(cols["opened"]) if v]
    assert len(opened_rows) == 12
    assert {cols["seconds"][i] for i in opened_rows} == {"120"}
    assert {cols["first_keystroke_seconds"][i] for i in opened_rows} == {"5"}
    assert {cols["last_keystroke_seconds"][i] for i in opened_rows} == {"50"}
    assert {cols["keystrokes"][i] for i in opened_rows} == {"40"}
    assert sum(1 for v in cols["signed"] if v) == 10
    unblinded = readings_table(study_db, "s1", unblind=True).columns
    assert set(unblinded["arm"]) == {"unassisted", "draft:rrg24-baseline"}
    accepted = [a for a, arm, s in zip(unblinded["accepted"], unblinded["arm"],
                                       unblinded["signed"], strict=True)
                if arm.startswith("draft") and s]
    assert set(accepted) == {"0", "1"}
    out = tmp_path / "table.csv"
    assert main(["study", "analyze", "s1", "--db", settings.db_url, "--data-dir",
                 str(settings.data_dir), "--csv", str(out), "--out",
                 str(tmp_path / "r.json")]) == 0
    printed = capsys.readouterr().out
    assert "draft:rrg24-baseline vs unassisted" in printed
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 24 and "ann" not in out.read_text()
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["n"]["readings"] == 10
    reasons = {e["reason"]: e["count"] for e in result["excluded"]}
    assert sum(reasons.values()) == 14  # 2 unsigned + 12 never opened (no time)
    assert main(["study", "analyze", "s1", "--readings", str(out)]) == 2
    assert "one of them" in capsys.readouterr().err
    # the same table as Parquet (typed numbers) analyses to the same result
    parquet = readings_table(study_db, "s1", unblind=True).write(tmp_path / "t.parquet")
    assert main(["study", "analyze", "--readings", str(parquet), "--out",
                 str(tmp_path / "p.json")]) == 0
    again = json.loads((tmp_path / "p.json").read_text())
    assert again["outcomes"]["seconds"]["contrasts"] == result["outcomes"]["seconds"]["contrasts"]


def test_racing_saves_of_one_reading_lose_no_edit(study_db, tmp_path):
    """Two tabs save the same reading at once from the same base: one is stored, the other
    gets its EditConflict (the reading's row serialises them), never a silent overwrite."""
    from concurrent.futures import ThreadPoolExecutor

    _service(study_db).create(_design(tmp_path))
    desk = _desk(study_db)
    item = desk.studies.worklist("s1", "ann", T0).readings[0]
    desk.open(item.reading_id, "ann", T0)

    def save(text):
        return desk.save(item.reading_id, "ann", {"findings": ReadingEdit(text, None)},
                         now=T0)["findings"]

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(save, ["Tab one.", "Tab two."]))
    conflicts = [r for r in results if isinstance(r, EditConflict)]
    stored = [r for r in results if not isinstance(r, EditConflict)]
    assert len(conflicts) == 1 and len(stored) == 1
    assert conflicts[0].current.text == stored[0].text
    assert [r.text for r in desk.history(item.reading_id, "ann", "findings")] == \
        [stored[0].text]


def test_a_rating_belongs_to_its_reading_and_names_no_model(study_db, tmp_path, settings,
                                                            capsys):
    _service(study_db).create(_design(tmp_path))
    desk = _desk(study_db)
    item = desk.studies.worklist("s1", "ann", T0).readings[0]
    with pytest.raises(ReaderStudyError, match="not been opened"):
        desk.rate(item.reading_id, "ann", likert=4, now=T0)
    desk.open(item.reading_id, "ann", T0)
    rating = desk.rate(item.reading_id, "ann", likert=4,
                       errors={"false_finding": {"significant": 1}}, now=T0,
                       suggested={"false_finding": 2})
    assert rating.preset is None and rating.likert == 4
    assert rating.suggested["false_finding"] == 2 and sum(rating.suggested.values()) == 2
    with study_db.read() as s:
        ann = s.scalar(select(Reader.id).where(Reader.name == "ann"))
    assert ReviewService(study_db).latest_rating(ann, item.study_id) is None
    columns = readings_table(study_db, "s1", unblind=False).columns
    row = columns["opened"].index(next(v for v in columns["opened"] if v))
    assert (columns["likert"][row], columns["errors_significant"][row],
            columns["errors_total"][row]) == ("4", "1", "1")
    assert main(["study", "analyze", "nope", "--db", settings.db_url, "--data-dir",
                 str(settings.data_dir)]) == 2
    assert "error: no reader study named 'nope'" in capsys.readouterr().err


def test_a_readers_evaluation_export_holds_none_of_their_study_readings(study_db, tmp_path):
    """The review-session export names the model of each draft; a reader's study work (edited
    from a blinded draft, rated) must not appear in it, or it would unblind the arm."""
    from rrg_review.app.evaluation.results import ExportFilters
    from rrg_review.app.evaluation.rows import collect_rows

    _service(study_db).create(_design(tmp_path, design="parallel", sessions=1, washout_days=0))
    desk = _desk(study_db)
    for item in desk.studies.worklist("s1", "ann", T0).readings:
        opened = desk.open(item.reading_id, "ann", T0)
        desk.save(item.reading_id, "ann",
                  {"findings": ReadingEdit(opened.sections[0].text + " Edited.", None)}, now=T0)
        desk.rate(item.reading_id, "ann", likert=3, now=T0)
    with study_db.read() as s:
        assert s.scalar(select(Revision.id).where(Revision.draft_id.is_not(None)).limit(1))
    assert collect_rows(study_db, ExportFilters(reader="ann")) == []


def test_a_blinded_reading_gets_flags_that_need_no_answer_and_none_from_the_reference(
        study_db, tmp_path):
    """Issue #22: the same text flagged on the review page (reference shown) carries the
    reference's flags; in a reading it carries only those that need no answer."""
    from rrg_review.app.review.aids import ReviewAids
    from rrg_review.db.models import ReferenceReport
    from rrg_review.studies.records import ReportSections

    _service(study_db).create(_design(tmp_path, design="parallel", sessions=1,
                                      washout_days=0, arms=["draft:rrg24-baseline"]))
    desk = _desk(study_db)
    item = desk.studies.worklist("s1", "ann", T0).readings[0]
    texts = {"findings": "No pleural effusion. Large left pleural effusion. Heart size normal.",
             "impression": "Left lower lobe pneumonia."}
    with study_db.read() as s:
        ref = s.scalar(select(ReferenceReport).where(ReferenceReport.study_id == item.study_id))
        reference = ReportSections(ref.findings, ref.impression)
    seen = ReviewAids().flags(texts, has_prior=None, reference=reference)
    assert {f.kind for f in seen} >= {"contradiction", "reference_extra"}
    blinded = desk.flags(item.reading_id, "ann", texts)
    assert {f.kind for f in blinded} == {"contradiction"}
    assert all(texts[f.section][f.span[0]:f.span[1]].strip() for f in blinded)
    with pytest.raises(ReaderStudyError):
        desk.flags(item.reading_id, "bob", texts)
