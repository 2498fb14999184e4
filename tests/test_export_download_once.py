"""An export is one download (issue #24: a reader's export holds their own work, and the file
does not outlive its download). A second GET that arrives while the first is still being sent,
or while its file is being deleted, is a clean 404: before, Gradio found the file, Starlette
then found it deleted, and the reader got a 500 (a clean-clone CI run,
test_a_readers_export_holds_only_their_own_work_without_phi_or_formulas)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from starlette.responses import FileResponse, PlainTextResponse

from rrg_review.app.server import EXPORT_PREFIX, Guard, ServerOptions
from tests.test_stream_end import PassingCheck


def scope_for(path: str) -> dict[str, Any]:
    return {"type": "http", "method": "GET", "path": path, "raw_path": path.encode(),
            "query_string": b"", "headers": [(b"host", b"127.0.0.1")], "scheme": "http",
            "server": ("127.0.0.1", 7860), "client": ("127.0.0.1", 5000), "root_path": ""}


async def get(app: Any, path: str) -> tuple[int, bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope_for(path), receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_a_second_get_during_the_first_download_is_a_404_and_the_file_goes(tmp_path: Path):
    cache = tmp_path / "gradio"
    (cache / "abc").mkdir(parents=True)
    export = cache / "abc" / f"{EXPORT_PREFIX}.csv"
    export.write_text("reader,final\nalice,clear\n")
    first_started, let_first_finish = asyncio.Event(), asyncio.Event()

    async def files(scope: Any, receive: Any, send: Any) -> None:
        """Gradio's file route, slowed: it holds the first download open part-way."""
        target = Path(scope["path"].split("/file=", 1)[1])
        if not target.exists():
            await PlainTextResponse("not found", status_code=404)(scope, receive, send)
            return
        if not first_started.is_set():
            first_started.set()
            await let_first_finish.wait()
        await FileResponse(target)(scope, receive, send)

    deleted: list[bool] = []
    guard = Guard(files, check=PassingCheck(), options=ServerOptions(gradio_cache=cache),  # type: ignore[arg-type]
                  on_export_download=lambda: deleted.append(True))
    url = f"/gradio_api/file={export}"

    async def scenario() -> tuple[tuple[int, bytes], tuple[int, bytes], tuple[int, bytes]]:
        first = asyncio.create_task(get(guard, url))
        await first_started.wait()
        during = await get(guard, url)
        let_first_finish.set()
        done = await first
        after = await get(guard, url)
        return done, during, after

    # (a bounded wait: a Guard that fails before the file route ran hung the whole CI run)
    done, during, after = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert done == (200, b"reader,final\nalice,clear\n")
    assert during[0] == 404 and b"downloaded already" in during[1]
    assert not export.exists() and deleted == [True]
    assert after[0] == 404
