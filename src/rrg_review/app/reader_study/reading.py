"""A reader's work on one reading of a reader study: open it (the arm's text as the draft,
blinded), save edits as revisions of this reading (conflicts as on the review screen), count
active time and keystrokes, rate it, and sign it after an explicit confirmation.

What is returned to a reader never names the arm: no preset, model id, provenance or retrieval
note, and no separate reference report (a blinded study hides it; the `reference` arm shows
the dataset's report as the draft, like any other draft). The draft ids stay on the server
(`reading_section.draft_id`). A case read in two sessions has two readings, so two histories
(revisions and ratings carry their `reading_id`; the numbers run on in one sequence).

Signing is two steps: `sign_preview` shows the report as it will be signed with a
confirmation token (the revisions shown); `sign` with that token signs it, and is refused
when the report changed since (another tab saved). A section never saved is stored then as
the draft it showed, so every signed reading's final report is in its revisions.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rrg_review.app.accounts.audit import AuditLog
from rrg_review.app.reader_study.service import (
    ReaderStudyError,
    ReaderStudyService,
    ReadingSigned,
    WorklistReading,
    reading_for,
    worklist_reading,
)
from rrg_review.app.review.aids import ReviewAids
from rrg_review.app.review.service import (
    MAX_ACTIVE_GAP_S,
    SECTIONS,
    EditConflict,
    RatingView,
    ReviewError,
    RevisionScope,
    RevisionView,
    likert_score,
    rexval_counts,
    save_revision,
    set_aside_revision,
    suggested_counts,
)
from rrg_review.db.engine import ROWS, Database
from rrg_review.db.models import (
    Draft,
    Rating,
    Reader,
    ReaderStudyArm,
    Reading,
    ReadingSection,
    ReferenceReport,
    Revision,
    Study,
)
from rrg_review.db.store import prior_ids
from rrg_review.metrics.findings.flags import DraftFlag

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReadingKeys:
    """The page's count of a reader's typing in one section since its last save: first and
    last keystroke (UTC), keystroke events and edit operations (no text)."""

    first: datetime
    last: datetime
    keystrokes: int = 0
    edits: int = 0


@dataclass(frozen=True)
class ReadingEdit:
    """One section's text, the revision it was edited from (None: from the draft shown)."""

    text: str
    base: int | None
    keys: ReadingKeys | None = None


@dataclass(frozen=True)
class SectionOnScreen:
    section: str
    draft: str  # the arm's text: empty, the template, a model's draft or the dataset's report
    text: str  # the reader's latest text of this reading, else the draft
    revision: int | None  # the base of the next save


@dataclass(frozen=True)
class OpenedReading:
    """A reading as its reader sees it: the blinded arm code only."""

    study: str
    reading: WorklistReading
    sections: tuple[SectionOnScreen, ...]
    active_seconds: float


@dataclass(frozen=True)
class SignPreview:
    reading: WorklistReading
    report: dict[str, str]  # section -> the text that will be signed
    token: str  # give it back to `sign`: what was confirmed is what is signed


def _arm_texts(s: Session, arm: ReaderStudyArm, case_id: int) -> dict[str, tuple[str, int | None]]:
    """section -> (the arm's text for this case, the draft id it came from)."""
    if arm.kind == "draft":
        out: dict[str, tuple[str, int | None]] = {}
        for d in s.scalars(select(Draft).where(
                Draft.study_id == case_id, Draft.preset == arm.preset, Draft.error.is_(None),
                Draft.text.is_not(None)).order_by(Draft.id)):
            out[d.section] = (d.text or "", d.id)  # the newest draft of a section wins
        return {sec: out.get(sec, ("", None)) for sec in SECTIONS}
    if arm.kind == "reference":
        ref = s.scalar(select(ReferenceReport).where(ReferenceReport.study_id == case_id))
        texts = {"findings": ref.findings if ref else None,
                 "impression": ref.impression if ref else None}
        return {sec: (texts.get(sec) or "", None) for sec in SECTIONS}
    template = arm.template or ""
    return {sec: (template if sec == SECTIONS[0] else "", None) for sec in SECTIONS}


def _latest(s: Session, reading: Reading, section: str) -> Revision | None:
    scope = RevisionScope(reading.reader_id, reading.study_id, reading.id)
    return s.scalar(select(Revision).where(scope.of(section))
                    .order_by(Revision.number.desc()).limit(1))


