"""The viewer's panels: the film (the open study's images side by side, its header, the prior
study beside it on request) and the enlarged view (one image at full resolution with window/level,
presets and invert, the other images by arrow keys). The study's images come from StudyViewer;
window/level from the Desk."""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Callable
from dataclasses import dataclass, replace

import gradio as gr

from rrg_review.app.deps import PRIVATE, Guard, Inputs, Outputs, Reader
from rrg_review.app.review.desk import Desk, PriorReport, Session
from rrg_review.app.viewer.service import ImageView, StudyView, StudyViewer


# -- formatting (pure) --------------------------------------------------------------------------
def _image_src(viewer: StudyViewer, img: ImageView) -> str:
    if viewer.preview_dir is not None:
        return "/gradio_api/file=" + html.escape(viewer.preview_file(img), quote=True)
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(img.preview()).save(buf, format="PNG", compress_level=1)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


# (reader id, study id) -> the reader's report of that study (`Desk.prior_report`)
OwnReport = Callable[[int, int], PriorReport | None]


def study_line(view: StudyView, prior: bool = False) -> str:
    esc = html.escape
    # (a date never breaks at its hyphens: "2026-03-" / "12" at 1366, a new-user trial)
    when = f'<span class="nobreak">{esc(str(view.study_date or "date unknown"))}</span>'
    if prior:  # named as the current study is (a reader checks whose film it is: new-user trial)
        return (f"<b>Patient {esc(view.patient_key)}</b> · PRIOR (read-only) · <b>{when}</b>"
                f" · Study {esc(view.study_key)}")
    return (f"<b>Patient {esc(view.patient_key)}</b> · <b>Study {esc(view.study_key)}</b>"
            f" · {when} · {esc(view.source)}")


def film_html(viewer: StudyViewer, view: StudyView | None,
              prior: StudyView | None = None, prior_report: bool = True,
              own: PriorReport | None = None) -> str:
    """The film: the open study's images side by side (whole film, never cropped), its
    patient and study key above them, and the prior study beside it when asked for with its
    reports: the reader's own saved report of it (`own`, as a PACS shows the prior's signed
    report: a new-user trial found only the dataset's there) above the dataset's reference.
    No report in a reader-study reading (`prior_report`; a prior may be another case of the
    study, whose report the `reference` arm shows as a draft)."""
    if view is None:
        return ('<div class="film"><div class="film-empty">Select a study in the worklist.'
                "</div></div>")

    def images(v: StudyView) -> str:
        if not v.images:
            return ('<div class="film-empty">No images: this study is a report only '
                    '(imported as a reference).</div>')
        figs = []
        for i, img in enumerate(v.images):
            attr = f' data-index="{i}" title="Click to enlarge"'
            figs.append(f'<figure{attr}><img src="{_image_src(viewer, img)}" '
                        f'alt="{html.escape(img.label)}"><figcaption>{html.escape(img.label)}'
                        "</figcaption></figure>")
        return f'<div class="film-images">{"".join(figs)}</div>'

    def grow(v: StudyView) -> str:
        # each study's share of the row by its number of images, so that every film gets the
        # same width: a current frontal and lateral beside a one-film prior were each half
        # the prior's size (a fourth new-user trial)
        return f'style="flex-grow: {max(len(v.images), 1)}"' if prior is not None else ""

    parts = [f'<div class="film-study current" data-study="{view.study_id}" {grow(view)}>'
             f'<div class="film-head" id="film-head">{study_line(view)}</div>'
             f"{images(view)}</div>"]
    if prior is not None:
        ref = prior.reference
        # the dataset's report of the prior, said so: a reader who just signed that study
        # took it for their own (a new-user trial)
        report = ("Reference report of the prior (as imported):\n"
                  f"FINDINGS: {ref.findings or '—'}\nIMPRESSION: {ref.impression or '—'}"
                  if ref else "No reference report stored for the prior study.")
        if own is not None:
            def section(name: str) -> str:
                kept = " (the draft, left as it was)" if name in own.drafted else ""
                return f"{name.upper()}{kept}: {own.texts.get(name) or '—'}"
            report = (f"Your report of the prior (saved {own.saved:%Y-%m-%d %H:%M} UTC):\n"
                      f"{section('findings')}\n{section('impression')}\n\n{report}")
        if not prior_report:
            report = "The prior's report is not shown during a reader-study reading."
        parts.append(f'<div class="film-study prior" id="prior-panel" '
                     f'data-study="{prior.study_id}" '
                     f'{grow(prior)}><div class="film-head">'
                     f"{study_line(prior, prior=True)}</div>{images(prior)}"
                     f'<div class="prior-report">{html.escape(report)}</div></div>')
    return f'<div class="film">{"".join(parts)}</div>'


