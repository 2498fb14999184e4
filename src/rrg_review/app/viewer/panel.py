"""The viewer's panels: the film (the open study's images side by side, its header, the prior
study beside it on request) and the enlarged view (one image at full resolution with window/level,
presets and invert, the other images by arrow keys). The study's images come from StudyViewer;
window/level from the Desk."""

from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass
from typing import Any

import gradio as gr

from rrg_review.app.deps import FULL_SHOWN, PRIVATE, Guard, Inputs, Outputs, Reader
from rrg_review.app.review.desk import WINDOW_PRESETS, Desk, Session, film_order
from rrg_review.app.review.service import ReviewError
from rrg_review.app.viewer.service import ImageView, StudyView, StudyViewer


# -- formatting (pure) --------------------------------------------------------------------------
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


# -- the film -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class FilmPanel:
    prior_button: gr.Button
    details: gr.Markdown
    film: gr.HTML

    @classmethod
    def build(cls, viewer: StudyViewer) -> FilmPanel:
        with gr.Row(elem_id="study-bar"):
            prior_button = gr.Button("Show prior beside (Alt+B)", interactive=False,
                                     elem_id="toggle-prior", size="sm", scale=0, min_width=190)
            details = gr.Markdown(elem_id="study-header")
        return cls(prior_button, details, gr.HTML(film_html(viewer, None), elem_id="film",
                                                  padding=False))

    def cleared(self, viewer: StudyViewer) -> Outputs:
        """No study open."""
        return {self.film: film_html(viewer, None), self.details: "",
                self.prior_button: gr.update(interactive=False)}

    def opened(self, viewer: StudyViewer, view: StudyView) -> Outputs:
        return {self.film: film_html(viewer, view), self.details: study_details(view),
                self.prior_button: gr.update(interactive=bool(view.prior_ids),
                                             value="Show prior beside (Alt+B)")}


def wire_film(panel: FilmPanel, viewer: StudyViewer, guard: Guard) -> None:
    @guard
    def on_prior(r: Reader, d: Inputs) -> Outputs:
        """Show (or hide) the same patient's previous study beside the open one, read-only."""
        session = r.session
        if session.study is None:
            return {panel.film: gr.update()}
        view = viewer.open(session.study)
        if session.prior is not None or not view.prior_ids:
            session.prior = None
            return {panel.film: film_html(viewer, view),
                    panel.prior_button: gr.update(value="Show prior beside (Alt+B)")}
        session.prior = view.prior_ids[0]
        return {panel.film: film_html(viewer, view, viewer.open(session.prior)),
                panel.prior_button: gr.update(value="Hide prior (Alt+B)")}

    panel.prior_button.click(on_prior, {guard.tab.state}, [panel.film, panel.prior_button],
                             **PRIVATE)


# -- the enlarged view --------------------------------------------------------------------------
@dataclass(frozen=True)
class EnlargedPanel:
    pick: gr.Textbox  # the image clicked on the film (page.js), hidden
    enlarge: gr.Button  # clicked by page.js, hidden
    prev_image: gr.Button
    next_image: gr.Button
    preset: gr.Radio
    invert: gr.Checkbox
    center: gr.Slider
    width: gr.Slider
    close: gr.Button
    caption: gr.Markdown
    image: gr.Image

    @classmethod
    def build_hidden(cls) -> tuple[gr.Textbox, gr.Button]:
        """The page script's two hidden controls (placed with the page's other plumbing)."""
        return (gr.Textbox(elem_id="pick", elem_classes="rrg-hidden", container=False),
                gr.Button("enlarge", elem_id="enlarge-button", elem_classes="rrg-hidden"))

    @classmethod
    def build(cls, pick: gr.Textbox, enlarge: gr.Button) -> EnlargedPanel:
        with gr.Column(elem_id="enlarged"):  # shown by the page script (body.rrg-enlarged)
            with gr.Row(elem_id="enlarged-tools"):
                prev_image = gr.Button("◀ image", elem_id="prev-image", size="sm", scale=0)
                next_image = gr.Button("image ▶", elem_id="next-image", size="sm", scale=0)
                preset = gr.Radio(list(WINDOW_PRESETS), value="file default", label="Preset",
                                  elem_id="wl-preset", scale=3)
                invert = gr.Checkbox(label="Invert", elem_id="wl-invert", scale=0,
                                     min_width=90)
                center = gr.Slider(0, 4096, value=2048, label="Level", elem_id="wl-center",
                                   scale=2)
                width = gr.Slider(1, 8192, value=4096, label="Window", elem_id="wl-width",
                                  scale=2)
                close = gr.Button("Close (Esc)", elem_id="close-enlarged", size="sm", scale=0)
            caption = gr.Markdown(elem_id="wl-caption")
            image = gr.Image(show_label=False, interactive=False, elem_id="wl-image",
                             format="png", buttons=[], container=False)
        return cls(pick, enlarge, prev_image, next_image, preset, invert, center, width, close,
                   caption, image)

    def cleared(self) -> Outputs:
        return {self.image: None, self.caption: ""}

    def show(self, viewer: StudyViewer, desk: Desk, session: Session,
             image_id: int | None) -> Outputs:
        if image_id is None or session.study is None:
            return self.cleared()
        r = viewer.value_range(image_id)
        lo, hi, (center, width) = r.lo, r.hi, r.window
        n = session.images.index(image_id) + 1
        return {self.center: gr.update(minimum=lo, maximum=hi, value=center),
                self.width: gr.update(minimum=1, maximum=max(hi - lo, 1) * 2, value=width),
                self.preset: "file default", self.invert: False,
                # whose film this is stays on screen at full size (found in a new-user trial)
                self.caption: study_line(viewer.open(session.study)) + " · "
                              f"Image {n} of {len(session.images)} · ← → other images · "
                              "Esc closes · wheel/drag zoom/pan · double-click resets",
                self.image: desk.render(image_id, center, width, False)}


