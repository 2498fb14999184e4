"""The running app for browser tests: a real `launch.py` subprocess (its output drained to a log
file, never an unread pipe) and Debian's Chromium through Playwright. Waits are on conditions.

A test module gets the `browser` (one Chromium per module) and `app` (a fresh demo app per test)
fixtures with `pytest_plugins = ["tests.browser"]`."""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import sqlite3
import ssl
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench.processes import stop_process
from tests.app_process import start_app

log = logging.getLogger(__name__)

# Debian's headless shell where installed (`make test` installs it): the same Blink as the
# chromium package without the browser around it, about 15 % less CPU per test page (measured:
# 24-25 against 27-30 CPU-s of Chromium for the same three review-session tests); else the full
# browser, headless
CHROMIUM = next((path for path in ("/usr/bin/chromium-headless-shell", "/usr/bin/chromium")
                 if os.path.exists(path)), "/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, deadline: float,
                  log: Callable[[], str]) -> None:
    """Wait until the app's port takes connections (or fail with its log).

    A connect is cheap; asking for the page with a short timeout, as the tests did before,
    sent a new request every 2 s to an app still busy rendering the one before on a loaded
    machine, and the app never caught up within 120 s. Callers ask for the page once the port
    is open, with all the time left."""
    while True:
        if proc.poll() is not None:
            pytest.fail(f"app exited early:\n{log()[-5000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"app did not open its port in time:\n{log()[-5000:]}")
        time.sleep(0.1)


class App:
    """The app as a process of its own on a loopback port. `tls`: (certificate, key) files to
    serve https with (README's team set-up). `wait=False` only starts it (see `AppSpares`);
    `serving()` then waits until it answers. `fresh`: `python launch.py` in a new interpreter,
    for what start-up itself does (the first page's first-use work); else a fork of the
    server that imported the app once (tests/app_process.py), whose imports would hide it."""

    # (start_s: a start takes 4-6 s quiet; a browser run beside two busy processes and other
    # jobs, load 15 on 2 cores, took over 120 s for one: a long limit costs nothing when quick)
    def __init__(self, db: Path, *args: str, start_s: float = 300,
                 tls: tuple[Path, Path] | None = None, wait: bool = True,
                 fresh: bool = False) -> None:
        if not os.path.exists(CHROMIUM):
            pytest.skip(f"{CHROMIUM} not installed (make test installs Debian's chromium)")
        self.db = db
        self.log = db.with_suffix(".log")
        port = self.port = free_port()
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{port}/"
        self.ssl_context = None
        if tls:
            args = (*args, "--ssl-certfile", str(tls[0]), "--ssl-keyfile", str(tls[1]))
            self.ssl_context = ssl.create_default_context(cafile=str(tls[0]))
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        argv = ["--db", str(db), "--port", str(port), *args]
        self.log.write_text("")
        if fresh:
            with open(self.log, "a") as out:
                self.proc = subprocess.Popen([sys.executable, "launch.py", *argv], cwd=ROOT,
                                             stdout=out, stderr=subprocess.STDOUT, env=env)
        else:
            self.proc = start_app(argv, self.log, env, ROOT)
        self.start_s: float | None = None
        if wait:
            self.serving(start_s)

    def serving(self, start_s: float = 300) -> App:
        """Wait (at most `start_s` from now) until the app answers its page."""
        if self.start_s is None:
            self.start_s = self._wait_until_serving(self.port, start_s)
        return self

    def _wait_until_serving(self, port: int, start_s: float) -> float:
        """Wait until the app answers its page (see `wait_for_port`); returns the seconds it
        took."""
        began = time.monotonic()
        deadline = began + start_s
        wait_for_port(port, self.proc, deadline, self.log.read_text)
        while True:
            try:
                with urllib.request.urlopen(self.url, timeout=max(1.0, deadline
                                                                   - time.monotonic()),
                                            context=self.ssl_context):
                    return time.monotonic() - began
            except OSError as exc:
                if self.proc.poll() is not None:
                    pytest.fail(f"app exited early:\n{self.log.read_text()}")
                if time.monotonic() > deadline:
                    self.proc.kill()
                    pytest.fail(f"app did not answer within {start_s} s ({exc}):\n"
                                f"{self.log.read_text()}")
                time.sleep(0.3)

    def stop(self, tracebacks: bool = False,
             close_first: Callable[[], None] | None = None, wait: bool = True) -> None:
        """Stop the app; then fail if its log holds a traceback of an event handler or of
        this repository's code (the reader saw "Error"), unless the test provoked one
        (`tracebacks`). A new-user trial found 251 that no browser test had looked for. The
        log is read before the stop: uvicorn's shutdown cancels the browser's open event
        stream with a traceback of its own.

        `close_first` closes the test's pages after that read: the app's graceful shutdown
        otherwise waits up to 5 s for each page's open event stream.

        `wait=False` leaves the app to shut down while the next test runs (`reap` it later)."""
        bad = [] if tracebacks else handler_tracebacks(self.log.read_text(errors="replace"))
        if close_first is not None:
            close_first()
        self.proc.terminate()
        if wait:
            self.reap()
        if bad:
            pytest.fail(f"the app logged a traceback ({self.log}):\n{bad[0][:3000]}")

    def reap(self) -> None:
        """Wait for the stopped app's process to end (killed if it takes over 30 s)."""
        stop_process(self.proc, terminate=False)

    def query(self, sql: str, *params: Any) -> list[tuple]:
        with sqlite3.connect(self.db, timeout=30) as con:
            return con.execute(sql, params).fetchall()


def handler_tracebacks(log: str) -> list[str]:
    """The logged tracebacks of an event handler (Gradio's `process_api`) or of this
    repository's code. Transport-level ones are left out: a reload races Gradio's event stream
    of the old page (a 404 from `sse_stream`, then "response already started")."""
    ours = re.compile(r'File "' + re.escape(str(ROOT)) + r'/src/rrg_review/')
    blocks = re.split(r"\n(?=\d{4}-\d\d-\d\d |ERROR: |INFO: |WARNING: )", log)
    return [b for b in blocks if "Traceback (most recent call last)" in b
            and ("process_api" in b or ours.search(b))]


def answer_never_comes(route: Any) -> None:
    """A request the page sent whose answer never comes back (the page is not told it failed).

    A queued event's join is answered with an event id the server never streams, so the
    event just stays on its way; any other request is left unanswered (the route is never
    resolved: the fetch waits, as it would for a server that never answers; removing the route
    would send it on, see `ApiGate`). Failing either
    instead makes Gradio's client take the connection for lost: an aborted join dropped every
    later event (a Save pressed just after it never left the page: under load, the order of
    the two flipped and two tests failed in CI), and an aborted run/predict showed "Connection
    lost" and reloaded the page by itself 2 s later, once the server answered its check (two
    tests failed on that reload: one's own reload was cut off with net::ERR_ABORTED, the other
    found a new, empty page)."""
    if route.request.url.split("?", 1)[0].endswith("/queue/join"):
        route.fulfill(status=200, content_type="application/json",
                      body=json.dumps({"event_id": "never-" + uuid.uuid4().hex}))


class ApiGate:
    """One route over a page's Gradio API whose `rule` the test changes as it goes: the rule
    takes a request (returns True: held, answered or dropped by it) or leaves it (False: it
    goes on to the server); no rule lets everything through.

    Why one route, kept while a request is held: Playwright sends a request whose route was
    left unresolved (`answer_never_comes`) on to the server when that route is removed, so
    "unroute, then reload" delivered the held requests just before the reload (a CI run stored
    an autosave tick the test had held back, cut off half-way through a word). A held request
    of a page that reloads or closes never reaches the server: `reload` reloads, then removes
    the route. (A route's handler runs only while the test is inside a Playwright call: while
    the route is on, wait with `pump_until`, not `wait_until`.)"""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.rule: Callable[[Any], bool] | None = None
        page.route("**/gradio_api/**", self._handle)

    def _handle(self, route: Any) -> None:
        rule = self.rule
        if rule is None or not rule(route):
            route.continue_()

    def reload(self) -> None:
        """Reload the page, dropping what the gate holds, and take the gate away."""
        self.rule = None
        self.page.reload()
        self.remove()

    def remove(self) -> None:
        """Take the gate away: only once it holds nothing of a live page (that is sent on)."""
        self.page.unroute("**/gradio_api/**", self._handle)


def sign_in(http: Any, base: str, name: str, password: str,
            headers: dict[str, str] | None = None) -> Any:
    """Sign in through the login form the way a browser does: ask for the form first (its CSRF
    token and the pre-login cookie it is bound to, kept in `http`'s cookie jar), then post it.
    `http` is an httpx.Client."""
    form = http.get(base + "login")
    token = re.search(r'name=csrf value="([^"]+)"', form.text)
    return http.post(base + "login", data={"username": name, "password": password,
                                           "csrf": token.group(1) if token else ""},
                     headers=headers)


# One renderer process for every page of a test browser, instead of one per page (a test
# page is a new context on a new app's port: a new site, so a new renderer each time): a page
# load took 2.5 CPU-s of Chromium, 2.2 in the shared renderer (quiet 2-core machine, 6 loads
# each). What a page does is the same; only the cross-origin attack tests keep Chromium's
# default isolation (`isolated=True`).
SHARED_RENDERER = ("--renderer-process-limit=1", "--disable-site-isolation-trials",
                   "--disable-features=IsolateOrigins,site-per-process")


def launch_browser(playwright: Any, *args: str, isolated: bool = False) -> Any:
    """The tests' Chromium (CHROMIUM), headless, with these extra command-line `args`; its
    pages share one renderer process unless `isolated` (SHARED_RENDERER)."""
    return playwright.chromium.launch(
        executable_path=CHROMIUM,
        args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
              *(() if isolated else SHARED_RENDERER), *args])


