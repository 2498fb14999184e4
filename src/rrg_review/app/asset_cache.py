"""Gradio's front-end files answered from memory, compressed once (issue #21, defect 7).

A page load asks for about 120 JavaScript, CSS and font files. Gradio reads each from disk and
Brotli-compresses it again on every request: on this 2-core machine 118 of them took 0.7-1.4 s
with compression against 0.3-0.8 s without, and every first page paid it while its own events
waited behind them. The files under /assets/ have content-hashed names (a new Gradio build
gives new names) and /static/ holds Gradio's fonts and scripts of the installed version, so a
response, once made, is kept (per Accept-Encoding) and /assets/ may be cached by the browser
for good. Only complete 200 answers to GET are kept; everything else passes through.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)

PREFIXES = ("/assets/", "/static/")
IMMUTABLE = (b"cache-control", b"public, max-age=31536000, immutable")
MAX_BYTES = 32 << 20  # what the kept answers may take in all


@dataclass(frozen=True)
class Kept:
    """One complete answer: its start message's status and headers, and its body."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes


class AssetCache:
    """ASGI middleware in front of the mounted Gradio app (inside the Guard, so every check
    and header of the Guard still applies to a kept answer)."""

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BYTES) -> None:
        self.app, self.max_bytes = app, max_bytes
        self._kept: dict[tuple[str, bytes], Kept] = {}
        self._bytes = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or scope.get("method") != "GET" \
                or not path.startswith(PREFIXES) or scope.get("query_string"):
            await self.app(scope, receive, send)
            return
        encoding = dict(scope.get("headers") or []).get(b"accept-encoding", b"")
        key = (path, encoding)
        kept = self._kept.get(key)
        if kept is not None:
            await send({"type": "http.response.start", "status": kept.status,
                        "headers": list(kept.headers)})
            await send({"type": "http.response.body", "body": kept.body})
            return
        await self.app(scope, receive, self._keeping(key, send))

    def _keeping(self, key: tuple[str, bytes], send: Send) -> Send:
        start: list[Message] = []
        body: list[bytes] = []

        async def keep(message: Message) -> None:
            if message["type"] == "http.response.start":
                if message["status"] == 200 and key[0].startswith("/assets/"):
                    message["headers"] = [*message.get("headers", []), IMMUTABLE]
                start.append(message)
            elif message["type"] == "http.response.body" and start:
                body.append(message.get("body", b""))
                if not message.get("more_body", False):
                    self._keep(key, start[0], b"".join(body))
            await send(message)
        return keep

    def _keep(self, key: tuple[str, bytes], start: Message, body: bytes) -> None:
        if key in self._kept or start["status"] != 200 or self._bytes + len(body) > self.max_bytes:
            return
        headers = tuple((bytes(k), bytes(v)) for k, v in start.get("headers", []))
        self._kept[key] = Kept(200, headers, body)
        self._bytes += len(body)
