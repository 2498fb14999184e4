"""Review use cases: readers, per-reader worklists, edits saved as revisions (with conflict
detection), ratings with the ReXVal taxonomy, active time on task, and word-level diffs.

Nothing a reader wrote is updated in place: each save is a new Revision or Rating row, in one
transaction. A save states which revision it was edited from; if another tab or reader of the
same account saved in between, the save is refused with the current text (`EditConflict`).
"""

from __future__ import annotations

import difflib
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm.attributes import flag_modified

from rrg_review.app.services.accounts import (
    LOCAL_READER,
    Account,
    AccountError,
    AccountService,
    hash_password,
    verify_password,
)
from rrg_review.app.services.audit import AuditLog
from rrg_review.app.services.worklist import WorklistService
from rrg_review.core.vocabulary import ERROR_KINDS, REXVAL_CATEGORIES, SECTIONS, rexval_label
from rrg_review.db.engine import ROWS, Database, DatabaseBusy
from rrg_review.db.models import (
    Draft,
    Rating,
    Reader,
    Revision,
    SectionTiming,
    Study,
    WorklistItem,
    utcnow,
)

# active time: a heartbeat adds the time since the previous one, at most this much, so a tab
# left open overnight does not count as work
MAX_ACTIVE_GAP_S = 60.0
# the vocabulary the review screen shows and the service validates: the UI imports it from
# here (the services), never from the database models
__all__ = ["LOCAL_READER", "REXVAL_CATEGORIES", "SECTIONS", "Account", "DatabaseBusy",
           "EditConflict", "ReviewError", "ReviewService", "SectionEdit",
           "hash_password", "verify_password", "word_diff", "word_error_rate"]


class ReviewError(ValueError):
    pass


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


@dataclass(frozen=True)
class WorkItem:
    study_id: int
    position: int
    status: str
    source: str
    study_key: str
    active_seconds: float


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


@dataclass(frozen=True)
class DiffPiece:
    op: str  # "equal" | "delete" | "insert"
    text: str


def word_diff(before: str, after: str) -> list[DiffPiece]:
    """Word-level diff (difflib on whitespace tokens) of draft vs current text, so the reader
    sees what they changed in the model's words.

    Args:
        before: the draft text.
        after: the reader's current text.

    Returns:
        Pieces in reading order; a replaced run is a "delete" piece then an "insert" piece.
        Whitespace is not kept (pieces are words joined by single spaces); two empty texts
        give an empty list.
    """
    a, b = before.split(), after.split()
    out: list[DiffPiece] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag in ("equal", "delete", "replace") and i2 > i1:
            out.append(DiffPiece("equal" if tag == "equal" else "delete", " ".join(a[i1:i2])))
        if tag in ("insert", "replace") and j2 > j1:
            out.append(DiffPiece("insert", " ".join(b[j1:j2])))
    return out


def word_error_rate(draft: str, final: str) -> float:
    """The standard word error rate of the reader's final text against the model's draft:
    (substituted + deleted + inserted words) / words of the draft, from rapidfuzz's word-level
    Levenshtein distance. 0 means accepted as is; a replaced word counts once (not as a
    delete plus an insert). An empty draft counts as one word, so writing a report from
    nothing is its word count rather than a division by zero.

    Args:
        draft: the model's text (the reference of the rate).
        final: the reader's text (the hypothesis).
    Returns:
        The rate, 0 or more (above 1 when the reader wrote more than the draft had).
    """
    from rapidfuzz.distance import Levenshtein

    words = draft.split()
    return Levenshtein.distance(words, final.split()) / max(1, len(words))


def _revision(r: Revision) -> RevisionView:
    return RevisionView(r.id, r.section, r.number, r.text, r.autosave, r.draft_id, r.created_at)


def _rating(r: Rating) -> RatingView:
    return RatingView(r.number, r.preset, r.likert, r.acceptable, dict(r.errors or {}),
                      r.comment, r.created_at)


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


def _likert(value: object) -> int:
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


def _validate_errors(errors: dict[str, dict[str, object]]) -> dict[str, dict[str, int]]:
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


