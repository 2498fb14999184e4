"""The front-end files kept compressed (app/asset_cache.py): answered from memory within a
process, and from the kept folder by the next process, never half of one, and never a file of
another Gradio version."""

from __future__ import annotations

import asyncio
import logging

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from rrg_review.app.asset_cache import AssetCache

BODY = b"console.log('gradio');" * 100


class Client:
    """GET requests to one ASGI app in this process."""

    def __init__(self, app: AssetCache) -> None:
        self.app = app

    def get(self, path: str, headers: dict[str, str] | None = None) -> httpx.Response:
        async def one() -> httpx.Response:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app),
                                         base_url="http://test") as client:
                return await client.get(path, headers=headers)
        return asyncio.run(one())


class Files:
    """Gradio's file routes as the cache sees them: each answer made here is counted."""

    def __init__(self) -> None:
        self.made: list[str] = []

    def app(self, folder, version: str = "6.0.0") -> Client:
        async def asset(request: Request) -> Response:
            self.made.append(request.url.path)
            if request.path_params.get("name") == "missing.js":
                return Response(b"not found", status_code=404)
            return Response(BODY, media_type="text/javascript",
                            headers={"x-encoded": "br"})

        inner = Starlette(routes=[Route("/assets/{name}", asset), Route("/page", asset)])
        return Client(AssetCache(inner, folder=folder, version=version))


def test_a_new_process_answers_from_the_kept_folder_without_making_it_again(tmp_path):
    files = Files()
    first = files.app(tmp_path)
    for _ in range(2):  # the second from memory
        answer = first.get("/assets/index-abc.js", headers={"accept-encoding": "br"})
        assert answer.status_code == 200 and answer.content == BODY
    assert files.made == ["/assets/index-abc.js"]
    later = files.app(tmp_path)  # a restart: a new cache over the same folder
    answer = later.get("/assets/index-abc.js", headers={"accept-encoding": "br"})
    assert answer.content == BODY
    assert answer.headers["x-encoded"] == "br"  # the headers it was made with
    assert "immutable" in answer.headers["cache-control"]
    assert files.made == ["/assets/index-abc.js"]
    # another encoding asked for, another Gradio version: made, not taken from the folder
    files.app(tmp_path).get("/assets/index-abc.js", headers={"accept-encoding": "gzip"})
    files.app(tmp_path, version="6.1.0").get("/assets/index-abc.js",
                                             headers={"accept-encoding": "br"})
    assert len(files.made) == 3


def test_a_damaged_kept_file_is_made_again_and_only_whole_answers_are_kept(tmp_path):
    files = Files()
    files.app(tmp_path).get("/assets/a.js")
    (kept,) = tmp_path.iterdir()
    data = kept.read_bytes()
    for damaged in (data[:-5], b"", b"not json\n" + BODY, b'{"headers": 3, "length": 1}\nx'):
        kept.write_bytes(damaged)
        answer = files.app(tmp_path).get("/assets/a.js")
        assert answer.status_code == 200 and answer.content == BODY
    assert len(files.made) == 5
    assert kept.read_bytes() == data  # written whole again
    # a refused answer, a query string and a page outside the file routes are never kept
    client = files.app(tmp_path)
    for path in ("/assets/missing.js", "/assets/a.js?v=2", "/page"):
        client.get(path)
        client.get(path)
    assert len(files.made) == 5 + 6
    assert len(list(tmp_path.iterdir())) == 1


def test_a_folder_that_cannot_be_written_is_said_once_and_files_are_still_served(
        tmp_path, caplog):
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the folder should be
    files = Files()
    client = files.app(blocked / "front-end")
    with caplog.at_level(logging.INFO, logger="rrg_review.app.asset_cache"):
        for name in ("a.js", "b.js", "a.js"):
            assert client.get(f"/assets/{name}").content == BODY
    assert files.made == ["/assets/a.js", "/assets/b.js"]  # memory still keeps them
    said = [r for r in caplog.records if "not kept" in r.getMessage()]
    assert len(said) == 1, said
