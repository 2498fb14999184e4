"""The team server against pages of other origins and against floods (issue #24), with real
parts: the app as README's team set-up starts it (`--login`, TLS with a self-signed
certificate, `--trusted-proxy`), Chromium resolving `rrg.hospital.test` (the app),
`wiki.hospital.test` (a sibling subdomain: same site), and `evil.test` (another site) to
loopback with `--host-resolver-rules`, and the attack pages served over TLS from a second
loopback port (so `https://rrg.hospital.test:<other port>` is a same-site, cross-origin page too).

One app and one Chromium for the module.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import sqlite3
import ssl
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.browser import CHROMIUM, App, join_body, launch_browser, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.slow]

APP_HOST, SIBLING, OTHER_SITE = "rrg.hospital.test", "wiki.hospital.test", "evil.test"
PASSWORDS = {"alice": "tulip-river-0451", "bob": "granite-owl-7732",
             "carol": "amber-falcon-2210"}
FLOODER, PROXY_CLIENTS = "203.0.113.66", {"alice": "198.51.100.7", "bob": "198.51.100.8"}


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    names = f"DNS:{APP_HOST},DNS:{SIBLING},DNS:{OTHER_SITE},IP:127.0.0.1"
    made = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                           "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj",
                           f"/CN={APP_HOST}", "-addext", f"subjectAltName={names}"],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"openssl could not make a certificate: {made.stderr[-300:]}")
    return cert, key


@pytest.fixture(scope="module")
def team(tmp_path_factory, database_templates, certificate):
    """The demo studies, readers alice, bob and carol, served as README's team section says."""
    from rrg_review.app.accounts.service import AccountService
    from rrg_review.app.settings import Settings
    from rrg_review.app.worklist.service import WorklistService

    path = tmp_path_factory.mktemp("team") / "team.sqlite"
    settings = Settings.from_args(str(path))
    database_templates.copy_sqlite("demo", settings)
    db = settings.open_database()
    for name, password in PASSWORDS.items():
        WorklistService(db).assign(AccountService(db).add(name, password))
    db.dispose()
    app = App(path, "--login", "--no-predraft", "--trusted-proxy", "127.0.0.1/32",
              tls=certificate)
    yield app
    app.stop()  # and fail on a traceback in its log


class AttackPages:
    """An HTTPS server on a second loopback port serving the attack pages (`pages`)."""

    def __init__(self, certificate: tuple[Path, Path]) -> None:
        pages: dict[str, str] = {}
        self.pages = pages

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = pages.get(self.path.split("?")[0], "").encode()
                self.send_response(200 if body else 404)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(certificate[0]), str(certificate[1]))
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture(scope="module")
def attacker(certificate):
    pages = AttackPages(certificate)
    yield pages
    pages.close()


