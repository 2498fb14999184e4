"""The top bar: who is reading (the signed-in reader, or the local one), the theme, and Log out
(with logins). Signing in itself is the server's login form (app/server.py)."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gradio as gr

from rrg_review.app.deps import PRIVATE, Outputs, Reader


@dataclass(frozen=True)
class TopBar:
    who: gr.Markdown
    light: gr.Checkbox
    logout: gr.Button

    @classmethod
    def build(cls, login: bool) -> TopBar:
        with gr.Row(elem_id="topbar"):
            gr.HTML("<h2>rrg-review · chest X-ray report review</h2>")
            who = gr.Markdown(elem_id="reader")
            light = gr.Checkbox(label="Light theme", value=False, elem_id="light-theme",
                                container=False, scale=0, min_width=130)
            logout = gr.Button("Log out", elem_id="logout", size="sm", visible=login, scale=0)
        return cls(who, light, logout)

    def reader(self, reader: Reader) -> Outputs:
        return {self.who: f"Reader: **{html.escape(reader.name)}**"}


def wire_top_bar(panel: TopBar, login: bool, on_logout: Callable[..., Any],
                 inputs: set[Any], outputs: Sequence[Any], **event: Any) -> None:
    """The theme (browser-only); with logins, Log out runs `on_logout` (which saves what is
    typed) and then leaves for /logout."""
    panel.light.change(None, panel.light, None, js="(v) => { window.rrgSetTheme(v); return []; }")
    if login:
        panel.logout.click(on_logout, inputs, list(outputs), **PRIVATE, **event).then(
            None, None, None, js="() => { window.rrgLogout(); }")
