"""The worklist panel alone in a real Gradio app (the set-up shared by the panel's HTTP and
browser tests): a tab state, the panel, an "opened" header that the panel's open function
fills, launched on a free local port."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from rrg_review.app.worklist.panel import build_worklist_panel
from rrg_review.app.worklist.service import WorklistService
from tests.browser import free_port


@dataclass
class Tab:
    """The tab state the panel hands to the open function (the workstation's is `Session`)."""

    study: int | None = None


@dataclass
class PanelApp:
    url: str
    opened: list[int] = field(default_factory=list)  # studies opened, in order


@contextmanager
def panel_app(db: Any, reader: int, page_size: int = 10,
              prepare_reader: Callable[[int], Any] | None = None,
              extra: Callable[[Any, Any, Any], None] | None = None) -> Iterator[PanelApp]:
    """Launch the panel for `reader`; `extra(panel, state, header)` adds more to the page
    inside the Blocks (a stand-in for the workstation's rate button, say)."""
    import gradio as gr

    running = PanelApp("")
    with gr.Blocks() as ui:
        state = gr.State(Tab())
        with gr.Row():
            with gr.Column():
                panel = build_worklist_panel(WorklistService(db), page_size=page_size)
            header = gr.Markdown(elem_id="opened")

        def open_study(session: Tab, study_id: int, request: Any) -> list:
            session.study = study_id
            running.opened.append(study_id)
            return [session, f"opened {study_id}"]

        panel.connect(ui, state, lambda request: reader, open_study, [state, header],
                      prepare_reader=prepare_reader)
        if extra is not None:
            extra(panel, state, header)
    port = free_port()
    ui.launch(server_port=port, prevent_thread_lock=True)
    running.url = f"http://127.0.0.1:{port}/"
    try:
        yield running
    finally:
        ui.close()
