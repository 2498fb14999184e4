"""Reader studies stored in a real database (SQLite and PostgreSQL): `study create` checks the
design against the accounts, presets and studies, stores everything in one transaction or
nothing, never re-allocates a started study; `show`, `status` (washout by an injected clock) and
a reader's worklist; the CLI's one-sentence refusals."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from rrg_review.app.accounts.audit import AuditLog
from rrg_review.app.accounts.service import AccountService
from rrg_review.app.cli import main
from rrg_review.app.reader_study.reading import ReadingDesk, ReadingEdit
from rrg_review.app.reader_study.service import ReaderStudyError, ReaderStudyService
from rrg_review.db.models import (
    Patient,
    ReaderStudy,
    ReaderStudyArm,
    ReaderStudyCase,
    ReaderStudyReader,
    Reading,
    ReferenceReport,
    Study,
)
from rrg_review.reader_study.design import load_design

pytestmark = pytest.mark.both_databases

T0 = datetime(2026, 11, 2, 8, tzinfo=UTC)
PRESETS = ("retrieval", "rrg24-baseline")


def _cases(db, n, *, source="ds", split="test", images=1, reference=True, prefix="K"):
    """n imaging studies (as an importer leaves them: patient, study, reference report)."""
    with db.write() as s:
        patient = Patient(source=source, key=f"p-{source}-{prefix}")
        s.add(patient)
        s.flush()
        for i in range(n):
            study = Study(patient_id=patient.id, source=source, study_key=f"{prefix}{i:03d}",
                          split=split, image_count=images, sort_key=f"{prefix}{i:03d}")
            s.add(study)
            s.flush()
            if reference:
                s.add(ReferenceReport(study_id=study.id, findings=f"Findings {i}.",
                                      impression="No acute disease."))


def _readers(db, *names):
    accounts = AccountService(db)
    for name in names:
        accounts.add(name, None)


def _design(tmp_path, name="s1", **overrides):
    design = {"name": name, "cases": {"source": "ds", "split": "test"},
              "readers": ["ann", "bob"],
              "arms": ["unassisted", "draft:rrg24-baseline"], "design": "crossover",
              "sessions": 2, "washout_days": 14, "seed": 11}
    design.update(overrides)
    path = tmp_path / f"{name}-{len(list(tmp_path.iterdir()))}.json"
    path.write_text(json.dumps(design))
    return load_design(path)


@pytest.fixture
def study_db(db):
    _cases(db, 7)
    _readers(db, "ann", "bob", "cy")
    return db


def _service(db, now=T0):
    return ReaderStudyService(db, PRESETS, clock=lambda: now)


def _count(db, model):
    with db.read() as s:
        return s.scalar(select(func.count()).select_from(model))


def test_create_stores_the_design_and_a_balanced_allocation(study_db, tmp_path):
    service = _service(study_db)
    design_file = _design(tmp_path)
    created = service.create(design_file, actor="cli:test")
    assert (created.outcome, created.readers, created.cases, created.readings) == \
        ("created", 2, 7, 2 * 7 * 2)
    with study_db.read() as s:
        study = s.scalar(select(ReaderStudy))
        assert study.design_text == design_file.text
        assert study.design_sha256 == design_file.sha256
        arms = {a.spec: a.code for a in s.scalars(select(ReaderStudyArm))}
        readings = list(s.execute(select(Reading.reader_id, Reading.study_id, Reading.session,
                                         Reading.arm_id)))
    assert sorted(arms.values()) == ["A", "B"]
    per_case = Counter((r, c) for r, c, _, _ in readings)
    assert set(per_case.values()) == {2}  # each reader reads each case once per session
    overview = service.overview("s1")
    assert overview.balance.spread <= 1 and overview.key is None
    assert set(overview.balance.cells) == {3, 4}  # 7 cases over 2 arms, per session
    assert AuditLog(study_db).recent(1)[0].action == "study_create"


def test_the_same_design_again_changes_nothing(study_db, tmp_path):
    service = _service(study_db)
    service.create(_design(tmp_path))
    with study_db.read() as s:
        before = list(s.execute(select(Reading.id, Reading.arm_id, Reading.position)))
    again = service.create(_design(tmp_path))
    assert again.outcome == "unchanged" and again.readings == 28
    with study_db.read() as s:
        assert list(s.execute(select(Reading.id, Reading.arm_id, Reading.position))) == before


def test_a_changed_design_is_refused_then_replaced_only_before_reading_starts(study_db,
                                                                               tmp_path):
    service = _service(study_db)
    service.create(_design(tmp_path))
    changed = _design(tmp_path, seed=12)
    with pytest.raises(ReaderStudyError, match="--replace"):
        service.create(changed)
    replaced = service.create(changed, replace=True)
    assert replaced.outcome == "replaced" and _count(study_db, Reading) == 28
    assert _count(study_db, ReaderStudy) == 1 and _count(study_db, ReaderStudyArm) == 2
    with study_db.write() as s:  # a reader opens one reading
        s.execute(update(Reading).where(Reading.id == s.scalar(select(func.min(Reading.id))))
                  .values(opened_at=T0))
        seed_before = s.scalar(select(ReaderStudy.seed))
    with pytest.raises(ReaderStudyError, match="1 of its readings have started"):
        service.create(_design(tmp_path, seed=13), replace=True)
    with study_db.read() as s:
        assert s.scalar(select(ReaderStudy.seed)) == seed_before == 12
        assert s.scalar(select(func.count()).where(Reading.opened_at.is_not(None))) == 1


def test_unknown_readers_presets_and_keys_are_all_named_and_nothing_is_stored(study_db,
                                                                              tmp_path):
    bad = _design(tmp_path, readers=["ann", "zed", "yan"],
                  arms=["unassisted", "draft:no-such-model"],
                  cases={"source": "ds", "keys": ["K000", "K001", "NOPE", "NADA"]})
    with pytest.raises(ReaderStudyError) as caught:
        _service(study_db).create(bad)
    problems = caught.value.problems
    assert len(problems) == 3, problems
    assert all(p.startswith(f"{bad.path}: ") for p in problems)
    text = "\n".join(problems)
    for word in ("'zed'", "'yan'", "'no-such-model'", "'NOPE'", "'NADA'", "2 study keys"):
        assert word in text, (word, text)
    for model in (ReaderStudy, ReaderStudyArm, ReaderStudyReader, ReaderStudyCase, Reading):
        assert _count(study_db, model) == 0


def test_cases_without_images_or_a_reference_for_the_reference_arm_are_refused(study_db,
                                                                                tmp_path):
    _cases(study_db, 2, images=0, prefix="R")
    _cases(study_db, 1, reference=False, prefix="N")
    with pytest.raises(ReaderStudyError) as caught:
        _service(study_db).create(_design(
            tmp_path, cases={"source": "ds", "keys": ["R000", "N000", "K001"]},
            arms=["reference", "unassisted"]))
    text = str(caught.value)
    assert "no images" in text and "'R000'" in text
    assert "no reference report" in text and "'N000'" in text


def test_a_failure_inside_the_transaction_leaves_nothing(study_db, tmp_path, monkeypatch):
    """The readings go in last: a failure there must take the study, arms and readers with it."""
    service = _service(study_db)

    def boom(*_args, **_kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(ReaderStudyService, "_insert_readings", staticmethod(boom))
    with pytest.raises(RuntimeError, match="disk full"):
        service.create(_design(tmp_path))
    for model in (ReaderStudy, ReaderStudyArm, ReaderStudyReader, ReaderStudyCase, Reading):
        assert _count(study_db, model) == 0


def test_session_two_opens_per_reader_after_the_washout(study_db, tmp_path):
    service = _service(study_db)
    service.create(_design(tmp_path))
    first = service.worklist("s1", "ann", T0)
    assert first.schedule.open_session == 1 and len(first.readings) == 7
    assert [r.position for r in first.readings] == list(range(1, 8))
    assert {r.arm_code for r in first.readings} == {"A", "B"}
    signed_at = T0 + timedelta(hours=2)
    with study_db.write() as s:
        s.execute(update(Reading).where(Reading.id.in_([r.reading_id for r in first.readings]))
                  .values(signed_at=signed_at))
    waiting = service.worklist("s1", "ann", signed_at + timedelta(days=13))
    assert waiting.schedule.open_session is None and waiting.readings == ()
    assert waiting.washout_left == timedelta(days=1)
    status = service.status("s1", signed_at + timedelta(days=13))
    by_reader = {r.reader: r for r in status.readers}
    assert [(p.session, p.signed, p.total) for p in by_reader["ann"].sessions] == \
        [(1, 7, 7), (2, 0, 7)]
    assert by_reader["bob"].schedule.open_session == 1  # bob is not held by ann's washout
    opened = service.worklist("s1", "ann", signed_at + timedelta(days=14))
    assert opened.schedule.open_session == 2 and len(opened.readings) == 7
    # the arm of each case switches between the sessions
    arm_1 = {r.study_id: r.arm_code for r in first.readings}
    assert all(arm_1[r.study_id] != r.arm_code for r in opened.readings)
    # the clock given to the service is the default "now"
    assert _service(study_db, signed_at + timedelta(days=15)).worklist(
        "s1", "ann").schedule.open_session == 2


def test_worklists_carry_no_arm_name(study_db, tmp_path):
    service = _service(study_db)
    service.create(_design(tmp_path))
    worklist = service.worklist("s1", "bob", T0)
    assert "rrg24" not in repr(worklist) and "unassisted" not in repr(worklist)
    with pytest.raises(ReaderStudyError, match="not a reader"):
        service.worklist("s1", "cy", T0)


def test_unblinding_is_audited(study_db, tmp_path):
    service = _service(study_db)
    service.create(_design(tmp_path))
    overview = service.overview("s1", unblind=True, actor="cli:admin")
    assert {k.arm for k in overview.key} == {"unassisted", "draft:rrg24-baseline"}
    assert AuditLog(study_db).recent(1)[0].action == "study_unblind"
    with pytest.raises(ReaderStudyError, match="no reader study named 'nope'"):
        service.overview("nope")


# -- the CLI -----------------------------------------------------------------------------------
def _cli(settings, *argv):
    return main(["study", *argv, "--db", settings.db_url, "--data-dir", str(settings.data_dir)])


def _cli_create(settings, tmp_path, capsys, design: str) -> str:
    """`study create` of this design file's text; what it printed."""
    path = tmp_path / "study.yaml"
    path.write_text(design)
    assert _cli(settings, "create", str(path)) == 0
    return capsys.readouterr().out


