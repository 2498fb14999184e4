"""The review workstation page: the feature panels composed, and what crosses them.

Each feature lays out its own panel (a typed dataclass of components, `build`) and wires its own
events on the services it is given: the worklist (worklist/panel.py), the film and the enlarged
view (viewer/panel.py), the editor and the rating (review/panel.py), the metrics and the export
(evaluation/panel.py) and the top bar (accounts/panel.py). The page places them, and owns what
belongs to no single panel: opening a study (it replaces what every panel shows), page load and
navigation. Every handler's reader is resolved and checked by one `Guard` (app/deps.py); the page
script and styles are static files (static/).
"""

from __future__ import annotations

import html
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from rrg_review.app.accounts.panel import TopBar, wire_top_bar
from rrg_review.app.deps import (
    PRIVATE,
    QUIET,
    Guard,
    Inputs,
    Outputs,
    Reader,
    Services,
    Tab,
    arrived,
    track_quiet_progress_on,
    wait_for_draft,
    with_number,
)
from rrg_review.app.evaluation.panel import ExportPanel, MetricsPanel, wire_export, wire_metrics
from rrg_review.app.reader_study.panel import (
    SignPanel,
    StudyListPanel,
    StudyLists,
    StudyListView,
    wire_sign,
)
from rrg_review.app.reader_study.service import ReaderStudyError
from rrg_review.app.reader_study.status_panel import StudyAdminPanel, wire_study_admin
from rrg_review.app.review.desk import (
    Client,
    Desk,
    Saved,
    Session,
    has_draft_actions,
    left_saved,
)
from rrg_review.app.review.panel import (
    Editor,
    ReviewPanel,
    Wiring,
    wire_draft_arrival,
    wire_review,
    wire_unload,
)
from rrg_review.app.review.service import SECTIONS
from rrg_review.app.viewer.panel import (
    EnlargedPanel,
    FilmPanel,
    film_html,
    wire_enlarged,
    wire_film,
)
from rrg_review.app.worklist.panel import WorklistPanel, build_worklist_panel

__all__ = ["Page", "build", "film_html", "launch_options"]

log = logging.getLogger(__name__)

# Next / Previous went round the end of the list without a word (a new-user trial took the
# first study, met again, for a new one)
def wrapped_note(step: int, kind: str) -> str:
    """What Next (step > 0) or Previous says when it went round the list's end to its first
    (last) `kind` study ("unfinished"; "done" under the status filter "done")."""
    if step > 0:
        return f"↻ Past the end of the list: back to its first {kind} study."
    return f"↻ Past the start of the list: on to its last {kind} study."


def no_other_study(kind: str) -> str:
    return f"No other {kind} study that way in the worklist as searched and filtered."


NO_OTHER_STUDY = no_other_study("unfinished")
NO_OTHER_READING = "No other reading to read in this session: the others are signed."

STATIC = Path(__file__).with_name("static")
SHORTCUTS = [
    ("Alt+N / Alt+P", "next / previous unfinished study, or reading not signed yet (what you "
                      "typed is saved first)"),
    ("Ctrl+S", "save both sections"),
    ("1 … 5", "overall score, when not typing in a box (Esc leaves the box)"),
    ("Alt+A", "accept the draft as is (asks first if you changed it)"),
    ("Alt+F / Alt+I", "focus findings / impression"),
    ("Alt+D", "draft (or regenerate) this study"),
    ("Alt+R", "submit the rating"),
    ("Alt+B", "show / hide the prior study beside this one"),
    ("↑ ↓, Enter", "in the worklist (after a click in it): choose a row, open its study"),
    ("Click an image", "enlarged view (current or prior): right-drag window/level, "
                        "wheel zoom, drag pan, ← → other images, P current ⇄ prior (with "
                        "the prior beside), Esc closes"),
]


