"""What the workstation's handlers do, without Gradio: a tab's session state and the steps of a
review (open, type, leave, autosave, save, conflicts, accept, draft, rate, window/level), so
they can be unit-tested directly. The panels (review/panel.py, viewer/panel.py...) only
turn these results into components.

Rules kept here:
- a tab's state belongs to the reader who created it; another login using it is refused;
- one tab's handlers run one at a time (`Session.lock`), so a Save and an autosave tick never
  race into a false conflict, and an older edit never lands after a newer one (`Client.seq`);
- text is saved only into the study it was typed for (`Client.study`), and empty text only when
  the reader typed in that section (cleared it on purpose), never because a page was loading.
"""

from __future__ import annotations

import asyncio
import dataclasses
import html
import json
import logging
import re
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rrg_review.app.accounts.service import AccountService
from rrg_review.app.drafting.service import DraftingService, PreDrafter, StoredDraft
from rrg_review.app.evaluation.study_metrics import StudyMetrics
from rrg_review.app.reader_study.on_page import ReadingReview
from rrg_review.app.reader_study.reading import OpenedReading, ReadingDesk, SignPreview
from rrg_review.app.reader_study.service import ReaderStudyError, ReadingSigned, WorklistReading
from rrg_review.app.review.aids import ReviewAids
from rrg_review.app.review.conflicts import conflict_message
from rrg_review.app.review.service import (
    DatabaseBusy,
    EditConflict,
    Keystrokes,
    RatingView,
    ReadOnlyNow,
    ReviewError,
    ReviewService,
    RevisionView,
    SectionEdit,
    likert_score,
    rexval_counts,
)
from rrg_review.app.viewer.service import StudyView, StudyViewer
from rrg_review.app.worklist.service import WorklistFilter, WorklistService
from rrg_review.core.vocabulary import REXVAL_CATEGORIES, SECTIONS
from rrg_review.metrics.base import by_reason
from rrg_review.studies.records import ReportSections

log = logging.getLogger(__name__)

PREDRAFT_AHEAD = 3  # undrafted studies beside the open one that the background worker drafts
# after opening a study that had no draft yet, a follow-up event waits this long at most for
# the pre-drafter (the page is usable meanwhile; the wait ends when the reader leaves the
# study) before it puts the draft in the boxes: a generative model on a CPU, with a study
# ahead of this one, takes minutes, and a shorter wait left "Drafting this study…" on screen
# after the draft had landed
FIRST_DRAFT_WAIT_S = 600.0
# a pre-draft done that has not reached the page this long after it was asked for is asked
# for again (`Desk.draft_missed`)
DRAFT_AGAIN_S = 10.0
ROWS_EVERY_S = 30.0  # how often the heartbeat refreshes the worklist's minutes column
# the first refresh comes sooner: once the column's 0.1 min could show, so a reader sees at
# once that time is being counted
FIRST_ROWS_S = 6.0
IDLE_AFTER_S = 60.0  # no input for this long: time on task stops counting
WINDOW_PRESETS = ("file default", "full range", "soft tissue", "bone", "lung")
LEFT_KEPT = 20  # unsaved studies a page load reports at most
OWN_KEPT = 50  # texts per section a tab reports as its own (page.js keeps as many)


def differ(sections: list[str]) -> str:
    """"findings differ", "impression differs", "findings and impression differ" ("Your
    impression differ from the draft" was on the page: a new-user trial)."""
    return " and ".join(sections) + (" differs" if sections == ["impression"] else " differ")


def asking(action: str, own: list[str]) -> str:
    """The status line's question before `action` ("Accept", "Revert") replaces the reader's
    own sections: two lines at most in the narrow editor column, so the buttons under it do
    not move when it comes (what confirming does is said beside the buttons)."""
    return f"{action} over your own text? Your {differ(own)} from the draft."


class TabRefused(ReviewError):
    """The request's login is not the reader this tab's state belongs to."""


@dataclass(frozen=True)
class Client:
    """What the page reports with every event that carries report text (see page.js).

    study: the study whose text is in the boxes; typed: sections the reader typed in since that
    study was shown, with (first, last) keystroke times; seq: the page's edit counter (a later
    edit has a larger number); visible/idle_s: whether the tab is seen and how long since the
    reader last touched keyboard or mouse."""

    study: int | None = None
    typed: dict[str, tuple[float, float]] = field(default_factory=dict)
    seq: int = 0
    visible: bool = True
    idle_s: float = 0.0
    # on page load: (login, study) of the unsaved text this browser still keeps, newest first
    left: tuple[tuple[str, int], ...] = ()
    # section -> texts this tab sent for the open study (across its reloads): a newer revision
    # holding one of them is this tab's own late save, not another tab's
    own: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # section -> (keystroke events, edit operations) since the study was shown (page.js)
    counts: dict[str, tuple[int, int]] = field(default_factory=dict)
    # the id in the worklist row the reader chose last (page.js): Gradio re-sends a row
    # click made while another was on its way with the first click's row (see page.py);
    # -1: the reader stepped (Next/Previous) since, so a late row select changes nothing
    row: int | None = None
    # on page load: the study this tab showed before it was reloaded (None: a new tab)
    was: int | None = None

    @classmethod
    def parse(cls, raw: str | None) -> Client:
        """Never raises: a missing or malformed report means "nothing known" (nothing saved)."""
        try:
            data = json.loads(raw or "{}")
            keys = {s: v for s, v in (data.get("keys") or {}).items() if s in SECTIONS}
            typed = {s: (float(v[0]), float(v[1])) for s, v in keys.items()}
            counts = {s: (max(0, int(v[2])), max(0, int(v[3])))
                      for s, v in keys.items() if len(v) >= 4}
            study = data.get("study")
            left = tuple((str(e["reader"]), int(e["study"]))
                         for e in (data.get("left") or [])[:LEFT_KEPT])
            own = {s: tuple(str(t) for t in texts[-OWN_KEPT:])
                   for s, texts in (data.get("own") or {}).items()
                   if s in SECTIONS and isinstance(texts, list)}
            row, was = data.get("row"), data.get("was")
            return cls(int(study) if study not in (None, "") else None, typed,
                       int(data.get("seq") or 0), bool(data.get("visible", True)),
                       float(data.get("idle_ms") or 0) / 1000, left, own, counts,
                       int(row) if row not in (None, "") else None,
                       int(was) if was not in (None, "") else None)
        except (TypeError, ValueError, AttributeError, IndexError, KeyError):
            log.warning("malformed client report ignored: %.200r", raw)
            return cls()