def test_cli_create_list_show_status(study_db, settings, tmp_path, capsys):
    out = _cli_create(settings, tmp_path, capsys,
                      "name: cli-study\ncases: {source: ds}\nreaders: [ann, bob, cy]\n"
                      "arms: [unassisted, draft:retrieval, reference]\ndesign: parallel\n"
                      "seed: 3\n")
    assert "created: 3 readers, 7 cases, 21 readings" in out
    assert "cases have no draft yet" in out  # the retrieval arm is not drafted
    assert _cli(settings, "list") == 0
    assert "cli-study\tparallel" in capsys.readouterr().out
    assert _cli(settings, "show", "cli-study") == 0
    shown = capsys.readouterr().out
    assert "A s1" in shown and "spread (largest - smallest cell): 1" in shown
    assert "arm key" not in shown and "= draft:retrieval" not in shown
    assert _cli(settings, "show", "cli-study", "--unblind") == 0
    assert "= draft:retrieval" in capsys.readouterr().out
    assert _cli(settings, "status", "cli-study", "--now", "2026-11-02T08:00") == 0
    assert "ann\ts1 0/7\tsession 1 open" in capsys.readouterr().out
    assert _cli(settings, "worklist", "cli-study", "ann") == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header.split("\t") == ["#", "reading", "study", "arm", "state"] and len(lines) == 7
    # each case by its study key, as the page's list names it, not the database's id
    assert {line.split("\t")[2] for line in lines} == {f"K{i:03d}" for i in range(7)}
    assert [line.split("\t")[0] for line in lines] == [str(i) for i in range(1, 8)]


