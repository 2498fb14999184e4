"""The evaluation's panels: the metrics of the open study (its draft and final against the
reference, rescored after every save) and the export of the evaluation report (the same files
as `rrg-review export`, scoped on the server to what the reader may see)."""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

import gradio as gr

from rrg_review.app.deps import LIGHT, PRIVATE, Guard, Inputs, Outputs, Reader, Services
from rrg_review.app.review.desk import Desk


@dataclass(frozen=True)
class MetricsPanel:
    table: gr.Dataframe
    notes: gr.Markdown

    @classmethod
    def build(cls) -> MetricsPanel:
        with gr.Accordion("Metrics for this study", open=True, elem_id="metrics"):
            return cls(gr.Dataframe(interactive=False, elem_id="metrics-panel"),
                       gr.Markdown(elem_id="metrics-notes"))

    def computing(self) -> Outputs:
        """A study was opened: its metrics follow in their own request (`step`)."""
        return {self.table: None, self.notes: "Computing metrics…"}


def notes_markdown(notes: list[str], unavailable: list[str]) -> str:
    """The notes under the metrics table. Metrics without their weights here are one line for
    the reader, their keys, reasons and the fetch command folded under it: a new-user trial
    found lines such as "chexbert_5_micro_f1 … StanfordAIMI/RRG_scorers/chexbert.pth" meaningless
    to a radiologist (they are what whoever runs the workstation needs)."""
    lines = [f"- {html.escape(n)}" for n in notes]
    if unavailable:
        details = "\n".join(f"<li>{html.escape(u)}</li>" for u in unavailable)
        lines.append("<details><summary>Some scores are not computed on this machine (their "
                     "model weights are not installed): details for whoever runs it"
                     f"</summary><ul>{details}</ul></details>")
    return "\n".join(lines)


def wire_metrics(panel: MetricsPanel, desk: Desk, guard: Guard) -> dict[str, Any]:
    """Rescore when an autosave stored text; returns the follow-up step (`event.then(**step)`)
    that other panels chain to their saves and navigations."""
    @guard(lock=False)
    def on_metrics(r: Reader, d: Inputs) -> Outputs:
        m = desk.metrics_view(r.session)
        table = {"headers": m.headers, "data": m.rows} if m.headers else None
        return {panel.table: table, panel.notes: notes_markdown(m.notes, m.unavailable)}

    state = guard.tab.state
    guard.tab.rescore.change(on_metrics, {state}, [panel.table, panel.notes], **LIGHT)
    return {"fn": on_metrics, "inputs": {state}, "outputs": [panel.table, panel.notes],
            **PRIVATE}


@dataclass(frozen=True)
class ExportPanel:
    format: gr.Radio
    mine: gr.Checkbox
    button: gr.Button
    file: gr.File

    @classmethod
    def build(cls) -> ExportPanel:
        with gr.Accordion("Export evaluation report", open=False, elem_id="export"):
            return cls(gr.Radio(["html", "csv", "json"], value="html", label="Format",
                                elem_id="export-format"),
                       gr.Checkbox(label="Only my reviews", value=False, elem_id="export-mine"),
                       gr.Button("Build report", elem_id="export-button", size="sm"),
                       gr.File(label="Report", interactive=False, elem_id="export-file"))


def wire_export(panel: ExportPanel, services: Services, guard: Guard) -> None:
    state = guard.tab.state

    def on_export(d: Inputs, request: gr.Request,
                  progress: gr.Progress = gr.Progress()) -> Outputs:  # noqa: B008
        """The same files as `rrg-review export`, scoped on the server: a reader gets only
        their own work, an admin everyone's unless "Only my reviews"."""
        reader = guard.reader(d[state], request)  # not under the tab's lock: it takes a while
        progress(0.1, desc="scoring and building the report")
        account = services.accounts.by_id(reader.id)
        if services.exports is None or account is None:
            raise gr.Error("Export is not set up." if services.exports is None
                           else f"reader {reader.id} does not exist")
        metrics = services.metrics
        result = services.exports.export_as(
            account, d[panel.format], everyone=not d[panel.mine],
            metrics=metrics.metrics if metrics else None,
            address=getattr(getattr(request, "client", None), "host", None))
        if result.note:
            gr.Info(result.note)
        return {panel.file: str(result.files[0])}

    panel.button.click(on_export, {state, panel.format, panel.mine}, [panel.file], **PRIVATE)
