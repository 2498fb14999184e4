"""Reader studies stored and read back: create (validated against the database, allocated and
stored in one transaction), list, show (the arm key to admins only), status (readings done per
reader and session, washout left) and a reader's worklist in a study.

A study is never silently re-allocated. Creating a name that exists:
- with the same design (the same meaning: comments and key order aside) changes nothing;
- with a changed design is refused, naming why; with `replace=True` it is replaced (dropped
  and allocated afresh, in the same transaction) only while none of its readings has been
  opened or signed. Once reading has started a changed design must be a new study (a new name:
  the old one and its readings stay as they were).

The clock is injected (`clock`, or `now=` per call): washout decisions never read the time
themselves, so tests (and an admin replaying a day) decide what "now" is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, func, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from rrg_review.app.accounts.audit import AuditLog
from rrg_review.app.accounts.service import Account
from rrg_review.app.reader_study.resolve import Resolved, resolve
from rrg_review.db.engine import ROWS, Database
from rrg_review.db.models import (
    Draft,
    Rating,
    Reader,
    ReaderStudy,
    ReaderStudyArm,
    ReaderStudyCase,
    ReaderStudyReader,
    Reading,
    Revision,
    Study,
    WorklistItem,
    table_of,
)
from rrg_review.reader_study.allocation import BalanceTable, StudyAllocation, allocate
from rrg_review.reader_study.design import DesignFile
from rrg_review.reader_study.sessions import (
    ReaderSchedule,
    SessionProgress,
    describe_wait,
    schedule,
)

log = logging.getLogger(__name__)


class ReaderStudyError(ValueError):
    """A study that cannot be created or found: every problem, one sentence each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = tuple(problems)


class ReadingSigned(ReaderStudyError):
    """The reading is signed: read-only. A tab that had it open and editable (a second tab of
    the reader, the reading signed in the first) is drawn again read-only."""


@dataclass(frozen=True)
class Created:
    name: str
    outcome: str  # "created" | "unchanged" | "replaced"
    readers: int
    cases: int
    readings: int


@dataclass(frozen=True)
class StudySummary:
    name: str
    design: str
    sessions: int
    washout_days: float
    blinded: bool
    arms: int
    readers: int
    cases: int
    readings: int
    signed: int
    created_at: datetime


@dataclass(frozen=True)
class ArmKey:
    """One line of the unblinding key: the blinded code and the arm it stands for."""

    code: str
    arm: str  # unassisted | draft:<preset> | reference
    template: str | None


@dataclass(frozen=True)
class StudyOverview:
    summary: StudySummary
    description: str
    design_text: str
    design_format: str
    design_sha256: str
    seed: int
    balance: BalanceTable  # arms by spec; show it with `codes` unless the viewer is unblinded
    codes: dict[str, str]  # arm spec -> blinded code
    key: tuple[ArmKey, ...] | None  # None: not unblinded


@dataclass(frozen=True)
class ReaderStatus:
    reader: str
    sessions: tuple[SessionProgress, ...]
    schedule: ReaderSchedule
    washout_left: timedelta


@dataclass(frozen=True)
class StudyStatus:
    name: str
    now: datetime
    washout: timedelta
    readers: tuple[ReaderStatus, ...]
    # blinded code of each draft arm -> cases still without a draft of its preset: such a
    # reading would show empty boxes (draft them first: rrg-review draft --model PRESET)
    missing_drafts: dict[str, int]
    # reader -> the study's cases they already opened, edited or rated outside it (the review
    # worklist): they come to those readings having seen the films and a draft, unblinded
    seen_outside: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class WorklistReading:
    """A reading on a reader's study worklist. The arm is its blinded code only: which model
    (or whether a human) wrote the draft is never in what a reader's page is given."""

    reading_id: int
    study_id: int
    session: int
    position: int
    arm_code: str
    opened_at: datetime | None
    signed_at: datetime | None


@dataclass(frozen=True)
class StudyWorklist:
    study: str
    schedule: ReaderSchedule
    washout_left: timedelta
    readings: tuple[WorklistReading, ...]  # the open session's, in the allocated order
    blinded: bool = True


