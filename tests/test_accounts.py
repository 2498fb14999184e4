"""Accounts, throttling, sessions and the audit trail on a real SQLite database."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from rrg_review.app.accounts.audit import AuditLog
from rrg_review.app.accounts.service import (
    AccountError,
    AccountService,
    LoginThrottle,
    SessionStore,
    hash_password,
    needs_rehash,
    verify_password,
)
from rrg_review.app.review.service import ReviewError, ReviewService
from rrg_review.app.worklist.service import WorklistService
from rrg_review.db.models import AuditEvent, Reader
from tests.conftest import TEST_PASSWORD_COST


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def accounts(db):
    return AccountService(db, throttle=LoginThrottle(clock=Clock()),
                          password_cost=TEST_PASSWORD_COST)


def test_password_policy_is_enforced_by_the_service(accounts):
    for bad, why in [("short-pw", "at least 10"), ("dr.wu-is-me-123", "account name"),
                     ("aaaaaaaaaaaa", "different characters"), ("password123", "well-known")]:
        with pytest.raises(AccountError, match=why):
            accounts.add("dr.wu", bad)
    with pytest.raises(AccountError, match="reader name"):
        accounts.add("../etc", "a-fine-password")
    with pytest.raises(AccountError, match="role"):
        accounts.add("dr.wu", "a-fine-password", role="root")
    accounts.add("dr.wu", "a-fine-password")
    with pytest.raises(AccountError, match="already exists"):
        accounts.add("dr.wu", "a-fine-password")
    with pytest.raises(AccountError, match="at least 10"):
        accounts.set_password("dr.wu", "tiny")


def test_scrypt_cost_is_owasp_and_old_hashes_are_upgraded_on_login(db):
    accounts = AccountService(db, throttle=LoginThrottle(clock=Clock()))  # the default cost
    current = hash_password("a-fine-password")
    assert current.split("$")[1] == str(2**17) and not needs_rehash(current)
    old = hash_password("a-fine-password", n=2**14)
    assert needs_rehash(old) and verify_password("a-fine-password", old)
    with db.write() as s:
        s.add(Reader(name="dr.old", password_hash=old))
    assert accounts.authenticate("dr.old", "wrong-password").account is None
    with db.read() as s:  # a failed login changes nothing
        assert s.scalar(select(Reader.password_hash).where(Reader.name == "dr.old")) == old
    assert accounts.authenticate("dr.old", "a-fine-password").account is not None
    with db.read() as s:
        upgraded = s.scalar(select(Reader.password_hash).where(Reader.name == "dr.old"))
    assert upgraded != old and upgraded.split("$")[1] == str(2**17)
    assert verify_password("a-fine-password", upgraded)


def test_the_settings_cost_makes_new_hashes_and_upgrades_weaker_ones_only(db):
    """A service at another cost (the settings' RRG_REVIEW_PASSWORD_COST) hashes new passwords
    at it, upgrades a weaker hash on login and never downgrades a stronger one; a stored hash
    asking for more than the highest cost (a gigabyte-scale N) or an N that is not a power of
    two is no match, not an error."""
    low = AccountService(db, throttle=LoginThrottle(clock=Clock()), password_cost=2**14)
    low.add("dr.low", "a-fine-password")
    with db.write() as s:
        s.add(Reader(name="dr.high", password_hash=hash_password("b-fine-password", n=2**15)))

    def stored(name: str) -> str:
        with db.read() as s:
            return s.scalar(select(Reader.password_hash).where(Reader.name == name))

    assert stored("dr.low").split("$")[1] == str(2**14)
    assert low.authenticate("dr.high", "b-fine-password").account is not None
    assert stored("dr.high").split("$")[1] == str(2**15)  # kept, not made weaker
    high = AccountService(db, throttle=LoginThrottle(clock=Clock()), password_cost=2**15)
    before = stored("dr.low")
    assert high.authenticate("dr.low", "a-fine-password").account is not None
    assert stored("dr.low") != before and stored("dr.low").split("$")[1] == str(2**15)
    salt_key = before.split("$", 4)[4]
    for n in (2**30, 3 * 2**14):
        assert not verify_password("a-fine-password", f"scrypt${n}$8$1${salt_key}")


def test_throttle_backs_off_exponentially_and_a_success_clears_it():
    clock = Clock()
    t = LoginThrottle(free=3, base_delay_s=1.0, max_delay_s=8.0, clock=clock)
    delays = [t.failure("account:x") for _ in range(8)]
    assert delays == [0, 0, 0, 1, 2, 4, 8, 8]
    assert t.wait("account:x") == 8
    clock.now += 8
    assert t.wait("account:x") == 0
    t.success("account:x")
    assert t.failure("account:x") == 0  # counting starts again


def test_logins_are_throttled_per_account_and_per_address_and_audited(db, accounts, capsys):
    accounts.add("dr.a", "a-fine-password")
    accounts.add("dr.b", "b-fine-password")
    clock = accounts.throttle.clock
    results = [accounts.authenticate("dr.a", "guess", "10.0.0.9").outcome for _ in range(4)]
    assert results == ["bad_credentials"] * 4
    # the account now waits, even with the right password and from another address
    refused = accounts.authenticate("dr.a", "a-fine-password", "10.0.0.10")
    assert refused.outcome == "throttled" and refused.retry_after_s > 0
    clock.now += 60
    assert accounts.authenticate("dr.a", "a-fine-password", "10.0.0.10").outcome == "ok"
    # one address guessing many accounts is throttled on its own: a name it already guessed
    # is refused unchecked ...
    for i in range(AccountService.ADDRESS_FREE_FAILURES + 1):
        accounts.authenticate(f"nobody{i}", "guess", "10.6.6.6")
    again = accounts.authenticate("nobody0", "guess", "10.6.6.6")
    assert again.outcome == "throttled" and again.retry_after_s > 0
    # ... but a reader sharing that address (a reading room behind one NAT), whose account is
    # in good standing, still signs in with the right password
    shared = accounts.authenticate("dr.b", "b-fine-password", "10.6.6.6")
    assert shared.outcome == "ok"
    assert accounts.authenticate("nobody1", "guess", "10.6.6.6").outcome == "throttled"
    # an account that already failed from there is refused unchecked, unless its browser
    # proves an earlier sign-in (a device cookie): then the address throttle does not apply
    assert accounts.authenticate("dr.b", "typo-password", "10.6.6.6").outcome == \
        "bad_credentials"
    assert accounts.authenticate("dr.b", "b-fine-password", "10.6.6.6").outcome == "throttled"
    known = accounts.authenticate("dr.b", "b-fine-password", "10.6.6.6", known_device=True)
    assert known.outcome == "ok"
    assert accounts.authenticate("dr.b", "b-fine-password", "10.0.0.11").outcome == "ok"
    events = AuditLog(db).recent(200)
    assert any(e.action == "login" and e.actor == "dr.b" and e.address == "10.6.6.6"
               and "address throttled" in (e.detail or "") for e in events)
    assert any(e.action == "login" and e.actor == "dr.b" and e.detail == "known device"
               for e in events)
    assert any(e.action == "login_throttled" and e.actor == "nobody0"
               and (e.detail or "").startswith("address back-off") for e in events)
    kinds = {e.action for e in events}
    assert {"login", "login_failed", "login_throttled"} <= kinds
    failed = [e for e in events if e.action == "login_failed" and e.actor == "dr.a"]
    assert len(failed) == 4 and all(e.address == "10.0.0.9" and not e.ok for e in failed)
    from rrg_review.app.cli import main as cli

    capsys.readouterr()
    assert cli(["audit", "--actor", "dr.a", "--db", db.url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sum("\tdr.a\tlogin_failed\tREFUSED\t10.0.0.9" in line for line in lines) == 4
    assert "\tdr.a\tlogin\tok\t10.0.0.10" in lines[-1]


def test_sessions_expire_when_idle_and_absolutely_and_on_logout():
    clock = Clock()
    store = SessionStore(idle_s=60, absolute_s=300, clock=clock)
    token = store.create("dr.a")
    assert store.user(token) == "dr.a" and store.user("forged") is None and store.user(None) is None
    for _ in range(4):  # active every 50 s: the idle limit never bites ...
        clock.now += 50
        assert store.user(token) == "dr.a"
    clock.now += 101  # ... but 301 s after the login the session is over anyway
    assert store.user(token) is None
    idle = store.create("dr.a")
    clock.now += 61
    assert store.user(idle) is None
    a, b = store.create("dr.a"), store.create("dr.a")
    assert store.revoke(a) == "dr.a" and store.user(a) is None and store.user(b) == "dr.a"
    assert store.revoke_all("dr.a") == 1 and store.user(b) is None


def test_saves_and_ratings_are_audited_in_the_same_transaction(demo_db):
    db = demo_db
    review = ReviewService(db)
    accounts = AccountService(review.db, password_cost=TEST_PASSWORD_COST)
    reader = accounts.add("dr.c", "c-fine-password")
    WorklistService(review.db).assign(reader)
    study = WorklistService(review.db).items(reader)[0].study_id
    review.save(reader, study, "findings", "first words", None, address="10.1.1.1")
    review.rate(reader, study, likert=4, acceptable=False, address="10.1.1.1")
    with pytest.raises(ReviewError):  # a refused save writes no audit row either
        review.save(reader, study, "findings", "stale", None)
    with db.read() as s:
        rows = list(s.scalars(select(AuditEvent).order_by(AuditEvent.id)))
    assert [(r.action, r.actor, r.address) for r in rows] == [
        ("save", "dr.c", "10.1.1.1"), ("rate", "dr.c", "10.1.1.1")]
    assert rows[0].target == f"study {study} findings revision 1" and rows[0].at is not None


def test_accepting_a_draft_is_audited_with_the_client_address(demo_db, settings):
    from rrg_review.app.drafting.service import DraftingService

    db = demo_db
    review = ReviewService(db)
    accounts = AccountService(review.db, password_cost=TEST_PASSWORD_COST)
    reader = accounts.add("dr.d", "d-fine-password")
    WorklistService(review.db).assign(reader)
    study = WorklistService(review.db).items(reader)[0].study_id
    drafting = DraftingService(db, settings)
    drafting.draft([study], "retrieval")
    drafts = {s: (d.id, d.text) for s, d in drafting.latest(study, "retrieval").items()}
    rating = review.accept_draft(reader, study, drafts, {}, preset="retrieval",
                                 address="10.2.2.2")
    with db.read() as s:
        rows = list(s.scalars(select(AuditEvent).where(AuditEvent.action == "accept")))
    assert [(r.actor, r.address, r.target) for r in rows] == [
        ("dr.d", "10.2.2.2", f"study {study} rating {rating.number}")]


def test_roles_and_the_local_reader(db):
    accounts = AccountService(db, password_cost=TEST_PASSWORD_COST)
    reader = accounts.add("dr.r", "r-fine-password")
    admin = accounts.add("dr.boss", "boss-fine-password", role="admin")

    def is_admin(reader_id: int) -> bool:
        found = accounts.by_id(reader_id)
        return found is not None and found.is_admin

    assert not is_admin(reader) and is_admin(admin)
    assert is_admin(accounts.local_reader())  # whoever sits at the machine
    with pytest.raises(AccountError, match="local"):
        accounts.add("local", "l-fine-password")
    accounts.set_role("dr.r", "admin")
    assert is_admin(reader)


def test_migration_0004_gives_roles_and_keeps_the_local_reader_an_admin(tmp_path):
    from sqlalchemy import text

    from rrg_review.db.engine import open_database, upgrade_schema

    old = open_database(tmp_path / "old.sqlite", upgrade=False)
    upgrade_schema(old, "0002")
    with old.engine.begin() as conn:
        conn.execute(text("INSERT INTO reader (name, password_hash, created_at) VALUES "
                          "('local', NULL, '2026-01-01'), ('dr.x', 'scrypt$16384$8$1$a$b', "
                          "'2026-01-01')"))
    upgrade_schema(old, "head")
    with old.engine.connect() as conn:
        roles = dict(conn.execute(text("SELECT name, role FROM reader")).all())
        assert conn.execute(text("SELECT count(*) FROM audit_event")).scalar() == 0
    assert roles == {"local": "admin", "dr.x": "reader"}
    old.dispose()


@pytest.mark.both_databases
def test_the_throttle_kept_in_the_database_survives_a_new_process(db):
    """Counters are rows: a new LoginThrottle on the same database (a restarted app) sees the
    back-off; a success clears it; a key quiet for `forget_s` starts from nothing."""
    clock = Clock()
    first = LoginThrottle(db, free=3, base_delay_s=1.0, max_delay_s=8.0, clock=clock)
    assert [first.failure("account:x") for _ in range(6)] == [0, 0, 0, 1, 2, 4]
    restarted = LoginThrottle(db, free=3, base_delay_s=1.0, max_delay_s=8.0, clock=clock)
    assert restarted.wait("account:x") == 4 and restarted.wait("account:y") == 0
    assert restarted.failure("account:x") == 8
    clock.now += 8
    assert first.wait("account:x") == 0
    restarted.success("account:x")
    assert first.failure("account:x") == 0  # counting starts again
    for _ in range(4):
        first.failure("address:10.1.1.1")
    clock.now += first.forget_s + 1  # a day later: forgotten, and pruned on the next failure
    assert first.failure("address:10.1.1.2") == 0
    assert first.failure("address:10.1.1.1") == 0
    from rrg_review.db.models import LoginThrottleState

    with db.read() as s:
        assert s.get(LoginThrottleState, "address:10.1.1.1").failures == 1


@pytest.mark.both_databases
def test_sessions_kept_in_the_database_store_only_a_hash_and_survive_a_new_process(db):
    from rrg_review.db.models import WebSession

    accounts = AccountService(db, password_cost=TEST_PASSWORD_COST)
    accounts.add("dr.a", "a-fine-password")
    accounts.add("dr.b", "b-fine-password")
    clock = Clock()
    store = SessionStore(db, idle_s=60, absolute_s=300, clock=clock)
    token = store.create("dr.a")
    with db.read() as s:
        stored = s.scalars(select(WebSession.token_hash)).all()
    assert len(stored) == 1 and token not in stored[0] and len(stored[0]) == 64
    restarted = SessionStore(db, idle_s=60, absolute_s=300, clock=clock)
    assert restarted.user(token) == "dr.a" and restarted.user("forged") is None
    assert restarted.user(None) is None and restarted.user("x" * 10_000) is None
    for _ in range(4):  # active every 50 s, seen by either process: never idle ...
        clock.now += 50
        assert (store if _ % 2 else restarted).user(token) == "dr.a"
    clock.now += 101  # ... but 301 s after the login it is over in both
    assert store.user(token) is None and restarted.user(token) is None
    idle = store.create("dr.a")
    clock.now += 61
    assert restarted.user(idle) is None
    a, b, other = store.create("dr.a"), store.create("dr.a"), store.create("dr.b")
    assert restarted.revoke(a) == "dr.a" and store.user(a) is None and store.user(b) == "dr.a"
    assert restarted.revoke(a) is None
    accounts.set_password("dr.a", "another-fine-pw")  # a new password ends every session
    assert store.user(b) is None and store.user(other) == "dr.b"
    accounts.set_role("dr.b", "admin")  # so does a new role
    assert store.user(other) is None
    with db.read() as s:  # expired rows were pruned on the way
        assert s.scalars(select(WebSession)).all() == []


def test_a_read_only_database_keeps_sessions_and_throttling_in_memory(tmp_path):
    """`--read-only` with logins: nothing can be written, so sessions and counters live in the
    process (and a restart forgets them), but signing in, back-off and logout still work."""
    from rrg_review.db.engine import open_database

    path = tmp_path / "ro.sqlite"
    writable = open_database(path)
    AccountService(writable, password_cost=TEST_PASSWORD_COST).add("dr.ro", "a-fine-password")
    writable.dispose()
    ro = open_database(path, read_only=True)
    try:
        accounts = AccountService(ro, password_cost=TEST_PASSWORD_COST)
        assert accounts.throttle.db is None
        assert [accounts.authenticate("dr.ro", "guess", "10.9.9.9").outcome
                for _ in range(4)] == ["bad_credentials"] * 4
        assert accounts.authenticate("dr.ro", "a-fine-password").outcome == "throttled"
        store = SessionStore(ro)
        assert store.db is None
        token = store.create("dr.ro")
        assert store.user(token) == "dr.ro" and store.revoke(token) == "dr.ro"
        assert store.user(token) is None
    finally:
        ro.dispose()
