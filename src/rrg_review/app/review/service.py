"""The review use case: a reader's edits saved as revisions (with conflict detection), ratings
with the ReXVal taxonomy, and active time on task. Accounts, worklists and exports are their own
services (accounts.service, worklist.service, evaluation.export), called by the callers.

Nothing a reader wrote is updated in place: each save is a new Revision or Rating row, in one
transaction. A save states which revision it was edited from; if another tab or reader of the
same account saved in between, the save is refused with the current text (`EditConflict`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import flag_modified

from rrg_review.app.accounts.audit import AuditLog
from rrg_review.core.vocabulary import ERROR_KINDS, REXVAL_CATEGORIES, SECTIONS, rexval_label
from rrg_review.db.engine import ROWS, Database, DatabaseBusy
from rrg_review.db.models import (
    Draft,
    Rating,
    Reader,
    Revision,
    SectionTiming,
    WorklistItem,
    utcnow,
)

# active time: a heartbeat adds the time since the previous one, at most this much, so a tab
# left open overnight does not count as work
MAX_ACTIVE_GAP_S = 60.0
# the vocabulary the review screen shows and the service validates: the UI imports it from
# here (the services), never from the database models
__all__ = ["REXVAL_CATEGORIES", "SECTIONS", "DatabaseBusy", "EditConflict", "ReviewError",
           "ReviewService", "SectionEdit"]


class ReviewError(ValueError):
    pass


class ReadOnlyNow(ReviewError):
    """What the tab edits became read-only since it was opened (a reader-study reading signed
    in another tab or window): nothing more is saved to it."""


class EditConflict(ReviewError):
    """The section was saved elsewhere since this edit began; nothing was written."""

    def __init__(self, section: str, current: RevisionView) -> None:
        super().__init__(f"{section} was saved elsewhere (revision {current.number} at "
                         f"{current.created_at:%H:%M:%S}); reload it before saving again")
        self.section = section
        self.current = current


# -- views -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RevisionView:
    id: int
    section: str
    number: int
    text: str
    autosave: bool
    draft_id: int | None
    created_at: datetime


@dataclass(frozen=True)
class RatingView:
    number: int
    preset: str | None
    likert: int | None
    acceptable: bool | None
    errors: dict[str, dict[str, int]]
    comment: str | None
    created_at: datetime
    suggested: dict[str, int] | None = None  # the counts suggested from the edit (#22)


@dataclass(frozen=True)
class Keystrokes:
    """A reader's typing in one section since the last save: first and last keystroke (UTC)
    and whether a model draft was on screen at the first one."""

    first: datetime
    last: datetime
    draft_on_screen: bool


@dataclass(frozen=True)
class SectionEdit:
    """One section's text to save, the revision it was edited from (None: from the draft),
    the draft it started from and the reader's keystrokes in it."""

    text: str
    base: int | None
    draft_id: int | None = None
    timing: Keystrokes | None = None


@dataclass(frozen=True)
class TimingView:
    first_keystroke_at: datetime | None
    last_keystroke_at: datetime | None
    submitted_at: datetime | None
    draft_on_screen: bool | None


def _revision(r: Revision) -> RevisionView:
    return RevisionView(r.id, r.section, r.number, r.text, r.autosave, r.draft_id, r.created_at)


def _rating(r: Rating) -> RatingView:
    return RatingView(r.number, r.preset, r.likert, r.acceptable, dict(r.errors or {}),
                      r.comment, r.created_at,
                      dict(r.suggested) if r.suggested is not None else None)


def _count(value: object, where: str) -> int:
    """A ReXVal count: a non-negative whole number (1.0 is 1; 1.5, -1, NaN, True, "x" are not)."""
    if value is None or value == "":
        return 0
    if isinstance(value, bool):
        raise ReviewError(f"{where}: a count must be a whole number, not {value!r}")
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ReviewError(f"{where}: a count must be a whole number, not {value!r}") from None
    if not math.isfinite(number) or number != int(number):
        raise ReviewError(f"{where}: a count must be a whole number, not {value!r}")
    if number < 0:
        raise ReviewError(f"{where}: a count cannot be negative")
    return int(number)


