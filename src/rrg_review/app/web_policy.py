"""What another web page may make a reader's browser do with the app: nothing.

SameSite=Strict cookies stop cross-site pages only. Pages on the same site but another origin
(another port of the same host, a sibling subdomain such as an intranet wiki next to the app)
get the reader's cookie on every request they make, so the app itself must refuse them:

- `refusal_reason`: a request whose `Origin` is not the app's own, or which the browser marks
  `Sec-Fetch-Site: same-site|cross-site`, is refused (403) unless it is a plain top-level
  navigation (a link to the app). This covers the login form, logout and Gradio's own event
  POSTs (queue/join, run, upload, cancel), and reads: a `fetch(..., {credentials: "include"})`
  from a sibling origin gets a 403 without the reader's data. Scripted clients (no `Origin`,
  no `Sec-Fetch-*`) carry no browser's ambient cookie and pass.
- The login form carries a token bound to the pre-login cookie (double submit, `LoginToken`);
  under TLS the cookie is `__Host-` prefixed, so a sibling subdomain cannot plant its own.
- `SecurityHeaders`: no CORS headers at all (Gradio reflects any origin with credentials when
  the host is not localhost; same-origin needs none), `Cross-Origin-Resource-Policy:
  same-origin`, framing denied, HSTS under TLS, and a Content-Security-Policy whose script
  nonce is written into the page's own inline scripts (`add_nonce`).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

SAFE_METHODS = frozenset({"GET", "HEAD"})
_DEFAULT_PORTS = {"http": 80, "https": 443}
LOGIN_COOKIE = "rrg-login"
LOGIN_FIELD = "csrf"
CORS_PREFIX = b"access-control-"


def _origin_key(scheme: str, netloc: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) with the default port filled in; None when unreadable."""
    try:
        parsed = urllib.parse.urlsplit(f"{scheme}://{netloc}")
        port = parsed.port or _DEFAULT_PORTS.get(scheme.lower())
    except ValueError:
        return None
    if not parsed.hostname or port is None:
        return None
    return scheme.lower(), parsed.hostname.lower(), port


def own_origin(scheme: str, host_header: str | None) -> tuple[str, str, int] | None:
    """The origin the browser sees the app at: the request's scheme (https under TLS, or as a
    trusted proxy forwarded it) and its Host header (which the proxy must pass on)."""
    return _origin_key(scheme, host_header or "")


def refusal_reason(method: str, scheme: str, headers: Mapping[str, str]) -> str | None:
    """Why a browser request from another origin is refused, or None to let it through.

    Args:
        method: the HTTP method.
        scheme: "http" or "https", as the client reached the app.
        headers: the request's headers (lower-case names).

    Returns:
        A short reason ("origin http://wiki.example", "same-site no-cors") or None.
    """
    origin = headers.get("origin")
    if origin is not None:
        split = urllib.parse.urlsplit(origin) if origin != "null" else None
        theirs = _origin_key(split.scheme, split.netloc) if split else None
        host = headers.get("host")
        # plain HTTP here and https in the browser: a TLS proxy in front that was not named
        # with --trusted-proxy (so its X-Forwarded-Proto is not believed); the same host
        # and port as the browser addressed it is still the app's own origin
        behind_tls = scheme == "http" and theirs is not None and theirs[0] == "https"
        if theirs is None or theirs != own_origin("https" if behind_tls else scheme, host):
            return f"origin {origin[:100]}"
    site = headers.get("sec-fetch-site")
    if site in ("same-site", "cross-site"):
        navigation = (method in SAFE_METHODS and headers.get("sec-fetch-mode") == "navigate"
                      and headers.get("sec-fetch-dest", "document") == "document")
        if not navigation:
            return f"{site} {headers.get('sec-fetch-mode', '')} request"
    return None


