"""The web server around the Gradio page: our own login, sessions, logout, TLS and headers.

Gradio's built-in `auth=` calls a `(name, password)` function without the request, keeps its
tokens forever and cannot throttle by address, so the page is mounted on a FastAPI app of ours
instead (`gr.mount_gradio_app(..., auth_dependency=...)`, Gradio's public API for external
login). FastAPI is imported at module level because it resolves the route annotations
(`Request`) from this module's globals:

- `GET /login` shows a plain form with a CSRF token bound to a pre-login cookie
  (web_policy.LoginToken); `POST /login` checks the token, then the password through
  `AccountService.authenticate` (throttled per account and per address, audited) and sets an
  HttpOnly, SameSite=Strict cookie (Secure under TLS) holding a server-side session token.
- Before anything else, a browser request from another origin (a sibling subdomain or another
  port of the same host is same-site, so SameSite cookies do not stop it) is refused with 403
  (web_policy.refusal_reason), and every response carries the headers of
  web_policy.security_headers, a Content-Security-Policy with a per-page script nonce, and no
  CORS headers (Gradio's own CORS middleware reflects other origins with credentials).
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
- `POST /logout` revokes the session (audited) and returns to the login form; `GET /logout`
  signs nobody out (an `<img src=.../logout>` on another page must not): it shows a button
  that posts.
- A signed-in reader's requests go through fair.FairQueue: limits on a tab's and a reader's
  queued events and requests in progress and, while another reader is active, on the rate
  a reader starts queued events (429 "Slow down" beyond them), and Gradio's queue
  in fair order after each join, so one reader cannot starve the others.
- Behind a reverse proxy named with `--trusted-proxy`, uvicorn's proxy-headers middleware
  makes the client address (throttling, audit, tabs) the rightmost untrusted X-Forwarded-For
  hop, and the scheme the proxy's.
- A downloaded export (`rrg-review-report.*` in Gradio's private cache) is deleted once sent.
"""

from __future__ import annotations

import functools
import hashlib
import html
import json
import logging
import re
import secrets
import socket
import ssl
import threading
import time
import urllib.parse
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
)
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rrg_review.app.accounts.service import AccountService, SessionStore
from rrg_review.app.asset_cache import AssetCache
from rrg_review.app.fair import FairQueue
from rrg_review.app.frame_guard import with_frame_guard
from rrg_review.app.queue_idle import calm_queue
from rrg_review.app.queue_record import bound_queue_record
from rrg_review.app.stream_end import StreamsEnd, is_event_stream
from rrg_review.app.viewer.service import packed
from rrg_review.app.web_policy import (
    CORS_PREFIX,
    LOGIN_FIELD,
    DeviceCookies,
    LoginToken,
    add_nonce,
    content_security_policy,
    nonce_placeholder,
    refusal_reason,
    security_headers,
)

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
JOIN = "/gradio_api/queue/join"
# the "call" API adds an event to the same queue as a join (gradio/routes.py, queue_join_helper)
_CALL = re.compile(r"^/gradio_api/call/(?:v2/)?[^/]+/?$")


def adds_an_event(method: str, path: str) -> bool:
    """Whether this request puts an event on Gradio's queue: the page's join, or the "call"
    API's POST (which a scripted client could use to go around the join's limits)."""
    return method == "POST" and (path == JOIN or _CALL.match(path) is not None)
_BODY_LIMIT = 8 * 1024 * 1024  # an event's inputs are text; uploads go to /upload (multipart)


@dataclass(frozen=True)
class ServerOptions:
    host: str = "127.0.0.1"
    port: int = 7860
    login: bool = False
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    gradio_cache: Path | None = None  # Gradio's private temp folder (GRADIO_TEMP_DIR)
    # where the compressed front-end files are kept for the next start (AssetCache; None: in
    # this process's memory only)
    asset_dir: Path | None = None
    # the viewer's folder of previews and pixel files: a pixel file goes gzipped where the
    # browser accepts it (`_packed_pixels`)
    pixel_dir: Path | None = None
    # written where the page's script tag in Gradio's `head` needs the page's CSP nonce
    # (web_policy.nonce_placeholder); each page gets its own nonce in its place
    nonce_placeholder: str = field(default_factory=nonce_placeholder)
    # networks of the reverse proxies whose X-Forwarded-For/-Proto are believed (uvicorn's
    # ProxyHeadersMiddleware: the client is the rightmost address not in them)
    trusted_proxies: tuple[str, ...] = ()

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


