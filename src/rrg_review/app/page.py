"""The review workstation screen: worklist, film (with the prior beside it), enlarged view with
window/level, drafts, editing, rating, metrics, keyboard.

`_layout` builds the components, `_wire` connects events to handlers; handlers read inputs as a
`{component: value}` dict, call the Gradio-free `Desk`, and return `{component: update}` dicts.
Every handler takes the reader from the authenticated request (checked against the database
and against the reader the tab's state was created for). Report text is plain text in Textboxes
and html.escape'd anywhere it becomes HTML.
"""

from __future__ import annotations

import asyncio
import base64
import html
import io
import json
import logging
import time
from pathlib import Path
from typing import Any

import gradio as gr

from rrg_review.app.accounts.service import LOCAL_READER
from rrg_review.app.deps import Services
from rrg_review.app.review.desk import (
    WINDOW_PRESETS,
    Client,
    Desk,
    Saved,
    Session,
    TabRefused,
    film_order,
)
from rrg_review.app.review.service import RatingView, ReviewError
from rrg_review.app.viewer.service import ImageView, StudyView, StudyViewer
from rrg_review.app.worklist.panel import build_worklist_panel, progress_line
from rrg_review.core.vocabulary import REXVAL_CATEGORIES, REXVAL_LABELS, SECTIONS
from rrg_review.metrics.edits import word_diff

log = logging.getLogger(__name__)
STATIC = Path(__file__).with_name("static")
AUTOSAVE_S = 4.0  # the autosave timer; also the heartbeat of active time
# "1 False report of a finding": the number and wording of core.vocabulary, as a form label
FORM_LABELS = {c: f"{i} {REXVAL_LABELS[c].capitalize()}"
               for i, c in enumerate(REXVAL_CATEGORIES, start=1)}
SHORTCUTS = [
    ("Alt+N / Alt+P", "next / previous unfinished study (what you typed is saved first)"),
    ("Ctrl+S", "save both sections"),
    ("1 … 5", "overall score, when not typing in a box"),
    ("Alt+A", "accept the draft as is (asks first if you changed it)"),
    ("Alt+F / Alt+I", "focus findings / impression"),
    ("Alt+D", "draft (or regenerate) this study"),
    ("Alt+R", "submit the rating"),
    ("Alt+B", "show / hide the prior study beside this one"),
    ("Click an image", "enlarged view: ← → other images, Esc closes, wheel/drag zoom/pan"),
]
PRIVATE: dict[str, Any] = {"api_visibility": "private"}  # the page's own events, not a public API
LIGHT: dict[str, Any] = {"queue": False, **PRIVATE}  # light, quick events skip the queue
# what the page does on its own while the reader types (autosave ticks, the diff, a draft
# arriving after the page opened) shows no progress overlay: on every keystroke it would
# dim the diff; the metrics panel keeps its overlay (scoring with real weights takes seconds)
QUIET: dict[str, Any] = {"show_progress": "hidden"}


# -- formatting (pure) --------------------------------------------------------------------------
def _diff(draft: str, text: str) -> list[tuple[str, str | None]]:
    ops = {"equal": None, "delete": "-", "insert": "+"}
    return [(p.text + " ", ops[p.op]) for p in word_diff(draft or "", text or "")]


def diff_of(drafts: dict[str, str], texts: dict[str, str]) -> list[tuple[str, str | None]]:
    return (_diff(drafts["findings"], texts["findings"]) + [("| ", None)]
            + _diff(drafts["impression"], texts["impression"]))


def _image_src(viewer: StudyViewer, img: ImageView) -> str:
    if viewer.preview_dir is not None:
        return "/gradio_api/file=" + html.escape(viewer.preview_file(img), quote=True)
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(img.preview()).save(buf, format="PNG", compress_level=1)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def study_line(view: StudyView, prior: bool = False) -> str:
    esc = html.escape
    when = esc(str(view.study_date or "date unknown"))
    if prior:  # the same patient: the date and key are what matter
        return f"PRIOR (read-only) · <b>{when}</b> · Study {esc(view.study_key)}"
    return (f"<b>Patient {esc(view.patient_key)}</b> · <b>Study {esc(view.study_key)}</b>"
            f" · {when} · {esc(view.source)}")


def film_html(viewer: StudyViewer, view: StudyView | None,
              prior: StudyView | None = None) -> str:
    """The film: the open study's images side by side (whole film, never cropped), its
    patient and study key above them, and the prior study beside it when asked for."""
    if view is None:
        return ('<div class="film"><div class="film-empty">Select a study in the worklist.'
                "</div></div>")

    def images(v: StudyView, clickable: bool) -> str:
        if not v.images:
            return ('<div class="film-empty">No images: this study is a report only '
                    '(imported as a reference).</div>')
        figs = []
        for i, img in enumerate(film_order(v)):
            attr = f' data-index="{i}" title="Click to enlarge"' if clickable else ""
            figs.append(f'<figure{attr}><img src="{_image_src(viewer, img)}" '
                        f'alt="{html.escape(img.label)}"><figcaption>{html.escape(img.label)}'
                        "</figcaption></figure>")
        return f'<div class="film-images">{"".join(figs)}</div>'

    parts = [f'<div class="film-study current" data-study="{view.study_id}">'
             f'<div class="film-head" id="film-head">{study_line(view)}</div>'
             f"{images(view, True)}</div>"]
    if prior is not None:
        ref = prior.reference
        # the dataset's report of the prior, said so: a reader who just signed that study
        # took it for their own (a new-user trial)
        report = ("Reference report of the prior (as imported):\n"
                  f"FINDINGS: {ref.findings or '—'}\nIMPRESSION: {ref.impression or '—'}"
                  if ref else "No reference report stored for the prior study.")
        parts.append(f'<div class="film-study prior" id="prior-panel" '
                     f'data-study="{prior.study_id}"><div class="film-head">'
                     f"{study_line(prior, prior=True)}</div>{images(prior, False)}"
                     f'<div class="prior-report">{html.escape(report)}</div></div>')
    return f'<div class="film">{"".join(parts)}</div>'