@dataclass(frozen=True)
class Page:
    """Every panel of the page."""

    tab: Tab
    top: TopBar
    worklist: WorklistPanel
    export: ExportPanel
    film: FilmPanel
    review: ReviewPanel
    metrics: MetricsPanel
    enlarged: EnlargedPanel
    studies: StudyListPanel
    sign: SignPanel
    study_admin: StudyAdminPanel  # reader-study status: shown to admins only

    @classmethod
    def build(cls, services: Services) -> Page:
        top = TopBar.build(services.login)
        tab = Tab.build()
        pick, enlarge = EnlargedPanel.build_hidden()
        with gr.Row(elem_id="main-row", equal_height=False):
            with gr.Column(scale=2, min_width=250, elem_id="worklist-col"):
                studies = StudyListPanel.build()
                worklist = build_worklist_panel(services.worklists,
                                                left_off=_left_off_of(services))
                with gr.Accordion("Keyboard shortcuts", open=False, elem_id="help"):
                    gr.Markdown("\n".join(f"- **{k}**: {v}" for k, v in SHORTCUTS))
                export = ExportPanel.build()
                study_admin = StudyAdminPanel.build()
            with gr.Column(scale=6, min_width=480, elem_id="viewer-col"):
                film = FilmPanel.build(services.viewer)
            with gr.Column(scale=3, min_width=380, elem_id="editor-col"):
                sign = SignPanel.build()
                review = ReviewPanel.build()
                metrics = MetricsPanel.build()
        return cls(tab, top, worklist, export, film, review, metrics,
                   EnlargedPanel.build(pick, enlarge), studies, sign, study_admin)

    @property
    def edit_in(self) -> set[Any]:
        """The inputs of every event that carries the report's text, and `sync`, gathered
        with them, which names the study they belong to (see `Tab.client_js`); the rating's
        comment and score too, which a move away does not drop unsent without a word
        (`Desk.unsent`)."""
        wl = self.worklist
        return {self.tab.state, self.review.findings, self.review.impression, self.tab.client,
                self.tab.sync, *wl.filters, wl.page, self.review.comment, self.review.likert}


def _left_off_of(services: Services) -> Callable[[int], frozenset[int]]:
    """What the plain worklist leaves off for a reader: the cases of their unfinished
    blinded reader studies (one query; none without reader studies)."""
    readings = services.readings

    def left_off(reader: int) -> frozenset[int]:
        return readings.studies.blinded_cases(reader).ids if readings else frozenset()
    return left_off


def build(services: Services) -> gr.Blocks:
    """The whole page on these services."""
    s = services
    desk = Desk(s.viewer, s.review, s.drafting, s.predrafter, s.preset, s.metrics,
                worklists=s.worklists, accounts=s.accounts, readings=s.readings)
    if not s.login:
        # the one local reader's first study is drafted before the first page asks for it
        desk.predraft_first(s.accounts.local_reader())
    ui: gr.Blocks  # (Gradio leaves Blocks.__enter__ unannotated)
    # analytics off: Gradio otherwise asks api.gradio.app for its latest version at every start
    # (a request leaving a reading room's machine, from a thread, for nothing the reader needs)
    with gr.Blocks(title="rrg-review", fill_width=True, analytics_enabled=False) as ui:
        page = Page.build(s)
        _wire(ui, page, desk, s)
    quiet = track_quiet_progress_on(ui, page.tab.sync)
    log.debug("%d events that show no progress keep their status on #sync", quiet)
    return ui


