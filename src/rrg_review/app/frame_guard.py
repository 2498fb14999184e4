"""The page's first script: animation-frame loops that never end are slowed (static/frames.js).

Gradio's status tracker runs a `requestAnimationFrame` loop while an event is pending and
stops it only when the event's status changes; the page's loader is removed while pending,
so one loop ran at 60 frames a second for as long as the page was open (about 10 % of a core
per idle tab on the 2-core test machine: style, layout and compositing of 60 frames a second
for a timer nobody sees). The guard must run before Gradio's scripts, which keep their own
reference to `requestAnimationFrame` from the moment they load, so the server writes it at the
top of the page's <head>; the page script of Gradio's `head` (page.py) comes too late for it.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

SCRIPT = Path(__file__).with_name("static") / "frames.js"
HEAD = b"<head>"


@cache
def _tag() -> bytes:
    return b"<script>\n" + SCRIPT.read_bytes() + b"</script>"


def with_frame_guard(page: bytes) -> bytes:
    """The HTML page with the frame guard as the first element of its <head> (a page without
    one is returned as it is). The server then gives the tag its CSP nonce like any other."""
    at = page.find(HEAD)
    if at < 0:
        return page
    at += len(HEAD)
    return page[:at] + _tag() + page[at:]