@dataclass(frozen=True)
class BlindedCases:
    """The cases a reader may not open in plain review: those of their own blinded studies
    they have not finished (every reading signed), washout included. A plain review shows a
    case's draft and model, its reference report and metrics: opened during the study it
    would unblind the reader's readings of that case, and store plain revisions beside them.
    Other cases (and every case of a non-blinded study) stay readable in plain review.

    study_of: case (study id) -> (the reader study's name, the case's key)."""

    study_of: Mapping[int, tuple[str, str]] = field(default_factory=dict)

    @property
    def ids(self) -> frozenset[int]:
        return frozenset(self.study_of)

    def count(self, study: str) -> int:
        """How many of the reader's cases `study` keeps out of plain review."""
        return sum(name == study for name, _ in self.study_of.values())

    def refuse(self, case: int) -> None:
        """Raises ReaderStudyError (one sentence naming the study) for such a case."""
        if case in self.study_of:
            name, key = self.study_of[case]
            raise ReaderStudyError([
                f"{key} is a case of your blinded reader study {name!r}: read it there, from "
                "the study worklist above; it opens in plain review once you have signed all "
                "your readings of the study"])


def _utcnow() -> datetime:
    return datetime.now(UTC)


MAX_READINGS = 2_000_000  # 100 readers x 10,000 cases x 2 sessions; more is a mistake


def _too_large(design_file: DesignFile, cases: int) -> list[str]:
    design = design_file.design
    readings = len(design.readers) * cases * (design.sessions if design.design == "crossover"
                                              else 1)
    if readings <= MAX_READINGS:
        return []
    return [f"{design_file.path}: cases: {len(design.readers)} readers x {cases} cases make "
            f"{readings} readings; a study holds at most {MAX_READINGS}"]


def _missing_drafts(s: Session, study_id: int) -> dict[str, int]:
    """Per draft arm (by code), the study's cases without a successful draft of its preset."""
    drafted = (select(Draft.id).where(Draft.study_id == ReaderStudyCase.study_id,
                                      Draft.preset == ReaderStudyArm.preset,
                                      Draft.error.is_(None), Draft.text.is_not(None))
               .exists())
    rows = s.execute(
        select(ReaderStudyArm.code, func.count(ReaderStudyCase.study_id))
        .join(ReaderStudyCase, ReaderStudyCase.reader_study_id == ReaderStudyArm.reader_study_id)
        .where(ReaderStudyArm.reader_study_id == study_id, ReaderStudyArm.kind == "draft",
               ~drafted)
        .group_by(ReaderStudyArm.code).order_by(ReaderStudyArm.code))
    return {code: n for code, n in rows}


def _seen_outside(s: Session, study_id: int) -> dict[str, int]:
    """Per reader of the study (by name, only those with any), its cases they already worked
    on outside every reader study: a saved edit or a rating with no reading, or time on task
    (or a status past drafted) on their review worklist. A reader study's premise is a first
    read under the arm's conditions; such readings are not (a new-user trial found `study
    create` silent about it)."""
    case, member = ReaderStudyCase, ReaderStudyReader
    worked = (select(Revision.id).where(Revision.reader_id == member.reader_id,
                                        Revision.study_id == case.study_id,
                                        Revision.reading_id.is_(None)).exists()
              | select(Rating.id).where(Rating.reader_id == member.reader_id,
                                        Rating.study_id == case.study_id,
                                        Rating.reading_id.is_(None)).exists()
              | select(WorklistItem.id).where(
                  WorklistItem.reader_id == member.reader_id,
                  WorklistItem.study_id == case.study_id,
                  (WorklistItem.active_seconds > 0)
                  | WorklistItem.status.in_(("in_review", "done"))).exists())
    rows = s.execute(
        select(Reader.name, func.count(case.study_id))
        .join(member, member.reader_id == Reader.id)
        .join(case, case.reader_study_id == member.reader_study_id)
        .where(member.reader_study_id == study_id, worked)
        .group_by(Reader.name, member.position).order_by(member.position))
    return {name: n for name, n in rows}


def _aware(value: datetime | None) -> datetime | None:
    """SQLite returns stored UTC times without their zone; PostgreSQL with it."""
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


