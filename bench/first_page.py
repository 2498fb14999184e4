"""First page load: how long a reader waits for the worklist and the film + draft after opening
the workstation in the browser, on a freshly started server (issue #21, defect 7: 7-14 s
under load, the same on 4 and 160,000 studies).

Each round starts `launch.py` on a new demo database (its start-up is timed apart: the port
open and the page's HTML answering), then opens the page in a fresh Chromium context at
1366x768 and times, from the navigation:
- rows: the first worklist row on screen;
- film + draft: every film image decoded and the findings box filled;
then the same on a second page of the same server (warm), and the static floor: the film's
preview PNG fetched as a page of the same server (the same middleware and file route, no
Gradio front end, no events). The figures are medians over the rounds, with the ratio of the
first page to the static page.

Run: `.venv/bin/python -m bench.first_page [--rounds 5]` (a quick check: `--rounds 1`).
Needs Debian's chromium and Playwright (the test extras).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.processes import stop_process

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
ROWS_JS = ("() => [...document.querySelectorAll('#worklist .body-cell[data-col=\"1\"]')]"
           ".some(c => c.innerText.trim())")
FILM_JS = ("() => { const imgs = [...document.querySelectorAll('#film .current img')];"
           " const box = document.querySelector('#edit-findings textarea');"
           " return imgs.length > 0 && imgs.every(i => i.complete && i.naturalWidth > 0)"
           " && !!box && box.value.trim().length > 0; }")
PREVIEW_JS = "() => document.querySelector('#film .current img')?.getAttribute('src')"


@dataclass(frozen=True)
class PageLoad:
    """Seconds from the navigation to each thing on screen."""

    rows_s: float
    film_s: float


@dataclass(frozen=True)
class Round:
    start_s: float  # launch.py until the page's HTML answers
    first: PageLoad  # the server's first page
    second: PageLoad  # the next page of the same server
    static_s: float  # a static file of the same server, as a page


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_serving(url: str, proc: subprocess.Popen[str], limit_s: float = 300) -> float:
    import httpx

    began = time.monotonic()
    while time.monotonic() - began < limit_s:
        if proc.poll() is not None:
            raise RuntimeError(f"launch.py exited with {proc.returncode} before serving")
        try:
            httpx.get(url, timeout=limit_s)
            return time.monotonic() - began
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"the app did not serve {url} within {limit_s} s")


def page_load(browser: object, url: str, width: int = 1366, height: int = 768) -> PageLoad:
    """Open the workstation in a fresh context (no cache, no storage) and time it."""
    context = browser.new_context(viewport={"width": width, "height": height})  # type: ignore[attr-defined]
    page = context.new_page()
    began = time.monotonic()
    page.goto(url, wait_until="commit")
    page.wait_for_function(ROWS_JS, timeout=300_000, polling=20)
    rows = time.monotonic() - began
    page.wait_for_function(FILM_JS, timeout=300_000, polling=20)
    film = time.monotonic() - began
    context.close()
    return PageLoad(rows, film)


def static_load(browser: object, url: str) -> float:
    """The film's preview PNG opened as a page of the same server (fresh context)."""
    context = browser.new_context()  # type: ignore[attr-defined]
    page = context.new_page()
    page.goto(url, wait_until="commit")
    page.wait_for_function(PREVIEW_JS, timeout=300_000)
    src = page.evaluate(PREVIEW_JS)
    context.close()
    context = browser.new_context()  # type: ignore[attr-defined]
    page = context.new_page()
    began = time.monotonic()
    page.goto(url.rstrip("/") + src, wait_until="load")
    spent = time.monotonic() - began
    context.close()
    return spent


def one_round(browser: object, folder: Path) -> Round:
    port = _free_port()
    url = f"http://127.0.0.1:{port}/"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with open(folder / "app.log", "w") as log:
        began = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "launch.py", "--db", str(folder / "app.sqlite"), "--port",
             str(port)], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True, env=env)
        try:
            _wait_serving(url, proc)
            start = time.monotonic() - began
            first = page_load(browser, url)
            second = page_load(browser, url)
            static = static_load(browser, url)
        finally:
            stop_process(proc)
    return Round(start, first, second, static)


def _median(values: list[float]) -> float:
    return statistics.median(values)


def report(rounds: list[Round]) -> None:
    n = len(rounds)
    firsts = [r.first for r in rounds]
    seconds = [r.second for r in rounds]
    static = _median([r.static_s for r in rounds])
    load = os.getloadavg()
    print(f"first page load, demo database, 1366x768, {n} round(s), medians "
          f"(load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}):")
    print(f"  server start (launch.py to its page answering): "
          f"{_median([r.start_s for r in rounds]):.2f} s")
    print(f"  first page of a fresh server: rows {_median([p.rows_s for p in firsts]):.2f} s, "
          f"film + draft {_median([p.film_s for p in firsts]):.2f} s")
    print(f"  second page of the same server: rows {_median([p.rows_s for p in seconds]):.2f} "
          f"s, film + draft {_median([p.film_s for p in seconds]):.2f} s")
    print(f"  static page of the same server (the film's preview PNG): {static:.2f} s")
    film = _median([p.film_s for p in firsts])
    print(f"first page (film + draft) / static page: {film / max(static, 1e-6):.1f}x; "
          f"target: film + draft within 2 s on a quiet machine "
          f"({'met' if film <= 2.0 else 'not met'} here)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    if not os.path.exists(CHROMIUM):
        print(f"{CHROMIUM} not installed: first page load not measured")
        return 1
    from playwright.sync_api import sync_playwright

    rounds = []
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu",
                  "--disable-background-networking"])
        try:
            for i in range(args.rounds):
                with tempfile.TemporaryDirectory() as tmp:
                    rounds.append(one_round(browser, Path(tmp)))
                r = rounds[-1]
                print(f"round {i + 1}: start {r.start_s:.2f} s; first page rows "
                      f"{r.first.rows_s:.2f} s, film + draft {r.first.film_s:.2f} s; second "
                      f"page {r.second.rows_s:.2f} / {r.second.film_s:.2f} s; static "
                      f"{r.static_s:.2f} s", flush=True)
        finally:
            browser.close()
    report(rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