@dataclass(frozen=True)
class LoginToken:
    """The login form's CSRF token: a random value in a pre-login cookie and the same value in
    the form's hidden field (double submit). A page of another origin can neither read the
    cookie nor, under TLS, set it (`__Host-` cookies cannot be set by a sibling subdomain)."""

    secure: bool

    @property
    def cookie(self) -> str:
        return ("__Host-" + LOGIN_COOKIE) if self.secure else LOGIN_COOKIE

    def current(self, cookies: Mapping[str, str]) -> str | None:
        value = cookies.get(self.cookie)
        return value if value and 20 <= len(value) <= 100 else None

    @staticmethod
    def new() -> str:
        return secrets.token_urlsafe(32)

    def valid(self, cookies: Mapping[str, str], submitted: object) -> bool:
        expected = self.current(cookies)
        return (expected is not None and isinstance(submitted, str)
                and hmac.compare_digest(expected.encode(), submitted.encode()))


class DeviceCookies:
    """A browser's proof that an account signed in from it before (OWASP's "device cookies"):
    "name.issued.mac", HMAC-SHA256 under a key of this process. With it, a login of that
    account skips its address's throttle, so a flood from the same address (a shared proxy
    or NAT) cannot keep the account's own reader out; without it (a new browser, or after a
    restart, which draws a new key) the login is throttled as before."""

    COOKIE = "rrg-device"
    LIFETIME_S = 30 * 24 * 3600

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key or secrets.token_bytes(32)

    def _mac(self, name: str, issued: int) -> str:
        message = f"{name}.{issued}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def issue(self, name: str) -> str:
        issued = int(time.time())
        return f"{name}.{issued}.{self._mac(name, issued)}"

    def valid(self, token: str | None, name: str) -> bool:
        """Whether `token` was issued by this process to `name` within LIFETIME_S."""
        parts = (token or "").rsplit(".", 2)
        if len(parts) != 3 or parts[0] != name or not parts[1].isdigit():
            return False
        issued = int(parts[1])
        return (0 <= time.time() - issued <= self.LIFETIME_S
                and hmac.compare_digest(parts[2], self._mac(name, issued)))


def content_security_policy(nonce: str | None) -> str:
    """The page's policy: its own scripts only (the inline ones Gradio writes carry the nonce;
    'unsafe-eval' because Gradio runs an event's `js=` function through `new Function`),
    styles of its own plus the inline style attributes Svelte sets, nothing framed, no
    framing, forms and connections to itself only."""
    script = "'self'" + (f" 'nonce-{nonce}'" if nonce else "") + " 'unsafe-eval'"
    return ("default-src 'self'; "
            f"script-src {script}; "
            "style-src 'self' 'unsafe-inline'; "
            "img-src 'self' data: blob:; font-src 'self' data:; media-src 'self' data: blob:; "
            "connect-src 'self'; worker-src 'self' blob:; frame-src 'none'; "
            "object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'")


_SCRIPT_OPEN = re.compile(rb"<script\b([^>]*)>", re.I)
_SCRIPT_CLOSE = re.compile(rb"</script\s*>", re.I)


def add_nonce(page: bytes, nonce: str) -> bytes:
    """The HTML page with `nonce=` on each of its script elements: only real tags, found by
    skipping each script's content to its end tag, so a `<script` inside a script's text (a
    report quoted in the page's config) is left as it is."""
    out: list[bytes] = []
    pos = 0
    attr = f' nonce="{nonce}"'.encode()
    while True:
        found = _SCRIPT_OPEN.search(page, pos)
        if found is None:
            out.append(page[pos:])
            return b"".join(out)
        out.append(page[pos:found.start()])
        out.append(b"<script" + attr + found.group(1) + b">")
        closing = _SCRIPT_CLOSE.search(page, found.end())
        end = closing.end() if closing else len(page)
        out.append(page[found.end():end])
        pos = end


def nonce_placeholder() -> str:
    """A per-process stand-in for the page's nonce in the page script's tag (Gradio keeps that
    tag in the page's config and inserts it after the page loaded). Random, so text stored in
    the page (a report) cannot plant it and be given the nonce."""
    return "rrgnonce" + secrets.token_hex(12)


def security_headers(*, tls: bool) -> dict[str, str]:
    """The headers every response carries (the CSP is added per response)."""
    headers = {"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY",
               "Referrer-Policy": "same-origin", "Cross-Origin-Resource-Policy": "same-origin",
               "Cross-Origin-Opener-Policy": "same-origin"}
    if tls:
        headers["Strict-Transport-Security"] = "max-age=31536000"
    return headers