@dataclass
class Session:
    """What one browser tab holds: whose it is, what is open, which revisions it edits from."""

    owner: str | None = None  # the login (or the local reader) that created this state
    reader: int | None = None
    study: int | None = None
    label: str = ""  # what the screen calls the open study: its key (a reading: "reading 8")
    stored_here: bool = False  # a save stored the reader's text since the study was opened
    # the rating's comment as stored (what the box showed when the study was opened), and the
    # unsent comment a move away was last held for (a second move leaves it: see `unsent`)
    comment_shown: str = ""
    comment_held: str | None = None
    # the reader typed a ReXVal count since the study was opened or last rated (the counts,
    # like the comment, go with Submit rating), and a move away was held for it once
    counts_typed: bool = False
    counts_held: bool = False
    # the score as stored (what the 1-5 buttons showed when the study was opened), and the
    # score picked and not sent that a move away was last held for
    score_shown: int | None = None
    score_held: int | None = None
    # the reader's latest score of the open study, and whether their text was saved after it
    # (the line under Submit rating says so: the score stood unchanged beside a report edited
    # since, and the study stayed "done" without a hint: a new-user trial)
    rated: RatingView | None = None
    edited_since_rated: bool = False
    base: dict[str, int | None] = field(default_factory=dict)
    drafts: dict[str, tuple[int, str]] = field(default_factory=dict)  # section -> (id, text)
    shown: dict[str, str] = field(default_factory=dict)  # what is stored for each box
    reference: ReportSections | None = None
    beat_at: float = 0.0
    image: int | None = None
    images: tuple[int, ...] = ()  # the open study's images in film order
    prior: int | None = None  # the prior study shown beside the open one
    # the open study's priors this reader may be shown (never a case of their unfinished
    # blinded reader study: shown beside a later study of the patient, with its reference
    # report, it broke the blinding: a new-user trial)
    priors: tuple[int, ...] = ()
    # the reader asked for the prior beside (Alt+B): kept from study to study until they hide
    # it (it went off at every study change, so a comparison read needed Alt+B each time)
    prior_wanted: bool = False
    seq: int = 0  # the newest client edit applied
    # the question Accept or Revert asks while its buttons are on: an autosave's note goes
    # above it, not in its place (a new-user trial saw the buttons stay with no question)
    question: str = ""
    conflicts: dict[str, RevisionView] = field(default_factory=dict)
    # the conflicts the page's notice calls untouched in this tab ("You have not changed it")
    told: frozenset[str] = frozenset()
    offered: bool = False  # whether "keep mine" / "take theirs" are enabled on the page
    address: str | None = None  # the browser's address in its latest request (for the audit)
    rescores: int = 0  # autosaves that stored new text (each one rescores the metrics panel)
    counted: bool = False  # time on task was counted since the worklist rows were last sent
    rows_at: float | None = None  # when a heartbeat last sent the worklist rows (monotonic)
    # a reader-study reading open in the tab (None: the plain review of `study`); its work
    # goes to the reading (reader_study/on_page.py), blinded
    reading: int | None = None
    signed: bool = False  # the open reading is signed: read-only
    sign_token: str | None = None  # the confirmation asked for by the last Sign
    keys_sent: dict[str, tuple[int, int]] = field(default_factory=dict)  # counts stored
    # issue #22: whether the open study has a prior (comparison flags); the ReXVal rows the
    # reader typed in (never pre-filled again) and the counts pre-filled in the others
    has_prior: bool | None = None
    # the open study was queued for its draft when opened (the page then waits for it, even if
    # the pre-drafter is done with it before the page asks: CI under load saw a draft stored
    # 0.1 s after the queueing and the page stay on "No draft yet" for good)
    predrafting: bool = False
    draft_asked_at: float = 0.0  # when the page was last told to wait for that draft
    own_rows: set[str] = field(default_factory=set)
    prefilled: dict[str, int] = field(default_factory=dict)
    suggested: dict[str, int] = field(default_factory=dict)  # the counts suggested last
    # the answers that told the page what is open, numbered (`deps.sync_json`): the page
    # draws no answer older than one it has drawn, and asks for the open study again
    answers: int = 0

    def __post_init__(self) -> None:
        # not a dataclass field: Gradio serialises a State's initial value with asdict()
        self.lock = threading.RLock()  # one handler of this tab at a time

    def __deepcopy__(self, memo: dict[int, object]) -> Session:
        # Gradio deep-copies a State's initial value for each new tab: a fresh, unbound state.
        return Session()


@dataclass(frozen=True)
class Opened:
    view: StudyView
    drafts: dict[str, StoredDraft]
    texts: dict[str, str]
    status: str
    model_note: str
    rating: RatingView | None


@contextmanager
def _read_only_when_signed(session: Session) -> Iterator[None]:
    """A reading found signed (in another tab or window) is read-only in this tab from now on:
    its page is drawn again (static/page.js `signedElsewhere`); the refusal goes on up."""
    try:
        yield
    except ReadingSigned:
        session.signed, session.sign_token = True, None
        raise


def _now_read_only(session: Session, lead: str = "") -> Saved:
    """The reading on screen was found signed: read-only in this tab from now on, and the page
    draws it again as signed (its sync says so: static/page.js `signedElsewhere`)."""
    where = "is signed" if session.signed else "was signed in another tab or window"
    session.signed, session.sign_token = True, None
    said = f"{session.label} {where}; it is read-only now."
    return Saved(lead + html.escape(said if lead else said[:1].upper() + said[1:]), {}, False,
                 closed=True)


@dataclass(frozen=True)
class Saved:
    """The outcome of a save: what to tell the reader, and what was refused.

    conflicts: every section of which another tab or reader saved a newer revision than the one
    this tab shows (Keep mine / Take theirs stay offered while there is one). held: those of
    them whose text on screen is the reader's own, changed since the tab showed the stored
    text (None: all of them). Only a held section keeps the reader on the study: a newer save
    of a section the reader left as it was is told, and nothing of this tab's goes over it
    (a new-user trial: an untouched impression held a worklist click, and Keep mine then saved
    the tab's old draft over the other tab's save). texts: the boxes' new values where the
    outcome puts stored text back on screen, None where the boxes stay as they are."""

    message: str
    conflicts: dict[str, RevisionView]
    wrote: bool
    held: frozenset[str] | None = None
    texts: dict[str, str] | None = None
    withdrawn: bool = False  # this save withdrew "acceptable without changes" (the box unticks)
    closed: bool = False  # refused: the reading was signed elsewhere (the tab turns read-only)

    @property
    def ok(self) -> bool:
        """Nothing of the reader's own was refused: they may leave the study."""
        return not (self.conflicts if self.held is None else self.held)


@dataclass(frozen=True)
class DraftsIn:
    """New drafts of the open study and where they went: `fresh`, the boxes that take the
    new draft (section -> text); `own`, the sections whose text is the reader's (kept, the new
    draft beside it)."""

    drafts: dict[str, StoredDraft]
    fresh: dict[str, str]
    own: frozenset[str]

    @property
    def new(self) -> bool:
        """Whether any section has a new draft (a failed one offers none)."""
        return any(d.error is None and d.text for d in self.drafts.values())


@dataclass(frozen=True)
class Accepted:
    message: str
    needs_confirm: bool = False
    texts: dict[str, str] | None = None


@dataclass(frozen=True)
class MetricsView:
    headers: list[str]
    rows: list[list[Any]]
    notes: list[str]
    # "keys — why" of each reason some metrics are not computed here (missing weights): for
    # whoever runs the workstation, folded away under one line for the reader
    unavailable: list[str] = field(default_factory=list)


def left_saved(label: str, numbers: dict[str, int]) -> str:
    """What the next study's status line says first after leaving a study whose text the
    reader changed: the status then describes the study now open, and nothing told the reader
    that the text typed just before Alt+N had been kept (a new-user trial asked). Every
    section of theirs is named (a tick may have stored one before the move stored the other:
    naming only the last read as if the first were not saved, a new-user trial)."""
    revisions = ", ".join(f"{section} revision {number}" for section, number in numbers.items())
    return f"✓ Your edits to {html.escape(label) or 'the last study'} are saved ({revisions})."


def draft_label(preset: str, drafts: dict[str, StoredDraft], service: DraftingService) -> str:
    """Which model wrote the drafts on screen (or will), as one line of Markdown."""
    esc = html.escape
    chosen = service.preset(preset)
    if chosen.backend == "retrieval":
        line = ("**Offline default (retrieval)**: not a generative model; the reference report "
                "of the most similar other patient's study is shown as the draft.")
    else:
        line = f"**Model preset `{esc(preset)}`** ({esc(chosen.backend)})"
    if drafts:
        d = next(iter(drafts.values()))
        extra = ""
        if d.generation.get("neighbour_study_id") is not None:
            extra = (f" · copied from study {d.generation['neighbour_study_id']} "
                     f"(similarity {d.generation.get('similarity')})")
        for key, what in (("comparisons_removed", "comparing with a prior study {} removed "
                                                  "(this patient has no prior)"),
                          ("dates_removed", "naming the other patient's examination dates {} "
                                            "removed")):
            removed = d.generation.get(key)
            if isinstance(removed, dict) and removed:
                n = sum(int(v) for v in removed.values())
                extra += (f" · {n} sentence{'s' if n != 1 else ''} "
                          + what.format("were" if n != 1 else "was"))
        # (a model from a folder or the retrieval default has no hub revision: none is named;
        # "revision —" read as if the reader's revision were missing: a new-user trial)
        parts = [f"`{esc(d.model_id)}`",
                 *([f"revision `{esc(str(d.revision))}`"] if d.revision else []),
                 f"{esc(str(d.device or '?'))}/{esc(str(d.dtype or '?'))}",
                 f"{d.seconds:.2f} s" if d.seconds is not None else "—"]
        line += "<br>" + " · ".join(parts) + extra
    return line


def _edits(session: Session, changed: dict[str, str], client: Client) -> dict[str, SectionEdit]:
    """The sections to store, with the revision each was edited from and the keystrokes'
    timing; a section held by a conflict waits for "keep mine" / "take theirs"."""
    edits: dict[str, SectionEdit] = {}
    for section, text in changed.items():
        if section in session.conflicts:
            continue
        draft = session.drafts.get(section)
        keys = client.typed.get(section)
        timing = (Keystrokes(_utc(keys[0]), _utc(keys[1]), draft is not None)
                  if keys else None)
        edits[section] = SectionEdit(text, session.base.get(section),
                                     draft[0] if draft else None, timing)
    return edits


