"""Reader accounts: roles, password hashing and policy, login throttling and web sessions.

- Passwords: scrypt (hashlib, memory-hard) at N=2^17, r=8, p=1 (OWASP's minimum); a hash made
  with weaker parameters is replaced on the next successful login. N is the settings'
  `password_cost` (RRG_REVIEW_PASSWORD_COST, 2^14..2^20): a faster machine may raise it, and
  a test set-up lowers it, as Django's documentation has test settings use a fast hasher (the
  suite hashed about 210 passwords at 0.5 CPU-s each).
- Policy (enforced here, not only by the CLI): at least 10 characters, not the account name,
  not one repeated character, not a well-known password.
- Throttling: after a few failures an account, and separately a client address, must wait
  1 s, 2 s, 4 s ... (at most 15 min) before the next attempt is even checked. An address
  throttle never locks out the innocent sharing that address (a reading room behind one
  proxy or NAT): an account with no failure on record still has its password checked (one
  such check at a time, so a flood cannot spend every core on scrypt), and a correct one signs
  in. Every decision is logged and audited. The counters are kept in the database: a restart
  does not reset them.
- Sessions: server-side tokens (only their SHA-256 is stored, in the database) with an idle and
  an absolute lifetime, checked in the query; logout revokes them; a new password or role ends
  every session of the account. All of it survives a restart of the app.
- Roles: `reader` (own work only) and `admin` (every reader's export, unloading the model).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import ColumnElement, CursorResult, delete, not_, or_, select, update

from rrg_review.app.accounts.audit import AuditLog
from rrg_review.db.engine import ROWS, Database
from rrg_review.db.models import ROLES, LoginThrottleState, Reader, WebSession

log = logging.getLogger(__name__)

LOCAL_READER = "local"
SCRYPT = {"n": 2**17, "r": 8, "p": 1, "dklen": 32}
# the N a setting may choose: 2^14 (16 MiB, the scrypt paper's interactive logins) for test
# set-ups, up to 2^20 (1 GiB a check)
PASSWORD_COSTS = range(14, 21)
_NAME_RE = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
MIN_PASSWORD = 10
MAX_PASSWORD = 1024
_COMMON = {"password", "password1", "password123", "passw0rd", "1234567890", "12345678910",
           "qwertyuiop", "iloveyou12", "letmein123", "welcome123", "administrator",
           "changeme123", "radiology1", "hospital123", "0123456789", "abcdefghij"}


class AccountError(ValueError):
    """A bad account name, an existing account, or a password the policy refuses."""


@dataclass(frozen=True)
class Account:
    id: int
    name: str
    role: str

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


@dataclass(frozen=True)
class LoginResult:
    account: Account | None
    outcome: str  # "ok" | "bad_credentials" | "throttled"
    retry_after_s: float = 0.0


# -- passwords ---------------------------------------------------------------------------------
def hash_password(password: str, *, n: int = SCRYPT["n"]) -> str:
    """A salted scrypt hash to store instead of the password (slow on purpose, so a copied
    database cannot be brute-forced cheaply).

    Args:
        password: the plain password.
        n: scrypt's cost (a power of two); tests pass a small one to stay fast.

    Returns:
        "scrypt$n$r$p$salt$key" with base64 salt (16 random bytes) and key.
    """
    salt = os.urandom(16)
    key = hashlib.scrypt(password.encode(), salt=salt, n=n, r=SCRYPT["r"], p=SCRYPT["p"],
                         dklen=SCRYPT["dklen"], maxmem=_maxmem(n, SCRYPT["r"]))
    return (f"scrypt${n}${SCRYPT['r']}${SCRYPT['p']}${base64.b64encode(salt).decode()}$"
            f"{base64.b64encode(key).decode()}")


def _maxmem(n: int, r: int) -> int:
    """The memory hashlib may use: scrypt needs 128 * r * N bytes (128 MiB at 2^17, r=8)."""
    return 2 * 128 * r * n


def password_cost(value: str | None) -> int:
    """The scrypt N a setting names (a power of two, 2^14..2^20), SCRYPT's when None.

    Raises:
        ValueError: one sentence naming the value and what is allowed.
    """
    if value is None or not value.strip():
        return SCRYPT["n"]
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1 or n & (n - 1) or n.bit_length() - 1 not in PASSWORD_COSTS:
        raise ValueError(f"the password cost must be a power of two from 2^{PASSWORD_COSTS[0]}"
                         f" ({2**PASSWORD_COSTS[0]}) to 2^{PASSWORD_COSTS[-1]}, not {value!r}")
    return n


def _params(stored: str | None) -> tuple[int, int, int, bytes, bytes] | None:
    try:
        kind, n, r, p, salt, key = (stored or "").split("$")
        if kind != "scrypt":
            return None
        return int(n), int(r), int(p), base64.b64decode(salt), base64.b64decode(key)
    except ValueError:
        return None


def verify_password(password: str, stored: str | None) -> bool:
    """Check a password against a stored hash, with the parameters stored in it (so hashes
    made with older costs still verify) and a constant-time comparison.

    Args:
        password: the plain password tried.
        stored: the stored hash; None (no password) or an unreadable value never matches.

    Returns:
        Whether the password matches.
    """
    parsed = _params(stored)
    if parsed is None:
        return False
    n, r, p, salt, expected = parsed
    if _maxmem(n, r) > _maxmem(2**PASSWORD_COSTS[-1], SCRYPT["r"]):
        return False  # (no stored hash asks for more memory than the highest cost)
    try:
        got = hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, dklen=len(expected),
                             maxmem=_maxmem(n, r))
    except ValueError:  # an N that is not a power of two, a bad salt: no match
        return False
    return hmac.compare_digest(got, expected)


def needs_rehash(stored: str | None, n: int = SCRYPT["n"]) -> bool:
    """Whether a stored hash is weaker than today's cost, so a correct login upgrades it.

    Args:
        stored: the stored hash, or None.
        n: today's scrypt N (the settings' password cost).

    Returns:
        True for None, an unreadable value, or an N below `n` or an r below SCRYPT's.
    """
    parsed = _params(stored)
    return parsed is None or parsed[0] < n or parsed[1] < SCRYPT["r"]


def check_password(name: str, password: str) -> None:
    """Raise AccountError naming what is wrong with a new password.

    Args:
        name: the account's name (a password containing it, 3 or more letters, is refused).
        password: the new password.

    Raises:
        AccountError: too short (< MIN_PASSWORD) or too long (> MAX_PASSWORD), contains the
            name, fewer than three different characters, or a well-known password.
    """
    if len(password) < MIN_PASSWORD:
        raise AccountError(f"use a password of at least {MIN_PASSWORD} characters")
    if len(password) > MAX_PASSWORD:
        raise AccountError(f"use a password of at most {MAX_PASSWORD} characters")
    lowered = password.lower()
    if len(name) >= 3 and name.lower() in lowered:
        raise AccountError("the password must not contain the account name")
    if len(set(password)) < 3:
        raise AccountError("the password needs more than one or two different characters")
    if lowered in _COMMON:
        raise AccountError("that password is on the list of well-known passwords")


def check_name(name: str) -> None:
    """Refuse names that could not be shown, typed or logged unambiguously.

    Args:
        name: a proposed account name.

    Raises:
        AccountError: not 1-64 of letters, digits, ".", "_", "-", "@".
    """
    if not _NAME_RE.match(name):
        raise AccountError(f"reader name {name!r}: use 1-64 letters, digits, . _ - @")


# -- throttling --------------------------------------------------------------------------------
class LoginThrottle:
    """Exponential back-off per key ("account:alice", "address:10.0.0.7").

    `free` failures are allowed, then each further failure doubles the wait before the next
    attempt is looked at (base, 2*base, ... capped at `max_delay_s`). A success clears the key;
    a key with no failure for `forget_s` starts again from nothing.

    With a database (the app's) the counters are rows of `login_throttle` with wall-clock
    times, so a restart does not reset the back-off and every app process sharing the database
    sees the same counters; the read-modify-write runs in one write transaction (writes are
    serialised on both backends). Without one (tests, a `--read-only` database) they are kept
    in memory.
    """

    def __init__(self, db: Database | None = None, *, free: int = 3, base_delay_s: float = 1.0,
                 max_delay_s: float = 900.0, forget_s: float = 24 * 3600,
                 clock: Callable[[], float] | None = None) -> None:
        self.db = db if db is not None and not db.read_only else None
        self.free, self.base, self.cap, self.forget_s = free, base_delay_s, max_delay_s, forget_s
        self.clock = clock or (time.time if self.db is not None else time.monotonic)
        self._state: dict[str, tuple[int, float, float]] = {}  # key -> (failures, not before,
        self._lock = threading.Lock()                           #        last failure)

    def _delay(self, failures: int, allowed: int) -> float:
        over = failures - allowed
        return 0.0 if over <= 0 else min(self.cap, self.base * 2 ** (over - 1))

    def wait(self, key: str) -> float:
        """How long a key must still wait before an attempt is looked at.

        Args:
            key: e.g. "account:alice" or "address:10.0.0.7".

        Returns:
            Seconds to wait; 0 for a key with no pending back-off or never seen.
        """
        now = self.clock()
        if self.db is None:
            with self._lock:
                _, not_before, _ = self._state.get(key, (0, 0.0, 0.0))
        else:
            with self.db.read() as s:
                not_before = s.scalar(select(LoginThrottleState.not_before_s).where(
                    LoginThrottleState.key == key)) or 0.0
        return max(0.0, not_before - now)

    def failures(self, key: str) -> int:
        """How many failures a key has on record (0: in good standing).

        Args:
            key: e.g. "account:alice".

        Returns:
            The count since its last success, 0 for a key never seen or forgotten.
        """
        now = self.clock()
        if self.db is None:
            with self._lock:
                failures, _, last = self._state.get(key, (0, 0.0, now))
        else:
            with self.db.read() as s:
                row = s.get(LoginThrottleState, key)
                failures, last = (row.failures, row.last_failure_s) if row else (0, now)
        return 0 if now - last > self.forget_s else failures

    def failure(self, key: str, free: int | None = None) -> float:
        """Count a failure; returns the wait now imposed on the key.

        Args:
            key: e.g. "account:alice" or "address:10.0.0.7".
            free: failures allowed before any wait, for this key; None: the throttle's `free`.

        Returns:
            Seconds the key must now wait (0 while within its free failures); a key whose last
            failure is older than `forget_s` counts from one again.
        """
        allowed = self.free if free is None else free
        now = self.clock()
        if self.db is None:
            with self._lock:
                failures, _, last = self._state.get(key, (0, 0.0, now))
                failures = 1 if now - last > self.forget_s else failures + 1
                delay = self._delay(failures, allowed)
                self._state[key] = (failures, now + delay, now)
                if len(self._state) > 50_000:  # a flood of addresses: forget the oldest half
                    for old in sorted(self._state, key=lambda k: self._state[k][2])[:25_000]:
                        del self._state[old]
            return delay
        with self.db.write() as s:
            row = s.get(LoginThrottleState, key)
            if row is None or now - row.last_failure_s > self.forget_s:
                if row is not None:
                    s.delete(row)
                    s.flush()
                row = LoginThrottleState(key=key, failures=0, not_before_s=0.0,
                                         last_failure_s=now)
                s.add(row)
            row.failures += 1
            delay = self._delay(row.failures, allowed)
            row.not_before_s, row.last_failure_s = now + delay, now
            # keys quiet for a day are forgotten (a flood of addresses does not pile up)
            s.execute(delete(LoginThrottleState).where(
                LoginThrottleState.last_failure_s < now - self.forget_s))
        return delay

    def success(self, key: str) -> None:
        """Clear a key after a correct login, so earlier typos do not slow the next one.

        Args:
            key: e.g. "account:alice" or "address:10.0.0.7" (an unknown key is a no-op).
        """
        if self.db is None:
            with self._lock:
                self._state.pop(key, None)
            return
        with self.db.write() as s:
            s.execute(delete(LoginThrottleState).where(LoginThrottleState.key == key))


# -- sessions ----------------------------------------------------------------------------------
@dataclass
class _Session:
    name: str
    created: float
    seen: float


def token_digest(token: str) -> str:
    """What is stored for a session token: its SHA-256 (the token has 256 random bits, so no
    salt or slow hash is needed; a copy of the database cannot be turned into a cookie).

    Args:
        token: the session token as the cookie holds it.

    Returns:
        Its SHA-256 as 64 hex digits.
    """
    return hashlib.sha256(token.encode()).hexdigest()


class SessionStore:
    """Login sessions: an unguessable token per login, expiring after `idle_s` without a
    request and at most `absolute_s` after the login, whatever the activity; logout revokes.

    With a database (the app's) each session is a `web_session` row keyed by the SHA-256 of the
    token, with wall-clock times, and expiry is checked in the query: a restart keeps readers
    signed in, a logged-out or expired cookie stays refused, and app processes sharing the
    database agree. "Last seen" is written at most every `touch_s` (not on every request: each
    commit of a durable database waits for the disk). Without a database (tests, a
    `--read-only` database) sessions are kept in memory.
    """

    def __init__(self, db: Database | None = None, *, idle_s: float = 30 * 60,
                 absolute_s: float = 12 * 3600, clock: Callable[[], float] | None = None) -> None:
        self.db = db if db is not None and not db.read_only else None
        self.idle_s, self.absolute_s = idle_s, absolute_s
        self.clock = clock or (time.time if self.db is not None else time.monotonic)
        self.touch_s = min(60.0, idle_s / 20)
        self._tokens: dict[str, _Session] = {}
        self._lock = threading.Lock()

    def create(self, name: str) -> str:
        """Start a session after a successful login (expired sessions are purged meanwhile).

        Args:
            name: the account's name.

        Returns:
            A new URL-safe token (256 random bits) for the cookie; only its digest is stored.

        Raises:
            AccountError: with a database, no account has this name.
        """
        token = secrets.token_urlsafe(32)
        now = self.clock()
        if self.db is None:
            with self._lock:
                self._tokens[token] = _Session(name, now, now)
            return token
        with self.db.write() as s:
            reader = s.scalar(select(Reader.id).where(Reader.name == name))
            if reader is None:
                raise AccountError(f"no reader {name!r}")
            s.execute(delete(WebSession).where(self._expired(now)))  # keep the table small
            s.add(WebSession(token_hash=token_digest(token), reader_id=reader, created_s=now,
                             seen_s=now))
        return token

    def _expired(self, now: float) -> ColumnElement[bool]:
        return or_(WebSession.seen_s < now - self.idle_s,
                   WebSession.created_s < now - self.absolute_s)

    def user(self, token: str | None) -> str | None:
        """The account of a live session (and mark it used), or None.

        Args:
            token: the cookie's token; None, "" or longer than 256 characters is refused.

        Returns:
            The account's name, or None for an unknown, revoked or expired token (idle longer
            than `idle_s` or older than `absolute_s`).
        """
        if not token or len(token) > 256:
            return None
        now = self.clock()
        if self.db is None:
            with self._lock:
                found = self._tokens.get(token)
                if found is None:
                    return None
                if now - found.seen > self.idle_s or now - found.created > self.absolute_s:
                    del self._tokens[token]
                    log.info("session of %s expired", found.name)
                    return None
                found.seen = now
                return found.name
        digest = token_digest(token)
        with self.db.read() as s:
            row = s.execute(select(Reader.name, WebSession.seen_s).join(
                Reader, Reader.id == WebSession.reader_id).where(
                WebSession.token_hash == digest, not_(self._expired(now)))).first()
        if row is None:
            return None
        if now - row.seen_s >= self.touch_s:
            with self.db.write(scope=ROWS) as s:  # one guarded UPDATE of one row
                s.execute(update(WebSession).where(WebSession.token_hash == digest,
                                                   WebSession.seen_s < now)
                          .values(seen_s=now))
        name: str = row.name
        return name

    def revoke(self, token: str | None) -> str | None:
        """End one session (logout).

        Args:
            token: the cookie's token; None or "" revokes nothing.

        Returns:
            The name of the account whose session it was, or None for an unknown token.
        """
        if self.db is None:
            with self._lock:
                found = self._tokens.pop(token or "", None)
            return found.name if found else None
        if not token:
            return None
        digest = token_digest(token)
        with self.db.write() as s:
            name = s.scalar(select(Reader.name).join(
                WebSession, Reader.id == WebSession.reader_id).where(
                WebSession.token_hash == digest))
            s.execute(delete(WebSession).where(WebSession.token_hash == digest))
        return name

    def revoke_all(self, name: str) -> int:
        """End every session of an account (a new password, a changed role).

        Args:
            name: the account's name.

        Returns:
            How many sessions were ended (0 for an unknown name).
        """
        if self.db is None:
            with self._lock:
                gone = [t for t, s in self._tokens.items() if s.name == name]
                for t in gone:
                    del self._tokens[t]
            return len(gone)
        return revoke_sessions(self.db, name)


def revoke_sessions(db: Database, name: str) -> int:
    """End every web session of an account (a new password, a changed role).

    Args:
        db: the app's database.
        name: the account's name.

    Returns:
        How many sessions were deleted (0 for an unknown name).
    """
    with db.write() as s:
        reader = s.scalar(select(Reader.id).where(Reader.name == name))
        if reader is None:
            return 0
        gone = cast("CursorResult[Any]", s.execute(  # a DELETE's result: rowcount is set
            delete(WebSession).where(WebSession.reader_id == reader)))
        return gone.rowcount


# -- accounts ----------------------------------------------------------------------------------
def _joined(*parts: str | None) -> str | None:
    return "; ".join(p for p in parts if p) or None


class AccountService:
    ADDRESS_FREE_FAILURES = 10  # several readers may share one address (NAT, a reading room)

    def __init__(self, db: Database, audit: AuditLog | None = None,
                 throttle: LoginThrottle | None = None, *,
                 password_cost: int = SCRYPT["n"]) -> None:
        """`password_cost`: the scrypt N new hashes are made with (the settings' choice)."""
        self.db = db
        self.password_cost = password_cost
        self.audit = audit or AuditLog(db)
        self.throttle = throttle or LoginThrottle(db)
        # password checks while an address is throttled: one at a time (scrypt costs ~0.1 s
        # of a core and 128 MiB; a flood must not take them all)
        self._checks_under_throttle = threading.BoundedSemaphore(1)

    def add(self, name: str, password: str | None, role: str = "reader") -> int:
        """Create an account, checked against the name and password policies first.

        Args:
            name: the login name (not the reserved local reader's name).
            password: the password; None: an account that cannot log in (no password).
            role: one of ROLES.

        Returns:
            The new account's id.

        Raises:
            AccountError: an invalid or reserved name, an unknown role, a password the policy
                refuses, or a name already taken.
        """
        check_name(name)
        if name == LOCAL_READER:
            raise AccountError(f"{LOCAL_READER!r} is the name of the login-free local reader")
        if role not in ROLES:
            raise AccountError(f"role {role!r}: one of {', '.join(ROLES)}")
        if password is not None:
            check_password(name, password)
        hashed = (hash_password(password, n=self.password_cost) if password is not None
                  else None)
        with self.db.write() as s:
            if s.scalar(select(Reader.id).where(Reader.name == name)) is not None:
                raise AccountError(f"reader {name!r} already exists")
            reader = Reader(name=name, password_hash=hashed, role=role)
            s.add(reader)
            s.flush()
            return reader.id

    def set_password(self, name: str, password: str) -> None:
        """Set a new password and sign out every session that used the old one.

        Args:
            name: the account's name.
            password: the new password (checked by `check_password`).

        Raises:
            AccountError: the password is refused, or no account has this name.
        """
        check_password(name, password)
        hashed = hash_password(password, n=self.password_cost)
        with self.db.write() as s:
            reader = s.scalar(select(Reader).where(Reader.name == name))
            if reader is None:
                raise AccountError(f"no reader {name!r}")
            reader.password_hash = hashed
            # whoever signed in with the old password is signed out
            s.execute(delete(WebSession).where(WebSession.reader_id == reader.id))

    def set_role(self, name: str, role: str) -> None:
        """Change an account's role and sign out its sessions (they carried the old role).

        Args:
            name: the account's name.
            role: one of ROLES.

        Raises:
            AccountError: an unknown role, or no account has this name.
        """
        if role not in ROLES:
            raise AccountError(f"role {role!r}: one of {', '.join(ROLES)}")
        with self.db.write() as s:
            reader = s.scalar(select(Reader).where(Reader.name == name))
            if reader is None:
                raise AccountError(f"no reader {name!r}")
            reader.role = role
            s.execute(delete(WebSession).where(WebSession.reader_id == reader.id))

    def authenticate(self, name: str, password: str, address: str | None = None, *,
                     known_device: bool = False) -> LoginResult:
        """Check a login, throttled per account and per address, audited either way.

        An unknown name costs the same hashing time as a wrong password, so names cannot be
        found by timing; a correct login with an old-cost hash upgrades it. While the address
        is throttled, an account in good standing (no failure on record) is still checked, so
        one bad client cannot lock out the other readers behind its address.

        Args:
            name: the login name.
            password: the password tried.
            address: the client's address (None: throttled per account only); an address
                gets ADDRESS_FREE_FAILURES free failures, as several readers may share it.
            known_device: the browser proved an earlier sign-in of this account (server.py's
                device cookie): its address's throttle does not apply (OWASP's device
                cookies), so a flood from a shared address cannot keep the account out.

        Returns:
            The outcome ("ok", "bad_credentials" or "throttled"), the account when "ok", and
            the seconds before the next attempt is looked at otherwise.
        """
        # (a key column holds 160 characters: names are at most 64, addresses at most 45)
        account_key = f"account:{name.lower()[:150]}"
        address_key = f"address:{address[:150]}" if address else None
        refused = self._throttled(name, address, account_key,
                                  None if known_device else address_key)
        if isinstance(refused, LoginResult):
            return refused
        under_throttle = refused > 0
        if under_throttle and not self._checks_under_throttle.acquire(blocking=False):
            return self._refuse(name, address, refused, "address throttled, a check running")
        try:
            reader, ok = self._check(name, password)
        finally:
            if under_throttle:
                self._checks_under_throttle.release()
        note = ("address throttled, account in good standing" if under_throttle
                else "known device" if known_device else None)
        if not ok or reader is None or reader.password_hash is None:  # (ok implies a reader)
            delays = [self.throttle.failure(account_key)]
            if address_key:
                delays.append(self.throttle.failure(address_key, self.ADDRESS_FREE_FAILURES))
            log.warning("failed login for %r from %s (next attempt in %.0f s)", name, address,
                        max(delays))
            self.audit.record("login_failed", actor=name, address=address, ok=False,
                              detail=_joined(note, f"next attempt in {max(delays):.0f} s"
                                             if max(delays) > 0 else None))
            return LoginResult(None, "bad_credentials", max(delays))
        self.throttle.success(account_key)
        if address_key and not under_throttle:
            self.throttle.success(address_key)  # (a flooding address stays throttled)
        if needs_rehash(reader.password_hash, self.password_cost) and not self.db.read_only:
            with self.db.write() as s:
                s.get_one(Reader, reader.id).password_hash = hash_password(
                    password, n=self.password_cost)
            log.info("password hash of %s upgraded to scrypt N=2^%d", name,
                     self.password_cost.bit_length() - 1)
        self.audit.record("login", actor=name, address=address, detail=note)
        return LoginResult(Account(reader.id, reader.name, reader.role), "ok")

    def _throttled(self, name: str, address: str | None, account_key: str,
                   address_key: str | None) -> LoginResult | float:
        """The refusal of a throttled attempt, or the address's remaining wait (> 0: the
        address is throttled but the account is in good standing, so it is checked)."""
        wait = self.throttle.wait(account_key)
        if wait > 0:
            return self._refuse(name, address, wait, "account back-off")
        address_wait = self.throttle.wait(address_key) if address_key else 0.0
        if address_wait > 0 and self.throttle.failures(account_key) > 0:
            return self._refuse(name, address, address_wait, "address back-off")
        return address_wait

    def _refuse(self, name: str, address: str | None, wait: float, why: str) -> LoginResult:
        log.warning("login for %r from %s refused (%s): throttled for %.0f s more", name,
                    address, why, wait)
        self.audit.record("login_throttled", actor=name, address=address, ok=False,
                          detail=f"{why}: retry after {wait:.0f} s")
        return LoginResult(None, "throttled", wait)

    def _check(self, name: str, password: str) -> tuple[Reader | None, bool]:
        with self.db.read() as s:
            reader = s.scalar(select(Reader).where(Reader.name == name))
        if reader is None or reader.password_hash is None:
            # same cost either way: no account enumeration by timing
            hash_password(password, n=self.password_cost)
            return reader, False
        return reader, verify_password(password, reader.password_hash)

    def account(self, name: str) -> Account | None:
        """Args:
            name: an account name (exact, case-sensitive).

        Returns:
            The account, or None when there is none by that name.
        """
        with self.db.read() as s:
            r = s.scalar(select(Reader).where(Reader.name == name))
        return Account(r.id, r.name, r.role) if r else None

    def by_id(self, reader_id: int) -> Account | None:
        """Args:
            reader_id: an account id.

        Returns:
            The account, or None when there is none with that id.
        """
        with self.db.read() as s:
            r = s.get(Reader, reader_id)
        return Account(r.id, r.name, r.role) if r else None

    def accounts(self) -> list[tuple[Account, bool]]:
        """Every account and whether it can log in (has a password).

        Returns:
            (account, has a password) pairs, ordered by name.
        """
        with self.db.read() as s:
            return [(Account(r.id, r.name, r.role), r.password_hash is not None)
                    for r in s.scalars(select(Reader).order_by(Reader.name))]

    def has_logins(self) -> bool:
        """Returns:
            Whether any account has a password (else the app runs without a login).
        """
        with self.db.read() as s:
            return s.scalar(select(Reader.id).where(Reader.password_hash.is_not(None))
                            .limit(1)) is not None

    def local_reader(self) -> int:
        """The single reader of a loopback session without login (created on first use).

        Whoever sits at the machine running the app owns it, so the local reader is an admin.

        Returns:
            The local reader's id.
        """
        with self.db.read() as s:
            found = s.scalar(select(Reader.id).where(Reader.name == LOCAL_READER))
        if found is not None:
            return found
        with self.db.write() as s:
            reader = s.scalar(select(Reader).where(Reader.name == LOCAL_READER))
            if reader is None:
                reader = Reader(name=LOCAL_READER, role="admin")
                s.add(reader)
                s.flush()
            return reader.id