def study_details(view: StudyView) -> str:
    esc = html.escape
    demo = ", ".join(f"{k}: {esc(str(v))}" for k, v in view.demographics.items()) or "—"
    return (f"**Indication:** {esc(view.indication or '—')} · **Comparison:** "
            f"{esc(view.comparison or '—')} · **Demographics:** {demo} · "
            f"**Prior studies:** {len(view.prior_ids)}")


def sync_json(reader: str, session: Session) -> str:
    """What the page script needs to know to guard unsaved text (see static/page.js), and
    which drafts are on screen (a new draft id tells the page a Draft click has landed)."""
    return json.dumps({"reader": reader, "study": session.study, "base": session.base,
                       "shown": session.shown,
                       "drafts": {s: d[0] for s, d in session.drafts.items()}})


# -- components ---------------------------------------------------------------------------------
class Screen:
    """Every component of the page, by name (built by `_layout`)."""

    def __getattr__(self, name: str) -> Any:  # pragma: no cover - a typo is a bug
        raise AttributeError(name)

    def __setattr__(self, name: str, value: Any) -> None:  # tells mypy any name may be set
        object.__setattr__(self, name, value)


def _layout(services: Services) -> Screen:
    login = services.login
    c = Screen()
    c.state = gr.State(Session())
    c.awaited = gr.State(None)  # the study a page load's follow-up waits to show a draft for
    with gr.Row(elem_id="topbar"):
        gr.HTML("<h2>rrg-review · chest X-ray report review</h2>")
        c.who = gr.Markdown(elem_id="reader")
        c.light = gr.Checkbox(label="Light theme", value=False, elem_id="light-theme",
                              container=False, scale=0, min_width=130)
        c.logout = gr.Button("Log out", elem_id="logout", size="sm", visible=login, scale=0)
    # page-script plumbing, hidden by CSS (so it is in the page)
    c.sync = gr.Textbox(elem_id="sync", elem_classes="rrg-hidden", container=False)
    c.client = gr.Textbox(elem_id="client", elem_classes="rrg-hidden", container=False)
    # an autosave that stored text writes a new value here; its change event rescores the
    # metrics panel (a tick that saved nothing sends no second request)
    c.rescore = gr.Textbox(elem_id="rescore", elem_classes="rrg-hidden", container=False)
    c.pick = gr.Textbox(elem_id="pick", elem_classes="rrg-hidden", container=False)
    c.enlarge = gr.Button("enlarge", elem_id="enlarge-button", elem_classes="rrg-hidden")
    with gr.Row(elem_id="main-row", equal_height=False):
        with gr.Column(scale=2, min_width=250, elem_id="worklist-col"):
            c.worklist = build_worklist_panel(services.worklists)
            with gr.Accordion("Keyboard shortcuts", open=False, elem_id="help"):
                gr.Markdown("\n".join(f"- **{k}**: {v}" for k, v in SHORTCUTS))
            with gr.Accordion("Export evaluation report", open=False, elem_id="export"):
                c.export_format = gr.Radio(["html", "csv", "json"], value="html",
                                           label="Format", elem_id="export-format")
                c.export_mine = gr.Checkbox(label="Only my reviews", value=False,
                                            elem_id="export-mine")
                c.export_button = gr.Button("Build report", elem_id="export-button", size="sm")
                c.export_file = gr.File(label="Report", interactive=False,
                                        elem_id="export-file")
        with gr.Column(scale=6, min_width=480, elem_id="viewer-col"):
            with gr.Row(elem_id="study-bar"):
                c.prior_button = gr.Button("Show prior beside (Alt+B)", interactive=False,
                                           elem_id="toggle-prior", size="sm", scale=0,
                                           min_width=190)
                c.details = gr.Markdown(elem_id="study-header")
            c.film = gr.HTML(film_html(services.viewer, None), elem_id="film", padding=False)
        with gr.Column(scale=3, min_width=380, elem_id="editor-col"):
            c.save_status = gr.Markdown(elem_id="save-status")
            c.restore_note = gr.HTML("", elem_id="restore-note")
            # rows of buttons offered only now and then: shown while their buttons are enabled
            # (page.css), since a layout's visibility update does not always reach the page
            with gr.Row(elem_id="conflict-row", elem_classes="rrg-offer"):
                c.keep_mine = gr.Button("Keep mine", elem_id="keep-mine", size="sm",
                                        variant="primary", interactive=False)
                c.take_theirs = gr.Button("Take theirs", elem_id="take-theirs", size="sm",
                                          interactive=False)
            with gr.Row():
                c.draft_button = gr.Button("Draft", interactive=False, elem_id="draft-button",
                                           size="sm")
                c.unload_button = gr.Button("Unload model", elem_id="unload-model", size="sm")
            c.model_line = gr.Markdown(elem_id="draft-model")
            c.draft_error = gr.Markdown(elem_id="draft-error")
            c.findings = gr.Textbox(label="Findings (editable)", lines=7, max_lines=14,
                                    elem_id="edit-findings")
            c.impression = gr.Textbox(label="Impression (editable)", lines=3, max_lines=8,
                                      elem_id="edit-impression")
            with gr.Row(elem_id="save-row"):
                c.save_button = gr.Button("Save (Ctrl+S)", variant="primary", elem_id="save",
                                          size="sm")
                c.revert_button = gr.Button("Revert to draft", elem_id="revert", size="sm")
                c.accept_button = gr.Button("Accept draft (Alt+A)", elem_id="accept", size="sm")
            with gr.Row(elem_id="accept-confirm-row", elem_classes="rrg-offer"):
                # the buttons say what they do: the status line that explains the question
                # may be replaced by an autosave's note before the reader reads it (found in a
                # new-user trial)
                c.accept_confirm = gr.Button("Accept the draft, replacing my edits",
                                             elem_id="accept-confirm", size="sm",
                                             variant="stop", interactive=False)
                c.accept_cancel = gr.Button("Cancel: keep my edits", elem_id="accept-cancel",
                                            size="sm", interactive=False)
            with gr.Group(elem_id="rating"):
                with gr.Row(equal_height=True):
                    c.likert = gr.Radio([1, 2, 3, 4, 5], label="Overall quality (keys 1-5)",
                                        elem_id="likert", scale=3)
                    c.acceptable = gr.Checkbox(label="Acceptable without changes",
                                               elem_id="acceptable", scale=2)
                c.rate_button = gr.Button("Submit rating (Alt+R)", elem_id="rate", size="sm",
                                          variant="primary")
                c.rate_status = gr.Markdown(elem_id="rate-status")
            with gr.Accordion("ReXVal errors and comment", open=True, elem_id="rexval"):
                c.rexval = {}
                with gr.Row(elem_classes="rexval-row"):
                    gr.Markdown("**ReXVal errors** (counts)")
                    gr.Markdown("clinically significant")
                    gr.Markdown("insignificant")
                for category in REXVAL_CATEGORIES:
                    with gr.Row(elem_classes="rexval-row", equal_height=True):
                        gr.Markdown(FORM_LABELS[category])
                        for kind in ("significant", "insignificant"):
                            c.rexval[(category, kind)] = gr.Number(
                                # no minimum/precision here: Gradio would round 1.5 to 2
                                # and answer -2 with a bare "Error"; the review service
                                # refuses both with a sentence the reader can act on
                                value=0, show_label=False,
                                container=False, label=f"{FORM_LABELS[category]} · {kind}",
                                elem_id=f"rexval-{category}-{kind}", min_width=80)
                c.comment = gr.Textbox(label="Comment", lines=2, elem_id="comment")
            with gr.Accordion("Model draft (read-only)", open=False, elem_id="model-draft") \
                    as c.model_draft:
                c.new_findings = gr.Textbox(label="Draft findings", interactive=False, lines=4,
                                            elem_id="new-findings")
                c.new_impression = gr.Textbox(label="Draft impression", interactive=False,
                                              lines=2, elem_id="new-impression")
                c.use_draft = gr.Button("Use this draft in the boxes", elem_id="use-draft",
                                        size="sm")
            c.diff = gr.HighlightedText(label="Draft → current (word level)",
                                        color_map={"+": "green", "-": "red"},
                                        combine_adjacent=True, elem_id="diff")
            with gr.Accordion("Reference report (dataset)", open=True, elem_id="reference"):
                c.ref_findings = gr.Textbox(label="Reference findings", interactive=False,
                                            lines=3, elem_id="ref-findings")
                c.ref_impression = gr.Textbox(label="Reference impression", interactive=False,
                                              lines=2, elem_id="ref-impression")
            with gr.Accordion("Metrics for this study", open=True, elem_id="metrics"):
                c.metrics_table = gr.Dataframe(interactive=False, elem_id="metrics-panel")
                c.metrics_notes = gr.Markdown(elem_id="metrics-notes")
    with gr.Column(elem_id="enlarged"):  # shown by the page script (body.rrg-enlarged)
        with gr.Row(elem_id="enlarged-tools"):
            c.prev_image = gr.Button("◀ image", elem_id="prev-image", size="sm", scale=0)
            c.next_image = gr.Button("image ▶", elem_id="next-image", size="sm", scale=0)
            c.wl_preset = gr.Radio(list(WINDOW_PRESETS), value="file default", label="Preset",
                                   elem_id="wl-preset", scale=3)
            c.wl_invert = gr.Checkbox(label="Invert", elem_id="wl-invert", scale=0,
                                      min_width=90)
            c.wl_center = gr.Slider(0, 4096, value=2048, label="Level", elem_id="wl-center",
                                    scale=2)
            c.wl_width = gr.Slider(1, 8192, value=4096, label="Window", elem_id="wl-width",
                                   scale=2)
            c.close = gr.Button("Close (Esc)", elem_id="close-enlarged", size="sm", scale=0)
        c.wl_caption = gr.Markdown(elem_id="wl-caption")
        c.wl_image = gr.Image(show_label=False, interactive=False, elem_id="wl-image", format="png",
                              buttons=[], container=False)
    c.timer = gr.Timer(AUTOSAVE_S)
    return c