class ReaderStudyService:
    """Reader studies in one database.

    Args:
        db: the database.
        presets: the model presets `draft:<preset>` arms may name (the model registry's).
        clock: the current time, timezone-aware (injected; the server passes its clock).
    """

    def __init__(self, db: Database, presets: Collection[str],
                 clock: Callable[[], datetime] = _utcnow) -> None:
        self.db = db
        self.presets = frozenset(presets)
        self.clock = clock

    # -- create ----------------------------------------------------------------------------------
    def create(self, design_file: DesignFile, *, replace: bool = False,
               actor: str | None = None, address: str | None = None) -> Created:
        """Store a study, its arms, readers, cases and every reading, in one transaction.

        Raises:
            ReaderStudyError: unknown readers, presets or case keys (all listed), or a name
                taken by a different design (see the module docstring).
        """
        design = design_file.design
        try:
            with self.db.write() as s:
                existing = s.scalar(select(ReaderStudy).where(ReaderStudy.name == design.name))
                if existing is not None:
                    unchanged = self._keep_or_drop(s, existing, design_file, replace)
                    if unchanged is not None:
                        return unchanged
                resolved, problems = resolve(s, design, design_file.path, self.presets)
                problems += _too_large(design_file, len(resolved.cases))
                if problems:
                    raise ReaderStudyError(problems)
                created = self._store(s, design_file, resolved, actor)
                outcome = "replaced" if existing is not None else "created"
                AuditLog(self.db).record("study_create", actor=actor, address=address,
                                         target=f"reader study {design.name}", session=s,
                                         detail=f"{outcome}; design sha256 {design_file.sha256}")
        except IntegrityError:
            if design.name not in self.names():
                raise  # not the race below: a defect, not the user's doing
            raise ReaderStudyError([f"{design_file.path}: name: a study named {design.name!r} "
                                    "was created meanwhile; nothing was stored"]) from None
        log.info("reader study %s %s: %d readings", design.name, outcome, created.readings)
        return Created(created.name, outcome, created.readers, created.cases, created.readings)

    def _keep_or_drop(self, s: Session, existing: ReaderStudy, design_file: DesignFile,
                      replace: bool) -> Created | None:
        """The study as it is when the design is the same; None after dropping it (replace
        allowed: nothing read yet); else refused."""
        name = existing.name
        if existing.canonical_sha256 == design_file.design.canonical_sha256:
            counts = self._counts(s, existing.id)
            return Created(name, "unchanged", counts[0], counts[1], counts[2])
        started = s.scalar(select(func.count(Reading.id)).where(
            Reading.reader_study_id == existing.id,
            (Reading.opened_at.is_not(None)) | (Reading.signed_at.is_not(None)))) or 0
        if started:
            raise ReaderStudyError([
                f"{design_file.path}: study {name!r} exists with a different design and "
                f"{started} of its readings have started; a started study is never "
                "re-allocated: give the changed design a new name"])
        if not replace:
            raise ReaderStudyError([
                f"{design_file.path}: study {name!r} exists with a different design; no "
                "reading has started, so `study create --replace` may re-allocate it"])
        study_id = existing.id
        s.expunge(existing)
        s.execute(delete(Reading).where(Reading.reader_study_id == study_id))
        s.execute(delete(ReaderStudy).where(ReaderStudy.id == study_id))
        s.flush()
        return None

    def _counts(self, s: Session, study_id: int) -> tuple[int, int, int]:
        readers = s.scalar(select(func.count()).select_from(ReaderStudyReader).where(
            ReaderStudyReader.reader_study_id == study_id)) or 0
        cases = s.scalar(select(func.count()).select_from(ReaderStudyCase).where(
            ReaderStudyCase.reader_study_id == study_id)) or 0
        readings = s.scalar(select(func.count(Reading.id)).where(
            Reading.reader_study_id == study_id)) or 0
        return readers, cases, readings

    def _store(self, s: Session, design_file: DesignFile, resolved: Resolved,
               actor: str | None) -> Created:
        design = design_file.design
        case_ids = {c.identity: c.study_id for c in resolved.cases}
        allocation = allocate(design.readers, list(case_ids), [a.spec for a in design.arms],
                              design=design.design, sessions=design.sessions, seed=design.seed)
        study = ReaderStudy(
            name=design.name, description=design.description, design=design.design,
            sessions=design.sessions, washout_days=design.washout_days, seed=design.seed,
            blinded=design.blinded, design_text=design_file.text,
            design_format=design_file.format, design_sha256=design_file.sha256,
            canonical_sha256=design.canonical_sha256, balance=allocation.balance.to_json(),
            created_by=actor)
        s.add(study)
        s.flush()
        codes = dict(allocation.arm_codes)
        arms = {a.spec: ReaderStudyArm(reader_study_id=study.id, code=codes[a.spec],
                                       spec=a.spec, kind=a.kind, preset=a.preset,
                                       template=a.template) for a in design.arms}
        s.add_all(arms.values())
        s.add_all(ReaderStudyReader(reader_study_id=study.id, reader_id=resolved.reader_ids[r],
                                    position=i) for i, r in enumerate(design.readers))
        s.add_all(ReaderStudyCase(reader_study_id=study.id, study_id=c.study_id, position=i)
                  for i, c in enumerate(resolved.cases))
        s.flush()
        self._insert_readings(s, study.id, allocation, resolved, case_ids,
                              {spec: arm.id for spec, arm in arms.items()})
        return Created(design.name, "created", len(design.readers), len(case_ids),
                       len(allocation.readings))

    @staticmethod
    def _insert_readings(s: Session, study_id: int, allocation: StudyAllocation,
                         resolved: Resolved, case_ids: dict[str, int],
                         arm_ids: dict[str, int]) -> None:
        rows = [{"reader_study_id": study_id, "reader_id": resolved.reader_ids[a.reader],
                 "study_id": case_ids[a.case], "arm_id": arm_ids[a.arm], "session": a.session,
                 "position": a.order} for a in allocation.readings]
        for i in range(0, len(rows), 5000):
            s.execute(insert(table_of(Reading)), rows[i:i + 5000])

    # -- read ------------------------------------------------------------------------------------
    def names(self) -> list[str]:
        with self.db.read() as s:
            return list(s.scalars(select(ReaderStudy.name).order_by(ReaderStudy.name)))

    def studies(self) -> list[StudySummary]:
        """Every study, by name."""
        with self.db.read() as s:
            return [self._summary(s, study) for study in
                    s.scalars(select(ReaderStudy).order_by(ReaderStudy.name))]

    def _summary(self, s: Session, study: ReaderStudy) -> StudySummary:
        readers, cases, readings = self._counts(s, study.id)
        signed = s.scalar(select(func.count(Reading.id)).where(
            Reading.reader_study_id == study.id, Reading.signed_at.is_not(None))) or 0
        arms = s.scalar(select(func.count(ReaderStudyArm.id)).where(
            ReaderStudyArm.reader_study_id == study.id)) or 0
        return StudySummary(study.name, study.design, study.sessions, study.washout_days,
                            study.blinded, arms, readers, cases, readings, signed,
                            _aware(study.created_at) or study.created_at)

    def _find(self, s: Session, name: str) -> ReaderStudy:
        study = s.scalar(select(ReaderStudy).where(ReaderStudy.name == name))
        if study is None:
            known = ", ".join(s.scalars(select(ReaderStudy.name).order_by(ReaderStudy.name)))
            raise ReaderStudyError([f"no reader study named {name!r} (known: "
                                    f"{known or 'none yet'})"])
        return study

    def overview(self, name: str, *, unblind: bool = False, account: Account | None = None,
                 actor: str | None = None, address: str | None = None) -> StudyOverview:
        """The stored design, its balance table and, when `unblind` (an admin's request,
        audited), the arm key.

        Args:
            name: the study's name.
            unblind: include the arm key.
            account: who asks in the app (only an admin is given the key); None: the command
                line, whose user holds the database itself.
            actor, address: for the audit trail.

        Raises:
            ReaderStudyError: no study by that name, or a reader asking for the key.
        """
        if unblind and account is not None and not account.is_admin:
            AuditLog(self.db).record("study_unblind", actor=account.name, address=address,
                                     target=f"reader study {name}", ok=False,
                                     detail="refused: not an admin")
            raise ReaderStudyError([f"only an admin may see the arm key of study {name!r}"])
        actor = account.name if account is not None else actor
        with self.db.read() as s:
            study = self._find(s, name)
            arms = list(s.scalars(select(ReaderStudyArm).where(
                ReaderStudyArm.reader_study_id == study.id).order_by(ReaderStudyArm.code)))
            overview = StudyOverview(
                self._summary(s, study), study.description, study.design_text,
                study.design_format, study.design_sha256, study.seed,
                BalanceTable.from_json(study.balance), {a.spec: a.code for a in arms},
                tuple(ArmKey(a.code, a.spec, a.template) for a in arms) if unblind else None)
        if unblind:
            AuditLog(self.db).record("study_unblind", actor=actor, address=address,
                                     target=f"reader study {name}")
        return overview

    def status(self, name: str, now: datetime | None = None) -> StudyStatus:
        """Readings done per reader and session, and each reader's session and washout left.

        Raises:
            ReaderStudyError: no study by that name.
        """
        now = now or self.clock()
        with self.db.read() as s:
            study = self._find(s, name)
            washout = timedelta(days=study.washout_days)
            readers = list(s.execute(
                select(Reader.id, Reader.name).join(
                    ReaderStudyReader, ReaderStudyReader.reader_id == Reader.id)
                .where(ReaderStudyReader.reader_study_id == study.id)
                .order_by(ReaderStudyReader.position)))
            progress = self.progress(s, study)
            missing = _missing_drafts(s, study.id)
            seen = _seen_outside(s, study.id)
        rows = []
        for reader_id, reader_name in readers:
            sessions = progress.get(reader_id, ())
            plan = schedule(sessions, washout, now)
            rows.append(ReaderStatus(reader_name, sessions, plan, plan.wait(now)))
        return StudyStatus(name, now, washout, tuple(rows), missing, seen)

    @staticmethod
    def progress(s: Session, study: ReaderStudy,
                  reader_id: int | None = None) -> dict[int, tuple[SessionProgress, ...]]:
        stmt = (select(Reading.reader_id, Reading.session, func.count(Reading.id),
                       func.count(Reading.signed_at), func.max(Reading.signed_at))
                .where(Reading.reader_study_id == study.id)
                .group_by(Reading.reader_id, Reading.session))
        if reader_id is not None:
            stmt = stmt.where(Reading.reader_id == reader_id)
        found: dict[tuple[int, int], SessionProgress] = {}
        for rid, session, total, signed, last in s.execute(stmt):
            found[(rid, session)] = SessionProgress(session, total, signed, _aware(last))
        ids = {rid for rid, _ in found}
        return {rid: tuple(found.get((rid, n), SessionProgress(n, 0, 0, None))
                           for n in range(1, study.sessions + 1)) for rid in ids}

    def case_keys(self, study_ids: Collection[int]) -> dict[int, str]:
        """The study keys of cases (what a reader's study worklist names them by)."""
        if not study_ids:
            return {}
        with self.db.read() as s:
            rows = s.execute(select(Study.id, Study.study_key).where(
                Study.id.in_(list(study_ids))))
            return {study_id: key for study_id, key in rows}

    def blinded_cases(self, reader: int, case: int | None = None) -> BlindedCases:
        """The cases of the reader's unfinished blinded studies, in one query (the reader's
        readings, by the reader index; a study is unfinished while one of the reader's
        readings in it is unsigned, which is `schedule(...).finished` negated: a session
        waiting for its washout counts, its readings are unsigned).

        Args:
            reader: the reader's id (an account that reads in no study: no cases).
            case: only this case (is it held?); None: all of them.
        """
        # not a correlated EXISTS: that probes once per reading, and walks all of a finished
        # study's readings each time
        unsigned = select(Reading.reader_study_id).where(
            Reading.reader_id == reader, Reading.signed_at.is_(None))
        stmt = (select(Reading.study_id, ReaderStudy.name, Study.study_key)
                .join(ReaderStudy, ReaderStudy.id == Reading.reader_study_id)
                .join(Study, Study.id == Reading.study_id)
                .where(Reading.reader_id == reader, ReaderStudy.blinded.is_(True),
                       Reading.reader_study_id.in_(unsigned))
                .order_by(ReaderStudy.name).distinct())
        if case is not None:
            stmt = stmt.where(Reading.study_id == case)
        with self.db.read() as s:
            found: dict[int, tuple[str, str]] = {}
            for case, name, key in s.execute(stmt):
                found.setdefault(case, (name, key))
        return BlindedCases(found)

    def studies_of(self, reader: str) -> list[str]:
        """The names of the studies `reader` is a reader of (the page shows their
        worklists), by name."""
        with self.db.read() as s:
            return list(s.scalars(
                select(ReaderStudy.name)
                .join(ReaderStudyReader, ReaderStudyReader.reader_study_id == ReaderStudy.id)
                .join(Reader, Reader.id == ReaderStudyReader.reader_id)
                .where(Reader.name == reader).order_by(ReaderStudy.name)))

    def worklist(self, name: str, reader: str, now: datetime | None = None) -> StudyWorklist:
        """A reader's readings of their open session in the allocated order (none while their
        next session waits for its washout, or once they are finished).

        Raises:
            ReaderStudyError: no such study, or the account is not one of its readers.
        """
        now = now or self.clock()
        with self.db.read() as s:
            study = self._find(s, name)
            reader_id = s.scalar(select(ReaderStudyReader.reader_id).join(
                Reader, Reader.id == ReaderStudyReader.reader_id).where(
                ReaderStudyReader.reader_study_id == study.id, Reader.name == reader))
            if reader_id is None:
                raise ReaderStudyError([f"{reader!r} is not a reader of study {name!r}"])
            sessions = self.progress(s, study, reader_id).get(reader_id, ())
            plan = schedule(sessions, timedelta(days=study.washout_days), now)
            readings: tuple[WorklistReading, ...] = ()
            if plan.open_session is not None:
                rows = s.execute(
                    select(Reading, ReaderStudyArm.code)
                    .join(ReaderStudyArm, ReaderStudyArm.id == Reading.arm_id)
                    .where(Reading.reader_study_id == study.id, Reading.reader_id == reader_id,
                           Reading.session == plan.open_session)
                    .order_by(Reading.position))
                readings = tuple(
                    WorklistReading(r.id, r.study_id, r.session, r.position, code,
                                    _aware(r.opened_at), _aware(r.signed_at))
                    for r, code in rows)
        return StudyWorklist(name, plan, plan.wait(now), readings, study.blinded)

    # -- a reader's readings ---------------------------------------------------------------------
    def open_reading(self, reading_id: int, reader: str,
                     now: datetime | None = None) -> WorklistReading:
        """Record that `reader` opened one of their readings (the first time only).

        The server decides, not the page: a reading of another reader, or of a session that is
        not open to the reader now (its washout has not passed, or an earlier session is not
        signed yet), is refused.

        Raises:
            ReaderStudyError: the refusal, in one sentence.
        """
        return self._mark(reading_id, reader, now or self.clock())

    def _mark(self, reading_id: int, reader: str, now: datetime) -> WorklistReading:
        """Record the first opening (a reader's Sign is `reading.ReadingDesk.sign_preview`
        and `sign`: a confirmation, and the final report stored as the reading's
        revisions)."""
        with self.db.write(scope=ROWS) as s:
            reading, _, code = reading_for(s, reading_id, reader, now)
            if reading.opened_at is None:
                reading.opened_at = now
            s.flush()
            return worklist_reading(reading, code)