def _wire(ui: gr.Blocks, page: Page, desk: Desk, services: Services) -> None:
    guard = Guard(desk, page.tab, services.login, status=page.review.save_status)
    metrics_step = wire_metrics(page.metrics, desk, guard)
    nav = Navigation(page, desk, services, guard, metrics_step)
    wiring = Wiring(services, desk, guard, nav.editor, nav.rows, page.worklist.follow,
                    metrics_step, page.edit_in, nav.with_client,
                    [page.worklist.table, page.worklist.progress, page.worklist.page,
                     page.worklist.page_text],
                    lambda r: page.studies.shown(nav.study_lists(r)),
                    [page.studies.head, page.studies.table])
    loaded = nav.wire_load(ui)
    nav.wire_steps()
    nav.wire_redraw()
    wire_draft_arrival(wiring)
    wire_unload(wiring, loaded)
    if services.readings is not None:
        wire_study_admin(page.study_admin, services.readings.studies, services.accounts,
                         guard, loaded)
    # search, filters and paging: the panel's own read-only events; the row click and
    # Previous/Next above save the reader's pending text before they leave the study
    page.worklist.connect(ui, page.tab.state,
                          lambda request: guard.reader(Session(), request).id, None, [],
                          prepare_reader=desk.prepare, navigation=False)
    wire_film(page.film, services.viewer, guard, desk.prior_report)
    wire_review(wiring)
    wire_sign(page.sign, desk, guard, nav.editor, nav.reading_outputs, nav.reading_outs,
              page.edit_in, nav.with_client)
    wire_enlarged(page.enlarged, services.viewer, desk, guard)
    wire_top_bar(page.top, services.login, guard(nav.on_logout), page.edit_in, nav.study_outs,
                 **nav.with_client)
    wire_export(page.export, services, guard)