# Playwright's own default (30 s) is shorter than what a loaded machine needs for an answer
# that involves the app (a full image, a draft); waits are on conditions, so a long limit
# costs nothing when the machine is quick.
DEFAULT_TIMEOUT_MS = 90_000


class PatientBrowser:
    """The module's Chromium, handing out pages and contexts with DEFAULT_TIMEOUT_MS as their
    default wait (everything else is Playwright's `Browser`). Each test's pages are closed
    when it ends (`_pages_closed_after_each_test`)."""

    def __init__(self, browser: Any) -> None:
        self._browser = browser

    def new_context(self, **options: Any) -> Any:
        context = self._browser.new_context(**options)
        context.set_default_timeout(DEFAULT_TIMEOUT_MS)
        return context

    def new_page(self, **options: Any) -> Any:
        page = self._browser.new_page(**options)
        page.context.set_default_timeout(DEFAULT_TIMEOUT_MS)
        return page

    def __getattr__(self, name: str) -> Any:
        return getattr(self._browser, name)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = launch_browser(p)
        yield PatientBrowser(b)
        b.close()


def demo_copy(templates: Any, path: Path, kind: str = "demo") -> Path:
    """A copy of the session's demo database (and its images) at `path`: what a first start
    seeds (tests/test_cli_and_app.py checks the seeding itself), without seeding it again.
    `kind="drafted"`: with the demo studies drafted too, as an app finds them after its first
    run (tests/db_templates.py)."""
    from rrg_review.app.settings import Settings

    templates.copy_sqlite(kind, Settings.from_args(str(path)))
    return path