def study_details(view: StudyView) -> str:
    esc = html.escape
    demo = ", ".join(f"{k}: {esc(str(v))}" for k, v in view.demographics.items()) or "—"
    return (f"**Indication:** {esc(view.indication or '—')} · **Comparison:** "
            f"{esc(view.comparison or '—')} · **Demographics:** {demo} · "
            f"**Prior studies:** {len(view.prior_ids)}")


# -- the film -----------------------------------------------------------------------------------
SHOW_PRIOR, HIDE_PRIOR = "Show prior beside (Alt+B)", "Hide prior (Alt+B)"
# the button of a study without a prior says so (it read "Show prior beside (Alt+B)",
# greyed, and Alt+B did nothing a reader could see: a new-user trial)
NO_PRIOR = "No prior study found"


@dataclass(frozen=True)
class FilmPanel:
    prior_button: gr.Button
    details: gr.Markdown
    film: gr.HTML

    @classmethod
    def build(cls, viewer: StudyViewer) -> FilmPanel:
        with gr.Row(elem_id="study-bar"):
            prior_button = gr.Button(SHOW_PRIOR, interactive=False,
                                     elem_id="toggle-prior", size="sm", scale=0, min_width=190)
            details = gr.Markdown(elem_id="study-header")
        return cls(prior_button, details, gr.HTML(film_html(viewer, None), elem_id="film",
                                                  padding=False))

    def cleared(self, viewer: StudyViewer) -> Outputs:
        """No study open."""
        return {self.film: film_html(viewer, None), self.details: "",
                self.prior_button: gr.update(interactive=False)}

    def opened(self, viewer: StudyViewer, view: StudyView, session: Session,
               own: OwnReport | None = None) -> Outputs:
        """The study just opened; with its prior beside when the reader keeps it shown."""
        if session.prior_wanted and view.prior_ids:
            session.prior = view.prior_ids[0]
            return {self.film: prior_film(viewer, view, session, own),
                    self.details: study_details(view),
                    self.prior_button: gr.update(interactive=True, value=HIDE_PRIOR)}
        return {self.film: film_html(viewer, view), self.details: study_details(view),
                self.prior_button: gr.update(interactive=bool(view.prior_ids),
                                             value=SHOW_PRIOR if view.prior_ids else NO_PRIOR)}


def prior_film(viewer: StudyViewer, view: StudyView, session: Session,
               own: OwnReport | None) -> str:
    """The film with the session's prior (when it has one) beside it, and the reader's own
    report of the prior (outside a reader-study reading)."""
    if session.prior is None:
        return film_html(viewer, view)
    reading = session.reading is not None
    mine = (own(session.reader, session.prior)
            if own is not None and session.reader is not None and not reading else None)
    return film_html(viewer, view, viewer.open(session.prior), prior_report=not reading,
                     own=mine)


def wire_film(panel: FilmPanel, viewer: StudyViewer, guard: Guard,
              own: OwnReport | None = None) -> None:
    @guard
    def on_prior(r: Reader, d: Inputs) -> Outputs:
        """Show (or hide) the same patient's previous study beside the open one, read-only."""
        session = r.session
        if session.study is None:
            return {panel.film: gr.update()}
        # the priors the reader may be shown, as the study's opening chose them (never a case
        # of their unfinished blinded reader study: review/desk.py `open`)
        view = replace(viewer.open(session.study), prior_ids=session.priors)
        if session.prior is not None or not view.prior_ids:
            session.prior, session.prior_wanted = None, False
            return {panel.film: film_html(viewer, view),
                    panel.prior_button: gr.update(value=SHOW_PRIOR)}
        session.prior, session.prior_wanted = view.prior_ids[0], True
        return {panel.film: prior_film(viewer, view, session, own),
                panel.prior_button: gr.update(value=HIDE_PRIOR)}

    panel.prior_button.click(on_prior, {guard.tab.state}, [panel.film, panel.prior_button],
                             **PRIVATE)


