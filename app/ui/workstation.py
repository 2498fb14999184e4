"""The review workstation screen: worklist, viewer, drafts, editing, rating, metrics, keyboard.

Handlers only read inputs, call services, and format outputs; report text is always escaped
(Textbox values are plain text; Markdown gets html.escape).
"""

from __future__ import annotations

import html
import time
from typing import Any

import gradio as gr

from app.services.drafting import DraftingService, PreDrafter
from app.services.evaluation import StudyMetrics
from app.services.review import ReviewService, word_diff
from app.services.viewer import StudyView, StudyViewer
from app.ui.desk import Desk, Session
from db.models import REXVAL_CATEGORIES, SECTIONS

AUTOSAVE_S = 4.0  # the autosave timer; also the heartbeat of active time
WORKLIST_COLUMNS = ["id", "source", "study", "status", "minutes"]
STATUSES = ["all", "new", "drafted", "in_review", "done"]
REXVAL_LABELS = {
    "false_finding": "1 False report of a finding",
    "missing_finding": "2 Missing a finding",
    "wrong_location": "3 Wrong location/position",
    "wrong_severity": "4 Wrong severity",
    "false_comparison": "5 Comparison not in reference/prior",
    "omitted_comparison": "6 Omits a comparison of change",
}
SHORTCUTS = [
    ("Alt+N / Alt+P", "next / previous unfinished study"),
    ("Ctrl+S", "save both sections"),
    ("Alt+A", "accept the draft as is (saves it and rates it acceptable)"),
    ("Alt+F / Alt+I", "focus findings / impression"),
    ("Alt+D", "draft (or regenerate) this study"),
    ("Alt+R", "submit the rating"),
    ("Wheel / drag / double-click", "zoom / pan / reset the window-level image"),
]
KEYBOARD_JS = """
<script>
document.addEventListener('keydown', (e) => {
  const click = (id) => { const el = document.querySelector('#' + id); if (el) el.click(); };
  const focus = (id) => { const el = document.querySelector('#' + id + ' textarea');
                          if (el) el.focus(); };
  const k = e.key.toLowerCase();
  if ((e.ctrlKey || e.metaKey) && k === 's') { e.preventDefault(); click('save'); return; }
  if (!e.altKey) return;
  const map = {n: () => click('next-study'), p: () => click('prev-study'),
               a: () => click('accept'), d: () => click('draft-button'),
               r: () => click('rate'), f: () => focus('edit-findings'),
               i: () => focus('edit-impression')};
  if (map[k]) { e.preventDefault(); map[k](); }
});
// zoom (wheel) and pan (drag) on the window/level image; double-click resets
const wlImage = (e) => e.target.closest && e.target.closest('#wl-image img');
const wlApply = (img) => {
  img.style.transformOrigin = 'center';
  img.style.transform = `translate(${img.dataset.tx || 0}px, ${img.dataset.ty || 0}px) ` +
                        `scale(${img.dataset.scale || 1})`;
};
document.addEventListener('wheel', (e) => {
  const img = wlImage(e); if (!img) return;
  e.preventDefault();
  const s = parseFloat(img.dataset.scale || '1') * (e.deltaY < 0 ? 1.2 : 1 / 1.2);
  img.dataset.scale = Math.min(Math.max(s, 1), 16); wlApply(img);
}, {passive: false});
let wlDrag = null;
document.addEventListener('mousedown', (e) => {
  const img = wlImage(e); if (!img) return;
  e.preventDefault();
  wlDrag = {img, x: e.clientX - (+img.dataset.tx || 0), y: e.clientY - (+img.dataset.ty || 0)};
});
document.addEventListener('mousemove', (e) => {
  if (!wlDrag) return;
  wlDrag.img.dataset.tx = e.clientX - wlDrag.x; wlDrag.img.dataset.ty = e.clientY - wlDrag.y;
  wlApply(wlDrag.img);
});
document.addEventListener('mouseup', () => { wlDrag = null; });
document.addEventListener('dblclick', (e) => {
  const img = wlImage(e); if (!img) return;
  img.dataset.scale = 1; img.dataset.tx = 0; img.dataset.ty = 0; wlApply(img);
});
</script>
"""
CSS = """
#wl-image { overflow: hidden; }
#wl-image img { cursor: grab; }
#diff .token { font-size: 0.9em; }
.rexval-row { gap: 4px !important; }
"""