@pytest.fixture(scope="module")
def chromium():
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} not installed (make test installs Debian's chromium)")
    from playwright.sync_api import sync_playwright

    rules = ", ".join(f"MAP {h} 127.0.0.1" for h in (APP_HOST, SIBLING, OTHER_SITE))
    with sync_playwright() as p:
        browser = launch_browser(p, f"--host-resolver-rules={rules}", isolated=True)
        yield browser
        browser.close()


def proxied(team: App, forwarded_for: str) -> httpx.Client:
    """A client as the trusted proxy (loopback) forwards it: X-Forwarded-For as given."""
    return httpx.Client(base_url=team.url, verify=team.ssl_context, timeout=60,
                        headers={"X-Forwarded-For": forwarded_for})


def app_url(team: App) -> str:
    return f"https://{APP_HOST}:{team.port}/"


def signed_in_tab(chromium, team: App, name: str):
    """A context signed in through the real login form, its page and the page's console
    messages (a list that fills as they come)."""
    context = chromium.new_context(ignore_https_errors=True,
                                   viewport={"width": 1500, "height": 1000})
    page = context.new_page()
    console: list[str] = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    page.goto(app_url(team) + "login")
    page.fill("#username", name)
    page.fill("#password", PASSWORDS[name])
    page.click("button[type=submit]")
    page.locator("#film [data-study]").first.wait_for(timeout=90_000)
    page.wait_for_function("() => document.querySelector('#reader')?.innerText"
                           f".includes('{name}')", timeout=60_000)
    return context, page, console


def _count(team: App, sql: str, *params: object) -> int:
    return team.query(sql, *params)[0][0]


def status_of(page, path: str) -> int:
    """The status of a same-origin GET from `page` (an app page: the browser's own cookies;
    Playwright's request API resolves names without Chromium's resolver rules)."""
    return page.evaluate("async (p) => (await fetch(p)).status", path)


def _save_body(page) -> str:
    """What a forged save sends: the Save button's real event (fn_index and inputs read from
    the page's config with the victim's own cookie: the strongest attacker knows them)."""
    config = page.evaluate("async () => (await fetch('config')).json()")
    comps = {c["id"]: c.get("props", {}).get("elem_id") for c in config["components"]}
    save = next(d for d in config["dependencies"] if d.get("api_name") == "save")
    data = [("FORGED by another page" if comps.get(i) == "edit-findings" else None)
            for i in save["inputs"]]
    return json.dumps({"data": data, "fn_index": save["id"], "session_hash": "forged12345",
                       "event_data": None, "trigger_id": save["targets"][0][0]})


ATTACK = """<!doctype html><html><body>
<iframe name=sink style="display:none"></iframe>
<form id=login target=sink method=post action="{app}login">
<input name=username value=carol><input name=password value="{carol}"><input name=csrf value=x>
</form>
<form id=logout target=sink method=post action="{app}logout"></form>
<form id=save target=sink method=post enctype="text/plain" action="{app}gradio_api/run/predict">
<input name='{{"x":"' value='"}}'></form>
<img src="{app}logout">
<script>
const app = "{app}", body = {body};
const results = window.results = {{}};
async function attempt(name, fn) {{
  try {{ results[name] = await fn(); }} catch (e) {{ results[name] = "refused: " + e.name; }}
}}
async function read(path) {{
  const r = await fetch(app + path, {{credentials: "include"}});
  return "readable " + r.status + " " + (await r.text()).length + " bytes";
}}
(async () => {{
  for (const path of ["config", "gradio_api/info", "login", "gradio_api/queue/status"])
    await attempt("read " + path, () => read(path));
  await attempt("GET logout", () => fetch(app + "logout", {{credentials: "include",
                                                           mode: "no-cors"}}).then(() => "sent"));
  for (const route of ["gradio_api/run/predict", "gradio_api/queue/join"]) {{
    await attempt("no-cors " + route, () => fetch(app + route, {{method: "POST",
      mode: "no-cors", credentials: "include", headers: {{"Content-Type": "text/plain"}},
      body: JSON.stringify(body)}}).then(() => "sent"));
    await attempt("cors " + route, () => fetch(app + route, {{method: "POST",
      credentials: "include", headers: {{"Content-Type": "application/json"}},
      body: JSON.stringify(body)}}).then(async (r) => "readable " + r.status + " "
                                                + (await r.text()).slice(0, 80)));
  }}
  // each form's answer lands in the hidden frame (a refusal too) before the next is sent
  const sink = document.querySelector("iframe[name=sink]");
  for (const form of ["save", "login", "logout"]) {{
    results["form " + form] = await new Promise((done) => {{
      sink.addEventListener("load", () => done("answered"), {{once: true}});
      setTimeout(() => done("no answer"), 30000);
      document.getElementById(form).submit();
    }});
  }}
  document.title = "done";
}})();
</script></body></html>"""


def _attack_from(chromium, context, attacker: AttackPages, origin: str, body: str,
                 team: App) -> dict:
    path = f"/attack-{len(attacker.pages)}.html"
    attacker.pages[path] = ATTACK.format(app=app_url(team), carol=PASSWORDS["carol"],
                                         body=body)
    page = context.new_page()
    page.goto(f"{origin}{path}")
    page.wait_for_function("() => document.title === 'done'", timeout=60_000)
    results = page.evaluate("() => window.results")
    page.close()
    return results


def test_pages_of_other_origins_can_neither_sign_in_out_read_nor_save(team, attacker,
                                                                       chromium):
    """alice is signed in; pages on another port of the app's host, on a sibling subdomain
    and on another site try login CSRF (carol's credentials), logout by GET and by POST,
    credentialed reads of the page's config and API, and forged saves (the Save event with
    its real fn_index, by fetch with and without CORS and by a text/plain form). Then the
    same pages on a browser that is not signed in (classic login CSRF)."""
    context, page, console = signed_in_tab(chromium, team, "alice")
    body = _save_body(page)
    before = {t: _count(team, f"SELECT count(*) FROM {t}") for t in ("revision", "rating")}
    marker = _count(team, "SELECT coalesce(max(id), 0) FROM audit_event")
    origins = {"another port, same host": f"https://{APP_HOST}:{attacker.port}",
               "sibling subdomain": f"https://{SIBLING}:{attacker.port}",
               "another site": f"https://{OTHER_SITE}:{attacker.port}"}
    readable: list[str] = []
    for label, origin in origins.items():
        results = _attack_from(chromium, context, attacker, origin, body, team)
        assert len(results) == 12, results
        # (the forms' requests reached the app: a refusal is an answer)
        assert {results[f"form {f}"] for f in ("save", "login", "logout")} == {"answered"}
        readable += [f"{label}: {k}: {v}" for k, v in results.items()
                     if str(v).startswith("readable")]
        # still alice, on the server and in the page
        assert status_of(page, "config") == 200, label
    assert readable == []  # 0 readable credentialed answers
    page.reload()
    page.wait_for_function("() => document.querySelector('#reader')?.innerText"
                           ".includes('alice')", timeout=60_000)
    # not signed in: the same pages cannot sign this browser in as carol
    fresh = chromium.new_context(ignore_https_errors=True)
    for origin in origins.values():
        results = _attack_from(chromium, fresh, attacker, origin, body, team)
        assert results["form login"] == "answered", results
    look = fresh.new_page()
    look.goto(app_url(team) + "login")
    assert status_of(look, "config") == 401
    fresh.close()
    after = {t: _count(team, f"SELECT count(*) FROM {t}") for t in ("revision", "rating")}
    assert after == before  # 0 forged saves or ratings
    actions = team.query("SELECT action, actor FROM audit_event WHERE id > ?", marker)
    assert not [a for a in actions if a[0] in ("login", "logout", "save", "rate")], actions
    assert "refused" in team.log.read_text() and "another origin" in team.log.read_text()
    # the page itself passed its Content-Security-Policy: no violation reported
    assert not [m for m in console if "Content Security Policy" in m], console
    context.close()


def test_the_page_works_under_its_headers_and_signs_out_by_post(team, chromium):
    """The page, under its CSP and no-framing headers, opens a study, saves, shows a 'slow
    down' notice when its reader floods events, and signs out with its Log out button."""
    context, page, console = signed_in_tab(chromium, team, "bob")
    headers = page.evaluate("async () => Object.fromEntries((await fetch('./')).headers)")
    assert headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert "'nonce-" in headers["content-security-policy"]
    assert headers["cross-origin-resource-policy"] == "same-origin"
    assert headers["strict-transport-security"].startswith("max-age=")
    assert not [h for h in headers if h.startswith("access-control-")]
    page.locator("#edit-findings textarea").fill("Bob's own words.")
    page.locator("#save").click()
    page.wait_for_function("() => document.querySelector('#save-status')?.innerText"
                           ".includes('revision')", timeout=60_000)
    assert _count(team, "SELECT count(*) FROM audit_event WHERE action='save' AND "
                        "actor='bob'") >= 1
    _slow_down_is_shown(page)
    # typed and not yet saved: kept in this browser until the server has it; Log out saves it
    # and leaves no copy behind (a patient's words stayed in a shared browser's storage)
    # (once the flood's last step is on screen: the page holds a reader's keys while a study is
    # on its way, and Playwright's fill() goes around that hold; the page copies text as it is
    # typed, and what came while a study was being drawn was never copied: two loaded runs)
    page.wait_for_function("() => !window.rrg.pending && !window.rrg.stale && !document.body"
                           ".classList.contains('rrg-leaving')", timeout=90_000)
    # (and once the flood's events queued in bob's name have run: until then his Log out is
    # refused too, and a refused Log out signs out without saving, keeping the text in this
    # browser: the page's own test of that is test_review_session's)
    page.wait_for_function("async () => (await (await fetch('gradio_api/queue/status'))"
                           ".json()).queue_size === 0", polling=500, timeout=120_000)
    page.locator("#edit-findings textarea").fill("Bob's own words, and his last ones.")
    page.wait_for_function("() => Object.keys(localStorage).some((k) => k.startsWith('rrg:'))",
                           timeout=90_000)
    page.locator("#logout").click()
    page.wait_for_url(re.compile(r".*/login\?msg=out$"), timeout=60_000)
    assert status_of(page, "config") == 401
    assert _count(team, "SELECT count(*) FROM revision WHERE text = "
                        "'Bob''s own words, and his last ones.'") == 1
    assert page.evaluate("() => Object.keys(localStorage).filter((k) => k.startsWith('rrg:'))"
                         ) == []
    assert not [m for m in console if "Content Security Policy" in m], console
    context.close()


FLOOD_JS = """async (seconds) => {
  const config = await (await fetch("config")).json();
  const next = config.dependencies.find((d) => d.api_name === "next_study");
  const join = () => fetch("gradio_api/queue/join", {method: "POST",
    headers: {"Content-Type": "application/json"},
    body: JSON.stringify({data: next.inputs.map(() => null), fn_index: next.id,
                          session_hash: Math.random().toString(36).slice(2, 13),
                          event_data: null, trigger_id: null})}).then((r) => r.status);
  // (read five times a second: the body's text lays the page out)
  let shown = false;
  const look = setInterval(() => { shown = document.body.innerText.includes("Slow down"); },
                           200);
  // 30 joins always in flight (each answered one is followed by another at once) until the
  // page shows the notice: a slot or a token that comes free is taken by one of them, so the
  // click's own join, sent when a join is refused, meets the limit too. (Waves of 30 with a
  // pause between them left room: a loaded run's click was taken each of four floods, and a
  // taken click is a step on its way, which holds the page's next click until it lands.)
  const statuses = [], until = Date.now() + seconds * 1000, t0 = Date.now();
  const seen = {clicks: []};
  let lastClick = -Infinity;
  const click = () => {
    if (document.body.classList.contains("rrg-leaving") || Date.now() - lastClick < 1000)
      return;
    lastClick = Date.now();
    seen.clicks.push(lastClick - t0);
    document.getElementById("next-study").click();
  };
  const flood = async () => {
    while (!shown && Date.now() < until) {
      const s = await join();
      statuses.push(s);
      if (s === 429) click();
    }
  };
  await Promise.all(Array.from({length: 30}, flood));
  clearInterval(look);
  await new Promise((r) => setTimeout(r, 300));  // (the notice's turn to be drawn)
  shown = document.body.innerText.includes("Slow down");
  seen.head = (document.getElementById("film-head") || {}).innerText;
  seen.status = (document.getElementById("save-status") || {}).innerText;
  seen.leaving = document.body.classList.contains("rrg-leaving");
  return {statuses, shown, seen, step: next.id};
}"""


def _slow_down_is_shown(page) -> None:
    """bob's own page floods queued events (30 always in flight, from new tabs of his): the
    ones over his limit are refused 429, and his click meanwhile gets the 'Slow down' notice
    on the page. A click whose event was accepted (a slot came free) is a step on its way,
    and the page holds the next click until it lands; under a flood it did not land in 30 s
    (beside four busy processes: 141 of 4,740 joins accepted in 60 s, the page 'leaving' for
    157 of 158 waves): the flood stops, the step lands, and the page floods again. A refused
    click holds nothing (page.js), so the flood clicks again at its next refusal.
    Not every join is refused: the limit is a rate, not a wall."""
    tries, every = [], []
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    # the answers to the page's own joins (Gradio's: a trigger_id), by event: the notice is
    # the click's (a refused autosave tick or follow-up step of the page counted too, and two
    # runs of the whole suite then waited for a notice no click had been refused)
    own: list[tuple[int, int]] = []

    def answered(response) -> None:
        body = join_body(response.request)
        if body is not None and body.get("trigger_id") is not None:
            own.append((body.get("fn_index"), response.status))

    page.on("response", answered)
    try:
        for _ in range(4):
            own.clear()
            flood = page.evaluate(FLOOD_JS, 10)
            statuses = flood["statuses"]
            every += statuses
            assert 429 in statuses, statuses
            clicked = [status for fn, status in own if fn == flood["step"]]
            if flood["shown"] or 429 in clicked:
                # a join of the page itself refused: its notice shows (a toast drawn late on
                # a loaded machine is waited for here)
                try:
                    page.get_by_text("Slow down").first.wait_for()
                except PlaywrightTimeout:
                    body = page.evaluate("() => document.body.innerText")
                    raise AssertionError(
                        f"no 'Slow down' notice: the flood saw {flood['shown']=}, "
                        f"{flood['seen']}, the page's own joins answered {own}, "
                        f"{len(statuses)} joins ({statuses.count(429)} refused); the page's "
                        f"text ends {body[-600:]!r}") from None
                # a limit, not a wall: some of his joins were taken (in one flood or another;
                # under load a single 10-s flood may see every join refused)
                assert 200 in every, f"all {len(every)} joins refused"
                return
            tries.append(f"{len(statuses)} joins, {statuses.count(200)} accepted, the page's "
                         f"own joins answered {own}: {flood['seen']}")
            page.wait_for_function("() => !document.body.classList.contains('rrg-leaving')",
                                   timeout=120_000)
    finally:
        page.remove_listener("response", answered)
    raise AssertionError("no 'Slow down' notice on the page: " + "; ".join(tries))


def test_a_login_flood_from_one_address_locks_out_nobody_else(team):
    """1,000+ wrong logins from one client address behind the trusted proxy (X-Forwarded-For),
    from 8 connections at once: that address is throttled, while alice and bob, behind the
    same proxy, sign in at once, and carol signs in at once from the flooding address itself,
    in the browser she had signed in from before. Every attempt is in the audit trail."""
    carols_browser = proxied(team, FLOODER)  # she signed in from it before the flood
    assert sign_in(carols_browser, "", "carol", PASSWORDS["carol"]).status_code == 200
    assert carols_browser.cookies.get("rrg-device")
    assert carols_browser.post("logout").status_code == 303  # signed out; the device stays
    marker = _count(team, "SELECT coalesce(max(id), 0) FROM audit_event")
    deadline = time.monotonic() + 240
    codes: list[int] = []

    def flood(worker: int) -> None:
        with proxied(team, f"10.9.9.9, {FLOODER}") as http:
            form = http.get("login")  # the form's token (and its cookie), then the flood
            token = re.search(r'name=csrf value="([^"]+)"', form.text).group(1)
            for i in range(130):
                if time.monotonic() > deadline:
                    return
                codes.append(http.post("login", data={"username": f"nobody-{i % 20}",
                                                      "password": f"guess-{worker}-{i}",
                                                      "csrf": token}).status_code)

    with ThreadPoolExecutor(8) as pool:
        flooding = [pool.submit(flood, w) for w in range(8)]
        while len(codes) < 300 and not all(f.done() for f in flooding):
            time.sleep(0.2)
        signed: dict[str, tuple[int, float]] = {}
        for name, address in PROXY_CLIENTS.items():
            with proxied(team, address) as http:
                t = time.monotonic()
                signed[name] = (sign_in(http, "", name, PASSWORDS[name]).status_code,
                                time.monotonic() - t)
        carol = _sign_in_under_throttle(carols_browser)
        for f in flooding:
            f.result()
    assert len(codes) >= 1000, f"only {len(codes)} attempts before the deadline"
    assert 429 in codes and codes.count(200) == 0
    assert {n: s[0] for n, s in signed.items()} == {"alice": 200, "bob": 200}, signed
    assert max(s[1] for s in signed.values()) < 30, signed
    assert carol == 200
    rows = team.query("SELECT action, actor, address, detail FROM audit_event WHERE id > ? "
                      "AND action LIKE 'login%'", marker)
    flood_rows = [r for r in rows if r[2] == FLOODER and r[1].startswith("nobody")]
    assert len(flood_rows) == len(codes)  # every decision audited
    assert {r[0] for r in flood_rows} == {"login_failed", "login_throttled"}
    assert ("login", "alice", PROXY_CLIENTS["alice"]) in [r[:3] for r in rows]
    assert any(r[:3] == ("login", "carol", FLOODER) and r[3] == "known device"
               for r in rows), [r for r in rows if r[1] == "carol"]
    carols_browser.close()


def _sign_in_under_throttle(http: httpx.Client) -> int:
    """carol from the flooding address, in a browser she signed in from before (its device
    cookie): at once, the address's throttle does not apply to her."""
    return sign_in(http, "", "carol", PASSWORDS["carol"]).status_code


def test_the_audit_trail_names_the_real_client_behind_the_proxy(team):
    """X-Forwarded-For is believed from the trusted proxy only, and its rightmost untrusted
    hop is the client (what the client itself wrote further left is ignored)."""
    with proxied(team, "1.2.3.4, 198.51.100.99") as http:
        assert sign_in(http, "", "bob", "wrong password").status_code == 401
    with sqlite3.connect(team.db) as conn:
        last = conn.execute("SELECT actor, address FROM audit_event WHERE action="
                            "'login_failed' ORDER BY id DESC LIMIT 1").fetchone()
    assert last == ("bob", "198.51.100.99")