def suggested_counts(suggested: dict[str, int]) -> dict[str, int]:
    """Every ReXVal category's suggested count (0 where none), checked like a reader's."""
    unknown = sorted(set(suggested) - set(REXVAL_CATEGORIES))
    if unknown:
        raise ReviewError(f"unknown ReXVal category {unknown[0]!r} in the suggestion")
    return {c: _count(suggested.get(c, 0), f"suggested {rexval_label(c)}")
            for c in REXVAL_CATEGORIES}


def likert_score(value: object) -> int:
    if value is None or value == "":
        raise ReviewError("choose an overall quality score (Likert 1-5) before submitting")
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ReviewError(f"overall quality must be 1-5, not {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(number) or number != int(number) \
            or not 1 <= number <= 5:
        raise ReviewError(f"overall quality must be 1-5, not {value!r}")
    return int(number)


def rexval_counts(errors: dict[str, dict[str, object]]) -> dict[str, dict[str, int]]:
    """Every count checked; all the bad ones named at once, by the labels readers see."""
    clean: dict[str, dict[str, int]] = {}
    problems: list[str] = []
    for category, counts in errors.items():
        if category not in REXVAL_CATEGORIES:
            raise ReviewError(f"unknown ReXVal category {category!r} "
                              f"(one of {', '.join(REXVAL_CATEGORIES)})")
        clean[category] = {}
        for kind in ERROR_KINDS:
            where = (f"{rexval_label(category)}, "
                     f"{'clinically significant' if kind == 'significant' else kind}")
            try:
                clean[category][kind] = _count((counts or {}).get(kind, 0), where)
            except ReviewError as exc:
                problems.append(str(exc))
    if problems:
        raise ReviewError("; ".join(problems))
    return {c: clean.get(c, {"significant": 0, "insignificant": 0}) for c in REXVAL_CATEGORIES}


@dataclass(frozen=True)
class RevisionScope:
    """Whose history a save extends: a reader's case outside studies (`reading_id` None) or
    one reader-study reading of it. Numbers run in one sequence per reader, case and section
    (unique), while "the latest revision" and conflicts are judged within the scope, so a case
    read in two sessions keeps two histories."""

    reader_id: int
    study_id: int
    reading_id: int | None

    def of(self, section: str) -> Any:
        """The WHERE clause of this scope's revisions of one section."""
        reading = (Revision.reading_id.is_(None) if self.reading_id is None
                   else Revision.reading_id == self.reading_id)
        return (Revision.reader_id == self.reader_id) & (Revision.study_id == self.study_id) \
            & (Revision.section == section) & reading


def save_revision(s: Session, scope: RevisionScope, section: str, text: str,
                  base_number: int | None, draft_id: int | None,
                  autosave: bool) -> tuple[RevisionView, bool]:
    """Store `text` as the next revision of `section` in `scope` unless it is already the
    latest; refuse (EditConflict) when another save came in since `base_number` with other
    words. The caller holds the row lock that serialises this scope's writes.

    Returns:
        The revision (new, or the latest when its text is already this text) and whether it
        is new.
    """
    where = scope.of(section)
    latest = s.scalar(select(Revision).where(where).order_by(Revision.number.desc()).limit(1))
    latest_number = latest.number if latest else None
    if latest_number != base_number:
        if latest is not None and latest.text == text:
            return _revision(latest), False  # the other save wrote the same words
        if latest is None:
            raise ReviewError(f"{section}: revision {base_number} does not exist")
        base = (s.scalar(select(Revision.text).where(where, Revision.number == base_number))
                if base_number is not None else None)
        if base is None or base != latest.text:
            raise EditConflict(section, _revision(latest))
        # the newer revisions end on the very words this edit started from (another tab's
        # "take theirs" stores them again): nothing to choose between, so the edit goes on
        # top (a third new-user trial was asked to choose its own words)
    if latest is not None and latest.text == text:
        return _revision(latest), False
    if draft_id is not None and s.get(Draft, draft_id) is None:
        raise ReviewError(f"draft {draft_id} does not exist")
    number = int(s.scalar(select(func.coalesce(func.max(Revision.number), 0)).where(
        Revision.reader_id == scope.reader_id, Revision.study_id == scope.study_id,
        Revision.section == section)) or 0) + 1
    revision = Revision(reader_id=scope.reader_id, study_id=scope.study_id, section=section,
                        number=number, text=text, draft_id=draft_id, autosave=autosave,
                        created_at=utcnow(), reading_id=scope.reading_id)
    s.add(revision)
    s.flush()
    return _revision(revision), True


@dataclass(frozen=True)
class SetAside:
    """What `set_aside_revision` stored: the reader's words kept in the history and the newer
    text stored again on top of them (current); `created`: whether either save wrote a row."""

    kept: RevisionView
    current: RevisionView
    created: bool

    def audit_target(self, where: str) -> str:
        """The audit log's target of this "take theirs" (`where`: "study 3", "reading 7")."""
        return (f"{where} {self.current.section} revision {self.current.number} "
                f"(yours kept as {self.kept.number})")


def set_aside_revision(s: Session, scope: RevisionScope, section: str, text: str,
                       theirs_number: int) -> SetAside:
    """"Take theirs" without losing the reader's words: the reader's refused `text` is stored
    on top of the newer revision `theirs_number`, then that newer text again on top of it, so
    the newer text stays current and the reader's words are in the history (before, "take
    theirs" dropped them: found in a new-user trial). One function for the plain review and
    the reader-study reading, which differ only in their scope, bookkeeping and audit target.
    The caller holds the row lock that serialises this scope's writes.

    Raises:
        EditConflict: yet another revision came in meanwhile (nothing stored for it).
        ReviewError: revision `theirs_number` does not exist in this scope.
    """
    theirs = s.scalar(select(Revision).where(scope.of(section),
                                             Revision.number == theirs_number))
    if theirs is None:
        raise ReviewError(f"{section}: revision {theirs_number} does not exist")
    kept, kept_new = save_revision(s, scope, section, text, theirs_number, None, True)
    current, current_new = save_revision(s, scope, section, theirs.text, kept.number,
                                         theirs.draft_id, True)
    return SetAside(kept, current, kept_new or current_new)


class SavedSections(dict[str, "RevisionView | EditConflict"]):
    """`ReviewService.save_sections`' answer: section -> its revision or its conflict, and
    whether the save withdrew the reader's "acceptable without changes"."""

    withdrawn: bool = False


class ReviewService:
    """A reader's work on one study: revisions, conflicts, ratings and time on task.

    Who the reader is (accounts.service), which studies they have (worklist.service) and what
    their work becomes (evaluation.export) are other services: the callers call them."""

    def __init__(self, db: Database, audit: AuditLog | None = None) -> None:
        self.db = db
        self.audit = audit or AuditLog(db)

    def _item(self, s: Session, reader_id: int, study_id: int, lock: bool = False) -> WorklistItem:
        """The reader's worklist entry of the study; `lock`: FOR UPDATE, taken first by every
        write of this service (`scope=ROWS`), so on PostgreSQL the writes of one reader's study
        (next revision or rating number, "was this edited since?", the status, time counted)
        are serialised by this row, and those of other studies or readers never wait for them.
        SQLite serialises all writers and ignores it."""
        query = select(WorklistItem).where(WorklistItem.reader_id == reader_id,
                                           WorklistItem.study_id == study_id)
        item = s.scalar(query.with_for_update() if lock else query)
        if item is None:
            raise ReviewError(f"study {study_id} is not on this reader's worklist")
        return item

    def heartbeat(self, reader_id: int, study_id: int, seconds_since_last: float,
                  at: float | None = None) -> float:
        """Add active time (capped per beat); returns the study's total active seconds.

        Time is a measurement, not work: it never changes the study's status (only a save or a
        rating does), so opening or passing a study leaves it as it was. A beat stands for the
        wall-clock interval [at - seconds, at]; only the part after the time already counted
        for this reader and study is added, so three tabs (or app processes) open on one study
        count its time once, not three times.

        Args:
            reader_id: the reader.
            study_id: the study on screen.
            seconds_since_last: seconds since the previous beat; capped at MAX_ACTIVE_GAP_S,
                negative counts as 0 and NaN or infinity as 0 (an idle tab adds nothing).
            at: the beat's wall-clock time in epoch seconds (default: now).

        Returns:
            The study's total active seconds for this reader, after the beat.

        Raises:
            ReviewError: the study is not on this reader's worklist.
        """
        seconds = float(seconds_since_last)
        if not math.isfinite(seconds):
            seconds = 0.0
        end = time.time() if at is None else float(at)
        start = end - max(0.0, min(seconds, MAX_ACTIVE_GAP_S))
        # a measurement, not the reader's work: committed without an fsync (Database.write)
        with self.db.write(durable=False, scope=ROWS) as s:
            item = self._item(s, reader_id, study_id, lock=True)
            counted = item.active_until
            if counted is not None:
                start = max(start, counted)
            if end > start:
                item.active_seconds += end - start
            if counted is None or end > counted:
                item.active_until = end
            # kept as it is (written back, so its on-update default stays out): `resume` goes
            # back to where the reader last worked, not to a study a tab is merely showing
            # (a new-user trial's re-login opened the study of another open tab)
            flag_modified(item, "updated_at")
            return item.active_seconds

    # -- editing --------------------------------------------------------------------------
    def current(self, reader_id: int, study_id: int) -> dict[str, RevisionView]:
        """This reader's latest revision of each section (other readers' never shown).

        Args:
            reader_id: the reader.
            study_id: the study.

        Returns:
            section -> latest revision; sections never saved are absent (empty dict if none).
        """
        with self.db.read() as s:
            rows = s.scalars(select(Revision).where(
                Revision.reader_id == reader_id, Revision.study_id == study_id,
                Revision.reading_id.is_(None)).order_by(Revision.number))
            return {r.section: _revision(r) for r in rows}

    def history(self, reader_id: int, study_id: int, section: str) -> list[RevisionView]:
        """Every revision (autosaves included) of one section by one reader, so an edit can be
        traced or restored.

        Args:
            reader_id: the reader.
            study_id: the study.
            section: a section name.

        Returns:
            The revisions, oldest first (empty when the section was never saved).
        """
        with self.db.read() as s:
            return [_revision(r) for r in s.scalars(select(Revision).where(
                RevisionScope(reader_id, study_id, None).of(section))
                .order_by(Revision.number))]

    def save(self, reader_id: int, study_id: int, section: str, text: str,
             base_number: int | None, draft_id: int | None = None,
             autosave: bool = False, timing: Keystrokes | None = None,
             address: str | None = None) -> RevisionView:
        """Save an edit as the next revision. `base_number` is the revision the edit started from
        (None: from the draft). Unchanged text saves nothing and returns the current revision.
        `timing` (the reader's keystrokes in this section) is stored in the same transaction.

        Args:
            reader_id: the reader.
            study_id: the study (must be on the reader's worklist).
            section: one of SECTIONS.
            text: the section's full new text.
            base_number: the revision the edit started from; None: from the draft.
            draft_id: the draft the text came from, if any.
            autosave: True for a background save (no submit time is recorded).
            timing: the reader's keystroke times in this section, if any.
            address: the client's address, for the audit log.

        Returns:
            The new revision, or the latest one when its text is already this text.

        Raises:
            ReviewError: unknown section, study not on the worklist, unknown draft, or a base
                revision that does not exist.
            EditConflict: the section was saved elsewhere since `base_number` with other text.
        """
        if section not in SECTIONS:
            raise ReviewError(f"unknown section {section!r}")
        with self.db.write(scope=ROWS) as s:
            item = self._item(s, reader_id, study_id, lock=True)
            revision = self._save_in(s, item, section, text, base_number, draft_id, autosave)
            self._timing_in(s, reader_id, study_id, section, timing,
                            submitted=not autosave)
            self._audit(s, "save", reader_id, address,
                        f"study {study_id} {section} revision {revision.number}")
            return revision

    def save_sections(self, reader_id: int, study_id: int,
                      edits: dict[str, SectionEdit], autosave: bool = False,
                      address: str | None = None,
                      drafts: Mapping[str, str] | None = None) -> SavedSections:
        """Save several sections' edits in ONE transaction (one commit, so one fsync under
        synchronous=FULL, instead of one per section). Each section is judged on its own: a
        section edited elsewhere since its base is refused (its EditConflict returned, nothing
        written for it) while the others are saved. Any other error saves nothing.

        Args:
            reader_id: the reader.
            study_id: the study (must be on the reader's worklist).
            edits: section -> its edit (text, base revision, draft id, keystroke timing).
            autosave: True for a background save (no submit time is recorded).
            address: the client's address, for the audit log.
            drafts: section -> the draft's text, when the study has one: a saved text that
                differs from it withdraws the reader's "acceptable without changes" (a new
                rating, in the same transaction: an Accept followed by an edit had left the
                claim standing, and the export reported it beside a changed report).

        Returns:
            section -> its revision (new, or the latest when unchanged) or its EditConflict;
            `withdrawn` says whether "acceptable without changes" was withdrawn.

        Raises:
            ReviewError: an unknown section, the study not on the worklist, an unknown reader
                or draft, or a missing base revision; nothing is saved then.
        """
        for section in edits:
            if section not in SECTIONS:
                raise ReviewError(f"unknown section {section!r}")
        out = SavedSections()
        with self.db.write(scope=ROWS) as s:
            item, actor = self._editor(s, reader_id, study_id)
            for section, edit in edits.items():
                try:
                    revision = self._save_in(s, item, section, edit.text, edit.base,
                                             edit.draft_id, autosave)
                except EditConflict as exc:
                    out[section] = exc
                    continue
                self._timing_in(s, reader_id, study_id, section, edit.timing,
                                submitted=not autosave)
                self.audit.record("save", session=s, actor=actor, address=address,
                                  target=f"study {study_id} {section} revision "
                                         f"{revision.number}")
                out[section] = revision
            if drafts is not None and any(
                    isinstance(r, RevisionView)
                    and r.text.strip() != (drafts.get(sec) or "").strip()
                    for sec, r in out.items()):
                out.withdrawn = self._withdraw_acceptable(s, item, address)
        return out

    def _withdraw_acceptable(self, s: Session, item: WorklistItem,
                             address: str | None) -> bool:
        """A new rating like the newest but not "acceptable without changes", when the newest
        says it is; whether one was added."""
        newest = s.scalar(select(Rating).where(Rating.reader_id == item.reader_id,
                                               Rating.study_id == item.study_id,
                                               Rating.reading_id.is_(None))
                          .order_by(Rating.number.desc()).limit(1))
        if newest is None or not newest.acceptable:
            return False
        rating = self._rating_in(s, item, newest.likert, False, dict(newest.errors or {}),
                                 newest.comment, newest.preset, newest.suggested)
        self._audit(s, "rate", item.reader_id, address,
                    f"study {item.study_id} rating {rating.number} (acceptable withdrawn "
                    "by an edit)")
        return True

    def set_aside(self, reader_id: int, study_id: int, mine: dict[str, tuple[str, int]],
                  address: str | None = None) -> dict[str, RevisionView | EditConflict]:
        """"Take theirs" without losing the reader's words (`set_aside_revision`), all the
        sections in ONE transaction.

        Args:
            reader_id: the reader.
            study_id: the study.
            mine: section -> (the reader's refused text, the newer revision's number).
            address: the client's address, for the audit log.

        Returns:
            section -> the current revision (the newer text, stored again), or an
            EditConflict when yet another revision came in meanwhile (nothing stored for it).
        """
        out: dict[str, RevisionView | EditConflict] = {}
        with self.db.write(scope=ROWS) as s:
            item, actor = self._editor(s, reader_id, study_id)
            for section, (text, theirs_number) in mine.items():
                if section not in SECTIONS:
                    raise ReviewError(f"unknown section {section!r}")
                try:
                    aside = set_aside_revision(s, RevisionScope(reader_id, study_id, None),
                                               section, text, theirs_number)
                except EditConflict as exc:
                    out[section] = exc
                    continue
                self._worked_on(item, aside.created)
                self.audit.record("take_theirs", session=s, actor=actor, address=address,
                                  target=aside.audit_target(f"study {study_id}"))
                out[section] = aside.current
        return out

    def _editor(self, s: Session, reader_id: int, study_id: int) -> tuple[WorklistItem, str]:
        """The worklist entry an edit goes to and the reader's name (for the audit log)."""
        item = self._item(s, reader_id, study_id, lock=True)
        reader = s.get(Reader, reader_id)
        if reader is None:
            raise ReviewError(f"no reader with id {reader_id}")
        return item, reader.name

    def _save_in(self, s: Session, item: WorklistItem, section: str, text: str,
                 base_number: int | None, draft_id: int | None,
                 autosave: bool) -> RevisionView:
        revision, created = save_revision(s, RevisionScope(item.reader_id, item.study_id, None),
                                          section, text, base_number, draft_id, autosave)
        self._worked_on(item, created)
        return revision

    @staticmethod
    def _worked_on(item: WorklistItem, created: bool) -> None:
        """A new revision is work on the study: it is in review now, and `resume` reopens the
        one saved last (the on-update default fired only when the status changed, so a
        re-login opened an older study; found in a new-user trial)."""
        if created:
            if item.status in ("new", "drafted"):
                item.status = "in_review"
            item.updated_at = utcnow()

    def _timing_in(self, s: Session, reader_id: int, study_id: int, section: str,
                   keys: Keystrokes | None, submitted: bool) -> None:
        if keys is None and not submitted:
            return
        row = s.scalar(select(SectionTiming).where(
            SectionTiming.reader_id == reader_id, SectionTiming.study_id == study_id,
            SectionTiming.section == section))
        if row is None:
            row = SectionTiming(reader_id=reader_id, study_id=study_id, section=section)
            s.add(row)
        if keys is not None:
            if row.first_keystroke_at is None:
                row.first_keystroke_at = keys.first
                row.draft_on_screen = keys.draft_on_screen
            row.last_keystroke_at = keys.last
        if submitted:
            row.submitted_at = utcnow()

    def submitted(self, reader_id: int, study_id: int, sections: Sequence[str]) -> None:
        """An explicit Save of text that an autosave already stored: record the submit time.

        Args:
            reader_id: the reader.
            study_id: the study (must be on the reader's worklist).
            sections: the sections submitted (their submit time becomes now).

        Raises:
            ReviewError: the study is not on this reader's worklist.
        """
        with self.db.write(scope=ROWS) as s:
            self._item(s, reader_id, study_id, lock=True)
            for section in sections:
                self._timing_in(s, reader_id, study_id, section, None, submitted=True)

    def timing(self, reader_id: int, study_id: int) -> dict[str, TimingView]:
        """The keystroke and submit times per section, for time-on-task in the evaluation.

        Args:
            reader_id: the reader.
            study_id: the study.

        Returns:
            section -> its times (UTC); sections never typed in or submitted are absent.
        """
        with self.db.read() as s:
            rows = s.scalars(select(SectionTiming).where(
                SectionTiming.reader_id == reader_id, SectionTiming.study_id == study_id))
            return {r.section: TimingView(r.first_keystroke_at, r.last_keystroke_at,
                                          r.submitted_at, r.draft_on_screen) for r in rows}

    def status(self, reader_id: int, study_id: int) -> str:
        """Args:
            reader_id: the reader.
            study_id: the study.

        Returns:
            The worklist status of the study for this reader ("new", "in_review", "done"...).

        Raises:
            ReviewError: the study is not on this reader's worklist.
        """
        with self.db.read() as s:
            return self._item(s, reader_id, study_id).status

    # -- rating ---------------------------------------------------------------------------
    def rate(self, reader_id: int, study_id: int, *, likert: object,
             acceptable: bool | None, errors: dict[str, dict[str, object]] | None = None,
             comment: str | None = None, preset: str | None = None,
             address: str | None = None,
             suggested: dict[str, int] | None = None) -> RatingView:
        """A reader's rating: a Likert score 1-5 is required (an empty rating is refused), the
        ReXVal counts must be non-negative integers. The study is then done.

        Args:
            reader_id: the reader.
            study_id: the study (must be on the reader's worklist).
            likert: the overall quality, a whole number 1-5 (1.0 is accepted, 1.5 is not).
            acceptable: whether the draft was acceptable; None: not said.
            errors: ReXVal category -> {"significant": n, "insignificant": n}; missing
                categories and counts are 0; None: no errors.
            comment: free text (blank is stored as None).
            preset: the model preset whose draft is rated, if any.
            address: the client's address, for the audit log.
            suggested: the counts suggested from the reader's edit and confirmed or changed
                by them (category -> n, issue #22); None: no suggestion was made.

        Returns:
            The stored rating (a re-rating is the next number, earlier ones are kept).

        Raises:
            ReviewError: no or an invalid Likert score, an unknown ReXVal category, a count that
                is not a non-negative whole number, or the study not on the worklist.
        """
        score = likert_score(likert)
        clean = rexval_counts(errors or {})
        proposed = suggested_counts(suggested) if suggested is not None else None
        with self.db.write(scope=ROWS) as s:
            item = self._item(s, reader_id, study_id, lock=True)
            rating = self._rating_in(s, item, score, acceptable, clean, comment, preset,
                                     proposed)
            item.status = "done"
            self._audit(s, "rate", reader_id, address,
                        f"study {study_id} rating {rating.number}")
            return rating

    def _audit(self, s: Session, action: str, reader_id: int, address: str | None,
               target: str) -> None:
        """An audit row in the same transaction as the work it records."""
        self.audit.record(action, session=s, actor=s.get_one(Reader, reader_id).name,
                          address=address, target=target)

    def _rating_in(self, s: Session, item: WorklistItem, likert: int | None,
                   acceptable: bool | None,
                   errors: dict[str, dict[str, int]], comment: str | None,
                   preset: str | None, suggested: dict[str, int] | None = None) -> RatingView:
        number = int(s.scalar(select(func.coalesce(func.max(Rating.number), 0)).where(
            Rating.reader_id == item.reader_id, Rating.study_id == item.study_id)) or 0) + 1
        rating = Rating(reader_id=item.reader_id, study_id=item.study_id, number=number,
                        preset=preset, likert=likert, acceptable=acceptable, errors=errors,
                        comment=(comment or "").strip() or None, suggested=suggested)
        s.add(rating)
        s.flush()
        return _rating(rating)

    def latest_rating(self, reader_id: int, study_id: int) -> RatingView | None:
        """Args:
            reader_id: the reader.
            study_id: the study.

        Returns:
            The reader's newest rating of the study, or None when they have not rated it.
        """
        with self.db.read() as s:
            r = s.scalar(select(Rating).where(Rating.reader_id == reader_id,
                                              Rating.study_id == study_id,
                                              Rating.reading_id.is_(None))
                         .order_by(Rating.number.desc()).limit(1))
            return _rating(r) if r else None

    def accept_draft(self, reader_id: int, study_id: int, drafts: dict[str, tuple[int, str]],
                     bases: dict[str, int | None], preset: str | None = None,
                     address: str | None = None) -> RatingView:
        """'Accept draft as is', in one transaction: each section's draft becomes the reader's
        text (a revision, unless already identical; `bases` are the revisions the screen showed,
        so a newer save elsewhere is a conflict) and a rating row records "acceptable without
        changes" with no Likert score: the score is the reader's to give. Killed midway, nothing
        of it is stored.

        Args:
            reader_id: the reader.
            study_id: the study (must be on the reader's worklist).
            drafts: section -> (draft id, draft text).
            bases: section -> the revision the screen showed (None: none); missing: None.
            preset: the model preset whose draft is accepted, if any.
            address: the client's address, for the audit log.

        Returns:
            The rating row: acceptable, no Likert score, no errors.

        Raises:
            EditConflict: a section was saved elsewhere since its base; nothing is stored.
            ReviewError: the study is not on the worklist, or a draft does not exist.
        """
        with self.db.write(scope=ROWS) as s:
            item = self._item(s, reader_id, study_id, lock=True)
            for section, (draft_id, text) in drafts.items():
                self._save_in(s, item, section, text, bases.get(section), draft_id, False)
                self._timing_in(s, reader_id, study_id, section, None, submitted=True)
            rating = self._rating_in(s, item, None, True, rexval_counts({}), None, preset)
            self._audit(s, "accept", reader_id, address,
                        f"study {study_id} rating {rating.number}")
            return rating