def worklist_reading(reading: Reading, code: str) -> WorklistReading:
    return WorklistReading(reading.id, reading.study_id, reading.session, reading.position,
                           code, _aware(reading.opened_at), _aware(reading.signed_at))


def reading_for(s: Session, reading_id: int, reader: str,
                now: datetime) -> tuple[Reading, ReaderStudy, str]:
    """One of `reader`'s readings that they may work on now, locked (FOR UPDATE on
    PostgreSQL: every write of a reading is serialised by its row), with its study and arm
    code. The server decides, not the page: another reader's reading, or one of a session not
    open to the reader now (washout, an earlier session unsigned), is refused; a signed
    reading stays readable.

    Raises:
        ReaderStudyError: the refusal, in one sentence.
    """
    reader_id = s.scalar(select(Reader.id).where(Reader.name == reader))
    reading = s.scalar(select(Reading).where(Reading.id == reading_id,
                                             Reading.reader_id == reader_id)
                       .with_for_update()) if reader_id is not None else None
    if reading is None:
        raise ReaderStudyError([f"reading {reading_id} is not one of the readings of "
                                f"{reader!r}"])
    study = s.get_one(ReaderStudy, reading.reader_study_id)
    code = s.get_one(ReaderStudyArm, reading.arm_id).code
    sessions = ReaderStudyService.progress(s, study, reading.reader_id).get(reading.reader_id,
                                                                            ())
    plan = schedule(sessions, timedelta(days=study.washout_days), now)
    if reading.signed_at is None and plan.open_session != reading.session:
        raise ReaderStudyError([_closed(reading.session, plan, now)])
    return reading, study, code


def _closed(session: int, plan: ReaderSchedule, now: datetime) -> str:
    """Why a reading of `session` cannot be worked on now."""
    if plan.open_session is not None and plan.open_session < session:
        return (f"session {session} is not open: session {plan.open_session} is not signed "
                "yet")
    if plan.next_session == session and plan.opens_at is not None:
        return (f"session {session} opens {plan.opens_at:%Y-%m-%d %H:%M} UTC, after the "
                f"washout ({describe_wait(plan.wait(now))} left)")
    return f"session {session} is not open now"