@pytest.fixture(autouse=True)
def _pages_closed_after_each_test(request):
    """Close the pages (and contexts) a test opened in the module's browser when it ends.

    An open page keeps working: its 200 ms poll, the viewer's watch, Gradio's heartbeat, and
    the app answering them. A module whose tests each open a page and leave it (one app for
    the module) had 13 such renderers at 6-7 % of a core each by its last test, and Chromium
    was most of a browser module's CPU time."""
    if "browser" not in request.fixturenames:
        yield
        return
    browser = request.getfixturevalue("browser")
    before = set(browser.contexts)
    yield
    for context in browser.contexts:
        if context not in before:
            context.close()


class AppSpares:
    """Fresh demo apps, each started while the test before it runs.

    A browser test spends most of its time waiting for the page (timers, answers), and an app
    takes seconds of CPU to start: starting the next test's app during those waits takes the
    start out of the suite's wall time. Every app still gets its own fresh copy of the demo
    database and its own process, exactly as if its test had started it; stopped apps finish
    shutting down in the background and are reaped when the module ends."""

    def __init__(self, folders: pytest.TempPathFactory, templates: Any) -> None:
        self._folders = folders
        self._templates = templates
        self._spare: App | None = None
        self._stopping: list[App] = []

    def _launch(self) -> App:
        # drafted already, as after the app's first run: each app pre-drafted the four demo
        # studies again (decoding their JPEG 2000 films), about 1.7 CPU-s of every browser test;
        # the tests of drafting itself start their apps on undrafted copies
        return App(demo_copy(self._templates, self._folders.mktemp("app") / "app.sqlite",
                             "drafted"), wait=False)

    def take(self, another: bool = True) -> App:
        """A serving app of its own; the next one starts now if `another` test will want one."""
        running, self._spare = self._spare or self._launch(), None
        running.serving()
        if another:
            self._spare = self._launch()
        return running

    def stopping(self, running: App) -> None:
        self._stopping.append(running)

    def close(self) -> None:
        if self._spare is not None:
            self._spare.proc.kill()
            self._stopping.append(self._spare)
        for running in self._stopping:
            running.reap()


