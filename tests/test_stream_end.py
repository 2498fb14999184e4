"""A response that fails after it has started (a reloaded page's old Gradio event stream, ended
with a 404 once its session is gone) is one log line, never uvicorn's "Exception in ASGI
application" traceback in the app's log (issue #23: no traceback in the log after tabs close;
found by a clean-clone run, test_light_theme_is_a_setting_kept_in_the_browser, after a reload)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from starlette.exceptions import HTTPException
from starlette.responses import StreamingResponse

from rrg_review.app.server import Guard, ServerOptions


class PassingCheck:
    """A request check that lets everything through (the Guard's own error path is tested)."""

    def early_refusal(self, request: Any) -> None:
        return None

    def reads_body(self, request: Any) -> bool:
        return False

    async def refusal(self, request: Any, body: Any, *, too_large: bool = False) -> None:
        return None


def stream_failing_with(exc: Exception) -> Any:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"data: first\n\n"
        raise exc

    return StreamingResponse(chunks(), media_type="text/event-stream")


async def call(app: Any, path: str) -> list[dict[str, Any]]:
    scope = {"type": "http", "method": "GET", "path": path, "raw_path": path.encode(),
             "query_string": b"", "headers": [(b"host", b"127.0.0.1")], "scheme": "http",
             "server": ("127.0.0.1", 7860), "client": ("127.0.0.1", 5000), "root_path": ""}
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(3600)  # the client stays connected
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


def guard_over(inner: Any) -> Guard:
    return Guard(inner, check=PassingCheck(), options=ServerOptions())  # type: ignore[arg-type]


def test_a_stream_ended_by_a_404_after_it_started_is_one_info_line(caplog):
    caplog.set_level(logging.INFO, logger="rrg_review.app.server")
    sent = asyncio.run(call(guard_over(stream_failing_with(HTTPException(404))),
                            "/gradio_api/queue/data"))
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    (record,) = [r for r in caplog.records if "ended part-way" in r.getMessage()]
    assert record.levelno == logging.INFO and record.exc_info is None
    assert "/gradio_api/queue/data" in record.getMessage() and "404" in record.getMessage()


def test_another_failure_after_the_start_is_a_warning_line(caplog):
    caplog.set_level(logging.INFO, logger="rrg_review.app.server")
    asyncio.run(call(guard_over(stream_failing_with(ValueError("broken"))), "/x"))
    (record,) = [r for r in caplog.records if "ended part-way" in r.getMessage()]
    assert record.levelno == logging.WARNING and "ValueError: broken" in record.getMessage()


def test_a_failure_before_any_answer_still_reaches_uvicorn():
    """Nothing was answered yet: uvicorn must answer 500 and log the error in full."""

    async def broken(scope: Any, receive: Any, send: Any) -> None:
        raise ValueError("before the answer")

    with pytest.raises(ValueError, match="before the answer"):
        asyncio.run(call(guard_over(broken), "/x"))
