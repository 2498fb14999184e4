"""The web server around the Gradio page: our own login, sessions, logout, TLS and headers.

Gradio's built-in `auth=` calls a `(name, password)` function without the request, keeps its
tokens forever and cannot throttle by address, so the page is mounted on a FastAPI app of ours
instead (`gr.mount_gradio_app(..., auth_dependency=...)`, Gradio's public API for external
login). FastAPI is imported at module level because it resolves the route annotations
(`Request`) from this module's globals:

- `GET /login` shows a plain form; `POST /login` checks the password through
  `AccountService.authenticate` (throttled per account and per address, audited) and sets an
  HttpOnly, SameSite=Strict cookie (Secure under TLS) holding a server-side session token.
- Every other route (Gradio's API, files and queue, and its heartbeat, cancel and stream
  routes, which Gradio itself leaves open) asks `SessionStore.user(token)` who is calling,
  once per request: an unknown, idle or too old session gets 401, and the page redirects to
  `/login`. Only the login form and the page's static assets (the same JS/CSS for everyone)
  are served without a session. Handlers see the signed-in name as `gr.Request.username`.
- A Gradio session hash (one browser tab: its server-side state, its queue of results, its
  heartbeat) belongs to the account that first used it (`TabOwners`). Gradio binds it to no
  user, so without this check another reader could read the tab's results off
  `queue/data?session_hash=`, run its events, cancel them or close it; any request naming
  another account's session hash, in the path, the query or the JSON body, gets 403 and is
  audited (`tab_refused`). Gradio's media-stream routes, which the page does not use, are off.
- `GET|POST /logout` revokes the session (audited) and returns to the login form.
- A downloaded export (`rrg-review-report.*` in Gradio's private cache) is deleted once sent.
"""

from __future__ import annotations

import html
import json
import logging
import re
import ssl
import threading
import time
import urllib.parse
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool

from rrg_review.app.accounts.service import AccountService, SessionStore

log = logging.getLogger(__name__)

COOKIE = "rrg-session"
EXPORT_PREFIX = "rrg-review-report"
# served without a session: the login form, logout, and the page's static files (the same
# JavaScript, CSS and fonts for everyone; nothing of a reader's)
PUBLIC_PATHS = frozenset({"/login", "/logout", "/favicon.ico", "/theme.css", "/robots.txt",
                          "/manifest.json"})
PUBLIC_PREFIXES = ("/assets/", "/static/", "/svelte/", "/pwa_icon")
# routes whose path names a session hash (the "call" API uses its event id as one)
_HASH_IN_PATH = (re.compile(r"^/gradio_api/heartbeat/([^/]+)/?$"),
                 re.compile(r"^/gradio_api/call/(?:v2/)?[^/]+/([^/]+)/?$"))
_BODY_LIMIT = 8 * 1024 * 1024  # an event's inputs are text; uploads go to /upload (multipart)


@dataclass(frozen=True)
class ServerOptions:
    host: str = "127.0.0.1"
    port: int = 7860
    login: bool = False
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    gradio_cache: Path | None = None  # Gradio's private temp folder (GRADIO_TEMP_DIR)

    @property
    def tls(self) -> bool:
        return bool(self.ssl_certfile)


class TLSFilesError(ValueError):
    pass


def check_tls_files(certfile: str, keyfile: str | None) -> None:
    """Load the certificate and key once before starting, so a wrong file is one sentence
    instead of a uvicorn traceback."""
    for label, path in (("certificate", certfile), ("key", keyfile)):
        if path is not None and not Path(path).is_file():
            raise TLSFilesError(f"the TLS {label} file {path} does not exist")
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(certfile, keyfile)
    except (ssl.SSLError, OSError) as exc:
        raise TLSFilesError(f"the TLS certificate {certfile} and key {keyfile} cannot be used "
                            f"together ({exc.strerror or getattr(exc, 'reason', None) or exc})"
                            ) from None