def _study_header(view: StudyView) -> str:
    esc = html.escape
    demo = ", ".join(f"{k}: {esc(str(v))}" for k, v in view.demographics.items()) or "—"
    return "\n\n".join([
        f"### {esc(view.source)} · {esc(view.study_key)}",
        f"**Date:** {esc(str(view.study_date or 'unknown'))} · **Patient:** "
        f"{esc(view.patient_key)} · **Demographics:** {demo}",
        f"**Indication:** {esc(view.indication or '—')}",
        f"**Comparison:** {esc(view.comparison or '—')}",
        f"**Prior studies:** {len(view.prior_ids)}",
    ])


def _diff(draft: str, text: str) -> list[tuple[str, str | None]]:
    ops = {"equal": None, "delete": "-", "insert": "+"}
    return [(p.text + " ", ops[p.op]) for p in word_diff(draft or "", text or "")]


def build(viewer: StudyViewer, drafting: DraftingService | None = None,
          predrafter: PreDrafter | None = None, preset: str = "retrieval",
          review: ReviewService | None = None, metrics: StudyMetrics | None = None,
          login: bool = False) -> gr.Blocks:
    review = review or ReviewService(viewer.db)
    local_reader = None if login else review.local_reader()
    if local_reader is not None:
        review.assign(local_reader)

    def reader_of(request: gr.Request | None) -> int:
        if local_reader is not None:
            return local_reader
        name = getattr(request, "username", None)
        reader = review.reader_id(name) if name else None
        if reader is None:
            raise gr.Error("not logged in")
        return reader

    desk = Desk(viewer, review, drafting, predrafter, preset, metrics)

    with gr.Blocks(title="rrg-review") as ui:
        state = gr.State(Session())
        with gr.Row():
            gr.Markdown("## rrg-review — chest X-ray report review")
            who = gr.Markdown(elem_id="reader")
            if login:  # the server's /logout ends the session (app/server.py)
                gr.HTML('<a href="logout" id="logout-link">Sign out</a>', elem_id="logout")
            progress = gr.Markdown(elem_id="progress")
        with gr.Row():
            with gr.Column(scale=3, min_width=340):
                with gr.Row():
                    status_filter = gr.Dropdown(STATUSES, value="all", label="Status",
                                                elem_id="status-filter")
                    sources = ["all", *sorted({r.source for r in viewer.worklist()})]
                    source_filter = gr.Dropdown(sources, value="all", label="Source",
                                                elem_id="source-filter")
                worklist = gr.Dataframe(headers=WORKLIST_COLUMNS, interactive=False,
                                        label="Worklist", elem_id="worklist")
                with gr.Row():
                    prev_button = gr.Button("◀ Previous", elem_id="prev-study", size="sm")
                    next_button = gr.Button("Next ▶", elem_id="next-study", size="sm")
                with gr.Accordion("Keyboard shortcuts", open=False, elem_id="help"):
                    gr.Markdown("\n".join(f"- **{k}**: {v}" for k, v in SHORTCUTS))
                with gr.Accordion("Export evaluation report", open=False, elem_id="export"):
                    export_format = gr.Radio(["html", "csv", "json"], value="html",
                                             label="Format", elem_id="export-format")
                    export_mine = gr.Checkbox(label="Only my reviews", value=False,
                                              elem_id="export-mine")
                    export_button = gr.Button("Build report", elem_id="export-button",
                                              size="sm")
                    export_file = gr.File(label="Report", interactive=False,
                                          elem_id="export-file")
            with gr.Column(scale=4):
                header = gr.Markdown("Select a study in the worklist.", elem_id="study-header")
                gallery = gr.Gallery(label="Images (click to enlarge)", columns=2, height=420,
                                     object_fit="contain", elem_id="study-images",
                                     allow_preview=True)
                with gr.Accordion("Window / level (full bit depth)", open=False,
                                  elem_id="window-panel"):
                    with gr.Row():
                        wl_center = gr.Slider(0, 4096, value=2048, label="Level (center)",
                                              elem_id="wl-center")
                        wl_width = gr.Slider(1, 8192, value=4096, label="Window (width)",
                                             elem_id="wl-width")
                    with gr.Row():
                        wl_preset = gr.Radio(["file default", "full range", "narrow",
                                              "wide"], value="file default", label="Preset",
                                             elem_id="wl-preset")
                        wl_invert = gr.Checkbox(label="Invert", elem_id="wl-invert")
                    wl_image = gr.Image(label="Selected image", interactive=False,
                                        elem_id="wl-image", height=520)
                prior_button = gr.Button("Open prior study", interactive=False,
                                         elem_id="open-prior", size="sm")
                with gr.Row():
                    ref_findings = gr.Textbox(label="Reference findings", interactive=False,
                                              lines=4, elem_id="ref-findings")
                    ref_impression = gr.Textbox(label="Reference impression",
                                                interactive=False, lines=4,
                                                elem_id="ref-impression")
            with gr.Column(scale=4):
                model_line = gr.Markdown(elem_id="draft-model")
                with gr.Row():
                    draft_button = gr.Button("Draft", interactive=False,
                                             elem_id="draft-button", size="sm")
                    unload_button = gr.Button("Unload model", elem_id="unload-model",
                                              size="sm")
                edit_findings = gr.Textbox(label="Findings (editable)", lines=6,
                                           elem_id="edit-findings")
                edit_impression = gr.Textbox(label="Impression (editable)", lines=3,
                                             elem_id="edit-impression")
                with gr.Row():
                    save_button = gr.Button("Save (Ctrl+S)", variant="primary", elem_id="save")
                    revert_button = gr.Button("Revert to draft", elem_id="revert")
                    accept_button = gr.Button("Accept draft as is (Alt+A)", elem_id="accept")
                save_status = gr.Markdown(elem_id="save-status")
                diff = gr.HighlightedText(label="Draft → current (word level)",
                                          color_map={"+": "green", "-": "red"},
                                          combine_adjacent=True, elem_id="diff")
                with gr.Accordion("Rating", open=True, elem_id="rating"):
                    with gr.Row():
                        likert = gr.Radio([1, 2, 3, 4, 5], label="Overall quality (1-5)",
                                          elem_id="likert")
                        acceptable = gr.Checkbox(label="Acceptable without changes",
                                                 elem_id="acceptable")
                    rexval: dict[tuple[str, str], gr.Number] = {}
                    with gr.Row(elem_classes="rexval-row"):
                        gr.Markdown("**ReXVal errors** (counts)")
                        gr.Markdown("clinically significant")
                        gr.Markdown("insignificant")
                    for category in REXVAL_CATEGORIES:
                        with gr.Row(elem_classes="rexval-row", equal_height=True):
                            gr.Markdown(REXVAL_LABELS[category])
                            for kind in ("significant", "insignificant"):
                                rexval[(category, kind)] = gr.Number(
                                    value=0, minimum=0, precision=0, show_label=False,
                                    container=False,
                                    label=f"{REXVAL_LABELS[category]} · {kind}",
                                    elem_id=f"rexval-{category}-{kind}", min_width=80)
                    comment = gr.Textbox(label="Comment", lines=2, elem_id="comment")
                    rate_button = gr.Button("Submit rating (Alt+R)", elem_id="rate")
                    rate_status = gr.Markdown(elem_id="rate-status")
                with gr.Accordion("Metrics for this study", open=True, elem_id="metrics"):
                    metrics_table = gr.Dataframe(interactive=False, elem_id="metrics-panel")
                    metrics_notes = gr.Markdown(elem_id="metrics-notes")
        timer = gr.Timer(AUTOSAVE_S)

        # -- handlers: read inputs, call the desk, format outputs ---------------------------
        rating_fields = [likert, acceptable, *rexval.values(), comment, rate_status]

        def rating_values(r) -> list:
            values = [r.likert if r else None, bool(r.acceptable) if r else False]
            for category in REXVAL_CATEGORIES:
                for kind in ("significant", "insignificant"):
                    values.append(((r.errors.get(category) or {}).get(kind, 0)) if r else 0)
            values.append((r.comment or "") if r else "")
            values.append(f"Rated (#{r.number}, {r.created_at:%H:%M})." if r else "")
            return values

        def metrics_outputs(session: Session) -> tuple[Any, str]:
            m = desk.metrics_view(session)
            table = {"headers": m.headers, "data": m.rows} if m.headers else None
            return table, "\n".join(f"- {html.escape(n)}" for n in m.notes)

        def diff_of(session: Session, findings: str, impression: str):
            return (_diff(session.drafts.get("findings", (0, ""))[1], findings)
                    + [("| ", None)]
                    + _diff(session.drafts.get("impression", (0, ""))[1], impression))

        def open_study(session: Session, study_id: int | None, request: gr.Request,
                       status: str = "all", source: str = "all", with_list: bool = False):
            """Outputs for opening a study. The worklist table is re-sent only when asked
            (page load): opening a study does not change it, and a long list is the
            heaviest part of the response."""
            reader = reader_of(request)
            session.reader = reader
            rows, done = desk.worklist_rows(reader, status, source)
            if not with_list:
                rows = gr.update()
            who_text = f"Reader: **{html.escape(review.reader_name(reader))}**"
            if study_id is None:
                empty = gr.update(interactive=False)
                return [session, who_text, done, rows, "Select a study in the worklist.", [],
                        empty, "", "", "", empty, "", "", "", [], None, "",
                        *rating_values(None)]
            opened = desk.open(session, reader, int(study_id), time.monotonic())
            view, ref = opened.view, opened.view.reference
            table, notes = metrics_outputs(session)
            return [
                session, who_text, done, rows, _study_header(view),
                [(viewer.preview_file(img) if viewer.preview_dir else img.preview(),
                  img.label) for img in view.images],
                gr.update(interactive=bool(view.prior_ids)),
                (ref.findings or "") if ref else "", (ref.impression or "") if ref else "",
                opened.model_note,
                gr.update(interactive=drafting is not None,
                          value="Regenerate" if opened.drafts else "Draft"),
                opened.texts["findings"], opened.texts["impression"], opened.status,
                diff_of(session, opened.texts["findings"], opened.texts["impression"]),
                table, notes, *rating_values(opened.rating),
            ]

        open_outputs = [state, who, progress, worklist, header, gallery, prior_button,
                        ref_findings, ref_impression, model_line, draft_button, edit_findings,
                        edit_impression, save_status, diff, metrics_table, metrics_notes,
                        *rating_fields]

        def on_load(session: Session, status: str, source: str, request: gr.Request):
            reader = reader_of(request)
            if not review.worklist(reader):
                review.assign(reader)  # a new reader starts with every study on the worklist
            return open_study(session, review.resume(reader), request, status, source,
                              with_list=True)

        def on_select(session: Session, table, status, source, evt: gr.SelectData,
                      request: gr.Request):
            row = evt.index[0] if isinstance(evt.index, list | tuple) else evt.index
            return open_study(session, int(table.iloc[row, 0]), request, status, source)

        def on_step(step: int):
            def handler(session: Session, status, source, request: gr.Request):
                target = review.next_unfinished(reader_of(request), session.study, step)
                return open_study(session, target if target is not None else session.study,
                                  request, status, source)
            return handler

        def on_filter(session: Session, status, source, request: gr.Request):
            return desk.worklist_rows(reader_of(request), status, source)

        def on_prior(session: Session, status, source, request: gr.Request):
            prior_ids = viewer.prior_ids(session.study) if session.study else ()
            return open_study(session, prior_ids[0] if prior_ids else session.study, request,
                              status, source)

        def on_save(session: Session, findings, impression, status, source,
                    request: gr.Request):
            message = desk.save(session, findings, impression)
            rows, done = desk.worklist_rows(reader_of(request), status, source)
            return (session, message, rows, done, *metrics_outputs(session))

        def on_tick(session: Session, findings, impression):
            message = desk.tick(session, findings, impression, time.monotonic())
            return session, message if message is not None else gr.update()

        def on_input(session: Session, findings, impression):
            desk.typed(session, time.monotonic())
            return session, diff_of(session, findings, impression)

        def on_revert(session: Session):
            findings, impression = desk.revert(session)
            return (session, findings, impression,
                    "Reverted to the draft (autosaved shortly, or press Save).")

        def on_accept(session: Session, status, source):
            message = desk.accept(session)
            if session.reader is None:
                return [session, message, gr.update(), gr.update(), gr.update()]
            rows, done = desk.worklist_rows(session.reader, status, source)
            rated = desk.review.latest_rating(session.reader, session.study)
            return [session, message, rows, done,
                    rating_values(rated)[-1] if rated else gr.update()]

        def on_rate(session: Session, likert_v, acceptable_v, *rest):
            *counts, comment_v, status, source = rest
            errors: dict[str, dict[str, int]] = {}
            for (category, kind), value in zip(rexval, counts, strict=True):
                errors.setdefault(category, {})[kind] = int(value or 0)
            ok, message = desk.rate(session, likert_v, acceptable_v, errors, comment_v)
            if not ok:
                return message, gr.update(), gr.update()
            rows, done = desk.worklist_rows(session.reader, status, source)
            return message, rows, done

        def on_draft(session: Session):
            """Stream the draft sections; each is stored as a draft when complete."""
            if session.study is None or drafting is None:
                yield gr.update(), gr.update(), gr.update(), session
                return
            texts = {"findings": "", "impression": ""}
            try:  # one stream for both sections: a whole-report model generates once
                for step in drafting.stream_study(session.study, preset, SECTIONS):
                    texts.update(step.texts)
                    texts.update({s: f"[draft failed: {e}]" for s, e in step.errors.items()})
                    yield (f"Drafting with `{html.escape(preset)}` …",
                           texts["findings"], texts["impression"], session)
            except Exception as exc:  # shown to the reader, never a stack trace
                texts = {s: f"[draft failed: {type(exc).__name__}: {exc}]" for s in SECTIONS}
            drafts = desk.refresh_drafts(session)
            yield (desk.model_note(drafts), texts["findings"], texts["impression"], session)

        def wl_render(session: Session, center, width, invert):
            if session.image is None:
                return None
            img = viewer.window(session.image, center, width)
            return 255 - img if invert else img

        def wl_select(session: Session, evt: gr.SelectData):
            if session.study is None:
                return session, gr.update(), gr.update(), None
            view = viewer.open(session.study)
            session.image = view.images[evt.index].image_id
            lo, hi, (c, w) = viewer.value_range(session.image)
            return (session, gr.update(minimum=lo, maximum=hi, value=c),
                    gr.update(minimum=1, maximum=max(hi - lo, 1) * 2, value=w),
                    viewer.window(session.image, c, w))

        def wl_apply_preset(session: Session, choice, invert):
            if session.image is None:
                return gr.update(), gr.update(), None
            lo, hi, (c, w) = viewer.value_range(session.image)
            span = max(hi - lo, 1.0)
            presets = {"file default": (c, w), "full range": ((lo + hi) / 2, span),
                       "narrow": ((lo + hi) / 2, span / 3), "wide": ((lo + hi) / 2, span * 1.5)}
            c, w = presets[choice]
            return c, w, wl_render(session, c, w, invert)

        def on_export(session: Session, fmt: str, mine: bool, request: gr.Request,
                      progress=gr.Progress()):  # noqa: B008 - Gradio injects it
            """The same files as `rrg-review export`, scoped on the server: a reader gets only
            their own work, an admin everyone's unless "Only my reviews"."""
            reader = reader_of(request)
            progress(0.1, desc="scoring and building the report")
            result = review.export_report(
                reader, fmt, everyone=not mine, metrics=metrics.metrics if metrics else None,
                address=getattr(getattr(request, "client", None), "host", None))
            if result.note:
                gr.Info(result.note)
            return str(result.files[0])

        def on_unload(request: gr.Request):
            """Free the model's memory (GPU included) for everyone: admins only."""
            if not review.is_admin(reader_of(request)):
                raise gr.Error("only an admin can unload the model")
            if drafting is not None:
                drafting.unload()
            return (f"Model `{html.escape(preset)}` unloaded; it loads again on the next "
                    "draft.")

        unload_button.click(on_unload, None, model_line)
        export_button.click(on_export, [state, export_format, export_mine], export_file)
        filters = [status_filter, source_filter]
        ui.load(on_load, [state, *filters], open_outputs)
        worklist.select(on_select, [state, worklist, *filters], open_outputs)
        next_button.click(on_step(1), [state, *filters], open_outputs, api_name="next_study")
        prev_button.click(on_step(-1), [state, *filters], open_outputs,
                          api_name="previous_study")
        prior_button.click(on_prior, [state, *filters], open_outputs)
        status_filter.change(on_filter, [state, *filters], [worklist, progress])
        source_filter.change(on_filter, [state, *filters], [worklist, progress])
        save_button.click(on_save, [state, edit_findings, edit_impression, *filters],
                          [state, save_status, worklist, progress, metrics_table,
                           metrics_notes], api_name="save")
        timer.tick(on_tick, [state, edit_findings, edit_impression], [state, save_status])
        edit_findings.input(on_input, [state, edit_findings, edit_impression], [state, diff])
        edit_impression.input(on_input, [state, edit_findings, edit_impression], [state, diff])
        revert_button.click(on_revert, [state],
                            [state, edit_findings, edit_impression, save_status])
        accept_button.click(on_accept, [state, *filters],
                            [state, save_status, worklist, progress, rate_status])
        rate_button.click(on_rate, [state, likert, acceptable, *rexval.values(), comment,
                                    *filters], [rate_status, worklist, progress])
        draft_button.click(on_draft, [state],
                           [model_line, edit_findings, edit_impression, state])
        gallery.select(wl_select, [state], [state, wl_center, wl_width, wl_image])
        wl_preset.change(wl_apply_preset, [state, wl_preset, wl_invert],
                         [wl_center, wl_width, wl_image])
        wl_inputs = [state, wl_center, wl_width, wl_invert]
        wl_center.release(wl_render, wl_inputs, wl_image)
        wl_width.release(wl_render, wl_inputs, wl_image)
        wl_invert.change(wl_render, wl_inputs, wl_image)
    return ui


def launch_options() -> dict[str, str]:
    """Page-level additions that Gradio 6 takes at launch: keyboard shortcuts and styles."""
    return {"head": KEYBOARD_JS, "css": CSS}