@pytest.fixture(scope="module")
def app_spares(tmp_path_factory, database_templates):
    spares = AppSpares(tmp_path_factory, database_templates)
    yield spares
    spares.close()


def _app_wanted_later(request: pytest.FixtureRequest) -> bool:
    """Whether a later test of this module (as this worker runs them) takes an `app` too: a
    spare started for none would cost a whole start (seconds of CPU) for nothing."""
    items = request.session.items
    try:
        at = items.index(request.node)
    except ValueError:
        return True
    return any(item.module is request.node.module and "app" in item.fixturenames
               for item in items[at + 1:])


@pytest.fixture
def app(app_spares, request):
    """A fresh app on its own copy of the demo studies, drafted (imported and drafted once
    per session: the app finds studies and drafts and makes none; tests that start the app on
    a new database seed and draft for real)."""
    running = app_spares.take(another=_app_wanted_later(request))
    yield running
    app_spares.stopping(running)  # reaped at the module's end, also if the check below fails
    running.stop(close_first=(lambda: close_pages(request.getfixturevalue("browser")))
                 if "browser" in request.fixturenames else None, wait=False)


def close_pages(browser) -> None:
    """Close every page (and context) the test left open in the module's browser."""
    for context in list(browser.contexts):
        context.close()


def wait_until(check: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.2)


def pump_until(page: Any, check: Callable[[], Any], what: str, timeout: float = 60,
               detail: Callable[[], Any] | None = None) -> None:
    """`wait_until` for a test whose page has a route on: Playwright runs route handlers only
    while the test is inside one of its calls, so this waits in the page's own timer.
    `detail` says what the page showed instead when it times out."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {what}"
                                 + (f"; {detail()}" if detail else ""))
        page.wait_for_timeout(100)


def new_page(browser, url: str, width: int = 1500, height: int = 1000):
    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(url)
    page.locator("#film [data-study]").first.wait_for(timeout=60_000)
    return page


def header_study(page) -> str:
    return page.locator("#film-head").inner_text()


def join_body(request: Any) -> dict[str, Any] | None:
    """The body of a Gradio queue join the page sent (event, data, trigger), else None."""
    if not request.url.split("?", 1)[0].endswith("/queue/join"):
        return None
    try:
        body = json.loads(request.post_data or "{}")
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


# what the page knew of a row click that never opened its study (see `click_row`)
ROW_STATE = """() => {
  const r = window.rrg || {}, head = document.getElementById('film-head');
  const status = document.getElementById('save-status');
  return {study: r.study, row: r.row, rowWanted: r.rowWanted, rowTries: r.rowTries || 0,
          rowAgo_ms: r.rowAt ? Date.now() - r.rowAt : null, pending: !!r.pending,
          leaving: !!(window.rrgLeaving && window.rrgLeaving()),
          body: document.body.className, head: head ? head.innerText : null,
          status: status ? status.innerText : null};
}"""


def click_row(page, key: str) -> None:
    """Click study `key`'s worklist row and wait until the page shows that study. A click
    that never opens it fails with what the page sent (its queue joins: which event, with
    what row) and what it knew of the click (a browser run beside two busy processes once
    waited 90 s for a row whose study the server never opened, with nothing to go on)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    joins: list[str] = []

    def note(request: Any) -> None:
        body = join_body(request)
        if body is not None:
            joins.append(f"fn {body.get('fn_index')} {body.get('event_data')}")

    page.on("request", note)
    try:
        # Gradio keeps hidden copies of table cells for measuring: click the visible one.
        page.get_by_text(key, exact=True).filter(visible=True).first.click()
        try:
            page.locator("#film-head").get_by_text(key).wait_for()
        except PlaywrightTimeout:
            raise AssertionError(f"{key}'s row was clicked and its study never opened; the "
                                 f"page's joins since: {joins}; the page: "
                                 f"{page.evaluate(ROW_STATE)}") from None
    finally:
        page.remove_listener("request", note)
    # the boxes take keys once they show the study (the heading can come first): keys typed
    # before then are held back by the page, as for a reader (a CI run typed into that gap)
    page.wait_for_function("() => !document.body.classList.contains('rrg-leaving')")