class TabOwners:
    """Which account each Gradio session hash (one browser tab) belongs to: the first account
    that used it. In memory, like Gradio's own per-tab state it protects (a restart loses
    both, and the page starts a new tab). Entries unused for `forget_s` are dropped."""

    def __init__(self, *, forget_s: float = 24 * 3600, limit: int = 200_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.forget_s, self.limit, self.clock = forget_s, limit, clock
        self._owners: dict[str, tuple[str, float]] = {}  # hash -> (account, last used)
        self._lock = threading.Lock()

    def claim(self, session_hash: str, user: str) -> str | None:
        """None when `user` may use the tab (now bound to them), else its owner's name."""
        now = self.clock()
        with self._lock:
            found = self._owners.get(session_hash)
            if found is not None and found[0] != user and now - found[1] <= self.forget_s:
                return found[0]
            self._owners[session_hash] = (user, now)
            if len(self._owners) > self.limit:
                self._forget(now)
        return None

    def _forget(self, now: float) -> None:
        stale = [h for h, (_, seen) in self._owners.items() if now - seen > self.forget_s]
        for h in stale or sorted(self._owners, key=lambda k: self._owners[k][1])[
                :len(self._owners) // 2]:
            del self._owners[h]


def is_public(path: str) -> bool:
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)


async def session_hashes(request: Request) -> set[str]:
    """Every Gradio session hash a request names: in its path, its query or its JSON body."""
    found = set(request.query_params.getlist("session_hash"))
    for pattern in _HASH_IN_PATH:
        match = pattern.match(request.url.path)
        if match and request.method in ("GET", "HEAD"):
            found.add(match.group(1))  # (Starlette has decoded the path, as for routing)
    if request.method == "POST" and request.url.path.startswith("/gradio_api/"):
        body = await request.body()  # cached by Starlette: the route reads it again
        if body and not request.headers.get("content-type", "").startswith("multipart/"):
            try:
                data = json.loads(body)
            except ValueError:  # Gradio answers malformed JSON itself (422)
                data = None
            if isinstance(data, dict) and data.get("session_hash") is not None:
                found.add(str(data["session_hash"]))
    return found


def client_address(request: Any) -> str | None:
    client = getattr(request, "client", None)
    return getattr(client, "host", None)


LOGIN_PAGE = """<!doctype html><html lang=en><head><meta charset=utf-8>
<meta name=viewport content="width=device-width, initial-scale=1">
<title>rrg-review: sign in</title>
<style>:root{{color-scheme:dark}}body{{font-family:system-ui,sans-serif;display:flex;
justify-content:center;margin-top:12vh;background:#0b0f19;color:#e5e7eb}}form{{display:flex;flex-direction:column;gap:.6em;min-width:18em}}
input{{font-size:1em;padding:.4em}}button{{font-size:1em;padding:.5em}}
.error{{color:#ff7b72}}.note{{color:#9ca3af;font-size:.9em}}</style></head><body>
<form method=post action="{action}">
<h1>rrg-review</h1>
{message}
<label for=username>username</label>
<input id=username name=username autocomplete=username required autofocus>
<label for=password>password</label>
<input id=password name=password type=password autocomplete=current-password required>
<button type=submit>Login</button>
<p class=note>{transport}</p>
</form></body></html>"""


def login_page(message: str = "", *, tls: bool, error: bool = True) -> str:
    css = "error" if error else "note"
    shown = f'<p class="{css}" role=alert>{html.escape(message)}</p>' if message else ""
    transport = ("Connection encrypted (TLS)." if tls else
                 "Not encrypted: use this only on this machine.")
    return LOGIN_PAGE.format(action="login", message=shown, transport=transport)


def build_app(blocks: Any, accounts: AccountService, sessions: SessionStore,
              options: ServerOptions, *, launch_kwargs: dict[str, Any] | None = None,
              on_export_download: Callable[[], Any] | None = None):
    """The FastAPI app: login/logout routes and headers, with the Gradio page mounted at /.

    `on_export_download` runs after an export was sent (launch.py empties the export spool of
    finished exports, whose copy Gradio has already taken)."""
    import gradio as gr

    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    launch_kwargs = dict(launch_kwargs or {})
    tabs = TabOwners()

    def current_user(request: Request) -> str | None:
        """The signed-in account, looked up once per request (Gradio asks several times)."""
        known: str | None | bool = getattr(request.state, "rrg_user", False)
        if known is not False:
            return known if isinstance(known, str) else None
        user = sessions.user(request.cookies.get(COOKIE))
        request.state.rrg_user = user
        return user

    if options.login:
        _add_login_routes(app, accounts, sessions, options, current_user)

    cache = options.gradio_cache.resolve() if options.gradio_cache else None

    @app.middleware("http")
    async def guard(request: Request, call_next):
        path = request.url.path
        if options.login and not is_public(path):
            refused = await _refusal(request, path, current_user, tabs, accounts)
            if refused is not None:
                return refused
        response = await call_next(request)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("X-Frame-Options", "SAMEORIGIN")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        if options.tls:
            response.headers.setdefault("Strict-Transport-Security", "max-age=31536000")
        served = _export_file(path, cache)
        if served is not None and response.status_code == 200:
            response.background = BackgroundTask(_delete, served, on_export_download)
        return response

    gr.mount_gradio_app(app, blocks, path="/",
                        auth_dependency=current_user if options.login else None,
                        server_name=options.host, server_port=options.port,
                        **launch_kwargs)
    return app


def _wants_html(request: Request) -> bool:
    return "text/html" in request.headers.get("accept", "")


def _add_login_routes(app: FastAPI, accounts: AccountService, sessions: SessionStore,
                      options: ServerOptions, current_user: Callable[[Request], str | None]
                      ) -> None:
    """/login (the form, and signing in: throttled, audited, a session cookie) and /logout."""
    @app.get("/login", response_class=HTMLResponse)
    def login_form(request: Request, msg: str = ""):
        if current_user(request):
            return RedirectResponse("./", status_code=303)
        notes = {"out": "You are signed out.", "expired": "Your session ended; sign in."}
        return HTMLResponse(login_page(notes.get(msg, ""), tls=options.tls, error=False))

    @app.post("/login")
    async def login(request: Request):
        form = await request.form()
        name = str(form.get("username", "")).strip()[:64]
        password = str(form.get("password", ""))[:4096]
        address = client_address(request)
        # scrypt takes a fraction of a second: off the event loop, so other readers' requests
        # are not held up by someone's login
        result = await run_in_threadpool(accounts.authenticate, name, password, address)
        if result.account is None:
            if result.outcome == "throttled":
                message = (f"Too many failed attempts: try again in "
                           f"{max(1, round(result.retry_after_s))} s.")
                status, headers = 429, {"Retry-After": str(max(1, round(
                    result.retry_after_s)))}
            else:
                message, status, headers = "Incorrect username or password.", 401, {}
            if _wants_html(request):
                return HTMLResponse(login_page(message, tls=options.tls), status_code=status,
                                    headers=headers)
            return JSONResponse({"detail": message}, status_code=status, headers=headers)
        token = sessions.create(result.account.name)
        response = (RedirectResponse("./", status_code=303) if _wants_html(request)
                    else JSONResponse({"success": True}))
        response.set_cookie(COOKIE, token, httponly=True, samesite="strict",
                            secure=options.tls, path="/")
        return response

    @app.api_route("/logout", methods=["GET", "POST"])
    def logout(request: Request):
        token = request.cookies.get(COOKIE)
        name = sessions.revoke(token)
        if name:
            accounts.audit.record("logout", actor=name, address=client_address(request))
        response = RedirectResponse("login?msg=out", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response


async def _refusal(request: Request, path: str, current_user: Callable[[Request], str | None],
                   tabs: TabOwners, accounts: AccountService) -> Response | None:
    """Why a request to a private path is refused (not signed in, a stream, too large, a form
    body, another reader's tab), or None to serve it."""
    user = await run_in_threadpool(current_user, request)  # a database read
    if user is None:
        if request.method in ("GET", "HEAD") and path in ("/", ""):
            expired = COOKIE in request.cookies
            return RedirectResponse("login" + ("?msg=expired" if expired else ""),
                                    status_code=303)
        return JSONResponse({"detail": "Not authenticated: sign in at /login."},
                            status_code=401)
    if path.startswith("/gradio_api/stream/"):
        return JSONResponse({"detail": "Not found"}, status_code=404)
    if request.method == "POST" and len(await request.body()) > _BODY_LIMIT:
        return JSONResponse({"detail": "Request too large"}, status_code=413)
    if (request.headers.get("content-type", "").startswith("multipart/")
            and path.startswith("/gradio_api/") and path != "/gradio_api/upload"):
        # a form body could name a session hash where `session_hashes` does not look
        # (component_server accepts one); the page sends forms only to /upload
        return JSONResponse({"detail": "Unsupported media type"}, status_code=415)
    for session_hash in await session_hashes(request):
        owner = tabs.claim(session_hash, user)
        if owner is not None:
            log.warning("refused: %s used a tab of %s (%s)", user, owner, path)
            await run_in_threadpool(
                accounts.audit.record, "tab_refused", actor=user, ok=False,
                address=client_address(request), target=path[:255],
                detail=f"tab of {owner}")
            return JSONResponse({"detail": "This tab belongs to another reader; "
                                           "reload the page."}, status_code=403)
    return None


def _export_file(url_path: str, cache: Path | None) -> Path | None:
    """The cached export file a Gradio `/file=` URL points at, if it is one."""
    if cache is None or "/file=" not in url_path:
        return None
    target = Path(urllib.parse.unquote(url_path.split("/file=", 1)[1])).resolve()
    if target.name.startswith(EXPORT_PREFIX) and target.is_relative_to(cache):
        return target
    return None


def _delete(path: Path, then: Callable[[], Any] | None = None) -> None:
    try:
        path.unlink(missing_ok=True)
        log.info("export %s deleted after download", path.name)
    except OSError as exc:  # pragma: no cover - logged, the folder goes at shutdown
        log.warning("could not delete %s: %s", path, exc)
    if then is not None:
        then()


def serve(app: Any, options: ServerOptions) -> None:
    """Run until Ctrl+C / SIGTERM (uvicorn's own handlers shut it down gracefully)."""
    import uvicorn

    # Gradio's queue/join builds a dict naming Starlette's deprecated HTTP_422 constant on every
    # request: one warning per queued event filled the log (142 in a 20-minute session) and
    # read like rejected requests. Only that message is silenced.
    warnings.filterwarnings("ignore", message=r"'HTTP_\d{3}_\w+' is deprecated",
                            module=r"gradio\.")
    config = uvicorn.Config(app, host=options.host, port=options.port, log_level="warning",
                            ssl_certfile=options.ssl_certfile, ssl_keyfile=options.ssl_keyfile,
                            proxy_headers=False, server_header=False,
                            timeout_graceful_shutdown=5)
    scheme = "https" if options.tls else "http"
    host = f"[{options.host}]" if ":" in options.host else options.host
    print(f"rrg-review: serving on {scheme}://{host}:{options.port}/", flush=True)
    uvicorn.Server(config).run()
