"""The review workstation screen (first cut: worklist, viewer, reference report, prior study).

Handlers only read inputs, call one service, and format outputs.
"""

from __future__ import annotations

import html

import gradio as gr

from app.services.viewer import StudyView, StudyViewer

WORKLIST_COLUMNS = ["id", "source", "study", "date", "images", "reference"]


def _worklist_rows(viewer: StudyViewer) -> list[list]:
    return [[r.study_id, r.source, r.study_key, str(r.study_date or ""), r.images,
             "yes" if r.has_reference else "no"] for r in viewer.worklist()]


def _study_header(view: StudyView) -> str:
    esc = html.escape
    demo = ", ".join(f"{k}: {esc(str(v))}" for k, v in view.demographics.items()) or "—"
    lines = [
        f"### {esc(view.source)} · {esc(view.study_key)}",
        f"**Date:** {esc(str(view.study_date or 'unknown'))} · **Patient:** "
        f"{esc(view.patient_key)} · **Demographics:** {demo}",
        f"**Indication:** {esc(view.indication or '—')}",
        f"**Comparison:** {esc(view.comparison or '—')}",
        f"**Prior studies:** {len(view.prior_ids)}",
    ]
    return "\n\n".join(lines)


def build(viewer: StudyViewer) -> gr.Blocks:
    with gr.Blocks(title="rrg-review") as ui:
        current = gr.State(None)
        gr.Markdown("## rrg-review — chest X-ray report review")
        with gr.Row():
            with gr.Column(scale=2):
                worklist = gr.Dataframe(
                    value=_worklist_rows(viewer), headers=WORKLIST_COLUMNS,
                    interactive=False, label="Worklist", elem_id="worklist",
                )
            with gr.Column(scale=5):
                header = gr.Markdown("Select a study in the worklist.", elem_id="study-header")
                gallery = gr.Gallery(label="Images", columns=2, height=520, object_fit="contain",
                                     elem_id="study-images", allow_preview=True)
                prior_button = gr.Button("Open prior study", interactive=False,
                                         elem_id="open-prior")
                with gr.Row():
                    ref_findings = gr.Textbox(label="Reference findings", interactive=False,
                                              lines=5, elem_id="ref-findings")
                    ref_impression = gr.Textbox(label="Reference impression", interactive=False,
                                                lines=5, elem_id="ref-impression")

        def show(study_id: int | None):
            if study_id is None:
                empty = gr.update(interactive=False)
                return None, "Select a study in the worklist.", [], empty, "", ""
            view = viewer.open(int(study_id))
            images = [(img.preview(), img.label) for img in view.images]
            ref = view.reference
            return (
                view.study_id, _study_header(view), images,
                gr.update(interactive=bool(view.prior_ids)),
                (ref.findings or "") if ref else "", (ref.impression or "") if ref else "",
            )

        outputs = [current, header, gallery, prior_button, ref_findings, ref_impression]

        def on_select(table, evt: gr.SelectData):
            row = evt.index[0] if isinstance(evt.index, list | tuple) else evt.index
            return show(int(table.iloc[row, 0]))

        def on_prior(study_id: int | None):
            if study_id is None:
                return show(None)
            prior_ids = viewer.prior_ids(int(study_id))
            return show(prior_ids[0] if prior_ids else int(study_id))

        worklist.select(on_select, inputs=[worklist], outputs=outputs)
        prior_button.click(on_prior, inputs=[current], outputs=outputs)
    return ui