def test_cli_refusals_are_sentences_without_a_traceback(study_db, settings, tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\ncases: {source: ds}\nreaders: [ann, nobody]\n"
                    "arms: [unassisted, draft:nope]\ndesign: parallel\nseed: 1\n")
    assert _cli(settings, "create", str(path)) == 2
    err = capsys.readouterr().err
    assert err.count("error: ") == 2 and "Traceback" not in err
    assert f"error: {path}: readers: no such account: 'nobody'" in err
    path.write_text("name: x\nseed: -1\n")
    assert _cli(settings, "create", str(path)) == 2
    err = capsys.readouterr().err
    assert err.count("error: ") == 5 and "Traceback" not in err, err
    assert _cli(settings, "status", "absent") == 2
    assert "no reader study named 'absent'" in capsys.readouterr().err


def test_design_files_can_be_read_from_relative_keys_files(study_db, settings, tmp_path,
                                                           capsys):
    folder = tmp_path / "designs"
    folder.mkdir()
    (folder / "keys.txt").write_text("K002\nK004\nK006\n")
    (folder / "d.yaml").write_text("name: keyed\ncases: {keys_file: keys.txt}\n"
                                   "readers: [ann]\narms: [unassisted]\ndesign: parallel\n"
                                   "seed: 9\n")
    assert _cli(settings, "create", str(folder / "d.yaml")) == 0
    assert "1 readers, 3 cases, 3 readings" in capsys.readouterr().out
    assert Path(folder / "d.yaml").is_file()


