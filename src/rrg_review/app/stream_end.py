"""An open page's event streams end when the server shuts down.

Why: every open tab holds two responses that never finish by themselves, Gradio's heartbeat
(`/gradio_api/heartbeat/<tab>`) and, while an event is pending, its event stream
(`/gradio_api/queue/data`). uvicorn's graceful shutdown waits for every response to finish, so
Ctrl+C (or a service manager's SIGTERM) with any page open waited the whole grace period (5 s),
then cancelled those responses and logged "Cancel 1 running task(s)". Gradio ends its
heartbeats itself only when it runs its own server (`Blocks.close`); mounted, as here, nothing
told them.

How: at shutdown (`StreamsEnd.end`, called by `server.serve` before uvicorn's own shutdown),
such a response's `receive` answers `http.disconnect`, the way a closed tab does; the route
ends as it ends for a closed tab (Starlette's StreamingResponse stops, Gradio runs the tab's
unload), and the response is completed so the connection closes cleanly. Requests other than
these streams are left to finish within the grace period as before (a save in flight).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)

STREAM_PATHS = ("/gradio_api/queue/data", "/gradio_api/heartbeat/")


def is_event_stream(method: str, path: str) -> bool:
    """Whether a request opens one of an open tab's long-lived streams."""
    return method == "GET" and path.startswith(STREAM_PATHS)


class StreamsEnd:
    """Set once, at shutdown; read by every open stream of the server's process."""

    def __init__(self) -> None:
        self._event = asyncio.Event()  # (bound to the server's loop at its first wait)

    def end(self) -> None:
        self._event.set()

    @property
    def ended(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> None:
        await self._event.wait()

    async def serve(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        """Run one stream's route until it ends, or until the server shuts down."""
        state = {"started": False, "complete": False}

        async def tracked(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["started"] = True
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                state["complete"] = True
            await send(message)

        await app(scope, _EndingReceive(receive, self), tracked)
        if self.ended and state["started"] and not state["complete"]:
            try:  # the chunked answer ends properly: uvicorn then closes the connection
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            except OSError:  # (the browser went at the same moment)
                log.debug("stream's client gone while its answer was completed")


class _EndingReceive:
    """`receive` that answers `http.disconnect` once the server shuts down.

    A `receive` may be abandoned by its caller (Starlette's `is_disconnected` polls it and
    cancels at once), so the underlying call is kept and handed to the next caller: no message
    of the client is lost between two polls."""

    def __init__(self, receive: Receive, streams: StreamsEnd) -> None:
        self._receive, self._streams = receive, streams
        self._pending: asyncio.Future[Message] | None = None

    async def __call__(self) -> Message:
        if self._streams.ended:
            return self._gone()
        if self._pending is None:
            self._pending = asyncio.ensure_future(self._receive())
        if not self._pending.done():
            ending = asyncio.ensure_future(self._streams.wait())
            waited: list[asyncio.Future[Any]] = [self._pending, ending]
            try:
                await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
            finally:
                ending.cancel()
        if self._pending.done():
            got, self._pending = self._pending, None
            return got.result()
        return self._gone()

    def _gone(self) -> Message:
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
        return {"type": "http.disconnect"}