# -- wiring -------------------------------------------------------------------------------------
def _client_js(inputs: set, client: gr.Textbox, texts: tuple = ()) -> str:
    """A JS preprocessor that fills the hidden `client` input with the page's report at the
    moment of the event (Gradio orders dict inputs by component id), telling the page script
    which texts this request carries (`texts`: the findings and impression boxes, when they are
    inputs), so a later load recognises a revision this tab saved itself."""
    order = sorted(inputs, key=lambda b: b._id)
    n, i = len(order), order.index(client)
    carried = ", ".join(f"{json.dumps(t.elem_id.removeprefix('edit-'))}: v[{order.index(t)}]"
                        for t in texts if t in inputs)
    return (f"(...a) => {{ const v = a.slice(0, {n}); "
            f"v[{i}] = window.rrgClient ? window.rrgClient({{{carried}}}) : '{{}}'; "
            "return v; }")


def build(services: Services) -> gr.Blocks:
    """The whole page on these services."""
    s = services
    desk = Desk(s.viewer, s.review, s.drafting, s.predrafter, s.preset, s.metrics,
                worklists=s.worklists, accounts=s.accounts)
    if not s.login:
        # the one local reader's first study is drafted before the first page asks for it
        desk.predraft_first(s.accounts.local_reader())
    with gr.Blocks(title="rrg-review", fill_width=True) as ui:
        c = _layout(s)
        _wire(ui, c, desk, s)
    return ui