def test_only_an_admin_account_is_given_the_arm_key(study_db, tmp_path):
    service = _service(study_db)
    service.create(_design(tmp_path))
    accounts = AccountService(study_db)
    with pytest.raises(ReaderStudyError, match="only an admin"):
        service.overview("s1", unblind=True, account=accounts.account("ann"))
    refused = AuditLog(study_db).recent(1)[0]
    assert (refused.action, refused.ok, refused.actor) == ("study_unblind", False, "ann")
    accounts.set_role("cy", "admin")
    shown = service.overview("s1", unblind=True, account=accounts.account("cy"))
    assert shown.key is not None and len(shown.key) == 2
    assert service.overview("s1", account=accounts.account("ann")).key is None


def test_a_study_too_large_to_be_meant_is_refused(study_db, tmp_path, monkeypatch):
    from rrg_review.app.reader_study import service as module

    monkeypatch.setattr(module, "MAX_READINGS", 27)
    with pytest.raises(ReaderStudyError, match="2 readers x 7 cases make 28 readings"):
        _service(study_db).create(_design(tmp_path))
    assert _count(study_db, ReaderStudy) == 0


def test_status_counts_the_cases_a_draft_arm_has_no_draft_for(study_db, tmp_path, capsys,
                                                              settings):
    from rrg_review.db.models import Draft

    service = _service(study_db)
    service.create(_design(tmp_path))
    key = {k.arm: k.code for k in service.overview("s1", unblind=True).key}
    code = key["draft:rrg24-baseline"]
    assert service.status("s1").missing_drafts == {code: 7}
    with study_db.read() as s:
        ids = list(s.scalars(select(ReaderStudyCase.study_id).order_by(
            ReaderStudyCase.study_id)))
    with study_db.write() as s:
        for study_id, text, error in ((ids[0], "Clear.", None), (ids[1], "Clear.", None),
                                      (ids[2], None, "out of memory")):
            s.add(Draft(study_id=study_id, section="findings", preset="rrg24-baseline",
                        text=text, error=error, model_id="m"))
        s.add(Draft(study_id=ids[3], section="findings", preset="retrieval", text="x",
                    model_id="m"))
    assert service.status("s1").missing_drafts == {code: 5}
    assert _cli(settings, "status", "s1") == 0
    assert f"warning: arm {code}: 5 cases have no draft yet" in capsys.readouterr().out


