"""What the workstation's handlers do, without Gradio: a tab's session state and the steps of a
review (open, type, autosave, save, accept, rate), so they can be unit-tested directly.

workstation.py only turns these results into Gradio components.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from app.services.drafting import DraftingService, PreDrafter, StoredDraft
from app.services.evaluation import StudyMetrics
from app.services.review import EditConflict, RatingView, ReviewError, ReviewService
from app.services.viewer import StudyView, StudyViewer
from db.models import SECTIONS
from studies.records import ReportSections

PREDRAFT_AHEAD = 3  # studies after the open one that the background worker drafts
IDLE_AFTER_S = 60.0  # no input for this long: time on task stops counting


@dataclass
class Session:
    """What one browser tab holds: whose it is, what is open, which revisions it edits from."""

    reader: int | None = None
    study: int | None = None
    base: dict[str, int | None] = field(default_factory=dict)
    drafts: dict[str, tuple[int, str]] = field(default_factory=dict)  # section -> (id, text)
    saved: dict[str, str] = field(default_factory=dict)
    reference: ReportSections | None = None
    active_at: float = 0.0
    beat_at: float = 0.0
    image: int | None = None
    dirty: bool = False  # typed since the last save: only then does autosave write


@dataclass(frozen=True)
class Opened:
    view: StudyView
    drafts: dict[str, StoredDraft]
    texts: dict[str, str]
    status: str
    model_note: str
    rating: RatingView | None


@dataclass(frozen=True)
class MetricsView:
    headers: list[str]
    rows: list[list[Any]]
    notes: list[str]


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
        seconds = f"{d.seconds:.2f} s" if d.seconds is not None else "—"
        line += (f"<br>`{esc(d.model_id)}` · revision `{esc(str(d.revision or '—'))}` · "
                 f"{esc(str(d.device or '?'))}/{esc(str(d.dtype or '?'))} · {seconds}{extra}")
    return line


class Desk:
    def __init__(self, viewer: StudyViewer, review: ReviewService,
                 drafting: DraftingService | None = None, predrafter: PreDrafter | None = None,
                 preset: str = "retrieval", metrics: StudyMetrics | None = None) -> None:
        self.viewer = viewer
        self.review = review
        self.drafting = drafting
        self.predrafter = predrafter
        self.preset = preset
        self.metrics = metrics

    # -- worklist -------------------------------------------------------------------------
    def worklist_rows(self, reader: int, status: str | None = "all",
                      source: str | None = "all") -> tuple[list[list[Any]], str]:
        """The first page of the filtered worklist and the progress line (two indexed
        queries; app/ui/worklist_panel.py pages, searches and filters in full)."""
        from app.services.worklist import WorklistFilter

        worklists = self.review.worklists
        page = worklists.page(reader, WorklistFilter.from_ui(status, source), page_size=200)
        progress = worklists.progress(reader)
        rows = [[i.study_id, i.source, i.study_key, i.status.replace("_", " "),
                 round(i.active_seconds / 60, 1)] for i in page.rows]
        return rows, f"**{progress.done} / {progress.total} done**"

    # -- opening --------------------------------------------------------------------------
    def open(self, session: Session, reader: int, study_id: int, now: float) -> Opened:
        """Open a study for a reader: their own latest text, else the draft; schedule the
        next studies for pre-drafting."""
        view = self.viewer.open(int(study_id))
        drafts = self.drafting.latest(view.study_id, self.preset) if self.drafting else {}
        if self.predrafter is not None:
            self.predrafter.schedule(
                self.review.worklists.upcoming(reader, view.study_id, PREDRAFT_AHEAD))
        good = {s: (d.id, d.text) for s, d in drafts.items() if d.error is None and d.text}
        current = self.review.current(reader, view.study_id)
        texts = {s: current[s].text if s in current else (good[s][1] if s in good else "")
                 for s in SECTIONS}
        session.reader, session.study = reader, view.study_id
        session.base = {s: current[s].number if s in current else None for s in SECTIONS}
        session.drafts = good
        session.saved = {s: current[s].text for s in current}
        session.reference = view.reference
        session.active_at = session.beat_at = now
        session.image = view.images[0].image_id if view.images else None
        session.dirty = False
        if current:
            status = f"Editing your revision {max(n or 0 for n in session.base.values())}."
        else:
            status = ("Showing the draft; edit and save." if good
                      else "No draft yet: press Draft (Alt+D).")
        return Opened(view, drafts, texts, status, self.model_note(drafts),
                      self.review.latest_rating(reader, view.study_id))

    def model_note(self, drafts: dict[str, StoredDraft]) -> str:
        if self.drafting is None:
            return "No drafting set up."
        note = draft_label(self.preset, drafts, self.drafting)
        if self.predrafter is not None and self.predrafter.unavailable:
            note += f"<br>⚠ {html.escape(self.predrafter.unavailable)}"
        failed = [f"{s}: {html.escape(d.error)}" for s, d in drafts.items() if d.error]
        if failed:
            note += "<br>⚠ draft failed — " + "; ".join(failed)
        return note

    def refresh_drafts(self, session: Session) -> dict[str, StoredDraft]:
        """After drafting on request: the new drafts become what edits are compared with."""
        drafts = self.drafting.latest(session.study, self.preset) if self.drafting else {}
        session.drafts = {s: (d.id, d.text) for s, d in drafts.items()
                          if d.error is None and d.text}
        return drafts

    # -- metrics --------------------------------------------------------------------------
    def metrics_view(self, session: Session) -> MetricsView:
        if self.metrics is None or session.study is None:
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
        reasons: dict[str, list[str]] = {}
        for key, why in panel.unavailable.items():
            reasons.setdefault(why, []).append(key)
        notes = [*panel.notes,
                 *[f"unavailable: {', '.join(k)} — {w}" for w, k in reasons.items()]]
        return MetricsView(["section", "comparison", *keys], rows, notes)

    # -- editing --------------------------------------------------------------------------
    def typed(self, session: Session, now: float) -> None:
        session.active_at = now
        session.dirty = True

    def save(self, session: Session, findings: str, impression: str,
             autosave: bool = False) -> str:
        """Save what changed as new revisions; a stale base is refused, never overwritten."""
        if session.study is None or session.reader is None:
            return "Open a study first."
        messages, conflict = [], False
        for section, text in (("findings", findings or ""), ("impression", impression or "")):
            if session.saved.get(section) == text:
                continue
            draft = session.drafts.get(section)
            if session.base.get(section) is None and draft and draft[1] == text:
                continue  # still the untouched draft: nothing to save
            try:
                rev = self.review.save(session.reader, session.study, section, text,
                                       session.base.get(section),
                                       draft_id=draft[0] if draft else None, autosave=autosave)
            except EditConflict as exc:
                conflict = True
                messages.append(f"⚠ **Not saved — {html.escape(str(exc))}.** The saved "
                                f"{section} reads: “{html.escape(exc.current.text)}”")
                continue
            session.base[section] = rev.number
            session.saved[section] = rev.text
            messages.append(f"{section} saved as revision {rev.number}"
                            + (" (autosave)" if autosave else ""))
        session.dirty = conflict
        return "; ".join(messages) if messages else "Everything is saved."

    def tick(self, session: Session, findings: str, impression: str, now: float) -> str | None:
        """The periodic heartbeat: count active time, autosave if the reader typed."""
        if session.study is None or session.reader is None:
            return None
        if now - session.active_at < IDLE_AFTER_S:
            self.review.heartbeat(session.reader, session.study, now - session.beat_at)
        session.beat_at = now
        if not session.dirty:
            return None
        return self.save(session, findings, impression, autosave=True)

    def revert(self, session: Session) -> tuple[str, str]:
        session.dirty = True
        return (session.drafts.get("findings", (0, ""))[1],
                session.drafts.get("impression", (0, ""))[1])

    def accept(self, session: Session) -> str:
        if session.study is None or not session.drafts:
            return "No draft to accept."
        try:
            self.review.accept_draft(session.reader, session.study, session.drafts,
                                     self.preset)
        except EditConflict as exc:
            return f"⚠ Not accepted — {html.escape(str(exc))}"
        current = self.review.current(session.reader, session.study)
        session.base = {s: current[s].number if s in current else None for s in SECTIONS}
        session.saved = {s: current[s].text for s in current}
        session.dirty = False
        return "Draft accepted as is and rated acceptable."

    def rate(self, session: Session, likert: int | None, acceptable: bool,
             errors: dict[str, dict[str, int]], comment: str | None) -> tuple[bool, str]:
        if session.study is None:
            return False, "Open a study first."
        try:
            r = self.review.rate(session.reader, session.study, likert=likert,
                                 acceptable=bool(acceptable), errors=errors, comment=comment,
                                 preset=self.preset)
        except ReviewError as exc:
            return False, f"⚠ {html.escape(str(exc))}"
        return True, f"Rated (#{r.number}, {r.created_at:%H:%M})."
