"""The review workstation screen (first cut: worklist, viewer, reference report, prior study).

Handlers only read inputs, call one service, and format outputs.
"""

from __future__ import annotations

import html

import gradio as gr

from app.services.drafting import DraftingService, PreDrafter, StoredDraft
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


PREDRAFT_AHEAD = 3  # studies after the open one that the background worker drafts


def draft_label(preset: str, drafts: dict[str, StoredDraft], service: DraftingService) -> str:
    """Which model wrote the drafts on screen (or will), in one line of Markdown."""
    esc = html.escape
    chosen = service.preset(preset)
    if chosen.backend == "retrieval":
        line = ("**Offline default (`retrieval`)**: not a generative model; the reference report "
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


def _draft_text(d: StoredDraft | None) -> str:
    if d is None:
        return ""
    return d.text if d.error is None else f"[draft failed: {d.error}]"


def build(viewer: StudyViewer, drafting: DraftingService | None = None,
          predrafter: PreDrafter | None = None, preset: str = "retrieval") -> gr.Blocks:
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
                model_line = gr.Markdown(elem_id="draft-model")
                with gr.Row():
                    draft_findings = gr.Textbox(label="Draft findings", interactive=False,
                                                lines=5, elem_id="draft-findings")
                    draft_impression = gr.Textbox(label="Draft impression", interactive=False,
                                                  lines=5, elem_id="draft-impression")
                draft_button = gr.Button("Draft", interactive=False, elem_id="draft-button")
                with gr.Row():
                    ref_findings = gr.Textbox(label="Reference findings", interactive=False,
                                              lines=5, elem_id="ref-findings")
                    ref_impression = gr.Textbox(label="Reference impression", interactive=False,
                                                lines=5, elem_id="ref-impression")

        def upcoming(study_id: int) -> list[int]:
            ids = [r.study_id for r in viewer.worklist()]
            after = ids[ids.index(study_id) + 1:] if study_id in ids else ids
            return after[:PREDRAFT_AHEAD]

        def show(study_id: int | None):
            if study_id is None:
                empty = gr.update(interactive=False)
                return (None, "Select a study in the worklist.", [], empty, "", "", "", "", "",
                        empty)
            view = viewer.open(int(study_id))
            images = [(img.preview(), img.label) for img in view.images]
            ref = view.reference
            drafts = drafting.latest(view.study_id, preset) if drafting else {}
            if predrafter is not None:
                predrafter.schedule(upcoming(view.study_id))
            note = draft_label(preset, drafts, drafting) if drafting else "No drafting configured."
            if predrafter is not None and predrafter.unavailable:
                note += f"<br>⚠ {html.escape(predrafter.unavailable)}"
            return (
                view.study_id, _study_header(view), images,
                gr.update(interactive=bool(view.prior_ids)),
                (ref.findings or "") if ref else "", (ref.impression or "") if ref else "",
                note, _draft_text(drafts.get("findings")), _draft_text(drafts.get("impression")),
                gr.update(interactive=drafting is not None,
                          value="Regenerate" if drafts else "Draft"),
            )

        outputs = [current, header, gallery, prior_button, ref_findings, ref_impression,
                   model_line, draft_findings, draft_impression, draft_button]

        def on_draft(study_id: int | None):
            """Stream findings, then impression; each is stored as a draft when complete."""
            if study_id is None or drafting is None:
                yield gr.update(), gr.update(), gr.update()
                return
            texts = {"findings": "", "impression": ""}
            for section in ("findings", "impression"):
                try:
                    for text in drafting.stream(int(study_id), section, preset):
                        texts[section] = text
                        yield (f"Drafting {section} with `{html.escape(preset)}` …",
                               texts["findings"], texts["impression"])
                except Exception as exc:  # shown to the reader, never a stack trace
                    texts[section] = f"[draft failed: {type(exc).__name__}: {exc}]"
            drafts = drafting.latest(int(study_id), preset)
            yield (draft_label(preset, drafts, drafting), texts["findings"],
                   texts["impression"])

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
        draft_button.click(on_draft, inputs=[current],
                           outputs=[model_line, draft_findings, draft_impression])
    return ui