def wait_text(page, elem_id: str, text: str, timeout: float = 60_000) -> None:
    """Wait until element `elem_id` shows `text`; on a timeout, say what it showed instead."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(
            "([id, text]) => { const el = document.getElementById(id); "
            "return !!el && el.innerText.includes(text); }", arg=[elem_id, text],
            timeout=timeout)
    except PlaywrightTimeout:
        shown = page.evaluate("(id) => { const el = document.getElementById(id); "
                              "return el ? el.innerText : '(no such element)'; }", elem_id)
        raise AssertionError(f"#{elem_id} never showed {text!r} in {timeout / 1000:.0f} s; "
                             f"it shows {shown!r}") from None


def press_draft(page, timeout: float = 60_000) -> None:
    """Press Draft and wait until the new draft is on screen (its ids in the page's sync data
    changed). A pre-drafted study already shows a draft: waiting for text in the box would
    return at once while the regeneration still runs, and its answer would then land on top
    of what the test does next (a CI run lost the "saved" status that way)."""
    before = page.locator("#sync textarea").input_value()
    page.locator("#draft-button").click()
    page.wait_for_function(
        "(before) => { const el = document.querySelector('#sync textarea'); if (!el) return false;"
        " const was = before ? JSON.parse(before).drafts : null;"
        " try { const now = JSON.parse(el.value).drafts;"
        " return !!now && Object.keys(now).length > 0"
        " && JSON.stringify(now) !== JSON.stringify(was); }"
        " catch (e) { return false; } }", arg=before, timeout=timeout)


def box(page, section: str):
    return page.locator(f"#edit-{section} textarea")


def wait_value(page, section: str, predicate_js: str, timeout: float = 60_000) -> None:
    """Wait until the box's value satisfies the predicate. The box is looked up on every poll:
    Gradio may replace the textarea (after a reload, say), and a handle taken once would then
    watch a detached element forever."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(
            f"() => {{ const el = document.querySelector('#edit-{section} textarea');"
            f" if (!el) return false; const v = el.value; return {predicate_js}; }}",
            timeout=timeout)
    except PlaywrightTimeout:
        seen = page.evaluate(
            "(s) => ({value: document.querySelector(`#edit-${s} textarea`)?.value,"
            " note: document.querySelector('#restore-note')?.innerText,"
            " status: document.querySelector('#save-status')?.innerText,"
            " sync: document.querySelector('#sync textarea')?.value,"
            " stored: JSON.stringify(Object.entries(localStorage))})", section)
        raise AssertionError(f"#{section} never matched {predicate_js}: {seen}") from None


def wait_in_view(page, selector: str) -> None:
    """Wait until the element is inside the window and the editor column's visible part."""
    check = """(sel) => { const e = document.querySelector(sel); if (!e) return null;
      const b = e.getBoundingClientRect();
      const col = document.querySelector('#editor-col').getBoundingClientRect();
      return {top: b.top, bottom: b.bottom, col: [col.top, col.bottom], vh: innerHeight,
              ok: b.height > 0 && b.top >= Math.max(col.top, 0) - 1
                  && b.bottom <= Math.min(col.bottom, innerHeight) + 1}; }"""
    try:
        # (beside two busy processes the question's answer and the page's scroll took over 5 s;
        # a long limit costs nothing when the machine is quick)
        page.wait_for_function(f"(sel) => ({check})(sel)?.ok", arg=selector, timeout=30_000)
    except Exception:
        raise AssertionError(f"{selector} out of view: {page.evaluate(check, selector)}"
                             ) from None


def top_in_column(page: Any, selector: str) -> float:
    """Where `selector` sits in the editor column's content (px from its top, whatever the
    column or the page is scrolled to): equal twice, it did not move in between."""
    return page.evaluate("""s => { const c = document.querySelector('#editor-col');
        return document.querySelector(s).getBoundingClientRect().top
               - c.getBoundingClientRect().top + c.scrollTop; }""", selector)