def _token(shown: dict[str, tuple[int | None, str]]) -> str:
    text = "\0".join(f"{sec}:{num}:{txt}" for sec, (num, txt) in sorted(shown.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class ReadingDesk:
    """A reader's readings in one database, with the server's clock (injected)."""

    def __init__(self, studies: ReaderStudyService, audit: AuditLog | None = None) -> None:
        self.studies = studies
        self.db: Database = studies.db
        self.audit = audit or AuditLog(studies.db)
        self.aids = ReviewAids()

    def _now(self, now: datetime | None) -> datetime:
        return now or self.studies.clock()

    # -- open ------------------------------------------------------------------------------------
    def open(self, reading_id: int, reader: str, now: datetime | None = None,
             address: str | None = None) -> OpenedReading:
        """Open a reading: the first time records when, and which draft each section showed.

        Raises:
            ReaderStudyError: not the reader's, or its session is not open now.
        """
        now = self._now(now)
        with self.db.write(scope=ROWS) as s:
            reading, study, code = reading_for(s, reading_id, reader, now)
            arm = s.get_one(ReaderStudyArm, reading.arm_id)
            texts = _arm_texts(s, arm, reading.study_id)
            if reading.opened_at is None:
                reading.opened_at = now
                self.audit.record("reading_open", session=s, actor=reader, address=address,
                                  target=f"reading {reading.id}")
            # (also for a reading marked opened without them: `ReaderStudyService.open_reading`)
            s.add_all(ReadingSection(reading_id=reading.id, section=sec, draft_id=texts[sec][1],
                                     keystrokes=0, edits=0) for sec in SECTIONS
                      if s.get(ReadingSection, (reading.id, sec)) is None)
            s.flush()
            sections = []
            for sec in SECTIONS:
                latest = _latest(s, reading, sec)
                draft = texts[sec][0]
                sections.append(SectionOnScreen(sec, draft, latest.text if latest else draft,
                                                latest.number if latest else None))
            return OpenedReading(study.name, worklist_reading(reading, code), tuple(sections),
                                 reading.active_seconds)

    def flags(self, reading_id: int, reader: str,
              texts: dict[str, str]) -> tuple[DraftFlag, ...]:
        """The flags on a reading's text as it is on screen (issue #22): only those that need
        no answer (a contradiction, findings and impression disagreeing, a comparison without a
        prior). A reading is blinded: no reference-based flag, whatever the dataset's report
        says (it would tell the reader the answer, and the `reference` arm's draft is that
        report).

        Raises:
            ReaderStudyError: not the reader's reading.
        """
        with self.db.read() as s:
            reading = s.scalar(select(Reading).join(Reader, Reader.id == Reading.reader_id)
                               .where(Reading.id == reading_id, Reader.name == reader))
            if reading is None:
                raise ReaderStudyError([f"reading {reading_id} is not one of the readings of "
                                        f"{reader!r}"])
            study = s.get_one(Study, reading.study_id)
            # priors are found by date: without one, nobody can tell (no comparison flag)
            has_prior = bool(prior_ids(s, study)) if study.study_date is not None else None
        return self.aids.flags(texts, has_prior=has_prior)

    # -- edit ------------------------------------------------------------------------------------
    def save(self, reading_id: int, reader: str, edits: dict[str, ReadingEdit], *,
             autosave: bool = False, now: datetime | None = None,
             address: str | None = None) -> dict[str, RevisionView | EditConflict]:
        """Save sections' edits as revisions of this reading, in one transaction; a section
        saved elsewhere since its base gets its EditConflict (nothing written for it).

        Raises:
            ReaderStudyError: not the reader's, its session not open, not opened, or signed.
        """
        unknown = [sec for sec in edits if sec not in SECTIONS]
        if unknown:
            raise ReaderStudyError([f"unknown section {unknown[0]!r}"])
        out: dict[str, RevisionView | EditConflict] = {}
        with self.db.write(scope=ROWS) as s:
            reading = self._editable(s, reading_id, reader, self._now(now))
            scope = RevisionScope(reading.reader_id, reading.study_id, reading.id)
            for sec, edit in edits.items():
                row = s.get_one(ReadingSection, (reading.id, sec))
                draft_id = row.draft_id if edit.base is None else None
                try:
                    revision, created = save_revision(s, scope, sec, edit.text, edit.base,
                                                      draft_id, autosave)
                except EditConflict as exc:
                    out[sec] = exc
                    continue
                _count_keys(row, edit.keys)
                if created:
                    self.audit.record("save", session=s, actor=reader, address=address,
                                      target=f"reading {reading.id} {sec} revision "
                                             f"{revision.number}")
                out[sec] = revision
        return out

    def _editable(self, s: Session, reading_id: int, reader: str, now: datetime) -> Reading:
        reading, _, _ = reading_for(s, reading_id, reader, now)
        if reading.opened_at is None:
            raise ReaderStudyError([f"reading {reading_id} has not been opened"])
        if reading.signed_at is not None:
            raise ReadingSigned([f"reading {reading_id} is signed; a signed reading is "
                                 "not changed"])
        return reading

    def history(self, reading_id: int, reader: str, section: str) -> list[RevisionView]:
        """Every revision of one section of this reading (not of the same case's other
        readings), oldest first."""
        with self.db.write(scope=ROWS) as s:
            reading, _, _ = reading_for(s, reading_id, reader, self._now(None))
            scope = RevisionScope(reading.reader_id, reading.study_id, reading.id)
            return [RevisionView(r.id, r.section, r.number, r.text, r.autosave, r.draft_id,
                                 r.created_at)
                    for r in s.scalars(select(Revision).where(scope.of(section))
                                       .order_by(Revision.number))]

    def current(self, reading_id: int, reader: str) -> dict[str, RevisionView]:
        """The latest revision of each section of this reading (sections never saved are
        absent), as `ReviewService.current` gives them for a plain review."""
        with self.db.read() as s:
            reading, _, _ = reading_for(s, reading_id, reader, self._now(None))
            out = {}
            for sec in SECTIONS:
                r = _latest(s, reading, sec)
                if r is not None:
                    out[sec] = RevisionView(r.id, r.section, r.number, r.text, r.autosave,
                                            r.draft_id, r.created_at)
            return out

    def signed_at(self, reading_id: int, reader: str) -> datetime | None:
        """When this reading was signed (None: not yet). A tab asks on its heartbeat, so a
        reading signed in another tab or window turns read-only there by itself: it looked
        editable until the reader's next save was refused (a new-user trial)."""
        with self.db.read() as s:
            reading, _, _ = reading_for(s, reading_id, reader, self._now(None))
            return reading.signed_at

    def latest_rating(self, reading_id: int, reader: str) -> RatingView | None:
        """The reader's newest rating of this reading (not of the case's other readings)."""
        with self.db.read() as s:
            reading, _, _ = reading_for(s, reading_id, reader, self._now(None))
            r = s.scalar(select(Rating).where(Rating.reading_id == reading.id)
                         .order_by(Rating.number.desc()).limit(1))
            return None if r is None else RatingView(r.number, None, r.likert, r.acceptable,
                                                     dict(r.errors), r.comment, r.created_at)

    def set_aside(self, reading_id: int, reader: str, mine: dict[str, tuple[str, int]],
                  address: str | None = None) -> dict[str, RevisionView | EditConflict]:
        """"Take theirs" in a reading without losing the reader's words, in one transaction:
        per section the reader's text on top of the newer revision, then that newer text
        again (`set_aside_revision`, as `ReviewService.set_aside` does for a plain review)."""
        out: dict[str, RevisionView | EditConflict] = {}
        with self.db.write(scope=ROWS) as s:
            reading = self._editable(s, reading_id, reader, self._now(None))
            scope = RevisionScope(reading.reader_id, reading.study_id, reading.id)
            for sec, (text, number) in mine.items():
                try:
                    aside = set_aside_revision(s, scope, sec, text, number)
                except EditConflict as exc:
                    out[sec] = exc
                    continue
                except ReviewError as exc:
                    raise ReaderStudyError([str(exc)]) from None
                self.audit.record("take_theirs", session=s, actor=reader, address=address,
                                  target=aside.audit_target(f"reading {reading.id}"))
                out[sec] = aside.current
        return out

    def heartbeat(self, reading_id: int, reader: str, seconds_since_last: float,
                  at: float | None = None, now: datetime | None = None) -> float:
        """Active time by the review screen's rule (a beat adds at most MAX_ACTIVE_GAP_S,
        overlapping beats of several tabs count once); a signed reading's time is final.

        Returns:
            The reading's active seconds after the beat.
        """
        seconds = float(seconds_since_last)
        seconds = seconds if math.isfinite(seconds) else 0.0
        end = time.time() if at is None else float(at)
        start = end - max(0.0, min(seconds, MAX_ACTIVE_GAP_S))
        with self.db.write(durable=False, scope=ROWS) as s:
            reading, _, _ = reading_for(s, reading_id, reader, self._now(now))
            if reading.signed_at is not None or reading.opened_at is None:
                return reading.active_seconds
            if reading.active_until is not None:
                start = max(start, reading.active_until)
            if end > start:
                reading.active_seconds += end - start
            if reading.active_until is None or end > reading.active_until:
                reading.active_until = end
            return reading.active_seconds

    def rate(self, reading_id: int, reader: str, *, likert: object,
             acceptable: bool | None = None,
             errors: dict[str, dict[str, object]] | None = None,
             comment: str | None = None, now: datetime | None = None,
             address: str | None = None,
             suggested: dict[str, int] | None = None) -> RatingView:
        """The reader's rating of this reading's draft (Likert 1-5, ReXVal counts), stored
        with the reading and no preset name (the arm is the reading's); `suggested`: the
        counts suggested from the reader's edit that they confirmed or changed (#22)."""
        score = likert_score(likert)
        clean = rexval_counts(errors or {})
        proposed = suggested_counts(suggested) if suggested is not None else None
        with self.db.write(scope=ROWS) as s:
            reading = self._editable(s, reading_id, reader, self._now(now))
            number = int(s.scalar(select(func.coalesce(func.max(Rating.number), 0)).where(
                Rating.reader_id == reading.reader_id,
                Rating.study_id == reading.study_id)) or 0) + 1
            rating = Rating(reader_id=reading.reader_id, study_id=reading.study_id,
                            number=number, preset=None, likert=score, acceptable=acceptable,
                            errors=clean, comment=(comment or "").strip() or None,
                            reading_id=reading.id, suggested=proposed)
            s.add(rating)
            s.flush()
            self.audit.record("rate", session=s, actor=reader, address=address,
                              target=f"reading {reading.id} rating {number}")
            return RatingView(rating.number, None, rating.likert, rating.acceptable,
                              dict(rating.errors), rating.comment, rating.created_at, proposed)

    # -- sign ------------------------------------------------------------------------------------
    def sign_preview(self, reading_id: int, reader: str,
                     now: datetime | None = None) -> SignPreview:
        """The report as it would be signed now, and the token that confirms it."""
        with self.db.write(scope=ROWS) as s:
            reading = self._editable(s, reading_id, reader, self._now(now))
            shown = self._final(s, reading)
            code = s.get_one(ReaderStudyArm, reading.arm_id).code
            return SignPreview(worklist_reading(reading, code),
                               {sec: txt for sec, (_, txt) in shown.items()}, _token(shown))

    def sign(self, reading_id: int, reader: str, confirm: str, now: datetime | None = None,
             address: str | None = None) -> WorklistReading:
        """Sign the reading the reader confirmed (`confirm`: the preview's token).

        Raises:
            ReaderStudyError: the report changed since the preview, it is empty, or the
                reading cannot be worked on (see `save`).
        """
        now = self._now(now)
        with self.db.write(scope=ROWS) as s:
            reading = self._editable(s, reading_id, reader, now)
            shown = self._final(s, reading)
            if confirm != _token(shown):
                raise ReaderStudyError([f"reading {reading_id} changed since you were asked to "
                                        "confirm; review it and sign again"])
            if not any(txt.strip() for _, txt in shown.values()):
                raise ReaderStudyError([f"reading {reading_id} has an empty report; write it "
                                        "before signing"])
            scope = RevisionScope(reading.reader_id, reading.study_id, reading.id)
            for sec, (number, txt) in shown.items():
                if number is None:  # signed as shown: the draft becomes its revision
                    row = s.get_one(ReadingSection, (reading.id, sec))
                    save_revision(s, scope, sec, txt, None, row.draft_id, False)
            reading.signed_at = now
            code = s.get_one(ReaderStudyArm, reading.arm_id).code
            self.audit.record("reading_sign", session=s, actor=reader, address=address,
                              target=f"reading {reading.id}")
            s.flush()
            log.info("reading %d signed by %s", reading.id, reader)
            return worklist_reading(reading, code)

    def _final(self, s: Session, reading: Reading) -> dict[str, tuple[int | None, str]]:
        """section -> (its latest revision's number or None, the text on screen)."""
        arm = s.get_one(ReaderStudyArm, reading.arm_id)
        texts = _arm_texts(s, arm, reading.study_id)
        out: dict[str, tuple[int | None, str]] = {}
        for sec in SECTIONS:
            latest = _latest(s, reading, sec)
            out[sec] = (latest.number, latest.text) if latest else (None, texts[sec][0])
        return out


def _count_keys(row: ReadingSection, keys: ReadingKeys | None) -> None:
    """Add the page's counts to the section's timing (first keystroke kept, last moved on)."""
    if keys is None:
        return
    if row.first_keystroke_at is None:
        row.first_keystroke_at = keys.first
    row.last_keystroke_at = keys.last
    row.keystrokes += max(0, int(keys.keystrokes))
    row.edits += max(0, int(keys.edits))