def test_the_stored_readings_are_the_allocation_the_seed_gives(study_db, tmp_path):
    """Anyone can re-derive a stored study from its design: same readers, cases, arms,
    sessions and order."""
    from rrg_review.db.models import Reader
    from rrg_review.reader_study.allocation import allocate

    design_file = _design(tmp_path, arms=["unassisted", "draft:rrg24-baseline", "reference"],
                          sessions=3, readers=["ann", "bob", "cy"])
    _service(study_db).create(design_file)
    with study_db.read() as s:
        stored = {(reader, f"{source}:{key}", spec, session, position)
                  for reader, source, key, spec, session, position in s.execute(
                      select(Reader.name, Study.source, Study.study_key, ReaderStudyArm.spec,
                             Reading.session, Reading.position)
                      .join(Reader, Reader.id == Reading.reader_id)
                      .join(Study, Study.id == Reading.study_id)
                      .join(ReaderStudyArm, ReaderStudyArm.id == Reading.arm_id))}
    design = design_file.design
    again = allocate(design.readers, [f"ds:K{i:03d}" for i in range(7)],
                     [a.spec for a in design.arms], design=design.design,
                     sessions=design.sessions, seed=design.seed)
    assert stored == {(a.reader, a.case, a.arm, a.session, a.order) for a in again.readings}
    assert len(stored) == 3 * 7 * 3


def test_long_key_lists_are_looked_up_in_chunks_and_unknown_keys_summarised(db, tmp_path):
    _cases(db, 1203, prefix="L")
    _readers(db, "ann")
    keys = [f"L{i:03d}" for i in range(1203)] + ["X1", "X2", "X3", "X4", "X5", "X6", "X7"]
    with pytest.raises(ReaderStudyError) as caught:
        _service(db).create(_design(tmp_path, readers=["ann"], cases={"keys": keys},
                                    design="parallel", sessions=1))
    (problem,) = caught.value.problems
    assert "7 study keys match no stored study" in problem and "and 2 more" in problem
    created = _service(db).create(_design(tmp_path, readers=["ann"], cases={"keys": keys[:-7]},
                                          design="parallel", sessions=2))
    assert (created.cases, created.readings) == (1203, 1203)