class ReviewService:
    def __init__(self, db: Database, accounts: AccountService | None = None,
                 exports=None, include_report_only: bool = False) -> None:
        self.db = db
        self.audit = accounts.audit if accounts else AuditLog(db)
        self.accounts = accounts or AccountService(db, self.audit)
        self.exports = exports  # an ExportService; made on first export when not given
        self.worklists = WorklistService(db)
        # launch.py --include-report-only: new readers also get studies without images
        self.include_report_only = include_report_only

    # -- readers (thin delegates to AccountService) ------------------------------------------
    def add_reader(self, name: str, password: str | None, role: str = "reader") -> int:
        """Add an account (`AccountService.add`), its errors as ReviewError for the pages.

        Args:
            name: the login name.
            password: the password; None: an account that cannot log in (no password).
            role: "reader" or "admin".

        Returns:
            The new reader's id.

        Raises:
            ReviewError: the account cannot be added (name taken or invalid, weak password...).
        """
        try:
            return self.accounts.add(name, password, role)
        except AccountError as exc:
            raise ReviewError(str(exc)) from None

    def authenticate(self, name: str, password: str, address: str | None = None) -> int | None:
        """The reader id for a correct login (throttled and audited), else None.

        Args:
            name, password: what the login form sent.
            address: the client's address, for the throttle and the audit log.

        Returns:
            The reader id, or None for a wrong name or password (or a throttled attempt).
        """
        result = self.accounts.authenticate(name, password, address)
        return result.account.id if result.account else None

    def reader_id(self, name: str) -> int | None:
        """Args:
            name: a login name.

        Returns:
            That account's id, or None when there is no such account.
        """
        found = self.accounts.account(name)
        return found.id if found else None

    def reader_name(self, reader_id: int) -> str:
        """Args:
            reader_id: an account id.

        Returns:
            The account's name, or "?" for an unknown id (a label, never an error).
        """
        found = self.accounts.by_id(reader_id)
        return found.name if found else "?"

    def is_admin(self, reader_id: int) -> bool:
        """Args:
            reader_id: an account id.

        Returns:
            True only for an existing admin account (False for an unknown id).
        """
        found = self.accounts.by_id(reader_id)
        return found is not None and found.is_admin

    def has_logins(self) -> bool:
        """Returns:
            Whether any account can log in (`AccountService.has_logins`), which decides
            whether the app asks for a login at all.
        """
        return self.accounts.has_logins()

    def local_reader(self) -> int:
        """Returns:
            The id of the single-user workstation's reader (`AccountService.local_reader`).
        """
        return self.accounts.local_reader()

    def export_report(self, reader_id: int, fmt: str, *, everyone: bool = False,
                      metrics=None, address: str | None = None):
        """Export as this reader: their own work only unless they are an admin asking for
        everyone's (decided here, not by the page). Returns an `ExportResult`.

        Args:
            reader_id: who asks; their role decides whether `everyone` is honoured.
            fmt: the export format, as `ExportService.export_as` accepts it.
            everyone: all readers' work (admins only) instead of the asker's own.
            metrics: the metrics to run; None: the export's default (available, no download).
            address: the client's address, for the audit log.

        Returns:
            The `ExportResult` of `ExportService.export_as`.

        Raises:
            ReviewError: no reader has this id.
            ValueError: an unknown format.
        """
        from rrg_review.app.services.export import ExportService

        if self.exports is None:
            self.exports = ExportService(self.db, audit=self.audit)
        account = self.accounts.by_id(reader_id)
        if account is None:
            raise ReviewError(f"reader {reader_id} does not exist")
        return self.exports.export_as(account, fmt, everyone=everyone, metrics=metrics,
                                      address=address)

    # -- worklists ------------------------------------------------------------------------
    def assign(self, reader_id: int, study_ids: Sequence[int] | None = None, *,
               include_report_only: bool | None = None) -> int:
        """Put studies (default: every study with images) on a reader's worklist; returns how
        many were new. Report-only studies only when asked (here or at construction).
        A read-only database (`--read-only`) keeps the worklists it has.

        Args:
            reader_id: whose worklist.
            study_ids: the studies to add; None: every study with images (and report-only
                ones when asked).
            include_report_only: add studies without images too; None: the setting given at
                construction.

        Returns:
            How many studies were newly added (0 on a read-only database, or when all were
            there already).
        """
        if self.db.read_only:
            return 0
        if include_report_only is None:
            include_report_only = self.include_report_only
        return self.worklists.assign(reader_id, study_ids,
                                     include_report_only=include_report_only)

    def worklist(self, reader_id: int, status: str | None = None,
                 source: str | None = None) -> list[WorkItem]:
        """The whole worklist (small lists, tests and exports only: handlers page with
        WorklistService.page, which never loads the whole list).

        Args:
            reader_id: whose worklist.
            status: only items with this status ("new", "in_review", "done"...); None or "": all.
            source: only studies from this import source; None or "": all.

        Returns:
            The items in worklist order (empty for a reader with no worklist).
        """
        stmt = (select(WorklistItem, Study.source, Study.study_key)
                .join(Study, Study.id == WorklistItem.study_id)
                .where(WorklistItem.reader_id == reader_id).order_by(WorklistItem.position))
        if status:
            stmt = stmt.where(WorklistItem.status == status)
        if source:
            stmt = stmt.where(Study.source == source)
        with self.db.read() as s:
            return [WorkItem(w.study_id, w.position, w.status, src, key, w.active_seconds)
                    for w, src, key in s.execute(stmt)]

    def next_unfinished(self, reader_id: int, after: int | None = None,
                        step: int = 1) -> int | None:
        """The next (step=1) or previous (step=-1) study not done, around `after`.

        Args:
            reader_id: whose worklist.
            after: the study on screen; None: from the start of the list.
            step: 1 for next, -1 for previous.

        Returns:
            A study id, or None when no other study is unfinished
            (see `WorklistService.next_unfinished`).
        """
        return self.worklists.next_unfinished(reader_id, after, step)

    def resume(self, reader_id: int) -> int | None:
        """The study to reopen after a reload: the last one worked on, else the first open.

        Args:
            reader_id: whose worklist.

        Returns:
            A study id, or None for an empty worklist (see `WorklistService.resume`).
        """
        return self.worklists.resume(reader_id)

    def _item(self, s, reader_id: int, study_id: int, lock: bool = False) -> WorklistItem:
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
                Revision.reader_id == reader_id, Revision.study_id == study_id)
                .order_by(Revision.number))
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
                Revision.reader_id == reader_id, Revision.study_id == study_id,
                Revision.section == section).order_by(Revision.number))]

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
                      address: str | None = None) -> dict[str, RevisionView | EditConflict]:
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

        Returns:
            section -> its revision (new, or the latest when unchanged) or its EditConflict.

        Raises:
            ReviewError: an unknown section, the study not on the worklist, an unknown reader
                or draft, or a missing base revision; nothing is saved then.
        """
        for section in edits:
            if section not in SECTIONS:
                raise ReviewError(f"unknown section {section!r}")
        out: dict[str, RevisionView | EditConflict] = {}
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
        return out

    def set_aside(self, reader_id: int, study_id: int, mine: dict[str, tuple[str, int]],
                  address: str | None = None) -> dict[str, RevisionView | EditConflict]:
        """"Take theirs" without losing the reader's words: in ONE transaction, per section,
        the reader's text is stored on top of the newer revision and that newer text again on
        top of it. The newer text stays current; the reader's words are in the history
        (before, "take theirs" dropped them: found in a new-user trial).

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
                theirs = s.scalar(select(Revision).where(
                    Revision.reader_id == reader_id, Revision.study_id == study_id,
                    Revision.section == section, Revision.number == theirs_number))
                if theirs is None:
                    raise ReviewError(f"{section}: revision {theirs_number} does not exist")
                try:
                    kept = self._save_in(s, item, section, text, theirs_number, None, True)
                    current = self._save_in(s, item, section, theirs.text, kept.number,
                                            theirs.draft_id, True)
                except EditConflict as exc:
                    out[section] = exc
                    continue
                self.audit.record("take_theirs", session=s, actor=actor, address=address,
                                  target=f"study {study_id} {section} revision "
                                         f"{current.number} (yours kept as {kept.number})")
                out[section] = current
        return out

    def _editor(self, s, reader_id: int, study_id: int) -> tuple[WorklistItem, str]:
        """The worklist entry an edit goes to and the reader's name (for the audit log)."""
        item = self._item(s, reader_id, study_id, lock=True)
        reader = s.get(Reader, reader_id)
        if reader is None:
            raise ReviewError(f"no reader with id {reader_id}")
        return item, reader.name

    def _save_in(self, s, item: WorklistItem, section: str, text: str,
                 base_number: int | None, draft_id: int | None,
                 autosave: bool) -> RevisionView:
        latest = s.scalar(select(Revision).where(
            Revision.reader_id == item.reader_id, Revision.study_id == item.study_id,
            Revision.section == section).order_by(Revision.number.desc()).limit(1))
        latest_number = latest.number if latest else None
        if latest_number != base_number:
            if latest is not None and latest.text == text:
                return _revision(latest)  # the other save wrote the same words
            if latest is None:
                raise ReviewError(f"{section}: revision {base_number} does not exist")
            base = (s.scalar(select(Revision.text).where(
                Revision.reader_id == item.reader_id, Revision.study_id == item.study_id,
                Revision.section == section, Revision.number == base_number))
                if base_number is not None else None)
            if base is None or base != latest.text:
                raise EditConflict(section, _revision(latest))
            # the newer revisions end on the very words this edit started from (another
            # tab's "take theirs" stores them again): nothing to choose between, so the
            # edit goes on top (a third new-user trial was asked to choose its own words)
        if latest is not None and latest.text == text:
            return _revision(latest)
        if draft_id is not None and s.get(Draft, draft_id) is None:
            raise ReviewError(f"draft {draft_id} does not exist")
        revision = Revision(reader_id=item.reader_id, study_id=item.study_id, section=section,
                            number=(latest_number or 0) + 1, text=text, draft_id=draft_id,
                            autosave=autosave, created_at=utcnow())
        s.add(revision)
        if item.status in ("new", "drafted"):
            item.status = "in_review"
        # every save is work on the study: `resume` reopens the one saved last (the on-update
        # default fired only when the status changed, so a re-login opened an older study;
        # found in a new-user trial)
        item.updated_at = utcnow()
        s.flush()
        return _revision(revision)

    def _timing_in(self, s, reader_id: int, study_id: int, section: str,
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
             address: str | None = None) -> RatingView:
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

        Returns:
            The stored rating (a re-rating is the next number, earlier ones are kept).

        Raises:
            ReviewError: no or an invalid Likert score, an unknown ReXVal category, a count that
                is not a non-negative whole number, or the study not on the worklist.
        """
        score = _likert(likert)
        clean = _validate_errors(errors or {})
        with self.db.write(scope=ROWS) as s:
            item = self._item(s, reader_id, study_id, lock=True)
            rating = self._rating_in(s, item, score, acceptable, clean, comment, preset)
            item.status = "done"
            self._audit(s, "rate", reader_id, address,
                        f"study {study_id} rating {rating.number}")
            return rating

    def _audit(self, s, action: str, reader_id: int, address: str | None, target: str) -> None:
        """An audit row in the same transaction as the work it records."""
        self.audit.record(action, session=s, actor=s.get(Reader, reader_id).name,
                          address=address, target=target)

    def _rating_in(self, s, item: WorklistItem, likert: int | None, acceptable: bool | None,
                   errors: dict[str, dict[str, int]], comment: str | None,
                   preset: str | None) -> RatingView:
        number = int(s.scalar(select(func.coalesce(func.max(Rating.number), 0)).where(
            Rating.reader_id == item.reader_id, Rating.study_id == item.study_id))) + 1
        rating = Rating(reader_id=item.reader_id, study_id=item.study_id, number=number,
                        preset=preset, likert=likert, acceptable=acceptable, errors=errors,
                        comment=(comment or "").strip() or None)
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
                                              Rating.study_id == study_id)
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
            rating = self._rating_in(s, item, None, True, _validate_errors({}), None, preset)
            self._audit(s, "accept", reader_id, address,
                        f"study {study_id} rating {rating.number}")
            return rating
