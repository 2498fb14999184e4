"""The web server around the Gradio page: our own login, sessions, logout, TLS and headers.

Gradio's built-in `auth=` calls a `(name, password)` function without the request, keeps its
tokens forever and cannot throttle by address, so the page is mounted on a FastAPI app of ours
instead (`gr.mount_gradio_app(..., auth_dependency=...)`, Gradio's public API for external
login). FastAPI is imported at module level because it resolves the route annotations
(`Request`) from this module's globals:

- `GET /login` shows a plain form; `POST /login` checks the password through
  `AccountService.authenticate` (throttled per account and per address, audited) and sets an
  HttpOnly, SameSite=Strict cookie (Secure under TLS) holding a server-side session token.
- Every Gradio route asks `SessionStore.user(token)` who is calling; an unknown, idle or too
  old session gets 401 from Gradio's own API routes, and the page redirects to `/login`.
  Handlers then see the signed-in name as `gr.Request.username`.
- `GET|POST /logout` revokes the session (audited) and returns to the login form.
- A downloaded export (`rrg-review-report.*` in Gradio's private cache) is deleted once sent.
"""

from __future__ import annotations

import html
import logging
import ssl
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool

from app.services.accounts import AccountService, SessionStore

log = logging.getLogger(__name__)

COOKIE = "rrg-session"
EXPORT_PREFIX = "rrg-review-report"


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
                            f"together ({exc.strerror or exc.reason or exc})") from None


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

    def current_user(request: Request) -> str | None:
        return sessions.user(request.cookies.get(COOKIE))

    def wants_html(request: Request) -> bool:
        return "text/html" in request.headers.get("accept", "")

    if options.login:
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
                if wants_html(request):
                    return HTMLResponse(login_page(message, tls=options.tls), status_code=status,
                                        headers=headers)
                return JSONResponse({"detail": message}, status_code=status, headers=headers)
            token = sessions.create(result.account.name)
            response = (RedirectResponse("./", status_code=303) if wants_html(request)
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

    cache = options.gradio_cache.resolve() if options.gradio_cache else None

    @app.middleware("http")
    async def guard(request: Request, call_next):
        path = request.url.path
        if (options.login and request.method in ("GET", "HEAD") and path in ("/", "")
                and current_user(request) is None):
            expired = COOKIE in request.cookies
            return RedirectResponse("login" + ("?msg=expired" if expired else ""),
                                    status_code=303)
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

    config = uvicorn.Config(app, host=options.host, port=options.port, log_level="warning",
                            ssl_certfile=options.ssl_certfile, ssl_keyfile=options.ssl_keyfile,
                            proxy_headers=False, server_header=False,
                            timeout_graceful_shutdown=5)
    scheme = "https" if options.tls else "http"
    host = f"[{options.host}]" if ":" in options.host else options.host
    print(f"rrg-review: serving on {scheme}://{host}:{options.port}/", flush=True)
    uvicorn.Server(config).run()