# -- the enlarged view --------------------------------------------------------------------------
@dataclass(frozen=True)
class EnlargedPanel:
    """The enlarged view: page.js draws it (a canvas that windows the full-bit-depth pixels in
    the browser, its toolbar and caption); the server only says which pixels to fetch."""

    pick: gr.Textbox  # the image clicked on a film (page.js): "current:2", "prior:0"; hidden
    enlarge: gr.Button  # clicked by page.js, hidden
    data: gr.Textbox  # JSON for page.js: the image's pixels file, size, scaling, presets

    @classmethod
    def build_hidden(cls) -> tuple[gr.Textbox, gr.Button]:
        """The page script's two hidden controls (placed with the page's other plumbing)."""
        return (gr.Textbox(elem_id="pick", elem_classes="rrg-hidden", container=False),
                gr.Button("enlarge", elem_id="enlarge-button", elem_classes="rrg-hidden"))

    @classmethod
    def build(cls, pick: gr.Textbox, enlarge: gr.Button) -> EnlargedPanel:
        # the overlay itself is made by page.js (#enlarged): Gradio never re-renders it
        data = gr.Textbox(elem_id="wl-data", elem_classes="rrg-hidden", container=False)
        return cls(pick, enlarge, data)

    def cleared(self) -> Outputs:
        return {self.data: ""}


def image_data(viewer: StudyViewer, desk: Desk, pick: str, view: StudyView, index: int) -> str:
    """What page.js needs to show one image: its full-bit-depth file and how to read it, the
    default window and the presets (rounded to 0.01: a level of 12164.26000000001 was shown)."""
    img = view.images[index]
    full = viewer.full_depth(img)
    presets = {name: [round(v, 2) for v in window]
               for name, window in desk.window_presets(img.image_id).items()}
    return json.dumps({
        "pick": pick, "image": img.image_id, "study": view.study_id,
        "url": "/gradio_api/file=" + str(full.path), "width": full.width,
        "height": full.height, "offset": full.offset, "slope": full.slope,
        "inverted": full.inverted, "presets": presets, "label": img.label,
        "spacing": full.pixel_spacing, "atDetector": full.spacing_at_detector,
        "standIn": {"url": "/gradio_api/file=" + str(full.stand_in.path),
                    "width": full.stand_in.width, "height": full.stand_in.height,
                    "step": full.stand_in.step}})


def wire_enlarged(panel: EnlargedPanel, viewer: StudyViewer, desk: Desk, guard: Guard) -> None:
    state = guard.tab.state

    @guard
    def on_enlarge(r: Reader, d: Inputs) -> Outputs:
        """The image picked on the current study's film or on the prior's (its own viewport:
        clicking the prior enlarged the current study, found in a new-user trial)."""
        session = r.session
        pick = str(d[panel.pick] or "")
        film, _, at = pick.partition(":")
        study = session.prior if film == "prior" else session.study
        if study is None or not at.isdigit():
            return {panel.data: gr.update()}
        view = viewer.open(study)
        index = int(at)
        if not 0 <= index < len(view.images):
            return {panel.data: gr.update()}
        if film != "prior":
            session.image = session.images[index]
        return {state: session, panel.data: image_data(viewer, desk, pick, view, index)}

    pick_at = sorted([state, panel.pick], key=lambda b: b._id).index(panel.pick)
    # always_last: an image picked while the one before is still on its way (← / → or the
    # prior, pressed before the first film had loaded) is served once that answer is in; the
    # button's default ("once") dropped it and left the view "Loading the full image…" for
    # good (a second new-user trial, medium)
    panel.enlarge.click(on_enlarge, {state, panel.pick}, [state, panel.data], **PRIVATE,
                        show_progress="hidden", trigger_mode="always_last",
                        js=f"(...a) => window.rrgWithPick(a, {pick_at})")
