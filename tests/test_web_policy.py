"""The rules the server applies to other origins and to its page (app/web_policy.py), case by
case; tests/test_server_origins.py checks them from Chromium against the running app."""

from __future__ import annotations

import pytest

from rrg_review.app.frame_guard import with_frame_guard
from rrg_review.app.web_policy import DeviceCookies, LoginToken, add_nonce, refusal_reason

APP = {"host": "rrg.hospital.test"}


@pytest.mark.parametrize(("method", "headers", "refused"), [
    # the app's own page (Chromium sends Origin on POST; default port left out or given)
    ("POST", {"origin": "https://rrg.hospital.test", "sec-fetch-site": "same-origin"}, False),
    ("POST", {"origin": "https://rrg.hospital.test:443"}, False),
    ("GET", {"sec-fetch-site": "same-origin", "sec-fetch-mode": "cors"}, False),
    # a link or a typed address: a top-level navigation, from anywhere
    ("GET", {"sec-fetch-site": "cross-site", "sec-fetch-mode": "navigate",
             "sec-fetch-dest": "document"}, False),
    ("GET", {"sec-fetch-site": "none", "sec-fetch-mode": "navigate"}, False),
    # scripted clients: no Origin, no Sec-Fetch-*
    ("POST", {}, False),
    # another port of the same host, a sibling subdomain, another site, http, null
    ("POST", {"origin": "https://rrg.hospital.test:8443"}, True),
    ("POST", {"origin": "https://wiki.hospital.test"}, True),
    ("POST", {"origin": "https://evil.test"}, True),
    ("POST", {"origin": "http://rrg.hospital.test"}, True),
    ("POST", {"origin": "null"}, True),
    ("POST", {"origin": "not a url at all"}, True),
    # same-site requests without Origin: an <img>, a no-cors fetch, a frame
    ("GET", {"sec-fetch-site": "same-site", "sec-fetch-mode": "no-cors",
             "sec-fetch-dest": "image"}, True),
    ("GET", {"sec-fetch-site": "same-site", "sec-fetch-mode": "navigate",
             "sec-fetch-dest": "iframe"}, True),
    ("POST", {"sec-fetch-site": "same-site", "sec-fetch-mode": "navigate",
              "sec-fetch-dest": "document"}, True),
])
def test_requests_from_other_origins_are_refused(method, headers, refused):
    reason = refusal_reason(method, "https", {**APP, **headers})
    assert (reason is not None) is refused, reason


def test_the_origin_is_compared_with_the_scheme_and_host_the_client_used():
    assert refusal_reason("POST", "http", {"host": "127.0.0.1:7860",
                                           "origin": "http://127.0.0.1:7860"}) is None
    assert refusal_reason("POST", "http", {"host": "127.0.0.1:7860",
                                           "origin": "http://localhost:7860"}) is not None
    assert refusal_reason("POST", "http", {"host": "127.0.0.1:7860",
                                           "origin": "http://127.0.0.1:7861"}) is not None


def test_the_nonce_goes_on_script_tags_only_not_into_a_scripts_text():
    page = (b'<html><script>window.cfg = {"report": "<script>alert(1)<\\/script>"};</script>'
            b'<script type="module" src="./a.js"></script><p>&lt;script&gt;</p></html>')
    out = add_nonce(page, "N0")
    assert out.count(b'nonce="N0"') == 2
    assert b'"report": "<script>alert(1)<\\/script>"' in out  # the config's text unchanged
    assert b'<script nonce="N0" type="module" src="./a.js">' in out


def test_the_login_token_must_match_its_cookie():
    tokens = LoginToken(secure=True)
    assert tokens.cookie == "__Host-rrg-login"
    value = LoginToken.new()
    assert tokens.valid({"__Host-rrg-login": value}, value)
    assert not tokens.valid({"__Host-rrg-login": value}, LoginToken.new())
    assert not tokens.valid({"rrg-login": value}, value)  # not the __Host- cookie under TLS
    assert not tokens.valid({}, value)
    assert not tokens.valid({"__Host-rrg-login": value}, None)


def test_behind_a_tls_proxy_not_named_the_browsers_https_origin_is_still_the_apps():
    """--insecure-http behind a TLS proxy without --trusted-proxy: the app sees http and the
    Host the proxy passed on; the page's own https origin passes, other hosts do not."""
    proxied = {"host": "rrg.hospital.test"}
    assert refusal_reason("POST", "http", {**proxied,
                                           "origin": "https://rrg.hospital.test"}) is None
    assert refusal_reason("POST", "http", {**proxied,
                                           "origin": "https://wiki.hospital.test"}) is not None
    assert refusal_reason("POST", "http", {**proxied,
                                           "origin": "https://rrg.hospital.test:8443"}) \
        is not None


def test_a_device_cookie_proves_only_its_own_accounts_earlier_sign_in():
    devices = DeviceCookies()
    token = devices.issue("dr.a")
    assert devices.valid(token, "dr.a")
    assert not devices.valid(token, "dr.b")  # another account
    assert not devices.valid(token.replace("dr.a", "dr.b", 1), "dr.b")  # renamed: bad mac
    assert not DeviceCookies().valid(token, "dr.a")  # another process's key (a restart)
    name, issued, _ = token.rsplit(".", 2)
    old = int(issued) - DeviceCookies.LIFETIME_S - 10
    assert not devices.valid(f"{name}.{old}.{devices._mac(name, old)}", "dr.a")  # expired
    assert not devices.valid(None, "dr.a") and not devices.valid("x.y", "dr.a")


def test_the_frame_guard_is_the_first_script_of_the_head():
    """static/frames.js must run before Gradio's scripts take their copy of
    requestAnimationFrame: the server writes it at the top of <head> (app/frame_guard.py),
    then every script tag, it included, gets the page's nonce."""
    page = b'<!doctype html><html><head><meta charset="utf-8"><script type="module" src="a.js">'
    out = add_nonce(with_frame_guard(page), "N0")
    head = out.index(b"<head>") + len(b"<head>")
    assert out[head:].startswith(b'<script nonce="N0">\n// rrg-review frame guard')
    assert out.index(b"frame guard") < out.index(b'src="a.js"')
    assert with_frame_guard(b"<p>no head</p>") == b"<p>no head</p>"