def _counted(session: Session, client: Client,
             results: dict[str, RevisionView | EditConflict]) -> None:
    """The page's keystroke counts now stored for the sections saved (the next save sends
    only what is new since)."""
    for section, rev in results.items():
        if not isinstance(rev, EditConflict) and section in client.counts:
            session.keys_sent[section] = client.counts[section]


def has_draft_actions(session: Session) -> bool:
    """Whether "Revert to draft" and "Accept draft" apply to what is open: a plain study (its
    draft is there or on its way), or a reading whose arm gives text (a draft or a template);
    a new-user trial met both buttons over a reading's empty boxes, "no draft" above them."""
    return session.reading is None or bool(session.drafts)


def reading_note(opened: OpenedReading) -> str:
    """What the model line says in a reading: the blinded code only (an arm that gives no text
    says so: "draft of arm B" over empty boxes left a trial looking for the draft)."""
    arm = html.escape(opened.reading.arm_code)
    if not any(s.draft for s in opened.sections):
        return f"**Reader study reading**, arm {arm}: no draft; the report is yours to write."
    return f"**Reader study reading**: draft of arm {arm} (blinded; its source is not shown)."


def _picked(score: object) -> int | None:
    """The score picked on the page (1-5), or None: none, or not a score."""
    try:
        return likert_score(score) if score not in (None, "") else None
    except ReviewError:
        return None


