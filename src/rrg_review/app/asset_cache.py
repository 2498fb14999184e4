"""Gradio's front-end files answered from memory, compressed once (issue #21, defect 7).

A page load asks for about 120 JavaScript, CSS and font files. Gradio reads each from disk and
Brotli-compresses it again on every request: on this 2-core machine 118 of them took 0.7-1.4 s
with compression against 0.3-0.8 s without, and every first page paid it while its own events
waited behind them. The files under /assets/ have content-hashed names (a new Gradio build
gives new names) and /static/ holds Gradio's fonts and scripts of the installed version, so a
response, once made, is kept (per Accept-Encoding) and /assets/ may be cached by the browser
for good. Only complete 200 answers to GET are kept; everything else passes through.

Kept in memory, each answer was still made once per server process: the first page of every
new start (a restart, each app of the test suite) compressed the ~120 files again (the server's
CPU for a fresh server's first page: 0.71 s; 0.50 with the files kept; a later page: 0.17).
With `folder`, each answer is also written there, once per Gradio version (the files are the
installed package's), and a new process reads it back instead of making it. A file there that
cannot be read whole is made again; a folder that cannot be written is said once and left
alone.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rrg_review.core.files import atomic_write

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

    def to_bytes(self) -> bytes:
        """One line of JSON (the headers, the body's length), then the body."""
        head = {"headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in self.headers],
                "length": len(self.body)}
        return json.dumps(head).encode() + b"\n" + self.body

    @classmethod
    def from_bytes(cls, data: bytes) -> Kept | None:
        """What `to_bytes` wrote, or None where it is not that whole (cut short, damaged)."""
        line, newline, body = data.partition(b"\n")
        try:
            head = json.loads(line)
            headers = tuple((k.encode("latin-1"), v.encode("latin-1"))
                            for k, v in head["headers"])
            whole = bool(newline) and head["length"] == len(body)
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        return cls(200, headers, body) if whole else None


class AssetCache:
    """ASGI middleware in front of the mounted Gradio app (inside the Guard, so every check
    and header of the Guard still applies to a kept answer)."""

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BYTES, folder: Path | None = None,
                 version: str = "") -> None:
        """`folder`: where answers are kept for later processes (None: in memory only);
        `version`: the Gradio version whose files they are (part of each answer's name)."""
        self.app, self.max_bytes = app, max_bytes
        self.folder, self.version = folder, version
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
        kept = self._kept.get(key) or self._read(key)
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
        kept = self._kept[key] = Kept(200, headers, body)
        self._bytes += len(body)
        self._write(key, kept)

    def _file(self, key: tuple[str, bytes]) -> Path | None:
        if self.folder is None:
            return None
        name = hashlib.sha256(b"\0".join((self.version.encode(), key[0].encode(), key[1])))
        return self.folder / name.hexdigest()

    def _read(self, key: tuple[str, bytes]) -> Kept | None:
        """The answer a process kept in `folder` (then kept in memory too), or None."""
        file = self._file(key)
        if file is None or self._bytes >= self.max_bytes:
            return None
        try:
            kept = Kept.from_bytes(file.read_bytes())
        except OSError:
            return None
        if kept is not None:
            self._kept[key] = kept
            self._bytes += len(kept.body)
        return kept

    def _write(self, key: tuple[str, bytes], kept: Kept) -> None:
        file = self._file(key)
        if file is None:
            return
        try:
            file.parent.mkdir(parents=True, exist_ok=True)
            # (not synced to disk: a cache, made again if a power cut loses it)
            atomic_write(file, kept.to_bytes(), durable=False)
        except OSError as exc:
            log.info("front-end files are not kept in %s (%s): each start makes them again",
                     self.folder, exc.strerror or exc)
            self.folder = None