class Navigation:
    """Opening a study, which replaces what every panel shows: on page load, on a worklist row,
    on Previous/Next, before logging out. What is typed is saved first."""

    def __init__(self, page: Page, desk: Desk, services: Services, guard: Guard,
                 metrics_step: dict[str, Any]) -> None:
        self.page, self.desk, self.services, self.guard = page, desk, services, guard
        self.metrics_step = metrics_step
        self.editor = Editor(page.review, desk, page.tab)
        self.lists = StudyLists(services.readings.studies) if services.readings else None
        carried = (page.review.findings, page.review.impression)
        self.with_client: dict[str, Any] = {"js": page.tab.client_js(page.edit_in, carried)}
        self._select_js = page.tab.client_js(page.edit_in | {page.worklist.table}, carried)
        p, wl, tab = page, page.worklist, page.tab
        self.study_outs = list(dict.fromkeys([
            tab.state, tab.wanted, p.top.who, p.film.film, p.film.details, p.film.prior_button,
            *self._review_outs(), p.enlarged.data, p.metrics.table,
            p.metrics.notes, wl.table, wl.progress, wl.page, wl.page_text,
            *self.reading_outs]))

    @property
    def reading_outs(self) -> list[Any]:
        s, g = self.page.studies, self.page.sign
        return [s.head, s.table, g.sign, g.confirm, g.cancel, g.preview,
                self.page.review.findings, self.page.review.impression, *self._writes]

    @property
    def _writes(self) -> list[Any]:
        """The buttons that write to the open study: greyed where the boxes take no text (a
        signed reading's Save and Submit rating looked as clickable as ever: a new-user
        trial)."""
        r = self.page.review
        return [r.save_button, r.revert_button, r.accept_button, r.rate_button]

    def study_lists(self, r: Reader) -> StudyListView:
        return self.lists.view(r.name, r.id) if self.lists else StudyListView("", [], None)

    def reading_outputs(self, r: Reader, texts: dict[str, str] | None = None,
                        lists: StudyListView | None = None) -> Outputs:
        """The study worklists, Sign and whether the boxes take text (a signed reading's do
        not, nor do they with no study open), after anything that opens, saves or signs a study
        or a reading; `texts`: the boxes' new values (one update carries both); `lists`: the
        study worklists when the caller has them already (one query fewer)."""
        session, p = r.session, self.page
        # no study open (every study done, an empty list): the boxes take no typing, which
        # belonged to no study and was dropped without a word (a new-user trial)
        editable = session.study is not None and not (session.reading is not None
                                                      and session.signed)
        can_sign = session.reading is not None and not session.signed
        # the labels say it too: a signed reading's boxes read "(editable)" and looked it (a
        # new-user trial)
        state = ("editable" if editable else "signed: read-only"
                 if session.study is not None else "no study open")
        boxes = {box: gr.update(interactive=editable, label=f"{section.title()} ({state})")
                 if texts is None else
                 gr.update(value=texts[section], interactive=editable,
                           label=f"{section.title()} ({state})")
                 for section, box in (("findings", p.review.findings),
                                      ("impression", p.review.impression))}
        lists = lists if lists is not None else self.study_lists(r)
        writes: Outputs = {b: gr.update(interactive=editable) for b in self._writes}
        for b in (p.review.revert_button, p.review.accept_button):
            writes[b] = gr.update(interactive=editable, visible=has_draft_actions(session))
        return {**p.studies.shown(lists), **p.sign.state(can_sign=can_sign), **boxes, **writes}

    def _review_outs(self) -> list[Any]:
        r, tab = self.page.review, self.page.tab
        return [r.findings, r.impression, r.new_findings, r.new_impression, r.reference,
                r.ref_findings, r.ref_impression, r.model_line, r.draft_error, r.draft_button,
                r.save_status, r.diff, tab.sync, r.keep_mine, r.take_theirs, r.accept_confirm,
                r.accept_cancel, r.revert_confirm, r.revert_cancel, r.restore_note,
                *r.rating_fields, r.rate_status, *r.aid_fields]

    # -- what opening a study shows ----------------------------------------------------------
    def filters_of(self, d: Inputs) -> tuple[Any, Any, Any, Any, Any]:
        """The worklist's search and filters as the event sent them."""
        wl = self.page.worklist
        search, status, source, split, images = (d.get(f, "all") for f in (
            wl.search, wl.status, wl.source, wl.split, wl.images))
        return search, status, source, split, images

    def rows(self, reader: int, d: Inputs) -> Outputs:
        """The worklist page on screen, refreshed (statuses change on save, rate and accept),
        with its "1-6 of 6" line: rows come and go too (a blinded study's cases come back
        when its last reading is signed), and the page script refits the table when that line
        changes (Gradio's table kept the old rows' height: two of six rows were drawn). The
        page number only where it changed (one being typed in is left alone)."""
        wl = self.page.worklist
        asked = d.get(wl.page) or 1
        v = wl.logic.view(reader, *self.filters_of(d), asked)
        progress = v.progress or wl.logic.progress_text(reader)
        out: Outputs = {wl.table: v.rows, wl.progress: progress, wl.page_text: v.label}
        if v.page != asked:
            out[wl.page] = v.page
        return out

    def empty_worklist_note(self, reader: int) -> str:
        """Why no study opened: every study is done (a new-user trial read "Your worklist is
        empty" beside four done studies), or the worklist is empty, with the reason when
        report-only studies are it (a new-user trial imported Open-i's 3,955 reports and took
        the empty list for a failed import)."""
        worklists = self.services.worklists
        progress = worklists.progress(reader)
        if progress.total and not progress.unfinished:
            return (f"All {progress.total:,} studies on your worklist are done. Open one in the "
                    "worklist to look at it again.")
        if progress.unfinished and self.page.worklist.logic.left_off(reader):
            return ("The unfinished studies on your worklist are cases of your blinded reader "
                    "study: read them from the study worklist above; they open in plain "
                    "review once you have signed all your readings of it.")
        hidden = worklists.report_only_count()
        if not hidden or worklists.include_report_only:
            return "Your worklist is empty."
        return (f"Your worklist is empty. {hidden:,} stored studies have no images (imported "
                "as references); they are not put on reading worklists unless the app is "
                "started with `--include-report-only`.")

    def study_outputs(self, r: Reader, study_id: int | None,
                      reading: int | None = None) -> Outputs:
        """Everything on screen that belongs to a study (or a reader-study reading: its
        case, blinded), replaced (or cleared) together.

        Raises:
            ReaderStudyError: the reading is not the reader's, or its session is closed
                (nothing on screen has changed then).
        """
        p, session, viewer = self.page, r.session, self.services.viewer
        # (a plain study's opening changes no reading: its study worklists are read once, for
        # the refusal, the priors it may show and the list on screen)
        lists: StudyListView | None = None
        if reading is not None:
            opened = self.desk.open_reading(session, r.id, reading, time.monotonic())
        elif study_id is not None:
            lists = self.study_lists(r)
            lists.refuse_plain(int(study_id))
            opened = self.desk.open(session, r.id, int(study_id), time.monotonic(),
                                    hidden=lists.blinded.ids)
        session.offered = False
        out: Outputs = {p.tab.state: session, **p.top.reader(r), **p.enlarged.cleared(),
                        **p.metrics.computing(), **self.editor.reset()}
        if study_id is None and reading is None:
            session.study, session.images, session.image = None, (), None
            session.reading = None
            return {**out, **p.film.cleared(viewer),
                    **self.editor.cleared(r, self.empty_worklist_note(r.id)),
                    **self.reading_outputs(r, {s: "" for s in SECTIONS})}
        can_draft = self.services.drafting is not None and reading is None
        if reading is None and self.desk.awaits_draft(session):
            # a new value starts the wait for the pre-drafter (`wire_draft_arrival`); a study
            # opened with its draft, as most are, sends no further request
            out[p.tab.wanted] = wait_for_draft(session.study)
        return {**out, **p.film.opened(viewer, opened.view, session, self.desk.prior_report),
                **self.editor.opened(r, opened, can_draft),
                **self.reading_outputs(r, opened.texts, lists)}

    # -- handlers ----------------------------------------------------------------------------
    def on_load(self, r: Reader, d: Inputs) -> Outputs:
        """The reading asked for in the address (`?reading=N`), else the reader's next
        reading of an open study session, else the study to resume."""
        client = Client.parse(d[self.page.tab.client])
        left = client.left
        asked, refused = r.query.get("reading"), ""
        lists = self.study_lists(r)
        reading = lists.first_open
        if asked is not None:
            try:
                return {**self.study_outputs(r, None, int(asked)), **self.rows(r.id, d)}
            except (ReaderStudyError, ValueError) as exc:
                log.info("reading %r refused to %s: %s", asked, r.name, exc)
                refused = f"⚠ {html.escape(str(exc))}"
        if reading is not None:
            out = self.study_outputs(r, None, reading)
        else:
            try:
                out = self.study_outputs(r, self.desk.start(r.id, r.name, left,
                                                            lists.blinded.ids, client.was))
            except ReaderStudyError as exc:  # a blinded study's reader between sessions
                out = self.study_outputs(r, None)
                refused = refused or f"{html.escape(str(exc))}"
        if refused:
            out[self.page.review.save_status] = refused
        return {**out, **self.rows(r.id, d)}

    def navigate(self, r: Reader, d: Inputs, target: Callable[[Reader], int | None],
                 reading: int | None = None, none_left: str = NO_OTHER_STUDY) -> Outputs:
        """Save what is typed (an autosave revision), then open the target study (or the
        reading). A refused save, or a refused reading, keeps the reader on the study with
        their words on screen; `none_left`: what is said when there is no target."""
        p, session = self.page.review, r.session
        texts, client = p.texts_of(d), Client.parse(d[self.page.tab.client])
        left = (session.study, session.reading)
        saved = self.desk.leave(session, texts, client, time.monotonic())
        if saved.closed:  # signed in another tab: stays, drawn again read-only, the words quoted
            return self.editor.after_save(r, saved, texts, client)
        if not saved.ok:
            held = Saved("⚠ **Still on this study: choose Keep mine or Take theirs first.** "
                         + saved.message, saved.conflicts, saved.wrote)
            return self.editor.after_save(r, held, texts, client)
        study = target(r)
        if study is None and reading is None:
            return {**self.editor.after_save(r, saved, texts, client),
                    p.save_status: none_left}
        if (study, reading) != left and (why := self.desk.unsent(
                session, d.get(p.comment), d.get(p.likert), page_study=client.study)):
            log.info("a move of %s from study %s held: %s", r.name, session.study, why)
            return {**self.editor.after_save(r, saved, texts, client),
                    p.save_status: f"⚠ **Still on this study: {why}**"}
        mine = {s: n for s, n in session.base.items() if n is not None}
        # a signed reading's words are its signed report: "your edits are saved (revision
        # 1)" after Sign read as if more had been stored into it (a new-user trial)
        signed = session.reading is not None and session.signed
        notes = [(f"✓ {html.escape(session.label)} is signed." if signed
                  else left_saved(session.label, mine)) if session.stored_here and mine else "",
                 self.desk.discarded(session, d.get(p.comment), d.get(p.likert),
                                     page_study=client.study) or ""]
        note = "<br>".join(n for n in notes if n)
        try:
            out = self.study_outputs(r, study, reading)
        except ReaderStudyError as exc:
            return {**self.editor.after_save(r, saved, texts, client),
                    p.save_status: f"⚠ {html.escape(str(exc))}"}
        if saved.wrote:
            out.update(self.rows(r.id, d))
        if note and (session.study, session.reading) != left:
            out[p.save_status] = f"{note}<br>{out.get(p.save_status, '')}"
        return out

    def on_step(self, step: int) -> Callable[..., Any]:
        """Next/previous unfinished study within the worklist's filters and search, round the
        end of the list when there is none that way. The worklist follows to the page that
        shows it (it stayed on page 1 while Next went on: found in a new-user trial)."""
        wl = self.page.worklist

        @self.guard
        def handler(r: Reader, d: Inputs) -> Outputs:
            if r.session.reading is not None:
                return self.reading_step(r, d, step)
            before, kind = r.session.study, wl.logic.stepped_through(d.get(wl.status))
            out = self.navigate(r, d, lambda r: wl.logic.target(
                r.id, r.session.study, step, *self.filters_of(d)), none_left=no_other_study(kind))
            session = r.session
            if self.page.film.film in out and session.study is not None \
                    and session.reader is not None:
                if before is not None and before != session.study and wl.logic.wrapped(
                        session.reader, before, session.study, step):
                    status = self.page.review.save_status
                    out[status] = f"{wrapped_note(step, kind)}<br>{out.get(status, '')}"
                v = wl.logic.page_showing(session.reader, session.study, *self.filters_of(d))
                if v is not None and v.page != (d.get(wl.page) or 1):
                    out.update({wl.table: v.rows, wl.page: v.page, wl.page_text: v.label})
            return out
        return handler

    def reading_step(self, r: Reader, d: Inputs, step: int) -> Outputs:
        """Next/previous (Alt+N / Alt+P) from a reader-study reading: the next reading of the
        reader's study worklist not signed yet, that way round the list; the general worklist
        is not stepped into from a reading (a new-user trial pressed Alt+N between readings
        and stayed put)."""
        rows = self.study_lists(r).rows
        ids = [int(row[0]) for row in rows]
        here = r.session.reading
        start = ids.index(here) if here in ids else (-1 if step > 0 else 0)
        unsigned = {int(row[0]) for row in rows if row[2] != "signed"}
        target = next((ids[(start + step * k) % len(ids)] for k in range(1, len(ids) + 1)
                       if ids[(start + step * k) % len(ids)] in unsigned - {here}), None)
        return self.navigate(r, d, lambda r: None, target, none_left=NO_OTHER_READING)

    def on_select(self, d: Inputs, evt: gr.SelectData, request: gr.Request) -> Outputs:
        """A worklist row: its study (a row click carries the event, so the guard's
        dependency is called here, under the tab's lock)."""
        wl, session = self.page.worklist, d[self.page.tab.state]
        row = evt.index[0] if isinstance(evt.index, list | tuple) else evt.index
        study = int(d[wl.table].iloc[row, 0])
        # the row clicked last, when it is on the list: a click made while another was on its
        # way runs after it (`always_last`), but with the first click's event data
        client = Client.parse(d[self.page.tab.client])
        clicked = client.row
        if clicked is not None and clicked < 0:  # a step (Next) since the last row chosen:
            study = session.study or study   # this late select stays where the step went
        elif clicked is not None and clicked in set(d[wl.table].iloc[:, 0].astype(int)):
            study = clicked
        with session.lock:  # (its status line numbered as a guarded handler's: `numbered`)
            return with_number(session, self._row_opened(session, study, client, d, request),
                               self.page.review.save_status)

    def _row_opened(self, session: Session, study: int, client: Client, d: Inputs,
                    request: gr.Request) -> Outputs:
        """`on_select`'s work, under the tab's lock."""
        r = self.guard.reader(session, request)
        if study == client.study and study != session.study:
            # a click on the row of the study open when it was made (it only saves),
            # handled after a step had opened another: the two handlers run on threads
            # of their own, and under load the step took the tab's lock first; this
            # select then took the reader back (a browser run beside two busy
            # processes). The step saved what was typed; nothing changes on screen
            # (the tab's state alone: Gradio takes an empty dict for one output value)
            return {self.page.tab.state: session}
        if study != session.study:
            return self.navigate(r, d, lambda r: study)
        # the open study's own row: saving is all there is to do; reopening it would put
        # the stored text back over whatever the reader typed while the click travelled
        texts = self.page.review.texts_of(d)
        saved = self.desk.leave(session, texts, client, time.monotonic())
        return self.editor.after_save(r, saved, texts, client)

    def on_select_reading(self, d: Inputs, evt: gr.SelectData, request: gr.Request) -> Outputs:
        """A row of the study worklists: its reading (the server decides whether the reader
        may open it; a row's value comes from the page, so it is never trusted)."""
        session = d[self.page.tab.state]
        row = evt.index[0] if isinstance(evt.index, list | tuple) else evt.index
        with session.lock:  # (its status line numbered as a guarded handler's: `numbered`)
            return with_number(session, self._reading_row_opened(session, d, row, request),
                               self.page.review.save_status)

    def _reading_row_opened(self, session: Session, d: Inputs, row: int,
                            request: gr.Request) -> Outputs:
        """`on_select_reading`'s work, under the tab's lock."""
        table = self.page.studies.table
        r = self.guard.reader(session, request)
        try:
            reading = int(d[table].iloc[row, 0])
        except (TypeError, ValueError, IndexError, AttributeError):
            return {self.page.review.save_status: "⚠ No such reading on your list."}
        if reading == session.reading:
            texts = self.page.review.texts_of(d)
            client = Client.parse(d[self.page.tab.client])
            saved = self.desk.leave(session, texts, client, time.monotonic())
            return self.editor.after_save(r, saved, texts, client)
        return self.navigate(r, d, lambda r: None, reading)

    def on_redraw(self, r: Reader, d: Inputs) -> Outputs:
        """The open study (or reading) drawn again as the server has it, nothing saved: the
        page asks when an answer handled before the one on screen landed after it (see
        `sync_json`), leaving one patient's film beside another's text. A reading refused
        now (its session closed meanwhile) leaves the page with no study, saying why."""
        session = r.session
        log.info("the page of %s drawn again on study %s", r.name, session.study)
        if session.reading is None:
            return self.study_outputs(r, session.study)
        try:
            return self.study_outputs(r, None, session.reading)
        except ReaderStudyError as exc:
            return {**self.study_outputs(r, None),
                    self.page.review.save_status: f"⚠ {html.escape(str(exc))}"}

    def on_logout(self, r: Reader, d: Inputs) -> Outputs:
        """Before leaving for /logout: what is typed is saved (the study stays open)."""
        session = r.session
        return self.navigate(r, d, lambda r: session.study if session.reading is None
                             else None, session.reading)

    # -- events ------------------------------------------------------------------------------
    def wire_load(self, ui: gr.Blocks) -> Any:
        """The page load opens the study to resume; returns the event (the draft and the
        metrics follow it)."""
        loaded = ui.load(self.guard(self.on_load), self.page.edit_in, self.study_outs,
                         **PRIVATE, **self.with_client, **QUIET)
        loaded.then(**self.metrics_step)
        return loaded

    def wire_redraw(self) -> None:
        """The open study drawn again when the page asks (`on_redraw`)."""
        redrawn = self.page.tab.redraw.click(self.guard(self.on_redraw), {self.page.tab.state},
                                             self.study_outs, **PRIVATE,
                                             **QUIET)
        redrawn.then(**self.metrics_step)
        # every value an answer gives #sync, seen by the page script as it is set (page.js
        # `rrgSyncSet`: an answer overwritten before the page read it is found so)
        tab = self.page.tab
        tab.sync.change(None, [tab.sync], None,
                        js="(v) => { if (window.rrgSyncSet) window.rrgSyncSet(v); return []; }")
        # so is every status line (`deps.numbered`): one older than the newest it was given
        # is replaced by the newest, in the browser
        status = self.page.review.save_status
        status.change(None, [status], None,
                      js="(v) => { if (window.rrgStatusSet) window.rrgStatusSet(v); "
                         "return []; }")
        tab.status_again.click(None, None, [status],
                               js="() => window.rrgNewestStatus ? window.rrgNewestStatus() "
                                  ": []")

    def wire_steps(self) -> None:
        """The row click and Previous/Next. The page script holds keystrokes back from a
        navigation's click until its answer is on screen (`arrived` tells it), and dims what
        is about to change meanwhile (page.css `rrg-leaving`; no Gradio overlay: `QUIET`). Of
        row clicks made while one is on its way the last one runs after it (Gradio's default
        ran a select once at a time and dropped the clicks meanwhile: on a slow link the list
        then marked another patient's row than the one shown, a new-user trial)."""
        wl, edit_in = self.page.worklist, self.page.edit_in
        studies = self.page.studies.table
        for kind, navigation in (
                ("row", studies.select(
                    self.on_select_reading, edit_in | {studies}, self.study_outs, **PRIVATE,
                    trigger_mode="always_last", **QUIET,
                    js=self.page.tab.client_js(
                        edit_in | {studies},
                        (self.page.review.findings, self.page.review.impression)))),
                ("row", wl.table.select(self.on_select, edit_in | {wl.table}, self.study_outs,
                                        **PRIVATE, trigger_mode="always_last",
                                        js=self._select_js, **QUIET)),
                ("step", wl.next_study.click(self.on_step(1), edit_in, self.study_outs,
                                             api_name="next_study", **self.with_client,
                                             **QUIET)),
                ("step", wl.previous_study.click(self.on_step(-1), edit_in, self.study_outs,
                                                 api_name="previous_study", **self.with_client,
                                                 **QUIET))):
            navigation.then(**self.metrics_step)
            navigation.then(**arrived(kind))


def launch_options(nonce: str = "") -> dict[str, str]:
    """Page-level additions that Gradio 6 takes at launch: the page script and styles.

    The script is inline, so it runs the moment Gradio inserts it (the page load's first
    event already calls it); `nonce` is server.py's placeholder for the page's CSP nonce,
    which Gradio copies onto the script element it inserts. The viewer's window/level runs
    in the browser (static/viewer.js, on a canvas), in the same element. page.js comes first:
    it defines `window.rrg`, whose poll marks.js hooks into (`rrg.onPoll`)."""
    script = "\n".join((STATIC / name).read_text() for name in ("page.js", "viewer.js", "marks.js"))
    tag = f'<script nonce="{nonce}">' if nonce else "<script>"
    return {"head": f"{tag}\n{script}\n</script>", "css": (STATIC / "page.css").read_text()}