def _listed(names: list[str]) -> str:
    """"score", "score and comment", "score, comment and ReXVal counts"."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


# of a discarded comment, quoted whole on the status line (its first 80 characters were not
# enough to give it again: a new-user trial's 230 lost their end) up to a long paragraph
QUOTE_CHARS = 2000


def _quoted(text: str) -> str:
    """The reader's words as Markdown shows them on the status line (which scrolls): one
    line, at most QUOTE_CHARS characters, nothing in them taken as Markdown or HTML."""
    line = " ".join(text.split())
    line = line if len(line) <= QUOTE_CHARS else f"{line[:QUOTE_CHARS - 1]}…"
    return html.escape(re.sub(r"([\\`*_\[\]{}()#+\-.!|~])", r"\\\1", line), quote=False)


def _as_chosen(client: Client, session: Session, own: bool = True) -> Client:
    """The page's report for a save of text the reader chose by a button (Keep mine, Revert):
    every section counts as typed (an emptied one is saved too), and it is not stale."""
    typed = {**client.typed, **{s: (0.0, 0.0) for s in SECTIONS if s not in client.typed}}
    return Client(client.study, typed, max(client.seq, session.seq), client.visible,
                  client.idle_s, own=client.own if own else {})


def _utc(ms: float) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


@dataclass(frozen=True)
class PriorReport:
    """A reader's report of an earlier study, as the film beside shows it: each section's
    saved text, or, for a section they saved nothing of, the model's draft that stood in its
    box (`drafted`). Only the saved sections said "IMPRESSION: —" under a prior whose draft
    impression the reader had left as it was and rated (a new-user trial)."""

    saved: datetime  # when the reader last saved text of it
    texts: dict[str, str]
    drafted: frozenset[str] = frozenset()


def _significant(errors: dict[str, dict[str, object]]) -> int:
    """The clinically significant ReXVal errors counted (0 where a count is not a whole
    number: the review service then says which)."""
    try:
        return sum(kinds["significant"] for kinds in rexval_counts(errors).values())
    except ReviewError:
        return 0


class Desk:
    def __init__(self, viewer: StudyViewer, review: ReviewService,
                 drafting: DraftingService | None = None, predrafter: PreDrafter | None = None,
                 preset: str = "retrieval", metrics: StudyMetrics | None = None, *,
                 worklists: WorklistService | None = None,
                 accounts: AccountService | None = None,
                 readings: ReadingDesk | None = None) -> None:
        """`worklists` and `accounts`: the page's own (serve's settings); None: plain ones on
        the review's database (tests and benches). `readings`: reader-study readings (None:
        the page opens no readings)."""
        self.viewer = viewer
        self.review = review
        self.worklists = worklists or WorklistService(review.db)
        self.accounts = accounts or AccountService(review.db, review.audit)
        self.drafting = drafting
        self.predrafter = predrafter
        self.preset = preset
        self.metrics = metrics
        self.readings = readings
        self.aids = ReviewAids()
        # the page load's two requests (the worklist panel's and the study's) may both find
        # a new reader without a worklist: one of them assigns it, the other waits for it
        self._preparing = threading.Lock()

    def _rv(self, session: Session, client: Client | None = None
            ) -> ReviewService | ReadingReview:
        """Who stores the open study's work: the plain review, or the open reading (with the
        page's keystroke counts since the last stored ones)."""
        if session.reading is None or self.readings is None or session.owner is None:
            return self.review
        counts = {}
        for section, (pressed, changed) in (client.counts if client else {}).items():
            was = session.keys_sent.get(section, (0, 0))
            counts[section] = (max(0, pressed - was[0]), max(0, changed - was[1]))
        return ReadingReview(self.readings, session.reading, session.owner, counts)

    def held(self, session: Session) -> str | None:
        """Why the plain study on screen takes no more work (one sentence), or None: it is a
        case of the reader's unfinished blinded study, which became so after this tab opened
        it (a tab left open while the study was created; opening it now is refused). Plain
        revisions and ratings of it would sit beside the readings of the same case."""
        if session.reading is not None or self.readings is None or session.reader is None \
                or session.study is None:
            return None
        try:
            self.readings.studies.blinded_cases(session.reader, session.study).refuse(
                session.study)
        except ReaderStudyError as exc:
            return str(exc)
        return None

    # -- who ------------------------------------------------------------------------------
    def bind(self, session: Session, login: str) -> int:
        """The reader for this request: `login` must be a reader in the database and the one
        this tab's state was created for (a tab is never used by another account)."""
        account = self.accounts.account(login)
        reader = account.id if account is not None else None
        if reader is None:
            raise TabRefused(f"unknown reader {login!r}")
        if session.owner is None:
            session.owner, session.reader = login, reader
        elif session.owner != login or session.reader != reader:
            log.warning("refused: %r used a tab of %r", login, session.owner)
            raise TabRefused("this tab belongs to another reader; reload the page")
        return reader

    def prepare(self, reader: int) -> None:
        """A new reader gets every study on the worklist (once, whichever load asks first),
        so that no count is read before the list exists ("No studies" on a first load)."""
        with self._preparing:
            if not self.worklists.has_worklist(reader):  # one indexed row
                self.worklists.assign(reader)

    def start(self, reader: int, login: str | None = None,
              left: tuple[tuple[str, int], ...] = (),
              left_off: frozenset[int] = frozenset(), was: int | None = None) -> int | None:
        """On page load: a new reader gets every study on the worklist; then the study to
        resume: the newest one whose unsaved text this browser still keeps (`left`, so that
        text can be restored; only the login's own and only studies on their worklist),
        else the study the tab showed before its reload (`was`: a reload stays where the
        reader was, not on the study edited last, a new-user trial), else the last one
        worked on, else the first unfinished; never one of `left_off` (the cases of the
        reader's unfinished blinded studies, which plain review refuses)."""
        worklists = self.worklists
        self.prepare(reader)
        study = next((s for owner, s in left
                      if owner == login and s not in left_off
                      and worklists.status_of(reader, s) is not None), None)
        if study is None and was is not None and was not in left_off \
                and worklists.status_of(reader, was) is not None:
            study = was
        if study is None:
            study = self.worklists.resume(reader, left_off)
        if study is not None and self.predrafter is not None:
            # the study the reader sees first is drafted first (it usually is already: the
            # app queued it at start); the page opens at once and `await_draft` fills the
            # boxes when the draft is ready
            self.predrafter.schedule([study], first=True)
        return study

    def drafting_now(self, session: Session) -> bool:
        """Whether the open study has no draft yet and the pre-drafter is working on it."""
        return (self.predrafter is not None and session.study is not None
                and not session.drafts
                and (session.predrafting or self.predrafter.queued(session.study)))

    def awaits_draft(self, session: Session) -> bool:
        """Whether the open study has no draft and the pre-drafter has it queued (the page
        then waits for it: `await_draft`)."""
        return (session.study is not None and self.predrafter is not None
                and not session.drafts and session.reading is None
                and (session.predrafting or self.predrafter.queued(session.study)))

    async def await_draft(self, session: Session, timeout: float = FIRST_DRAFT_WAIT_S,
                          poll: float = 0.2) -> int | None:
        """Wait (in a follow-up event, never in the event that opens the study) until the
        pre-drafter is done with the open study, if it had no draft when it was opened, or
        until the reader opens another study. A coroutine that polls:
        every waiting tab would otherwise hold one of the server's worker threads for up to
        `timeout` seconds, and a room of readers opening the worklist at once would leave
        none for their saves.

        Returns:
            The study waited for (the caller fills the boxes if it is still open), or None
            when there was nothing to wait for.
        """
        study = session.study
        if study is None or self.predrafter is None or session.drafts \
                or session.reading is not None:  # a reading's draft is its arm's, never new
            return None
        deadline = time.monotonic() + timeout
        # the reader may leave meanwhile: the draft still comes, for when they return
        while self.predrafter.queued(study) and session.study == study:
            if time.monotonic() >= deadline:
                log.info("study %s: no draft within %.0f s of opening it", study, timeout)
                break
            await asyncio.sleep(min(poll, max(deadline - time.monotonic(), 0.0)))
        return study

    def draft_missed(self, session: Session, now: float) -> bool:
        """Whether the page should wait for the open study's pre-draft again: it is done
        (stored, or failed) and has not reached the page `DRAFT_AGAIN_S` after the page was
        last told to wait (asked again at most that often). The wait is a request of its own
        (the change of `Tab.wanted`); one that never ran (refused when the reader had too many
        on their way; a change Gradio defers behind a pending one is dropped when that one
        fails) left "Drafting this study…" on screen for good: a CI run's page waited 60 s
        for a draft stored 3 s after the app started."""
        if not session.predrafting or session.drafts or session.study is None \
                or session.reading is not None or self.predrafter is None \
                or self.predrafter.queued(session.study) \
                or now - session.draft_asked_at < DRAFT_AGAIN_S:
            return False
        log.info("study %s: its draft is done and not on the page; the page waits again",
                 session.study)
        session.draft_asked_at = now
        return True

    def predraft_first(self, reader: int) -> int | None:
        """At app start: queue the study this reader will open first (what `start` gives on
        a page load without unsaved text), then the ones after it. Returns that study."""
        if self.predrafter is None:
            return None
        self.prepare(reader)
        first = self.worklists.resume(reader)
        if first is not None:
            self.predrafter.schedule(
                [first, *self.worklists.undrafted(reader, first, PREDRAFT_AHEAD)])
        return first

    # -- worklist (the panel the worklist helper replaces) ---------------------------------
    def worklist_rows(self, reader: int, status: str | None = "all",
                      source: str | None = "all") -> tuple[list[list[Any]], str]:
        """The first page of the filtered worklist and the progress line (two indexed
        queries; app/worklist/panel.py pages, searches and filters in full)."""
        worklists = self.worklists
        page = worklists.page(reader, WorklistFilter.from_ui(status, source), page_size=200)
        progress = worklists.progress(reader)
        rows = [[i.study_id, i.source, i.study_key, i.status.replace("_", " "),
                 round(i.active_seconds / 60, 1)] for i in page.rows]
        return rows, f"**{progress.done} / {progress.total} done**"

    def step(self, session: Session, step: int) -> int | None:
        if session.reader is None:  # a state no reader opened has no worklist
            return None
        return self.worklists.next_unfinished(session.reader, session.study, step)

    # -- opening --------------------------------------------------------------------------
    def open(self, session: Session, reader: int, study_id: int, now: float,
             hidden: frozenset[int] = frozenset()) -> Opened:
        """Open a study for a reader: their own latest text, else the draft; pre-draft it
        (see `_predraft`) and the next undrafted studies. Opening changes nothing in the
        database. `hidden`: studies not to be shown as its priors (the cases of the
        reader's unfinished blinded reader studies)."""
        view = self.viewer.open(int(study_id))
        if hidden:
            view = dataclasses.replace(view, prior_ids=tuple(
                i for i in view.prior_ids if i not in hidden))
        drafts = self.drafting.latest(view.study_id, self.preset) if self.drafting else {}
        good = {s: (d.id, d.text) for s, d in drafts.items() if d.error is None and d.text}
        current = self.review.current(reader, view.study_id)
        texts = {s: current[s].text if s in current else (good[s][1] if s in good else "")
                 for s in SECTIONS}
        session.reader, session.study, session.label = reader, view.study_id, view.study_key
        session.base = {s: current[s].number if s in current else None for s in SECTIONS}
        session.drafts = good
        session.shown = dict(texts)
        session.reference = view.reference
        session.beat_at = session.draft_asked_at = now
        session.images = tuple(i.image_id for i in view.images)
        session.image = session.images[0] if session.images else None
        session.prior, session.priors = None, view.prior_ids
        session.conflicts = {}
        session.reading, session.signed, session.sign_token = None, False, None
        session.keys_sent = {}
        rating = self.review.latest_rating(reader, view.study_id)
        # priors are found by date: a study without one may have priors nobody can tell
        session.has_prior = bool(view.prior_ids) if view.study_date is not None else None
        # a study rated before shows the reader's own counts: nothing is pre-filled over them
        session.own_rows = set(REXVAL_CATEGORIES) if rating is not None else set()
        session.prefilled, session.suggested = {}, {}
        self._opened(session, rating, max((c.created_at for c in current.values()),
                                          default=None))
        self._predraft(session, drafts)
        return Opened(view, drafts, texts, self.status_line(session), self.model_note(drafts),
                      rating)

    @staticmethod
    def _opened(session: Session, rating: RatingView | None,
                edited_at: datetime | None = None) -> None:
        """What a study (or reading) just opened starts from: its stored rating, nothing
        unsent; `edited_at`: when the reader's latest text of it was saved, where known."""
        session.stored_here, session.comment_held = False, None
        session.question = ""
        session.comment_shown = (rating.comment or "") if rating is not None else ""
        session.counts_typed = session.counts_held = False
        session.score_shown = rating.likert if rating is not None else None
        session.score_held = None
        session.rated = rating if rating is not None and rating.likert is not None else None
        session.edited_since_rated = (session.rated is not None and edited_at is not None
                                      and edited_at > session.rated.created_at)

    @staticmethod
    def edited_after_rating(session: Session, saved: Saved) -> bool:
        """Whether this save is the first to store the reader's text after their score of
        the open study (the line under Submit rating then says that the score came before)."""
        if not saved.wrote or session.rated is None or session.edited_since_rated:
            return False
        session.edited_since_rated = True
        return True

    @staticmethod
    def count_typed(session: Session, category: str) -> None:
        """The reader typed in a ReXVal row: it is theirs (never pre-filled again), and its
        count is not sent until Submit rating (`unsent`)."""
        session.own_rows.add(category)
        session.counts_typed = True

    def unsent(self, session: Session, comment: str | None, score: object = None, *,
               page_study: int | None, again: str = "moving again discards") -> str | None:
        """Why a move away from the open study waits, once: a score picked (1-5), words in
        the comment box or ReXVal counts the reader typed, and never sent with a rating (they
        go with Submit rating, and a move dropped them without a word: new-user trials; a
        hurried reader pressed 4, then Alt+N, and took the study for scored). A second move
        leaves them (the comment: the same words; the score: the same one); None: nothing
        to hold. `again`: what doing it again does (Sign reading: signs without them). The
        comment and score count only from a page that shows the open study
        (`page_study`, `Client.study`): a page out of step, as during quick steps, sends
        another study's, which must neither hold nor be held (as its text is never stored,
        `_changed`)."""
        if page_study != session.study:
            comment, score = None, None
        typed = (comment or "").strip()
        words = bool(typed) and typed not in (session.comment_shown.strip(),
                                              session.comment_held)
        counts = session.counts_typed and not session.counts_held
        picked = _picked(score)
        scored = picked is not None and picked not in (session.score_shown, session.score_held)
        if session.study is None or session.signed or not (words or counts or scored):
            return None
        if words:
            session.comment_held = typed
        if scored:
            session.score_held = picked
        session.counts_held = session.counts_held or counts
        # the notice names all that moving again discards, held before or not (a new-user
        # trial held for a score, then a comment, was told of the comment only; the move after
        # discarded both)
        names = [n for n, on in (
            ("score", picked is not None and picked != session.score_shown),
            ("comment", bool(typed) and typed != session.comment_shown.strip()),
            ("ReXVal counts", session.counts_typed)) if on]
        counts = "ReXVal counts" in names
        what = _listed(names)
        plural = len(names) > 1 or counts
        them = "them" if plural else "it"
        # (three lines of the status at 1366 px: a fourth was cut off) "move again to leave
        # them unsent" was read as "they stay in the form" (a new-user trial): a second move
        # discards them, and says so
        return (f"your {what} {'are' if plural else 'is'} not sent. Submit rating (Alt+R) "
                f"sends {them}; {again} {them}.")

    def discarded(self, session: Session, comment: str | None, score: object = None, *,
                  page_study: int | None) -> str | None:
        """What a move the reader made again leaves unsent, after `unsent` held the first one
        for it: said first on the next study's status line (the hold said "moving again
        discards them"; a new-user trial moved again and heard nothing of them after). Asked
        where `unsent` held nothing; None: nothing is left unsent."""
        if page_study != session.study or session.study is None or session.signed:
            return None
        typed = (comment or "").strip()
        picked = _picked(score)
        names = [n for n, on in (
            ("score", picked is not None and picked != session.score_shown
             and picked == session.score_held),
            ("comment", bool(typed) and typed != session.comment_shown.strip()
             and typed == session.comment_held),
            ("ReXVal counts", session.counts_typed and session.counts_held)) if on]
        if not names:
            return None
        what = _listed(names)
        plural = len(names) > 1 or names == ["ReXVal counts"]
        label = html.escape(session.label) or "the last study"
        # what they were, to give again if meant (a new-user trial was told its comment was
        # discarded, not which words)
        had = [f"score {picked}" if "score" in names else "",
               f"comment “{_quoted(typed)}”" if "comment" in names else ""]
        told = "; ".join(h for h in had if h)
        return (f"⚠ Your {what} for {label} {'were' if plural else 'was'} not sent: "
                "discarded as you moved on again." + (f" ({told[0].upper()}{told[1:]}.)"
                                                      if told else ""))

    def _predraft(self, session: Session, drafts: dict[str, StoredDraft]) -> None:
        """Queue the study just opened, first, when it would say "No draft yet" (no draft,
        not even a failed one, no text of the reader's, images to draft from), then the next
        undrafted studies on the list. Only the studies after it were queued: a study opened
        from the worklist before the pre-drafter reached it (one imported while the app ran)
        stayed without a draft until the reader pressed Draft (a new-user trial)."""
        session.predrafting = False
        if self.predrafter is None or session.reader is None or session.study is None:
            return
        mine = any(n is not None for n in session.base.values())
        session.predrafting = not drafts and not mine and bool(session.images)
        if session.predrafting:
            self.predrafter.schedule([session.study], first=True)
        self.predrafter.schedule(
            self.worklists.undrafted(session.reader, session.study, PREDRAFT_AHEAD))

    def open_reading(self, session: Session, reader: int, reading_id: int,
                     now: float) -> Opened:
        """Open one of the reader's reader-study readings: the arm's text as the draft, the
        reader's own text of this reading if any; nothing that names the arm (no preset,
        model, provenance, reference report). The server checks whose it is and whether its
        session is open (`ReaderStudyError`, one sentence)."""
        if self.readings is None or session.owner is None:
            raise ReaderStudyError(["reader studies are not set up on this page"])
        opened = self.readings.open(int(reading_id), session.owner, address=session.address)
        view = dataclasses.replace(self.viewer.open(opened.reading.study_id), reference=None)
        session.reader, session.study, session.reading = reader, view.study_id, int(reading_id)
        # the number the study worklist's "#", the address (?reading=N) and the server's
        # refusals ("reading 8 is signed") give it: the label said its place in the session
        # ("reading 2") beside "#8" in the list (a new-user trial)
        session.label = f"reading {opened.reading.reading_id}"
        session.signed = opened.reading.signed_at is not None
        session.sign_token, session.keys_sent = None, {}
        session.base = {s.section: s.revision for s in opened.sections}
        session.drafts = {s.section: (0, s.draft) for s in opened.sections if s.draft}
        session.shown = {s.section: s.text for s in opened.sections}
        session.reference, session.beat_at, session.prior = None, now, None
        session.priors = view.prior_ids
        session.images = tuple(i.image_id for i in view.images)
        session.image = session.images[0] if session.images else None
        session.conflicts = {}
        rating = self.readings.latest_rating(int(reading_id), session.owner)
        session.has_prior = None  # blinded: no comparison flags from the prior's existence
        session.predrafting = False
        session.own_rows = set(REXVAL_CATEGORIES) if rating is not None else set()
        session.prefilled, session.suggested = {}, {}
        self._opened(session, rating)
        return Opened(view, {}, dict(session.shown), self.reading_status(session, opened),
                      reading_note(opened), rating)

    def reading_status(self, session: Session, opened: OpenedReading) -> str:
        r = opened.reading
        if session.signed:
            return f"Reading signed ({r.signed_at:%Y-%m-%d %H:%M} UTC): it is read-only."
        return (f"{opened.study}: reading {r.reading_id} ({r.position} of your session "
                f"{r.session}). " + self.status_line(session))

    # -- signing a reading ------------------------------------------------------------------
    def sign_preview(self, session: Session) -> SignPreview:
        """The open reading's report as it would be signed; its token is kept in the tab
        (what the reader confirms is what is signed)."""
        if self.readings is None or session.reading is None or session.owner is None:
            raise ReaderStudyError(["no reader-study reading is open"])
        with _read_only_when_signed(session):
            preview = self.readings.sign_preview(session.reading, session.owner)
        session.sign_token = preview.token
        return preview

    def sign(self, session: Session) -> WorklistReading:
        """Sign the open reading as confirmed; then it is read-only in this tab."""
        if self.readings is None or session.reading is None or session.owner is None:
            raise ReaderStudyError(["no reader-study reading is open"])
        if session.sign_token is None:
            raise ReaderStudyError(["press Sign reading first: the report to sign is shown "
                                    "for confirmation"])
        token, session.sign_token = session.sign_token, None
        with _read_only_when_signed(session):
            signed = self.readings.sign(session.reading, session.owner, token,
                                        address=session.address)
        session.signed = True
        current = self.readings.current(session.reading, session.owner)
        session.base = {s: current[s].number if s in current else None for s in SECTIONS}
        session.shown = {s: current[s].text if s in current else "" for s in SECTIONS}
        return signed

    def status_line(self, session: Session) -> str:
        if session.study is None:
            return "Select a study in the worklist."
        mine = [f"{s} revision {n}" for s, n in session.base.items() if n is not None]
        if mine:  # each section's own number, as a save names them ("Editing your revision
            # 8", then "findings revision 9", "impression revision 1": three counters to a trial)
            return f"Editing your saved text ({', '.join(mine)})."
        if not session.images and not session.drafts:
            return ("A report-only study (no images; imported as a reference): there is "
                    "nothing to draft or rate.")
        if session.drafts:
            return "Showing the draft; edit and save."
        if session.reading is not None:  # (its arm gives no text; there is no Draft to press)
            return "No draft in this reading: write the report, then Sign reading."
        if self.drafting_now(session):
            return "Drafting this study… the draft appears in the boxes when it is ready."
        return "No draft yet: press Draft (Alt+D)."

    def model_note(self, drafts: dict[str, StoredDraft]) -> str:
        if self.drafting is None:
            return "No drafting set up."
        note = draft_label(self.preset, drafts, self.drafting)
        if self.predrafter is not None and self.predrafter.problem:
            note += f"<br>⚠ {html.escape(self.predrafter.problem)}"
        return note

    @staticmethod
    def draft_errors(drafts: dict[str, StoredDraft]) -> str:
        """Failed drafts as one line for the error box beside the editor ('' when none)."""
        failed = [f"{s}: {d.error}" for s, d in drafts.items() if d.error]
        return ("⚠ Draft failed — " + "; ".join(html.escape(f) for f in failed)) if failed else ""

    # -- metrics --------------------------------------------------------------------------
    def metrics_view(self, session: Session) -> MetricsView:
        if session.reading is not None:  # they would compare with the reference report
            return MetricsView([], [], ["Metrics are not shown in a reader study reading."])
        if self.metrics is None or session.study is None or session.reader is None:
            return MetricsView([], [], ["Metrics are not configured."])
        current = self.review.current(session.reader, session.study)
        texts = {}
        for section in SECTIONS:
            draft = session.drafts.get(section)
            final = current.get(section)
            texts[section] = {
                "draft": draft[1] if draft else None,
                "final": final.text if final else (draft[1] if draft else None),
                "reference": getattr(session.reference, section, None),
            }
        panel = self.metrics.panel(texts)
        keys = panel.keys
        rows = [[r.section, r.comparison, *[round(r.values.get(k, float("nan")), 4)
                                            for k in keys]] for r in panel.rows]
        return MetricsView(["section", "comparison", *keys], rows, list(panel.notes),
                           [f"unavailable: {', '.join(k)} — {w}"
                            for w, k in by_reason(panel.unavailable).items()])

    # -- editing --------------------------------------------------------------------------
    def pending(self, session: Session, texts: dict[str, str], client: Client,
                typed_only: bool = False) -> dict[str, str]:
        """The sections whose text on screen is not stored yet. Only text typed for the open
        study counts; empty text only when the reader typed in that section.

        typed_only (every autosave: the tick, leaving the study, the save before a draft
        replaces the boxes): only sections the page saw input events in since the study was
        shown (`Client.typed`: typing, paste, dictation, a restore). Other text unlike what
        the tab was shown is a page out of step with its study, never stored on the reader's
        behalf: a new-user trial saw DEMO-0002's draft autosaved into DEMO-0003 during fast
        Alt+N and row clicks, nothing typed. Save, the reader's own act, stores what is on
        screen."""
        if session.study is None or client.study != session.study:
            return {}
        out = {}
        for section in SECTIONS:
            text = texts.get(section) or ""
            if text == session.shown.get(section, ""):
                continue
            if not text.strip() and section not in client.typed:
                continue  # an empty box the reader did not clear: a page still loading
            out[section] = text
        stray = [section for section in out if section not in client.typed]
        if typed_only and stray:
            log.warning("autosave of study %s: %s not typed in this tab but unlike what it "
                        "was shown; not stored", session.study, ", ".join(stray))
            out = {k: v for k, v in out.items() if k not in stray}
        return out

    def save(self, session: Session, texts: dict[str, str], client: Client,
             autosave: bool = False, _own_late: bool = False) -> Saved:
        """Save what changed as new revisions; a stale base is refused, never overwritten,
        unless the newer revision holds a text this tab itself sent (`Client.own`: its own
        save that reached the server after a reload): then the text is saved on top of it.
        A request sent before an Accept, Take theirs or Revert replaced its text is refused
        only if it carries text of its own (a reader who had typed nothing since an Accept
        was told "a newer edit..." on every row click: a new-user trial)."""
        if session.study is None or session.reader is None:
            return Saved("Open a study first.", {}, False)
        # the reader's own text: a section they left as the tab showed it is never sent
        changed = self.pending(session, texts, client, typed_only=autosave)
        if client.seq < session.seq and changed:
            return Saved("A newer edit of this tab is already saved.", {}, False)
        if (held := self.held(session)) is not None:  # the text stays in the box
            return Saved(f"⚠ Not saved: {html.escape(held)}.", {}, False)
        wrote, messages = False, list[str]()
        edits = _edits(session, changed, client)
        # both sections in one transaction: one commit (one fsync) per save, not one each
        try:
            results = (self._store(session, session.reader, session.study, client, edits,
                                   autosave) if edits else {})
        except ReadOnlyNow:  # signed in another tab: this one is drawn again, read-only
            return _now_read_only(session, "⚠ Not saved: ")
        except (DatabaseBusy, ReviewError) as exc:  # the text stays in the box
            return Saved(f"⚠ Not saved: {html.escape(str(exc))}", {}, False)
        _counted(session, client, results)
        adopted = False
        for section, rev in results.items():
            if isinstance(rev, EditConflict):
                if not _own_late and rev.current.text in client.own.get(section, ()):
                    # this tab's own save that outlived a reload: edit on top of it
                    log.info("study %s %s: revision %s is this tab's own late save",
                             session.study, section, rev.current.number)
                    session.base[section] = rev.current.number
                    session.shown[section] = rev.current.text
                    adopted = True
                    continue
                session.conflicts[section] = rev.current
                continue
            session.base[section] = rev.number
            session.shown[section] = rev.text
            wrote = session.stored_here = True
            messages.append(f"{section} saved as revision {rev.number}"
                            + (" (autosave)" if autosave else ""))
        if adopted:
            again = self.save(session, texts, client, autosave, _own_late=True)
            messages += [again.message] if again.wrote or again.conflicts else []
            wrote = wrote or again.wrote
        session.seq = max(session.seq, client.seq)
        saved = self._saved(session, messages, set(results), wrote, autosave, texts, set(changed))
        if getattr(results, "withdrawn", False):  # see ReviewService.save_sections
            saved = dataclasses.replace(saved, withdrawn=True, message=(
                f"{saved.message}<br>“Acceptable without changes” is withdrawn: your text now "
                "differs from the draft."))
        return saved

    def _store(self, session: Session, reader: int, study: int, client: Client,
               edits: dict[str, SectionEdit], autosave: bool
               ) -> dict[str, RevisionView | EditConflict]:
        """Store the edits; in plain review with the draft's texts, which an edit that
        differs from them checks against "acceptable without changes"."""
        if session.reading is not None or not session.drafts:
            return self._rv(session, client).save_sections(
                reader, study, edits, autosave=autosave, address=session.address)
        return self.review.save_sections(reader, study, edits, autosave=autosave,
                                         address=session.address,
                                         drafts=self.draft_texts(session))

    def _saved(self, session: Session, messages: list[str], written: set[str], wrote: bool,
               autosave: bool, texts: dict[str, str], changed: set[str]) -> Saved:
        """What a save tells the reader: the conflicts, else what it stored, else that all
        is saved (a Save then also marks the sections submitted). A conflict holds only a
        section the reader `changed`; a newer save of another is told after what was saved."""
        if session.conflicts:
            held = frozenset(s for s in session.conflicts if s in changed)
            told = session.told = frozenset(session.conflicts) - held
            message = conflict_message(session.conflicts, texts, told)
            if messages and not held:
                message = "; ".join(messages) + "<br>" + message
            return Saved(message, dict(session.conflicts), wrote, held)
        if messages:
            if not autosave:  # Save says where every section stands (an autosave may have
                # stored one of them a moment before: "impression saved" alone read as if the
                # findings were not; issue #21, defect 9)
                messages += [f"{s} already saved as revision {n}"
                             for s, n in session.base.items() if n is not None and s not in written]
            return Saved("; ".join(messages), {}, wrote)
        mine = {s: n for s, n in session.base.items() if n is not None}
        if not mine:  # nothing of the reader's: the study is described as it was opened (a
            # new-user trial saw one untouched study say "Everything is saved." and another
            # "Showing the draft; edit and save.")
            return Saved(self.status_line(session), {}, wrote)
        if not autosave and session.reader is not None and session.study is not None:
            self._rv(session).submitted(session.reader, session.study, list(mine))
        return Saved("Everything is saved (" + ", ".join(
            f"{s} revision {n}" for s, n in mine.items()) + ").", {}, wrote)

    def check_signed(self, session: Session, client: Client) -> Saved | None:
        """Whether the reading on screen was signed meanwhile in another tab or window (its
        boxes, Save and Sign looked live until the reader's next save was refused: a new-user
        trial). Called by the heartbeat of a visible tab when nothing was saved, also while
        a conflict is up.

        Returns:
            The notice that turns the tab read-only, or None.
        """
        if self.readings is None or session.reading is None or session.owner is None \
                or session.signed or client.study != session.study:
            return None
        try:
            signed = self.readings.signed_at(session.reading, session.owner)
        except ReaderStudyError as exc:  # (its session closed, say: a save tells the reader)
            # (DEBUG: asked at every heartbeat of the tab, the same line every 4 s)
            log.debug("reading %s: %s", session.reading, exc)
            return None
        return None if signed is None else _now_read_only(session)

    def check_newer(self, session: Session, client: Client,
                    texts: Mapping[str, str] | None = None) -> Saved | None:
        """Whether another tab or session saved a newer revision of a section while this tab
        shows an older one (found in a new-user trial: the tab saved over kept saying "saved
        as revision 14" until its own next save was refused), or a revision newer than the one
        a conflict on screen quotes (a new-user trial: the notice kept quoting revision 1
        after revision 2 came in, and Keep mine saved over words the reader never saw). Called
        by the heartbeat when nothing but held sections is pending: the reader is told and
        chooses, exactly as after a refused save; the boxes are never replaced under a reader
        who may be about to type. `texts`: the boxes, which the quotes are marked against.

        Returns:
            The notice to show, or None when this tab is up to date.
        """
        if session.study is None or session.reader is None or client.study != session.study:
            return None
        newer = {}
        for section, rev in self._rv(session).current(session.reader, session.study).items():
            quoted = session.conflicts.get(section)
            if quoted is not None:
                if rev.number != quoted.number:  # the notice quotes an older one
                    newer[section] = rev
                continue
            if rev.number == session.base.get(section) or rev.text == session.shown.get(section):
                continue
            if rev.text in client.own.get(section, ()):  # this tab's own save, after a reload
                session.base[section], session.shown[section] = rev.number, rev.text
                continue
            newer[section] = rev
        if not newer:
            return None
        # (nothing is pending when the heartbeat asks but sections already in conflict: every
        # section newly told is one the reader has not changed; typing in it later makes it
        # theirs, and a conflict: see `tick`)
        fresh = frozenset(s for s in newer if s not in session.conflicts)
        session.told = (session.told if session.conflicts else frozenset()) | fresh
        session.conflicts.update(newer)
        boxes = session.shown if texts is None else {**session.shown, **texts}
        return Saved(conflict_message(session.conflicts, boxes, session.told),
                     dict(session.conflicts), False)

    def keep_mine(self, session: Session, texts: dict[str, str], client: Client) -> Saved:
        """Save the reader's text on top of the newest revision; all stay in the history.

        The newest, not the one the banner quoted: another save may have come in since, and
        Keep mine then ran into it and needed a second click (issue #21, defect 8). Only what
        the reader changed is theirs to keep: a section still as the tab showed it (an
        untouched draft) gets the newer text in its box instead. Saving it stored a stale
        draft over another tab's save (a new-user trial)."""
        newest = (self.review.current(session.reader, session.study)
                  if session.reader is not None and session.study is not None else {})
        # (before shown moves to the newest text, against which an untouched box would differ)
        mine = self.pending(session, texts, client)
        out, theirs = dict(texts), list[str]()
        for section, quoted in list(session.conflicts.items()):
            rev = newest.get(section, quoted)
            session.base[section] = rev.number
            session.shown[section] = rev.text
            if section not in mine:
                out[section] = rev.text
                theirs.append(f"{section} revision {rev.number}")
        session.conflicts = {}
        if theirs:  # requests on their way carry the old box text: only a newer edit saves
            session.seq = max(session.seq, client.seq + 1)
        saved = self.save(session, out, _as_chosen(client, session, own=False))
        if not theirs:
            return saved
        it = "it" if len(theirs) == 1 else "them"
        note = f"showing the newer saved {' and '.join(theirs)} (you had not changed {it} here)."
        return dataclasses.replace(saved, message=f"{saved.message.rstrip('.')}; {note}",
                                   texts=out)

    def put_draft(self, session: Session, client: Client) -> Saved:
        """Revert / Use this draft: store the draft's text as the reader's revision now, not by
        the next autosave. The page never typed it, so its edit counter had not moved: after
        an Accept or Take theirs (which make older requests stale) the autosave of the
        reverted text was refused as stale, and a reload brought back the text the reader had
        just replaced (a new-user trial). Requests already on their way carry the replaced
        text and are stale once this is stored."""
        saved = self.save(session, self.draft_texts(session), _as_chosen(client, session))
        if saved.ok:
            session.seq = max(session.seq, client.seq + 1)
        return saved

    def take_theirs(self, session: Session, texts: dict[str, str],
                    client: Client | None = None) -> tuple[dict[str, str], Saved]:
        """Show the newer saved text instead of the reader's; the reader's refused words are
        kept in the history first (`ReviewService.set_aside`), never dropped. Requests already
        on their way (an autosave of the reader's text) are then stale.

        Returns:
            The boxes' texts and what to tell the reader (a conflict again if yet another
            revision came in meanwhile).
        """
        if client is not None:
            session.seq = max(session.seq, client.seq + 1)
        out = dict(texts)
        if session.study is None or session.reader is None or not session.conflicts:
            return out, Saved("Nothing to take.", {}, False)
        # the reader's words, where they typed any: not theirs, and not what this tab had
        # stored already (a tab told of a newer save while showing its own stored text)
        mine = {sec: (texts.get(sec) or "", rev.number)
                for sec, rev in session.conflicts.items()
                if (texts.get(sec) or "").strip()
                and (texts.get(sec) or "") not in (rev.text, session.shown.get(sec, ""))}
        try:
            stored = (self._rv(session).set_aside(session.reader, session.study, mine,
                                                  session.address) if mine else {})
        except ReviewError as exc:
            return out, Saved(f"⚠ Not saved: {html.escape(str(exc))}", dict(session.conflicts),
                              False)
        kept = []
        for section, rev in list(session.conflicts.items()):
            result = stored.get(section)
            if isinstance(result, EditConflict):  # a third save meanwhile: choose again
                session.conflicts[section] = result.current
                continue
            current = rev if result is None else result
            session.base[section] = current.number
            session.shown[section] = out[section] = current.text
            del session.conflicts[section]
            if result is not None:
                kept.append(f"{section} revision {current.number - 1}")
        if session.conflicts:
            return out, Saved(conflict_message(session.conflicts, out), dict(session.conflicts),
                              bool(kept))
        note = f" Your text is kept in the history ({', '.join(kept)})." if kept else ""
        return out, Saved("Showing the newer saved text." + note, {}, bool(kept))

    def tick(self, session: Session, texts: dict[str, str], client: Client,
             now: float) -> Saved | None:
        """The heartbeat: count time while the study is open, the tab visible and the reader
        active; autosave what the reader typed. None when nothing was saved."""
        if session.study is None or session.reader is None:
            return None
        if client.visible and client.idle_s < IDLE_AFTER_S and client.study == session.study:
            self._beat(session, now)
            session.counted = True
        session.beat_at = now
        pending = self.pending(session, texts, client, typed_only=True)
        # a refused section waits for the reader's choice (no retry into it every few seconds);
        # a newer save of a section the reader has not changed stops no autosave of the others
        held = frozenset(s for s in pending if s in session.conflicts)
        if held & session.told:
            # told "you have not changed it", then typed in: the notice says the choice is
            # theirs now (it kept saying untouched, and Take theirs then took the typed words
            # off the screen: new-user trial 19)
            session.told -= held
            return Saved(conflict_message(session.conflicts, texts, session.told),
                         dict(session.conflicts), False, held)
        if not pending or held:
            return None
        if client.seq < session.seq:
            # sent before an Accept, Take theirs or Revert replaced its text: nothing to say
            # (its "a newer edit is already saved" replaced what the Accept had said: a CI
            # run); the page's next tick carries the boxes as they are now
            return None
        return self.save(session, texts, client, autosave=True)

    def count_time(self, session: Session, client: Client, now: float) -> None:
        """The time since the last heartbeat, by the activity rule (before a reading is
        signed: its time is final then, and a quick reading would count none)."""
        if session.study is not None and session.reader is not None and client.visible \
                and client.idle_s < IDLE_AFTER_S and client.study == session.study:
            self._beat(session, now)
            session.beat_at = now

    def _beat(self, session: Session, now: float) -> None:
        if session.study is None or session.reader is None:
            return
        try:
            self._rv(session).heartbeat(session.reader, session.study, now - session.beat_at)
        except ReviewError as exc:  # a reading closed under the tab: its time stops
            log.info("heartbeat refused: %s", exc)

    @staticmethod
    def rows_due(session: Session, now: float) -> bool:
        """Whether a heartbeat should also send the worklist rows: after `FIRST_ROWS_S`, then
        every `ROWS_EVERY_S` while time is counted, so the minutes column follows a reader who
        reads without saving (it stood still until the next save or study) at one worklist
        page query per interval."""
        if session.rows_at is None:  # the first beat starts the clock: due FIRST_ROWS_S on
            session.rows_at = now - ROWS_EVERY_S + FIRST_ROWS_S
        if not session.counted or now - session.rows_at < ROWS_EVERY_S:
            return False
        session.counted, session.rows_at = False, now
        return True

    def leave(self, session: Session, texts: dict[str, str], client: Client,
              now: float) -> Saved:
        """Before the screen leaves the study: store what is typed (an autosave revision) and
        the time since the last beat. A conflict keeps the reader on the study."""
        if session.study is not None and session.reader is not None and \
                client.visible and client.idle_s < IDLE_AFTER_S and client.study == session.study:
            self._beat(session, now)
        return self.save(session, texts, client, autosave=True)

    def prior_report(self, reader: int, study_id: int) -> PriorReport | None:
        """The reader's report of a study they saved text of (None: they saved none): the
        saved sections, the rest as the draft on screen when they left it."""
        current = self.review.current(reader, study_id)
        if not current:
            return None
        texts = {s: r.text for s, r in current.items()}
        drafts = self.drafting.latest(study_id, self.preset) if self.drafting else {}
        drafted = {s: d.text for s, d in drafts.items()
                   if s not in texts and s in SECTIONS and d.error is None and d.text}
        return PriorReport(max(r.created_at for r in current.values()),
                           {**texts, **drafted}, frozenset(drafted))

    def draft_texts(self, session: Session) -> dict[str, str]:
        """The draft's text per section ('' without one): Revert / Use the new draft."""
        return {s: session.drafts.get(s, (0, ""))[1] for s in SECTIONS}

    def own_sections(self, session: Session, texts: dict[str, str]) -> list[str]:
        """The sections whose text is the reader's own, on screen or saved (it differs from
        the draft): what Accept and Revert would replace, and so ask about first."""
        if not session.drafts:
            return []
        drafts = self.draft_texts(session)
        return [s for s in SECTIONS if (texts.get(s) or "") != drafts[s]
                or (session.base.get(s) is not None and session.shown.get(s) != drafts[s])]

    def accept(self, session: Session, texts: dict[str, str], client: Client,
               confirmed: bool = False, address: str | None = None) -> Accepted:
        """Accept the draft as is, in one transaction. With the reader's own text (saved or on
        screen) it asks first. It records "acceptable without changes" and no Likert score."""
        if session.study is None or session.reader is None:
            return Accepted("Open a study first.")
        if session.reading is not None:
            return Accepted("In a reader study a draft is accepted by signing it unchanged: "
                            "press **Sign reading**.")
        if (held := self.held(session)) is not None:
            return Accepted(f"⚠ Not accepted: {html.escape(held)}.")
        if not session.drafts:
            return Accepted("No draft to accept.")
        drafts = self.draft_texts(session)
        own = self.own_sections(session, texts)
        if own and not confirmed:
            return Accepted(asking("Accept", own), needs_confirm=True)
        try:
            self.review.accept_draft(session.reader, session.study, session.drafts,
                                     dict(session.base), self.preset,
                                     address=address or session.address)
        except EditConflict as exc:
            session.conflicts[exc.section] = exc.current
            return Accepted(conflict_message(session.conflicts, texts))
        current = self.review.current(session.reader, session.study)
        session.base = {s: current[s].number if s in current else None for s in SECTIONS}
        session.shown = {s: current[s].text if s in current else drafts[s] for s in SECTIONS}
        # requests already on their way carry the replaced text: only a newer edit may save
        session.seq = max(session.seq, client.seq + 1)
        return Accepted("Draft accepted without changes. Now give an overall score (keys 1-5) "
                        "and Submit rating to finish the study.", texts=dict(session.shown))

    def rate(self, session: Session, likert: object, acceptable: bool,
             errors: dict[str, dict[str, object]], comment: str | None,
             texts: dict[str, str] | None = None, checked: bool = False) -> tuple[bool, str]:
        """Rate the study. "Acceptable without changes" is refused when the text on screen
        differs from the draft (a reader who accepted and then edited would otherwise store a
        rating that contradicts their own report). Where the edit suggests ReXVal counts
        (`texts` given), the rating is refused until the reader says they `checked` them (a
        suggestion is never the reader's rating unconfirmed); the suggested counts are stored
        beside the reader's."""
        if session.study is None or session.reader is None:
            return False, "Open a study first."
        if (held := self.held(session)) is not None:
            return False, f"⚠ Not rated: {html.escape(held)}."
        if not session.drafts and session.reading is None:
            # the score is the model draft's: with none there is nothing it could mean, and
            # the evaluation (which pairs ratings with drafts) would leave it out unseen
            # (found in a new-user trial: "No ratings" in the report of a rated study)
            return False, ("⚠ Not rated: this study has no draft, and the score rates the "
                           "model's draft. Your own text is saved; press Draft (Alt+D) to get "
                           "one.")
        if acceptable and texts is not None and session.drafts:
            drafts = self.draft_texts(session)
            changed = [s for s in SECTIONS if (texts.get(s) or "").strip() != drafts[s].strip()]
            if changed:
                return False, ("⚠ Not rated: “Acceptable without changes” is ticked, but your "
                               f"{differ(changed)} from the draft; untick it, or "
                               "revert to the draft.")
        if acceptable and (significant := _significant(errors)):
            # a draft acceptable as it stands has no clinically significant error (a new-user
            # trial stored 5/5, acceptable, 2 significant errors left in the form below the
            # fold, without a word)
            return False, ("⚠ Not rated: “Acceptable without changes” is ticked, but you "
                           f"counted {significant} clinically significant error"
                           f"{'s' if significant > 1 else ''}; untick it, or set "
                           f"{'those counts' if significant > 1 else 'that count'} to 0.")
        suggested = (self.aids.suggest(self.draft_texts(session), texts)
                     if texts is not None else None)
        if suggested is not None and suggested.any and not checked:
            return False, ("⚠ Not rated: the ReXVal counts marked “suggested” come from your "
                           "edit, not from you; check them, then tick “I checked the suggested "
                           "counts”.")
        try:
            r = self._rv(session).rate(session.reader, session.study, likert=likert,
                                 acceptable=bool(acceptable), errors=errors, comment=comment,
                                 preset=self.preset, address=session.address,
                                 suggested=suggested.counts() if suggested is not None else None)
        except (ReviewError, DatabaseBusy) as exc:
            return False, f"⚠ Not rated: {html.escape(str(exc))}"
        session.comment_shown = comment or ""
        session.counts_typed = session.counts_held = False
        session.score_shown, session.score_held = r.likert, None
        session.rated = r if r.likert is not None else session.rated
        session.edited_since_rated = False
        # the score, not the rating's number: an Accept stores a score-less rating first, so
        # the reader's one score read "#2" (a new-user trial)
        return True, f"Rated {r.likert}/5 at {r.created_at:%H:%M}: study done."

    # -- drafting -------------------------------------------------------------------------
    def refresh_drafts(self, session: Session, texts: dict[str, str]) -> DraftsIn:
        """After drafting on request or on arrival: the new drafts become what edits are
        compared with. The new draft goes into each box where the reader has no text of their
        own (none saved, and the box as gathered holds the old draft or nothing); a box with
        their text keeps it, the new draft beside it. Judged per section: a reader who wrote
        the impression while the model ran (and had it autosaved) got an empty findings box
        too, the draft only beside it (CI under load).

        Not `own_sections`' rule: there a saved revision equal to the draft is not the
        reader's (Accept and Revert would replace nothing); here every saved revision is (an
        accepted draft is the reader's report, which a new draft never replaces unasked)."""
        if session.reading is not None:  # a reading shows its arm's draft, never the app's
            return DraftsIn({}, {}, frozenset())
        old = self.draft_texts(session)
        own = frozenset(s for s in SECTIONS if session.base.get(s) is not None
                        or (texts.get(s) or "") != old[s])
        drafts = (self.drafting.latest(session.study, self.preset)
                  if self.drafting and session.study is not None else {})
        session.drafts = {s: (d.id, d.text) for s, d in drafts.items()
                          if d.error is None and d.text}
        new = self.draft_texts(session)
        fresh = {s: new[s] for s in SECTIONS if s not in own and new[s]}
        session.shown.update(fresh)
        return DraftsIn(drafts, fresh, own)

    # -- window / level -------------------------------------------------------------------
    def window_preset(self, image_id: int, choice: str) -> tuple[float, float]:
        """(center, width) of a preset on the image's own brightness histogram: values depend
        on the file (12-bit DICOM, 16-bit PNG, 8-bit JPEG), on its polarity (on a MONOCHROME1
        image bone has the low values: "bone" and "lung" were swapped on such DICOMs) and on
        the exposure (fixed fractions of the raw range washed the lungs out). Both found in
        new-user trials. Lung: the darker part of the film, where the lungs are; soft tissue:
        the mid to bright part (mediastinum, heart); bone: wide and up to the brightest, so the
        ribs over the lungs show (a narrower one left them black: third new-user trial)."""
        presets = self.window_presets(image_id)
        if choice not in presets:
            raise ReviewError(f"unknown window preset {choice!r}")
        return presets[choice]

    def window_presets(self, image_id: int) -> dict[str, tuple[float, float]]:
        """Every preset of WINDOW_PRESETS as (center, width), from one read of the image's
        value range (the enlarged view sends them all to the page at once)."""
        r = self.viewer.value_range(image_id)
        span = max(r.hi - r.lo, 1.0)
        return {"file default": r.window, "full range": r.whole(r.at(0.5), span),
                "soft tissue": r.between(30.0, 92.0),
                "bone": r.between(10.0, 99.5),
                "lung": r.between(2.0, 60.0)}