def session_hashes(request: Request, body: bytes | None) -> set[str]:
    """Every Gradio session hash a request names: in its path, its query or its JSON body
    (`body`, read by the caller; None when it did not read it)."""
    found = set(request.query_params.getlist("session_hash"))
    for pattern in _HASH_IN_PATH:
        match = pattern.match(request.url.path)
        if match and request.method in ("GET", "HEAD"):
            found.add(match.group(1))  # (Starlette has decoded the path, as for routing)
    if body and request.method == "POST" and request.url.path.startswith("/gradio_api/") \
            and not request.headers.get("content-type", "").startswith("multipart/"):
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
<input type=hidden name=csrf value="{token}">
<label for=username>username</label>
<input id=username name=username autocomplete=username required value="{username}"{name_focus}>
<label for=password>password</label>
<input id=password name=password type=password autocomplete=current-password
required{password_focus}>
<button type=submit>Login</button>
<p class=note>{transport}</p>
</form></body></html>"""


LOGOUT_PAGE = """<!doctype html><html lang=en><head><meta charset=utf-8>
<title>rrg-review: sign out</title></head><body>
<form method=post action="logout"><button type=submit>Sign out</button></form>
<p><a href="./">Back to the workstation</a></p></body></html>"""


def login_page(message: str = "", *, tls: bool, error: bool = True, token: str = "",
               username: str = "") -> str:
    """The sign-in form. `username`: the name a refused attempt was made with, kept in its
    box with the password box focused (a new-user trial typed the name again after every
    mistyped password)."""
    css = "error" if error else "note"
    shown = f'<p class="{css}" role=alert>{html.escape(message)}</p>' if message else ""
    transport = ("Connection encrypted (TLS)." if tls else
                 "Not encrypted: use this only on this machine.")
    return LOGIN_PAGE.format(action="login", message=shown, transport=transport,
                             token=html.escape(token), username=html.escape(username),
                             name_focus="" if username else " autofocus",
                             password_focus=" autofocus" if username else "")


def build_app(blocks: Any, accounts: AccountService, sessions: SessionStore,
              options: ServerOptions, *, launch_kwargs: dict[str, Any] | None = None,
              on_export_download: Callable[[], Any] | None = None) -> FastAPI:
    """The FastAPI app: login/logout routes and headers, with the Gradio page mounted at /.

    `on_export_download` runs after an export was sent (launch.py empties the export spool of
    finished exports, whose copy Gradio has already taken)."""
    import gradio as gr

    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    readers = Readers(sessions)
    if options.login:
        _add_login_routes(app, accounts, sessions, readers, options)

    check = RequestCheck(accounts, readers, options, TabOwners(), blocks, FairQueue(blocks))
    app.state.streams = StreamsEnd()  # ended by `serve` at shutdown (stream_end)
    # inside the Guard (Starlette: the last added is outermost)
    app.add_middleware(AssetCache, folder=options.asset_dir, version=gr.__version__)
    app.add_middleware(Guard, check=check, options=options, streams=app.state.streams,
                       on_export_download=on_export_download)
    gr.mount_gradio_app(app, blocks, path="/",
                        auth_dependency=readers.current if options.login else None,
                        server_name=options.host, server_port=options.port,
                        **dict(launch_kwargs or {}))
    bound_queue_record(blocks)
    calm_queue(blocks)
    return app


class Readers:
    """Who is calling: the signed-in account of a request, looked up once per request (Gradio
    asks several times; the answer is kept in the request's scope state, which every Request
    object built on that scope shares)."""

    def __init__(self, sessions: SessionStore) -> None:
        self.sessions = sessions

    def current(self, request: Request) -> str | None:
        known: str | bool | None = getattr(request.state, "rrg_user", False)
        if known is not False:
            return known if isinstance(known, str) else None
        user = self.sessions.user(request.cookies.get(COOKIE))
        request.state.rrg_user = user
        return user


def _wants_html(request: Request) -> bool:
    return "text/html" in request.headers.get("accept", "")


def _secure(request: Request, options: ServerOptions) -> bool:
    """Whether the browser reached the app over TLS (ours, or a trusted proxy's)."""
    return options.tls or request.url.scheme == "https"


def _form_with_token(request: Request, options: ServerOptions, message: str = "", *,
                     error: bool = True, status: int = 200,
                     headers: dict[str, str] | None = None, username: str = "") -> Response:
    """The login form carrying the pre-login token (a new one when the cookie has none)."""
    tokens = LoginToken(_secure(request, options))
    token = tokens.current(request.cookies)
    fresh = token is None
    token = token or LoginToken.new()
    response = HTMLResponse(login_page(message, tls=options.tls, error=error, token=token,
                                       username=username),
                            status_code=status, headers=headers)
    if fresh:
        response.set_cookie(tokens.cookie, token, max_age=3600, httponly=True,
                            samesite="strict", secure=tokens.secure, path="/")
    return response


def _add_login_routes(app: FastAPI, accounts: AccountService, sessions: SessionStore,
                      readers: Readers, options: ServerOptions) -> None:
    """GET/POST /login and /logout (see the module's docstring)."""
    devices = DeviceCookies()

    @app.get("/login", response_class=HTMLResponse)
    def login_form(request: Request, msg: str = "") -> Response:
        if readers.current(request):
            return RedirectResponse("./", status_code=303)
        notes = {"out": "You are signed out.", "expired": "Your session ended; sign in."}
        return _form_with_token(request, options, notes.get(msg, ""), error=False)

    @app.post("/login")
    async def login(request: Request) -> Response:
        form = await request.form()
        tokens = LoginToken(_secure(request, options))
        if not tokens.valid(request.cookies, form.get(LOGIN_FIELD)):
            log.warning("login refused from %s: no valid form token", client_address(request))
            message = "The sign-in form expired or came from another page; sign in again."
            if _wants_html(request):
                return _form_with_token(request, options, message, status=403)
            return JSONResponse({"detail": message}, status_code=403)
        name = str(form.get("username", "")).strip()[:64]
        password = str(form.get("password", ""))[:4096]
        known = devices.valid(request.cookies.get(DeviceCookies.COOKIE), name)
        # scrypt takes a fraction of a second: off the event loop, so other readers' requests
        # are not held up by someone's login
        result = await run_in_threadpool(functools.partial(
            accounts.authenticate, name, password, client_address(request),
            known_device=known))
        if result.account is None:
            return _login_refused(request, result, options, name)
        token = sessions.create(result.account.name)
        response = (RedirectResponse("./", status_code=303) if _wants_html(request)
                    else JSONResponse({"success": True}))
        response.set_cookie(COOKIE, token, httponly=True, samesite="strict",
                            secure=_secure(request, options), path="/")
        response.delete_cookie(tokens.cookie, path="/", secure=tokens.secure)  # used up
        response.set_cookie(DeviceCookies.COOKIE, devices.issue(result.account.name),
                            max_age=DeviceCookies.LIFETIME_S, httponly=True,
                            samesite="strict", secure=tokens.secure, path="/login")
        return response

    @app.get("/logout", response_class=HTMLResponse)
    def logout_form() -> Response:
        return HTMLResponse(LOGOUT_PAGE)

    @app.post("/logout")
    def logout(request: Request) -> Response:
        name = sessions.revoke(request.cookies.get(COOKIE))
        if name:
            accounts.audit.record("logout", actor=name, address=client_address(request))
        response = RedirectResponse("login?msg=out", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response


def _login_refused(request: Request, result: Any, options: ServerOptions,
                   name: str) -> Response:
    if result.outcome == "throttled":
        wait = str(max(1, round(result.retry_after_s)))
        message = f"Too many failed attempts: try again in {wait} s."
        status, headers = 429, {"Retry-After": wait}
    else:
        message, status, headers = "Incorrect username or password.", 401, {}
    if _wants_html(request):
        return _form_with_token(request, options, message, status=status, headers=headers,
                                username=name)
    return JSONResponse({"detail": message}, status_code=status, headers=headers)


class RequestCheck:
    """What a request must pass before it reaches a route: a session (under --login), no
    media-stream route, a body within the limit, no form body outside /upload, and only its
    own account's tabs. `refusal` answers the response that refuses it, or None."""

    def __init__(self, accounts: AccountService, readers: Readers, options: ServerOptions,
                 tabs: TabOwners, blocks: Any, fair: FairQueue) -> None:
        self.accounts, self.readers, self.options = accounts, readers, options
        self.tabs, self.blocks, self.fair = tabs, blocks, fair
        # the reader of each recently checked session cookie (its digest), for `early_refusal`
        self._cookie_readers: dict[bytes, tuple[str, float]] = {}

    def early_refusal(self, request: Request) -> Response | None:
        """A queued event's join from a reader out of join tokens (fair.FairQueue's rate), refused
        before its body is read or its session looked up: a flood's refusals cost the server
        next to nothing, so the other readers' requests do not wait behind them (Save p95 under
        a flood went to 2.7-3.3x its unloaded p95 in 2 of 6 runs of bench/fairness.py).

        Only a cookie whose session was found valid in the last `EARLY_TTL_S` seconds is known
        here; this can only refuse, never let anything in (a join that passes goes through the
        full check in `refusal`)."""
        if not (self.options.login and adds_an_event(request.method, request.url.path)):
            return None
        known = self._cookie_readers.get(_cookie_digest(request))
        if known is None or time.monotonic() - known[1] > EARLY_TTL_S:
            return None
        slow = self.fair.out_of_tokens(known[0])
        return slow_down(slow) if slow is not None else None

    def _know_cookie(self, request: Request, user: str) -> None:
        if len(self._cookie_readers) >= 4096:  # a bound: sessions seen long ago are forgotten
            cutoff = time.monotonic() - EARLY_TTL_S
            self._cookie_readers = {k: v for k, v in self._cookie_readers.items()
                                    if v[1] >= cutoff}
        self._cookie_readers[_cookie_digest(request)] = (user, time.monotonic())

    def reads_body(self, request: Request) -> bool:
        """Whether `refusal` needs the request's body (it is read once, then replayed)."""
        return (self.options.login and request.method == "POST"
                and not is_public(request.url.path))

    async def refusal(self, request: Request, body: bytes | None, *,
                      too_large: bool = False) -> Response | None:
        path = request.url.path
        if self.options.login and not is_public(path):
            refused = await self._signed_in_refusal(request, body, too_large)
            if refused is not None:
                return refused
        if (request.method == "GET" and path == "/gradio_api/queue/data"
                and not self._tab_known(request.query_params.get("session_hash"))):
            # Gradio's own event stream answers an unknown tab (one whose state it dropped when
            # the tab closed, or a reload racing it) with a 404 raised after the stream has
            # started: a traceback in the log and nothing useful for the page. The same 404,
            # before the stream starts.
            return JSONResponse({"detail": "Not found"}, status_code=404)
        return None

    def _tab_known(self, session_hash: str | None) -> bool:
        queue = getattr(self.blocks, "_queue", None)
        pending = getattr(queue, "pending_messages_per_session", None)
        return pending is None or session_hash in pending  # (unknown Gradio: its own answer)

    async def _signed_in_refusal(self, request: Request, body: bytes | None,
                                 too_large: bool) -> Response | None:
        path = request.url.path
        user = await run_in_threadpool(self.readers.current, request)  # a database read
        if user is None:
            if request.method in ("GET", "HEAD") and path in ("/", ""):
                expired = COOKIE in request.cookies
                return RedirectResponse("login" + ("?msg=expired" if expired else ""),
                                        status_code=303)
            return JSONResponse({"detail": "Not authenticated: sign in at /login."},
                                status_code=401)
        if path.startswith("/gradio_api/stream/"):
            return JSONResponse({"detail": "Not found"}, status_code=404)
        if too_large:  # (read up to the limit and no further)
            return JSONResponse({"detail": "Request too large"}, status_code=413)
        if (request.headers.get("content-type", "").startswith("multipart/")
                and path.startswith("/gradio_api/") and path != "/gradio_api/upload"):
            # a form body could name a session hash where `session_hashes` does not look
            # (component_server accepts one); the page sends forms only to /upload
            return JSONResponse({"detail": "Unsupported media type"}, status_code=415)
        hashes = session_hashes(request, body)
        for session_hash in hashes:
            owner = self.tabs.claim(session_hash, user)
            if owner is not None:
                log.warning("refused: %s used a tab of %s (%s)", user, owner, path)
                await run_in_threadpool(
                    self.accounts.audit.record, "tab_refused", actor=user, ok=False,
                    address=client_address(request), target=path[:255],
                    detail=f"tab of {owner}")
                return JSONResponse({"detail": "This tab belongs to another reader; "
                                               "reload the page."}, status_code=403)
        if adds_an_event(request.method, path):
            self._know_cookie(request, user)
            slow = self.fair.join_refusal(user, hashes)
            if slow is not None:
                return slow_down(slow)
        return None


EARLY_TTL_S = 10.0  # how long a checked session cookie may be refused early (see early_refusal)


def _cookie_digest(request: Request) -> bytes:
    """A session cookie's digest (the token itself is never kept in this cache)."""
    return hashlib.sha256((request.cookies.get(COOKIE) or "").encode()).digest()


def slow_down(message: str) -> Response:
    """429 with the sentence where Gradio's page looks for it (`detail`, `error`)."""
    return JSONResponse({"detail": message, "error": message}, status_code=429,
                        headers={"Retry-After": "2"})


def counted(request: Request) -> bool:
    """Whether a request counts towards its reader's requests in progress: not the long-lived
    event stream and heartbeat of an open tab."""
    path = request.url.path
    return not (path == "/gradio_api/queue/data" or path.startswith("/gradio_api/heartbeat/"))


class _ClientGone(Exception):
    """The client closed the connection while its request body was being read."""


class Guard:
    """The app's outermost middleware of ours, a plain ASGI one: `RequestCheck` before a
    request reaches a route, then the security headers and the clean-up of a downloaded export
    on its response.

    Why not `@app.middleware("http")` (Starlette's BaseHTTPMiddleware), as before: its
    `call_next` runs the route in a separate task and raises `RuntimeError: No response
    returned.` whenever the route ends without starting a response. Starlette's
    StreamingResponse does exactly that when the client has gone before the first byte (a tab
    closed while its heartbeat or event stream was being opened), and uvicorn logged "Exception
    in ASGI application" with that traceback. Here the route's messages pass straight through:
    a route that sends nothing to a gone client sends nothing, which uvicorn accepts quietly."""

    def __init__(self, app: ASGIApp, *, check: RequestCheck, options: ServerOptions,
                 streams: StreamsEnd | None = None,
                 on_export_download: Callable[[], Any] | None = None) -> None:
        self.app, self.check, self.options = app, check, options
        self.streams = streams or StreamsEnd()
        self.cache = options.gradio_cache.resolve() if options.gradio_cache else None
        self.pixels = options.pixel_dir.resolve() if options.pixel_dir else None
        self.on_export_download = on_export_download
        self.headers = security_headers(tls=options.tls)
        self._downloading: set[Path] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        sent: dict[str, int] = {}
        reason = refusal_reason(request.method, request.url.scheme, request.headers)
        if reason is not None:
            log.warning("refused %s %s from another origin (%s)", request.method,
                        request.url.path, reason)
            foreign = JSONResponse({"detail": "Refused: this request came from another "
                                              "web page."}, status_code=403)
            await foreign(scope, receive, self._with_headers(send, sent, request))
            return
        early = self.check.early_refusal(request)
        if early is not None:
            await early(scope, receive, self._with_headers(send, sent, request))
            return
        body, too_large = None, False
        if self.check.reads_body(request):
            try:
                body = await _read_body(receive, _BODY_LIMIT)
            except _ClientGone:
                return  # nobody to answer
            too_large = body is None
            if body is not None:
                receive = _replay(body, receive)
        refused = await self.check.refusal(request, body, too_large=too_large)
        if refused is not None:
            await refused(scope, receive, self._with_headers(send, sent, request))
            return
        served = _export_file(request.url.path, self.cache)
        if served is not None:
            await self._download(served, request, scope, receive, send, sent)
            return
        gz = _packed_pixels(request, self.pixels)
        if gz is not None:  # (signed in: the check above)
            answer = FileResponse(gz, media_type="application/octet-stream", headers={
                "Content-Encoding": "gzip", "X-Pixel-Coding": "delta-planes",
                "Vary": "Accept-Encoding", "Cache-Control": "private, max-age=3600"})
            await answer(scope, receive, self._with_headers(send, sent, request))
            return
        try:
            await self._serve(request, scope, receive, self._with_headers(send, sent, request))
        except Exception as exc:
            if "status" not in sent:
                raise  # nothing answered yet: uvicorn answers 500 and logs it in full
            _stream_ended(request, exc)

    async def _download(self, served: Path, request: Request, scope: Scope, receive: Receive,
                        send: Send, sent: dict[str, int]) -> None:
        """Send an export file once, then delete it. It is claimed before it is served, so a
        second GET is a clean 404 rather than a race with the deletion (Gradio found the file,
        then Starlette found it gone: a 500)."""
        if served in self._downloading:
            gone = JSONResponse({"detail": "This export was downloaded already: export it "
                                           "again."}, status_code=404)
            await gone(scope, receive, self._with_headers(send, sent, request))
            return
        self._downloading.add(served)
        try:
            await self._serve(request, scope, receive, self._with_headers(send, sent, request))
            if sent.get("status") == 200:
                await run_in_threadpool(_delete, served, self.on_export_download)
        except Exception as exc:
            if "status" not in sent:
                raise
            _stream_ended(request, exc)  # a broken download: the reader may try again
        finally:
            self._downloading.discard(served)

    async def _serve(self, request: Request, scope: Scope, receive: Receive,
                     send: Send) -> None:
        user = getattr(request.state, "rrg_user", None) if self.options.login else None
        if isinstance(user, str) and counted(request):
            await self._fairly(user, request, scope, receive, send)
        elif is_event_stream(request.method, request.url.path):
            await self.streams.serve(self.app, scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _fairly(self, user: str, request: Request, scope: Scope, receive: Receive,
                      send: Send) -> None:
        """Run a signed-in request within its reader's limit of requests in progress; a
        queued event's join then puts Gradio's queue in fair order (fair.FairQueue)."""
        fair = self.check.fair
        slow = fair.enter(user)
        if slow is not None:
            await slow_down(slow)(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            fair.leave(user)
        if adds_an_event(request.method, request.url.path):
            fair.reorder()

    def _with_headers(self, send: Send, sent: dict[str, int], request: Request) -> Send:
        """`send` with our headers on the response, no CORS headers, and on an HTML page the
        CSP's script nonce written into its script tags (the page is held until complete)."""
        held: list[Message] = []
        https = request.url.scheme == "https"

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                sent["status"] = message["status"]
                message["headers"] = [(k, v) for k, v in message.get("headers", [])
                                      if not k.lower().startswith(CORS_PREFIX)]
                headers = MutableHeaders(scope=message)
                for name, value in self.headers.items():
                    headers.setdefault(name, value)
                if https:
                    headers.setdefault("Strict-Transport-Security", "max-age=31536000")
                if (headers.get("content-type", "").startswith("text/html")
                        and request.method != "HEAD"):
                    held.append(message)
                    return
                headers.setdefault("Content-Security-Policy", content_security_policy(None))
            elif held and message["type"] == "http.response.body":
                held.append(message)
                if message.get("more_body", False):
                    return
                await _send_page(send, held, self.options.nonce_placeholder)
                held.clear()
                return
            await send(message)
        return send_with_headers


async def _send_page(send: Send, held: list[Message], placeholder: str) -> None:
    """Send a held HTML response with a fresh nonce in its scripts and its CSP (and in place
    of the placeholder: Gradio inserts the page script of `head` from the page's config,
    copying its attributes, nonce included)."""
    start, parts = held[0], held[1:]
    nonce = secrets.token_urlsafe(16)
    body = add_nonce(with_frame_guard(b"".join(m.get("body", b"") for m in parts)), nonce)
    body = body.replace(placeholder.encode(), nonce.encode())
    headers = MutableHeaders(scope=start)
    headers["Content-Length"] = str(len(body))
    headers["Content-Security-Policy"] = content_security_policy(nonce)
    await send(start)
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole request body, or None once it is over `limit` bytes (read no further)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives the route the body already read, then the connection's own."""
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        return pending.pop() if pending else await receive()
    return replayed


def _file_target(url_path: str) -> Path | None:
    """The resolved file a Gradio `/file=` URL names (`..` resolved away), or None."""
    if "/file=" not in url_path:
        return None
    return Path(urllib.parse.unquote(url_path.split("/file=", 1)[1])).resolve()


def _export_file(url_path: str, cache: Path | None) -> Path | None:
    """The cached export file a Gradio `/file=` URL points at, if it is one."""
    target = _file_target(url_path) if cache is not None else None
    if target is not None and cache is not None and target.name.startswith(EXPORT_PREFIX) \
            and target.is_relative_to(cache):
        return target
    return None


def _packed_pixels(request: Request, pixels: Path | None) -> Path | None:
    """The packed copy (viewer/service.py `packed`) of the viewer's pixel file a GET of
    Gradio's `/file=` URL asks for, when the browser accepts gzip and the copy is there; None
    sends the request on to Gradio as it is (which serves the plain file, and every other
    file)."""
    path = request.url.path
    if (pixels is None or request.method != "GET" or not path.endswith(".u16")
            or "gzip" not in request.headers.get("accept-encoding", "")):
        return None
    target = _file_target(path)
    if target is None or not target.is_relative_to(pixels):  # (a ../: Gradio's own answer)
        return None
    gz = packed(target)
    return gz if gz.is_file() else None


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
                            proxy_headers=bool(options.trusted_proxies),
                            forwarded_allow_ips=list(options.trusted_proxies) or None,
                            server_header=False,
                            timeout_graceful_shutdown=5)
    scheme = "https" if options.tls else "http"
    host = f"[{options.host}]" if ":" in options.host else options.host
    streams: StreamsEnd | None = getattr(getattr(app, "state", None), "streams", None)

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            # said once the port listens, not before: a script (or a test) that connects on
            # reading it was refused when the line came before uvicorn had bound the port
            if self.started:  # (a port in use: uvicorn has said so and exits)
                print(f"rrg-review: serving on {scheme}://{host}:{options.port}/", flush=True)

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            if streams is not None:  # open tabs' streams end now, not after the grace period
                streams.end()
            await super().shutdown(sockets)

    Server(config).run()


def _stream_ended(request: Request, exc: Exception) -> None:
    """A response that had started failed part-way: nothing more can reach the browser, so one
    log line says so instead of uvicorn's "Exception in ASGI application" traceback. The usual
    case is benign: a reloaded page's old event stream, which Gradio ends with a 404 once the
    page's session is gone (an HTTPException, logged at INFO); anything else at WARNING."""
    http = next((e for e in (exc, exc.__cause__) if isinstance(e, HTTPException)), None)
    level = logging.INFO if http is not None else logging.WARNING
    log.log(level, "the answer to %s %s ended part-way: %s: %s", request.method,
            request.url.path, type(http or exc).__name__, http or exc)