def _wire(ui: gr.Blocks, c: Screen, desk: Desk, services: Services) -> None:
    viewer, drafting = services.viewer, services.drafting
    metrics, preset, login = services.metrics, services.preset, services.login
    worklists, accounts, exports = services.worklists, services.accounts, services.exports
    wl = c.worklist
    rating_fields = [c.likert, c.acceptable, *c.rexval.values(), c.comment]

    conflict_btns = [c.keep_mine, c.take_theirs]
    accept_btns = [c.accept_confirm, c.accept_cancel]

    def offer(*buttons: gr.Button, on: bool) -> dict:
        return {b: gr.update(interactive=on) for b in buttons}

    def offer_choice(session: Session, on: bool) -> dict:
        """Enable or disable "keep mine" / "take theirs", only when that changes: each button
        update costs Gradio a component rebuild, on every save and autosave tick."""
        if on == session.offered:
            return {}
        session.offered = on
        return offer(c.keep_mine, c.take_theirs, on=on)

    def who(session: Session, request: gr.Request | None) -> tuple[str, int]:
        """The authenticated reader of this request, bound to the tab's state."""
        name = getattr(request, "username", None) if login else LOCAL_READER
        if not name:
            raise gr.Error("Not logged in.")
        try:
            reader = desk.bind(session, name)
        except TabRefused as exc:
            raise gr.Error(str(exc)) from None
        session.address = getattr(getattr(request, "client", None), "host", None)
        return name, reader

    def texts_of(d: dict) -> dict[str, str]:
        return {"findings": d[c.findings] or "", "impression": d[c.impression] or ""}

    def rating_values(r: RatingView | None) -> dict:
        out: dict = {c.likert: r.likert if r else None,
                     c.acceptable: bool(r.acceptable) if r else False,
                     c.comment: (r.comment or "") if r else ""}
        for (category, kind), comp in c.rexval.items():
            out[comp] = ((r.errors.get(category) or {}).get(kind, 0)) if r else 0
        done = r is not None and r.likert is not None
        out[c.rate_status] = (f"Rated (#{r.number}, {r.created_at:%H:%M})."
                              if done and r is not None else
                              "Accepted without changes; no score yet." if r else "")
        return out

    def after_save(name: str, session: Session, saved: Saved, texts: dict[str, str]) -> dict:
        return {c.state: session, c.save_status: saved.message,
                c.sync: sync_json(name, session),
                **offer_choice(session, bool(saved.conflicts)),
                c.diff: diff_of(desk.draft_texts(session), texts)}

    def study_outputs(name: str, reader: int, session: Session, study_id: int | None,
                      d: dict) -> dict:
        """Everything on screen that belongs to a study, replaced (or cleared) together."""
        session.offered = False
        out: dict = {c.state: session, c.who: f"Reader: **{html.escape(name)}**",
                     c.wl_image: None, c.wl_caption: "", c.metrics_table: None,
                     c.metrics_notes: "Computing metrics…",
                     **offer(c.keep_mine, c.take_theirs, on=False),
                     **offer(c.accept_confirm, c.accept_cancel, on=False), c.draft_error: "",
                     c.restore_note: ""}
        if study_id is None:
            session.study = None
            session.images = ()
            session.image = None
            return {**out, c.film: film_html(viewer, None), c.details: "",
                    c.prior_button: gr.update(interactive=False),
                    c.findings: "", c.impression: "", c.new_findings: "",
                    c.new_impression: "", c.ref_findings: "", c.ref_impression: "",
                    c.model_line: "", c.save_status: empty_worklist_note(),
                    c.draft_button: gr.update(interactive=False), c.diff: [],
                    c.sync: sync_json(name, session), **rating_values(None)}
        opened = desk.open(session, reader, int(study_id), time.monotonic())
        view, ref = opened.view, opened.view.reference
        drafts = desk.draft_texts(session)
        return {**out, c.film: film_html(viewer, view), c.details: study_details(view),
                c.prior_button: gr.update(interactive=bool(view.prior_ids),
                                          value="Show prior beside (Alt+B)"),
                c.findings: opened.texts["findings"], c.impression: opened.texts["impression"],
                c.new_findings: drafts["findings"], c.new_impression: drafts["impression"],
                c.ref_findings: (ref.findings or "") if ref else "",
                c.ref_impression: (ref.impression or "") if ref else "",
                c.model_line: opened.model_note, c.draft_error: desk.draft_errors(opened.drafts),
                # a report-only study has no image to draft from (trying said so in a Python
                # error's words: found in a new-user trial on Open-i)
                c.draft_button: gr.update(interactive=drafting is not None and bool(view.images),
                                          value="Regenerate" if session.drafts else "Draft"),
                c.save_status: opened.status, c.diff: diff_of(drafts, opened.texts),
                c.sync: sync_json(name, session), **rating_values(opened.rating)}

    def empty_worklist_note() -> str:
        """Why the worklist is empty, when report-only studies are the reason (a new-user trial
        imported Open-i's 3,955 reports and took the empty list for a failed import)."""
        hidden = worklists.report_only_count()
        if not hidden or worklists.include_report_only:
            return "Your worklist is empty."
        return (f"Your worklist is empty. {hidden:,} stored studies have no images (imported "
                "as references); they are not put on reading worklists unless the app is "
                "started with `--include-report-only`.")

    def filters_of(d: dict) -> tuple:
        return tuple(d.get(f, "all") for f in (wl.search, wl.status, wl.source, wl.split,
                                                wl.images))

    def worklist_outputs(reader: int, d: dict) -> dict:
        """The page on screen, refreshed (statuses change on save, rate and accept)."""
        v = wl.logic.view(reader, *filters_of(d), d.get(wl.page) or 1)
        progress = v.progress or progress_line(worklists.progress(reader))
        return {wl.table: v.rows, wl.progress: progress}

    # -- page load and navigation ----------------------------------------------------------
    def on_load(d: dict, request: gr.Request) -> dict:
        session = d[c.state]
        with session.lock:
            name, reader = who(session, request)
            left = Client.parse(d[c.client]).left
            return {**study_outputs(name, reader, session, desk.start(reader, name, left), d),
                    **worklist_outputs(reader, d)}

    def navigate(d: dict, request: gr.Request, target) -> dict:
        """Save what is typed (an autosave revision), then open the target study. A refused
        save keeps the reader on the study with their words on screen."""
        session = d[c.state]
        with session.lock:
            name, reader = who(session, request)
            texts = texts_of(d)
            saved = desk.leave(session, texts, Client.parse(d[c.client]), time.monotonic())
            if not saved.ok:  # said, not silent (a new-user trial pressed Alt+N, and nothing)
                held = Saved("⚠ **Still on this study: choose Keep mine or Take theirs "
                             "first.** " + saved.message, saved.conflicts, saved.wrote)
                return after_save(name, session, held, texts)
            study = target(session, reader)
            if study is None:
                return {**after_save(name, session, saved, texts),
                        c.save_status: "No other unfinished study that way."}
            out = study_outputs(name, reader, session, study, d)
            if saved.wrote:
                out.update(worklist_outputs(reader, d))
            return out

    def on_step(step: int):
        """Next/previous unfinished study within the worklist's filters and search, round the
        end of the list when there is none that way. The worklist follows to the page that
        shows it (it stayed on page 1 while Next went on: found in a new-user trial)."""
        def handler(d: dict, request: gr.Request) -> dict:
            out = navigate(d, request, lambda session, reader: wl.logic.target(
                reader, session.study, step, *filters_of(d)))
            session = d[c.state]
            if c.film in out and session.study is not None and session.reader is not None:
                v = wl.logic.page_showing(session.reader, session.study, *filters_of(d))
                if v is not None and v.page != (d.get(wl.page) or 1):
                    out.update({wl.table: v.rows, wl.page: v.page, wl.page_text: v.label})
            return out
        return handler

    def on_select(d: dict, evt: gr.SelectData, request: gr.Request) -> dict:
        row = evt.index[0] if isinstance(evt.index, list | tuple) else evt.index
        study = int(d[wl.table].iloc[row, 0])
        session = d[c.state]
        if study == session.study:
            # the open study's own row: saving is all there is to do; reopening it would put
            # the stored text back over whatever the reader typed while the click travelled
            with session.lock:
                name, _ = who(session, request)
                texts = texts_of(d)
                saved = desk.leave(session, texts, Client.parse(d[c.client]), time.monotonic())
                return after_save(name, session, saved, texts)
        return navigate(d, request, lambda session, reader: study)

    def on_prior(d: dict, request: gr.Request) -> dict:
        """Show (or hide) the same patient's previous study beside the open one, read-only."""
        session = d[c.state]
        with session.lock:
            who(session, request)
            if session.study is None:
                return {c.film: gr.update()}
            view = viewer.open(session.study)
            if session.prior is not None or not view.prior_ids:
                session.prior = None
                return {c.film: film_html(viewer, view),
                        c.prior_button: gr.update(value="Show prior beside (Alt+B)")}
            session.prior = view.prior_ids[0]
            return {c.film: film_html(viewer, view, viewer.open(session.prior)),
                    c.prior_button: gr.update(value="Hide prior (Alt+B)")}

    # -- editing ---------------------------------------------------------------------------
    def saving(d: dict, request: gr.Request, step) -> dict:
        """An explicit save (Save, Keep mine): under the tab's lock, `step(session, texts,
        client)` stores the text on screen and the screen shows the result (the worklist page
        follows in its own request)."""
        session = d[c.state]
        with session.lock:
            name, _ = who(session, request)
            texts = texts_of(d)
            saved = step(session, texts, Client.parse(d[c.client]))
            return after_save(name, session, saved, texts)

    def on_save(d: dict, request: gr.Request) -> dict:
        return saving(d, request, desk.save)

    def on_tick(d: dict, request: gr.Request) -> dict:
        session = d[c.state]
        with session.lock:
            if session.study is None:
                return {c.save_status: gr.update()}
            name, reader = who(session, request)
            texts = texts_of(d)
            now = time.monotonic()
            client = Client.parse(d[c.client])
            saved = desk.tick(session, texts, client, now)
            if saved is None:
                newer = desk.check_newer(session, client) if client.visible else None
                if newer is not None:
                    return after_save(name, session, newer, texts)
                return ({c.save_status: gr.update(), **worklist_outputs(reader, d)}
                        if desk.rows_due(session, now) else {c.save_status: gr.update()})
            if not saved.wrote:
                return after_save(name, session, saved, texts)
            # an autosave changes the study's status, minutes and scores like Save does: the
            # worklist row here, the metrics panel in the follow-up (found in a new-user trial)
            # that the new value of c.rescore starts
            session.rescores += 1
            return {**after_save(name, session, saved, texts), **worklist_outputs(reader, d),
                    c.rescore: str(session.rescores)}

    def on_input(d: dict, request: gr.Request) -> dict:
        session = d[c.state]
        who(session, request)
        return {c.diff: diff_of(desk.draft_texts(session), texts_of(d))}

    def on_keep_mine(d: dict, request: gr.Request) -> dict:
        return saving(d, request, desk.keep_mine)

    def on_take_theirs(d: dict, request: gr.Request) -> dict:
        session = d[c.state]
        with session.lock:
            name, _ = who(session, request)
            texts, saved = desk.take_theirs(session, texts_of(d), Client.parse(d[c.client]))
            return {**after_save(name, session, saved, texts), c.findings: texts["findings"],
                    c.impression: texts["impression"]}

    def draft_in_boxes(message: str):
        """Revert / Use this draft: the draft's text into the editable boxes (saved like typing,
        by the next autosave or Save). What the reader had typed and not stored is saved first
        (an autosave revision), so it stays in the history: replacing both boxes at once must
        never lose words (found in a new-user trial). A conflict with another tab's save stops
        it: the reader's text stays on screen with "keep mine" / "take theirs"."""
        def handler(d: dict, request: gr.Request) -> dict:
            session = d[c.state]
            with session.lock:
                name, _ = who(session, request)
                typed = texts_of(d)
                client = Client.parse(d[c.client])
                kept = (desk.save(session, typed, client, autosave=True)
                        if desk.pending(session, typed, client) else None)
                if kept is not None and kept.conflicts:
                    return after_save(name, session, kept, typed)
                texts = desk.draft_texts(session)
                stored = ", ".join(f"{sec} revision {n}" for sec, n in session.base.items()
                                   if n is not None and session.shown.get(sec) != texts[sec])
                note = (f" Your text is kept in the history ({kept.message})."
                        if kept is not None and kept.wrote else
                        f" Your saved text stays in the history ({stored})." if stored else "")
                return {**after_save(name, session, Saved(message + note, {}, False), texts),
                        c.findings: texts["findings"], c.impression: texts["impression"]}
        return handler

    on_revert = draft_in_boxes("Reverted to the draft (autosaved shortly, or press Save).")

    def accept(confirmed: bool):
        def handler(d: dict, request: gr.Request) -> dict:
            session = d[c.state]
            with session.lock:
                name, reader = who(session, request)
                texts = texts_of(d)
                result = desk.accept(session, texts, Client.parse(d[c.client]), confirmed)
                out = {c.state: session, c.save_status: result.message,
                       **offer(c.accept_confirm, c.accept_cancel, on=result.needs_confirm),
                       **offer_choice(session, bool(session.conflicts))}
                if result.texts is not None:
                    out.update({c.findings: result.texts["findings"],
                                c.impression: result.texts["impression"],
                                c.diff: diff_of(desk.draft_texts(session), result.texts),
                                c.sync: sync_json(name, session), c.acceptable: True,
                                c.rate_status: "Accepted without changes; choose a score "
                                               "(1-5) and submit.",
                                **worklist_outputs(reader, d)})
                return out
        return handler

    def on_rate(d: dict, request: gr.Request) -> dict:
        session = d[c.state]
        with session.lock:
            _, reader = who(session, request)
            errors: dict[str, dict[str, object]] = {}
            for (category, kind), comp in c.rexval.items():
                errors.setdefault(category, {})[kind] = d[comp]
            ok, message = desk.rate(session, d[c.likert], d[c.acceptable], errors, d[c.comment],
                                    texts_of(d))
            out = {c.rate_status: message}
            if ok:
                out.update(worklist_outputs(reader, d))
            return out

    def on_draft(d: dict, request: gr.Request):
        """Draft (or regenerate): the reader's text is saved first and never replaced; the
        new draft streams into the read-only draft boxes, and into the editable boxes only
        where the reader has no text of their own. A failure is shown beside the boxes."""
        session = d[c.state]
        with session.lock:
            name, reader = who(session, request)
            texts = texts_of(d)
            study = session.study
            if study is None or drafting is None:
                yield {c.save_status: gr.update()}
                return
            saved = desk.leave(session, texts, Client.parse(d[c.client]), time.monotonic())
            if not saved.ok:
                yield after_save(name, session, saved, texts)
                return
        streamed = {"findings": "", "impression": ""}
        errors = []
        yield {c.model_draft: gr.update(open=True), c.draft_error: "",
               c.save_status: f"Drafting with `{html.escape(preset)}` …"}
        try:  # one stream for both sections: a whole-report model generates once
            for step in drafting.stream_study(study, preset, SECTIONS):
                streamed.update(step.texts)
                errors = [f"{s}: {e}" for s, e in step.errors.items()]
                yield {c.new_findings: streamed["findings"],
                       c.new_impression: streamed["impression"]}
        except Exception as exc:  # shown to the reader, never a stack trace
            log.warning("drafting study %s with %s failed", study, preset, exc_info=True)
            errors.append(f"{type(exc).__name__}: {exc}")
        yield {c.draft_error: ("⚠ Draft failed — " + "; ".join(html.escape(e) for e in errors))
               if errors else "", c.save_status: "Draft finished."}

    def drafts_arrived(name: str, reader: int, session: Session, d: dict) -> dict:
        """New drafts, with the boxes as they are now (the reader may have typed while the
        model ran): the draft goes into the boxes only if they hold no text of the reader's
        own; otherwise it stays beside them."""
        texts = texts_of(d)
        drafts, fresh = desk.refresh_drafts(session, texts)
        shown = desk.draft_texts(session)
        out = {c.state: session, c.model_line: desk.model_note(drafts),
               c.new_findings: shown["findings"], c.new_impression: shown["impression"],
               c.draft_button: gr.update(value="Regenerate" if drafts else "Draft"),
               c.sync: sync_json(name, session), **worklist_outputs(reader, d)}
        failed = desk.draft_errors(drafts)
        if failed:
            out[c.draft_error] = failed
        if fresh is not None:
            out.update({c.findings: fresh["findings"], c.impression: fresh["impression"],
                        c.diff: diff_of(shown, fresh),
                        c.save_status: desk.status_line(session)})
        else:
            out.update({c.diff: diff_of(shown, texts),
                        c.save_status: "The new draft is beside your text (Model draft); "
                                       "your text is kept."})
        return out

    def on_draft_done(d: dict, request: gr.Request) -> dict:
        """After drafting on request (`drafts_arrived`)."""
        session = d[c.state]
        with session.lock:
            name, reader = who(session, request)
            if session.study is None or drafting is None:
                return {c.save_status: gr.update()}
            return drafts_arrived(name, reader, session, d)

    async def on_await_draft(d: dict, request: gr.Request) -> dict:
        """After a page load whose study had no draft yet: wait for the pre-drafter beside
        the page (usable meanwhile; no session lock held, no worker thread taken). The next
        step reads the boxes."""
        session = d[c.state]
        await asyncio.to_thread(who, session, request)  # (a database lookup)
        return {c.awaited: await desk.await_draft(session)}

    def on_draft_ready(d: dict, request: gr.Request) -> dict:
        """The awaited draft into the boxes (or beside the reader's text), if its study is
        still open and still had no draft; else nothing changes."""
        session = d[c.state]
        with session.lock:
            name, reader = who(session, request)
            study = d[c.awaited]
            if study is None or session.study != study or session.drafts or drafting is None:
                return {c.save_status: gr.update()}
            if not drafting.latest(study, preset):  # timed out, or the model is unavailable
                return {c.save_status: desk.status_line(session),
                        c.model_line: desk.model_note({})}
            return drafts_arrived(name, reader, session, d)

    on_use_draft = draft_in_boxes("The draft is in the boxes (autosaved shortly, or Save).")

    def on_metrics(d: dict, request: gr.Request) -> dict:
        session = d[c.state]
        who(session, request)
        m = desk.metrics_view(session)
        table = {"headers": m.headers, "data": m.rows} if m.headers else None
        return {c.metrics_table: table,
                c.metrics_notes: "\n".join(f"- {html.escape(n)}" for n in m.notes)}

    # -- the enlarged view -----------------------------------------------------------------
    def show_image(session: Session, image_id: int | None) -> dict:
        if image_id is None or session.study is None:
            return {c.wl_image: None, c.wl_caption: ""}
        r = viewer.value_range(image_id)
        lo, hi, (center, width) = r.lo, r.hi, r.window
        n = session.images.index(image_id) + 1
        return {c.state: session,
                c.wl_center: gr.update(minimum=lo, maximum=hi, value=center),
                c.wl_width: gr.update(minimum=1, maximum=max(hi - lo, 1) * 2, value=width),
                c.wl_preset: "file default", c.wl_invert: False,
                # whose film this is stays on screen at full size (found in a new-user trial)
                c.wl_caption: study_line(viewer.open(session.study)) + " · "
                              f"Image {n} of {len(session.images)} · ← → other images · "
                              "Esc closes · wheel/drag zoom/pan · double-click resets",
                c.wl_image: desk.render(image_id, center, width, False)}

    def on_enlarge(d: dict, request: gr.Request) -> dict:
        session = d[c.state]
        with session.lock:
            who(session, request)
            try:
                index = int(d[c.pick])
            except (TypeError, ValueError):
                return {c.wl_image: gr.update()}
            if not 0 <= index < len(session.images):
                return {c.wl_image: gr.update()}
            session.image = session.images[index]
            return show_image(session, session.image)

    def on_step_image(step: int):
        def handler(d: dict, request: gr.Request) -> dict:
            session = d[c.state]
            with session.lock:
                who(session, request)
                return show_image(session, desk.step_image(session, step))
        return handler

    def on_window(d: dict, request: gr.Request) -> dict:
        session = d[c.state]
        who(session, request)
        if session.image is None:
            return {c.wl_image: gr.update()}
        return {c.wl_image: desk.render(session.image, d[c.wl_center], d[c.wl_width],
                                        d[c.wl_invert])}

    def on_preset(d: dict, request: gr.Request) -> dict:
        session = d[c.state]
        who(session, request)
        if session.image is None:
            return {c.wl_image: gr.update()}
        try:
            center, width = desk.window_preset(session.image, d[c.wl_preset])
        except ReviewError as exc:
            raise gr.Error(str(exc)) from None
        return {c.wl_center: center, c.wl_width: width,
                c.wl_image: desk.render(session.image, center, width, d[c.wl_invert])}

    # -- other -----------------------------------------------------------------------------
    def on_export(d: dict, request: gr.Request, progress=gr.Progress()):  # noqa: B008
        """The same files as `rrg-review export`, scoped on the server: a reader gets only
        their own work, an admin everyone's unless "Only my reviews"."""
        session = d[c.state]
        _, reader = who(session, request)
        progress(0.1, desc="scoring and building the report")
        account = accounts.by_id(reader)
        if exports is None or account is None:
            raise gr.Error("Export is not set up." if exports is None
                           else f"reader {reader} does not exist")
        result = exports.export_as(
            account, d[c.export_format], everyone=not d[c.export_mine],
            metrics=metrics.metrics if metrics else None,
            address=getattr(getattr(request, "client", None), "host", None))
        if result.note:
            gr.Info(result.note)
        return {c.export_file: str(result.files[0])}

    def on_unload(d: dict, request: gr.Request) -> dict:
        """Free the model's memory (GPU included) for everyone: admins only."""
        _, reader = who(d[c.state], request)
        account = accounts.by_id(reader)
        if account is None or not account.is_admin:
            raise gr.Error("only an admin can unload the model")
        if drafting is not None:
            drafting.unload()
        return {c.model_line: f"Model `{html.escape(preset)}` unloaded; it loads again on the "
                              "next draft."}

    def on_logout(d: dict, request: gr.Request) -> dict:
        return navigate(d, request, lambda session, reader: session.study)

    # -- events ----------------------------------------------------------------------------
    study_outs = [c.state, c.who, c.film, c.details, c.prior_button, c.findings, c.impression,
                  c.new_findings, c.new_impression, c.ref_findings, c.ref_impression,
                  c.model_line, c.draft_error, c.draft_button, c.save_status, c.diff, c.sync,
                  c.wl_image, c.wl_caption, *conflict_btns, *accept_btns, c.restore_note,
                  c.metrics_table, c.metrics_notes,
                  wl.table, wl.progress, wl.page, wl.page_text, *rating_fields, c.rate_status]
    edit_in = {c.state, c.findings, c.impression, c.client, wl.search, wl.status, wl.source,
               wl.split, wl.images, wl.page}
    edit_outs = [c.state, c.save_status, c.sync, *conflict_btns, c.diff]
    # the worklist row and progress line of a save follow in their own request (wl.follow):
    # the reader waits for "saved", not for the page of the worklist behind it
    save_outs = edit_outs
    metrics_step: dict[str, Any] = {"fn": on_metrics, "inputs": {c.state},
                    "outputs": [c.metrics_table, c.metrics_notes], **PRIVATE}
    carried = (c.findings, c.impression)
    with_client: dict[str, Any] = {"js": _client_js(edit_in, c.client, carried)}

    loaded = ui.load(on_load, edit_in, study_outs, **PRIVATE, **with_client)
    loaded.then(**metrics_step)
    # the page opens at once; a study still being drafted gets its draft when it is ready
    # (waiting beside the page: no limit on how many tabs wait at a time)
    drafted_outs = [c.state, c.model_line, c.new_findings, c.new_impression, c.draft_button,
                    c.draft_error, c.sync, c.findings, c.impression, c.diff, c.save_status,
                    wl.table, wl.progress]
    loaded.then(on_await_draft, {c.state}, [c.awaited], **PRIVATE, **QUIET,
                concurrency_limit=None
                ).then(on_draft_ready, edit_in | {c.awaited}, drafted_outs, **PRIVATE, **QUIET
                       ).then(**metrics_step)
    # the page script holds keystrokes back from a navigation's click until its answer is on
    # screen; this browser-only step tells it the answer (or an error) has arrived
    arrived: dict[str, Any] = {"fn": None, "js": "() => { window.rrgArrived(); }", **PRIVATE}
    for navigation in (
            wl.table.select(on_select, edit_in | {wl.table}, study_outs, **PRIVATE,
                            js=_client_js(edit_in | {wl.table}, c.client, carried)),
            wl.next_study.click(on_step(1), edit_in, study_outs, api_name="next_study",
                                **with_client),
            wl.previous_study.click(on_step(-1), edit_in, study_outs,
                                    api_name="previous_study", **with_client)):
        navigation.then(**metrics_step)
        navigation.then(**arrived)
    # search, filters and paging: the panel's own read-only events; the row click and
    # Previous/Next above save the reader's pending text before they leave the study
    wl.connect(ui, c.state, lambda request: who(Session(), request)[1], None, [],
               prepare_reader=desk.prepare, navigation=False)
    c.prior_button.click(on_prior, {c.state}, [c.film, c.prior_button], **PRIVATE)
    saved_by_button = c.save_button.click(on_save, edit_in, save_outs, api_name="save",
                                          queue=False, **with_client)
    saved_by_button.then(**metrics_step)
    wl.follow(saved_by_button)
    c.timer.tick(on_tick, edit_in, [*edit_outs, wl.table, wl.progress, c.rescore], **LIGHT,
                 **QUIET, **with_client)
    c.rescore.change(on_metrics, {c.state}, [c.metrics_table, c.metrics_notes], **LIGHT)
    for box in (c.findings, c.impression):
        box.input(on_input, {c.state, c.findings, c.impression}, [c.diff], **LIGHT, **QUIET,
                  trigger_mode="always_last")
    kept_mine = c.keep_mine.click(on_keep_mine, edit_in, save_outs, **LIGHT, **with_client)
    kept_mine.then(**metrics_step)
    wl.follow(kept_mine)
    c.take_theirs.click(on_take_theirs, edit_in, [*edit_outs, c.findings, c.impression],
                        **LIGHT, **with_client)
    c.revert_button.click(on_revert, edit_in, [*edit_outs, c.findings, c.impression],
                          **LIGHT, **with_client)
    accept_outs = [c.state, c.save_status, *accept_btns, *conflict_btns, c.findings,
                   c.impression, c.diff, c.sync, c.acceptable, c.rate_status, wl.table,
                   wl.progress]
    c.accept_button.click(accept(False), edit_in, accept_outs, **LIGHT, **with_client
                          ).then(**metrics_step)
    c.accept_confirm.click(accept(True), edit_in, accept_outs, **LIGHT, **with_client
                           ).then(**metrics_step)
    c.accept_cancel.click(lambda: {**offer(c.accept_confirm, c.accept_cancel, on=False),
                                   c.save_status: "Not accepted."}, None,
                          [c.accept_confirm, c.accept_cancel, c.save_status], **LIGHT)
    c.rate_button.click(on_rate, {c.state, c.likert, c.acceptable, *c.rexval.values(),
                                  c.comment, c.findings, c.impression, wl.search, wl.status,
                                  wl.source, wl.split, wl.images, wl.page},
                        [c.rate_status, wl.table, wl.progress], api_name="rate", queue=False)
    c.draft_button.click(on_draft, edit_in, [
        c.state, c.new_findings, c.new_impression, c.draft_error, c.sync, c.diff,
        c.save_status, c.model_draft, *conflict_btns], **PRIVATE, **with_client).then(
        on_draft_done, edit_in, drafted_outs, **PRIVATE, **with_client).then(**metrics_step)
    c.use_draft.click(on_use_draft, edit_in, [*edit_outs, c.findings, c.impression],
                      **LIGHT, **with_client)
    enlarge_outs = [c.state, c.wl_center, c.wl_width, c.wl_preset, c.wl_invert,
                    c.wl_caption, c.wl_image]
    # the film's preview is on screen at once (page.js); no spinner over it, and the page is
    # told when the full-resolution image has arrived
    full_shown: dict[str, Any] = {"fn": None, "js": "() => { window.rrgFullShown(); }",
                                  **PRIVATE}
    c.enlarge.click(on_enlarge, {c.state, c.pick}, enlarge_outs, **PRIVATE,
                    show_progress="hidden",
                    js=f"(...a) => {{ const v = a.slice(0, 2); "
                       f"v[{sorted([c.state, c.pick], key=lambda b: b._id).index(c.pick)}] = "
                       "window.rrgPick(); return v; }").then(**full_shown)
    c.next_image.click(on_step_image(1), {c.state}, enlarge_outs, **PRIVATE,
                       show_progress="hidden").then(**full_shown)
    c.prev_image.click(on_step_image(-1), {c.state}, enlarge_outs, **PRIVATE,
                       show_progress="hidden").then(**full_shown)
    c.close.click(None, None, None, js="() => { window.rrgEnlarged(false); return []; }")
    wl_in = {c.state, c.wl_center, c.wl_width, c.wl_invert}
    c.wl_center.release(on_window, wl_in, [c.wl_image], **PRIVATE)
    c.wl_width.release(on_window, wl_in, [c.wl_image], **PRIVATE)
    c.wl_invert.input(on_window, wl_in, [c.wl_image], **PRIVATE)
    c.wl_preset.input(on_preset, wl_in | {c.wl_preset}, [c.wl_center, c.wl_width, c.wl_image],
                      **PRIVATE)
    c.light.change(None, c.light, None, js="(v) => { window.rrgSetTheme(v); return []; }")
    c.unload_button.click(on_unload, {c.state}, [c.model_line], **PRIVATE)
    c.export_button.click(on_export, {c.state, c.export_format, c.export_mine},
                          [c.export_file], **PRIVATE)
    if login:
        c.logout.click(on_logout, edit_in, study_outs, **PRIVATE, **with_client).then(
            None, None, None, js="() => { window.location.href = '/logout'; }")


def launch_options() -> dict[str, str]:
    """Page-level additions that Gradio 6 takes at launch: the page script and styles."""
    script = (STATIC / "page.js").read_text()
    return {"head": f"<script>\n{script}\n</script>", "css": (STATIC / "page.css").read_text()}