def wire_enlarged(panel: EnlargedPanel, viewer: StudyViewer, desk: Desk, guard: Guard) -> None:
    state = guard.tab.state

    @guard
    def on_enlarge(r: Reader, d: Inputs) -> Outputs:
        session = r.session
        try:
            index = int(d[panel.pick])
        except (TypeError, ValueError):
            return {panel.image: gr.update()}
        if not 0 <= index < len(session.images):
            return {panel.image: gr.update()}
        session.image = session.images[index]
        return {state: session, **panel.show(viewer, desk, session, session.image)}

    def on_step_image(step: int) -> Any:
        @guard
        def on_step(r: Reader, d: Inputs) -> Outputs:
            image = desk.step_image(r.session, step)
            return {state: r.session, **panel.show(viewer, desk, r.session, image)}
        return on_step

    outs = [state, panel.center, panel.width, panel.preset, panel.invert, panel.caption,
            panel.image]
    # the film's preview is on screen at once (page.js); no spinner over it, and the page is
    # told when the full-resolution image has arrived
    pick_at = sorted([state, panel.pick], key=lambda b: b._id).index(panel.pick)
    panel.enlarge.click(on_enlarge, {state, panel.pick}, outs, **PRIVATE,
                        show_progress="hidden",
                        js=f"(...a) => window.rrgWithPick(a, {pick_at})").then(**FULL_SHOWN)
    panel.next_image.click(on_step_image(1), {state}, outs, **PRIVATE,
                           show_progress="hidden").then(**FULL_SHOWN)
    panel.prev_image.click(on_step_image(-1), {state}, outs, **PRIVATE,
                           show_progress="hidden").then(**FULL_SHOWN)
    panel.close.click(None, None, None, js="() => { window.rrgEnlarged(false); return []; }")
    _wire_window(panel, desk, guard)


def _wire_window(panel: EnlargedPanel, desk: Desk, guard: Guard) -> None:
    """Window/level: the sliders, invert and the presets re-render the image."""
    @guard(lock=False)
    def on_window(r: Reader, d: Inputs) -> Outputs:
        if r.session.image is None:
            return {panel.image: gr.update()}
        return {panel.image: desk.render(r.session.image, d[panel.center], d[panel.width],
                                         d[panel.invert])}

    @guard(lock=False)
    def on_preset(r: Reader, d: Inputs) -> Outputs:
        image = r.session.image
        if image is None:
            return {panel.image: gr.update()}
        try:
            center, width = desk.window_preset(image, d[panel.preset])
        except ReviewError as exc:
            raise gr.Error(str(exc)) from None
        return {panel.center: center, panel.width: width,
                panel.image: desk.render(image, center, width, d[panel.invert])}

    inputs: set[Any] = {guard.tab.state, panel.center, panel.width, panel.invert}
    panel.center.release(on_window, inputs, [panel.image], **PRIVATE)
    panel.width.release(on_window, inputs, [panel.image], **PRIVATE)
    panel.invert.input(on_window, inputs, [panel.image], **PRIVATE)
    panel.preset.input(on_preset, inputs | {panel.preset}, [panel.center, panel.width,
                                                            panel.image], **PRIVATE)