def test_a_bad_design_file_creates_no_database(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\n")
    target = tmp_path / "never.sqlite"
    assert main(["study", "create", str(path), "--db", str(target)]) == 2
    assert "error: " in capsys.readouterr().err
    assert not target.exists()


def test_the_server_refuses_readings_of_a_session_that_is_not_open(study_db, tmp_path,
                                                                   settings, capsys):
    service = _service(study_db)
    service.create(_design(tmp_path))
    first = service.worklist("s1", "ann", T0).readings
    with pytest.raises(ReaderStudyError, match="session 2 is not open: session 1 is not "
                                               "signed yet"):
        service.open_reading(_reading_of(study_db, "ann", 2), "ann", T0)
    with pytest.raises(ReaderStudyError, match="is not one of the readings of 'bob'"):
        service.open_reading(first[0].reading_id, "bob", T0)
    desk = ReadingDesk(service)
    with pytest.raises(ReaderStudyError, match="has not been opened"):
        desk.sign_preview(first[0].reading_id, "ann", T0)
    for i, reading in enumerate(first):
        opened = desk.open(reading.reading_id, "ann", T0 + timedelta(minutes=i)).reading
        at = T0 + timedelta(minutes=i + 1)
        desk.save(reading.reading_id, "ann", {"findings": ReadingEdit("Read.", None)}, now=at)
        preview = desk.sign_preview(reading.reading_id, "ann", at)
        signed = desk.sign(reading.reading_id, "ann", preview.token, at)
        assert opened.opened_at == signed.opened_at == T0 + timedelta(minutes=i)
        assert signed.signed_at == at
    last = T0 + timedelta(minutes=len(first))
    with pytest.raises(ReaderStudyError, match="is signed; a signed reading is not changed"):
        desk.sign(first[0].reading_id, "ann", preview.token, last + timedelta(days=1))
    again = service.open_reading(first[0].reading_id, "ann", last + timedelta(days=1))
    assert again.signed_at == T0 + timedelta(minutes=1)  # the first signature stays
    at = (last + timedelta(days=11)).isoformat()
    assert _cli(settings, "status", "s1", "--now", at) == 0
    assert "ann\ts1 7/7  s2 0/7\tsession 2 opens" in capsys.readouterr().out
    assert _cli(settings, "worklist", "s1", "ann", "--now", at) == 0
    assert "(3 d 0 h left)" in capsys.readouterr().out
    with pytest.raises(ReaderStudyError, match=r"session 2 opens .* after the washout "
                                               r"\(1 d 0 h left\)"):
        service.open_reading(_reading_of(study_db, "ann", 2), "ann", last + timedelta(days=13))
    opened = service.open_reading(_reading_of(study_db, "ann", 2), "ann",
                                  last + timedelta(days=14))
    assert opened.session == 2 and opened.opened_at == last + timedelta(days=14)
    # a started study is never re-allocated
    with pytest.raises(ReaderStudyError, match="have started"):
        service.create(_design(tmp_path, seed=99), replace=True)


def _reading_of(db, reader, session):
    from rrg_review.db.models import Reader

    with db.read() as s:
        return s.scalar(select(Reading.id).join(Reader, Reader.id == Reading.reader_id)
                        .where(Reader.name == reader, Reading.session == session)
                        .order_by(Reading.position).limit(1))


def test_create_and_status_name_readers_who_already_worked_on_its_cases(study_db, settings,
                                                                        tmp_path, capsys):
    """A reader study's reading is meant as a first read under its arm: a reader who already
    opened, edited or rated a case on the review worklist is named at `study create` and in
    `study status` (a new-user trial created one over cases read unblinded, without a word).
    Work inside a reader study (a reading) is not "outside"."""
    from rrg_review.db.models import Rating, Reader, Revision, WorklistItem

    with study_db.write() as s:
        ids = list(s.scalars(select(Study.id).order_by(Study.id)))
        reader = {name: rid for name, rid in s.execute(select(Reader.name, Reader.id))}
        s.add_all([
            # ann edited two cases and rated one of them: two cases
            Revision(reader_id=reader["ann"], study_id=ids[0], section="findings", number=1,
                     text="Clear."),
            Revision(reader_id=reader["ann"], study_id=ids[1], section="impression",
                     number=1, text="Normal."),
            Rating(reader_id=reader["ann"], study_id=ids[1], number=1, likert=4),
            # bob only opened one (time on task on his worklist); one only listed is not seen
            WorklistItem(reader_id=reader["bob"], study_id=ids[2], position=0,
                         status="drafted", active_seconds=12.5),
            WorklistItem(reader_id=reader["bob"], study_id=ids[3], position=1,
                         status="drafted", active_seconds=0.0),
            # cy is not in the study
            Revision(reader_id=reader["cy"], study_id=ids[4], section="findings", number=1,
                     text="Clear."),
        ])
    out = _cli_create(settings, tmp_path, capsys,
                      "name: seen\ncases: {source: ds}\nreaders: [ann, bob]\n"
                      "arms: [unassisted, reference]\ndesign: crossover\nsessions: 2\n"
                      "washout_days: 14\nseed: 3\n")
    assert "warning: ann already worked on 2 of the study's cases outside it" in out, out
    assert "warning: bob already worked on 1 of the study's cases outside it" in out, out
    assert "cy" not in out
    service = _service(study_db)
    assert service.status("seen").seen_outside == {"ann": 2, "bob": 1}
    # a save inside the study (a reading's revision) adds nothing
    with study_db.write() as s:
        reading = s.scalar(select(Reading).where(Reading.reader_id == reader["bob"],
                                                 Reading.study_id == ids[5]).limit(1))
        s.add(Revision(reader_id=reader["bob"], study_id=ids[5], section="findings",
                       number=1, text="In the study.", reading_id=reading.id))
    assert service.status("seen").seen_outside == {"ann": 2, "bob": 1}
    assert _cli(settings, "status", "seen") == 0
    assert "bob already worked on 1 of" in capsys.readouterr().out
