"""A broken or unusable database gives one clear sentence and exit 2 (CLI and launch.py), never
a traceback; saves are durable (synchronous=FULL); backups are online and consistent; the
pseudonym key lives outside the database."""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import select, text

from bench.processes import stop_process
from rrg_review.app.accounts.service import AccountService
from rrg_review.app.settings import Settings
from rrg_review.app.setup import seed_demo
from rrg_review.db.engine import DatabaseProblem, backup, open_database
from rrg_review.db.models import Meta, Patient
from rrg_review.db.store import ENV_KEY, PseudonymKeyError, add_study, pseudonym
from rrg_review.studies.records import ReportSections, StudyRecord
from tests.app_process import start_app
from tests.browser import demo_copy

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str, env: dict | None = None, user: int | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, user=user,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "src"),
                               **(env or {})})


def one_sentence(result: subprocess.CompletedProcess, *phrases: str) -> str:
    """exit 2, a single `error:` line naming the problem, no traceback."""
    err = result.stderr.strip()
    assert result.returncode == 2, (result.returncode, result.stdout[-2000:], err[-2000:])
    assert "Traceback" not in err and "Traceback" not in result.stdout, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    for phrase in phrases:
        assert phrase in lines[0], lines[0]
    return lines[0]


def both_fail(db: Path, *phrases: str, env: dict | None = None, user: int | None = None) -> None:
    one_sentence(run("-m", "rrg_review.app.cli",
                     "studies", "--db", str(db), env=env, user=user), *phrases)
    one_sentence(run("launch.py", "--db", str(db), "--no-predraft", "--port", "1", env=env,
                     user=user), *phrases)


def made_db(tmp_path: Path, name: str = "r.sqlite") -> Path:
    """A new database made and seeded here, as a first start makes it (its files' modes)."""
    path = tmp_path / name
    db = open_database(path)
    seed_demo(db, Settings.from_args(str(path)))
    db.dispose()
    return path


@pytest.fixture
def demo_db(database_templates):
    """`demo_db(folder)`: a copy of the session's seeded demo database in `folder`, opened once
    as the app leaves it (write-ahead log on): what `made_db` makes, without the migrations and
    seeding (1.2 CPU-s each) for the tests that only need such a database to exist."""
    def copy(folder: Path, name: str = "r.sqlite") -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        path = demo_copy(database_templates, folder / name)
        open_database(path).dispose()
        return path
    return copy


def test_pragmas_busy_timeout_first_and_durable_commits(db):
    with db.engine.connect() as conn:
        assert conn.execute(text("PRAGMA synchronous")).scalar() == 2  # FULL
        assert conn.execute(text("PRAGMA busy_timeout")).scalar() == 10000
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"


def test_new_files_are_private(tmp_path):
    path = made_db(tmp_path / "fresh" / "deeper")
    for f in [path, path.with_name(path.name + ".key"), *path.parent.glob("r.sqlite-*")]:
        if f.is_file():
            assert stat.S_IMODE(f.stat().st_mode) & 0o077 == 0, f
    out = tmp_path / "copy.sqlite"
    assert run("-m", "rrg_review.app.cli",
               "backup", "--out", str(out), "--db", str(path)).returncode == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


def test_a_directory_is_refused(tmp_path):
    both_fail(tmp_path, "is a directory")


def test_garbage_is_not_a_sqlite_database(tmp_path):
    bad = tmp_path / "garbage.sqlite"
    bad.write_bytes(os.urandom(8192))
    both_fail(bad, "is not a SQLite database")


def test_someone_elses_database_is_refused(tmp_path):
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    both_fail(other, "is not an rrg-review database")
    with sqlite3.connect(other) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["invoices"]


def test_a_newer_schema_is_refused_not_downgraded(demo_db, tmp_path):
    path = demo_db(tmp_path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    both_fail(path, "newer than this version", "9999")


def test_a_file_at_the_right_revision_but_another_builds_schema_is_refused(demo_db, tmp_path):
    """Found by a new-user trial: a database written by a development build carried the
    current revision number without a column (`reader.role`); it opened, then every panel of
    the page showed a raw "no such column" error."""
    path = demo_db(tmp_path)
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE study DROP COLUMN split_raw")
    both_fail(path, "lacks study.split_raw", "different build")


def test_a_corrupted_file_fails_the_start_up_check(demo_db, tmp_path):
    path = demo_db(tmp_path)
    conn = sqlite3.connect(path)  # enough rows for several pages of one table
    conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                     [(f"k{i}", "x" * 500) for i in range(400)])
    conn.commit()
    conn.execute("PRAGMA journal_mode=DELETE")  # everything in the main file
    conn.close()
    data = bytearray(path.read_bytes())
    page = 4096
    pages = len(data) // page
    for p in range(pages - 30, pages - 5):  # trash pages near the end, keep the catalogue
        data[p * page + 8:p * page + 400] = os.urandom(392)
    path.write_bytes(bytes(data))
    line = one_sentence(run("launch.py", "--db", str(path), "--no-predraft", "--port", "1"))
    assert "quick_check" in line or "damaged" in line or "not a SQLite" in line
    check = run("-m", "rrg_review.app.cli", "check", "--db", str(path))
    assert check.returncode in (1, 2) and "Traceback" not in check.stderr
    assert "problem" in check.stderr or "error:" in check.stderr


def test_a_lock_held_longer_than_the_wait_is_a_retryable_message(demo_db, tmp_path):
    path = demo_db(tmp_path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        both_fail(path, "locked by another process", "try again",
                  env={"RRG_REVIEW_BUSY_TIMEOUT": "0.5"})
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert run("-m", "rrg_review.app.cli", "studies", "--db", str(path)).returncode == 0


def test_a_writer_waits_for_the_lock_instead_of_failing(demo_db, tmp_path):
    path = demo_db(tmp_path)
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(1.0, lambda: holder.execute("ROLLBACK"))
    release.start()
    try:
        assert run("-m", "rrg_review.app.cli", "studies", "--db", str(path)).returncode == 0
    finally:
        release.join()
        holder.close()


def _can(*command: str) -> bool:
    return subprocess.run(list(command), capture_output=True).returncode == 0


def test_a_read_only_file_is_refused_unless_read_only_mode(demo_db, tmp_path):
    path = demo_db(tmp_path)
    db = open_database(path)
    AccountService(db).local_reader()
    db.dispose()
    for extra in path.parent.glob("r.sqlite-*"):
        extra.unlink()
    if os.geteuid() == 0:  # root writes any file whatever its mode: make it immutable
        if not _can("chattr", "+i", str(path)):
            pytest.skip("chattr +i is not available here")
    else:
        path.chmod(0o444)
    try:
        both_fail(path, "not writable", "--read-only")
        check = run("-m", "rrg_review.app.cli", "check", "--db", str(path))
        assert check.returncode == 0, check.stderr
        counted = run("-m", "rrg_review.app.cli", "studies", "--db", str(path), "--read-only")
        assert counted.returncode == 0 and "4 studies" in counted.stdout, counted.stderr
        _serves_read_only(path, tmp_path)
    finally:
        if os.geteuid() == 0:
            _can("chattr", "-i", str(path))


def _serves_read_only(path: Path, tmp_path: Path) -> None:
    """--read-only starts and serves the page from a database it cannot write."""
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "ro-app.log"
    # (a fork of the tests' app server: `launch.py` in a new interpreter imported Gradio again)
    proc = start_app(["--db", str(path), "--read-only", "--port", str(port), "--no-demo"], log,
                     {**os.environ, "HF_HUB_OFFLINE": "1"}, ROOT)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "ro-app.log").read_text()[-2000:]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/config", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        else:
            pytest.fail("the read-only app did not start")
        assert "(read-only)" in (tmp_path / "ro-app.log").read_text()
    finally:
        stop_process(proc)


def test_a_read_only_file_system_is_refused_unless_read_only_mode(demo_db, tmp_path):
    path = demo_db(tmp_path / "ro")
    folder = str(path.parent)
    wrap = ["unshare", "-m", "sh", "-c", 'mount --bind -o ro "$0" "$0" && exec "$@"', folder]
    if not _can(*wrap, "true"):
        pytest.skip("no mount namespace for a read-only bind mount here")

    def inside(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*wrap, sys.executable, *args], cwd=ROOT, capture_output=True,
                              text=True, timeout=120,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"})

    one_sentence(inside("-m", "rrg_review.app.cli", "studies", "--db", str(path)),
                 "read-only file system", "--read-only")
    one_sentence(inside("launch.py", "--db", str(path), "--no-predraft", "--port", "1"),
                 "read-only file system")
    check = inside("-m", "rrg_review.app.cli", "check", "--db", str(path))
    assert check.returncode == 0 and "ok" in check.stdout, check.stderr


def test_read_only_mode_refuses_writes_with_a_sentence(demo_db, tmp_path):
    path = demo_db(tmp_path)
    db = open_database(path, read_only=True)
    with db.read() as s:
        assert s.scalar(select(Patient.id).limit(1)) is not None
    with pytest.raises(DatabaseProblem, match="read-only"), db.write():
        pass
    db.dispose()
    with pytest.raises(DatabaseProblem, match="does not exist"):
        open_database(tmp_path / "missing.sqlite", read_only=True)


def test_backup_is_online_consistent_and_checked(demo_db, tmp_path):
    path = demo_db(tmp_path)
    db = open_database(path)
    writer = sqlite3.connect(path, isolation_level=None, timeout=10)
    writer.execute("BEGIN IMMEDIATE")  # a writer mid-transaction: the copy has its before state
    writer.execute("INSERT INTO meta (key, value) VALUES ('uncommitted', 'x')")
    out = backup(db, tmp_path / "backup.sqlite")
    writer.execute("COMMIT")
    writer.close()
    with sqlite3.connect(out) as conn:
        assert conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"
        assert conn.execute("SELECT count(*) FROM study").fetchone()[0] == 4
        assert conn.execute("SELECT count(*) FROM meta WHERE key='uncommitted'").fetchone()[0] == 0
    with pytest.raises(DatabaseProblem, match="the database itself"):
        backup(db, path)
    with pytest.raises(DatabaseProblem, match="does not exist"):
        backup(db, tmp_path / "no" / "such" / "dir.sqlite")
    db.dispose()
    cli = run("-m", "rrg_review.app.cli",
              "backup", "--out", str(tmp_path / "b2.sqlite"), "--db", str(path))
    assert cli.returncode == 0 and "r.sqlite.key" in cli.stdout  # reminds of the key
    assert run("-m", "rrg_review.app.cli", "check", "--db", str(tmp_path / "b2.sqlite"),
               env={ENV_KEY: (path.with_name("r.sqlite.key")).read_text().strip()}
               ).returncode == 0


def _record(key: str, patient: str) -> StudyRecord:
    return StudyRecord(source="folder", study_key=key, patient_key=patient, origin=key,
                       reference=ReportSections("f", "i"))


def test_the_pseudonym_key_lives_outside_the_database(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_KEY, raising=False)
    path = tmp_path / "k.sqlite"
    db = open_database(path)
    with db.write() as s:
        add_study(s, _record("s1", "5550001"), [])
    key_file = path.with_name("k.sqlite.key")
    assert key_file.is_file() and stat.S_IMODE(key_file.stat().st_mode) == 0o600
    with db.read() as s:
        stored = s.scalar(select(Patient.key))
        secrets_in_db = [m.value for m in s.scalars(select(Meta))]
    db.dispose()
    assert stored.startswith("anon-") and "5550001" not in stored
    # nothing in the database reproduces the pseudonym: trying every 7-digit MRN is useless
    for value in secrets_in_db:
        try:
            candidate = bytes.fromhex(value)
        except ValueError:
            continue
        guess = "anon-" + hmac.new(candidate, b"5550001", hashlib.sha256).hexdigest()[:16]
        assert guess != stored
    assert "anon-" + hmac.new(bytes.fromhex(key_file.read_text().strip()), b"5550001",
                              hashlib.sha256).hexdigest()[:16] == stored
    # a copy of the database without its key is refused, not given a new key
    copy = tmp_path / "copy.sqlite"
    copy.write_bytes(path.read_bytes())
    other = open_database(copy)
    with pytest.raises(PseudonymKeyError, match="missing"), other.write() as s:
        add_study(s, _record("s2", "5550001"), [])
    other.dispose()
    # ... and works again with the key given by the settings ($RRG_REVIEW_KEY)
    again = open_database(copy, key=key_file.read_text().strip())
    with again.write() as s:
        assert pseudonym(s, "5550001") == stored
    again.dispose()
    wrong = open_database(copy, key="ab" * 32)
    with pytest.raises(PseudonymKeyError, match="does not belong"), wrong.write() as s:
        pseudonym(s, "5550001")
    wrong.dispose()


def test_a_key_kept_in_the_database_by_an_older_version_is_moved_out(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_KEY, raising=False)
    path = tmp_path / "old.sqlite"
    db = open_database(path)
    legacy = "cd" * 32
    with db.write() as s:
        s.add(Meta(key="pseudonym_salt", value=legacy))
    with db.write() as s:
        value = pseudonym(s, "MRN-1")
    assert value == "anon-" + hmac.new(bytes.fromhex(legacy), b"MRN-1",
                                       hashlib.sha256).hexdigest()[:16]  # same patients
    assert path.with_name("old.sqlite.key").read_text().strip() == legacy
    with db.read() as s:
        assert s.get(Meta, "pseudonym_salt") is None
    db.dispose()


def test_patient_keys_stored_raw_by_an_older_version_are_pseudonymised_at_start(demo_db,
                                                                               tmp_path):
    from rrg_review.app.setup import prepare

    path = demo_db(tmp_path)
    key = bytes.fromhex(path.with_name(path.name + ".key").read_text().strip())
    same = "anon-" + hmac.new(key, b"MRN-5550001", hashlib.sha256).hexdigest()[:16]
    with sqlite3.connect(path) as conn:  # as an older version stored them: raw, and one of
        # them is the same patient as an already pseudonymised one
        ids = [r[0] for r in conn.execute("SELECT id FROM patient ORDER BY id")]
        conn.execute("UPDATE patient SET key = 'MRN-5550001' WHERE id = ?", (ids[0],))
        conn.execute("UPDATE patient SET key = ? WHERE id = ?", (same, ids[1]))
        conn.execute("UPDATE patient SET key = 'MRN-7770002' WHERE id = ?", (ids[2],))
        studies = conn.execute("SELECT count(*) FROM study").fetchone()[0]
    db = prepare(Settings.from_args(str(path)), demo=False)
    with db.read() as s:
        keys = list(s.scalars(select(Patient.key)))
        assert all(k.startswith("anon-") for k in keys) and len(keys) == len(set(keys))
        assert len(keys) == len(ids) - 1 and same in keys  # the two records merged
        assert s.scalar(text("SELECT count(*) FROM study WHERE patient_id NOT IN "
                             "(SELECT id FROM patient)")) == 0
        assert s.scalar(text("SELECT count(*) FROM study")) == studies
    db.dispose()


def test_importing_into_a_copy_without_its_key_is_one_sentence(demo_db, tmp_path):
    import shutil

    from tests.conftest import rg1

    path = demo_db(tmp_path)
    copy = tmp_path / "elsewhere" / "copy.sqlite"
    copy.parent.mkdir()
    shutil.copy(path, copy)
    case = tmp_path / "cases" / "case-1"
    case.mkdir(parents=True)
    shutil.copy(rg1(), case / "image.dcm")
    result = run("-m", "rrg_review.app.cli",
                 "import", str(tmp_path / "cases"), "--format", "folder",
                 "--db", str(copy), env={ENV_KEY: ""})
    one_sentence(result, "pseudonym key", "missing", "copy.sqlite.key")
    assert not copy.with_name("copy.sqlite.key").exists()  # no new key was made up


@pytest.mark.parametrize("command", [
    ["studies"], ["export", "--format", "csv", "--out", "{tmp}/e.csv"], ["study", "list"],
    ["draft", "--limit", "1"]])
def test_a_mistyped_database_path_is_refused_not_made(tmp_path, capsys, command):
    """A trial's `studies --db typo/dir/rrg.sqlite` made the folders and an empty database and
    printed "0 studies", exit 0 (`export` wrote a header-only CSV beside a new key file).
    Commands that read what is stored refuse a database that does not exist."""
    from rrg_review.app.cli import main

    missing = tmp_path / "typo" / "dir" / "rrg.sqlite"
    argv = [a.replace("{tmp}", str(tmp_path)) for a in command]
    assert main([*argv, "--db", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"{missing} does not exist" in err and "Traceback" not in err, err
    assert err.count("error:") == 1, err
    assert not (tmp_path / "typo").exists() and not (tmp_path / "e.csv").exists()


def test_an_export_to_a_folder_is_one_sentence(demo_db, tmp_path, capsys):
    """A trial's `export --format csv --out ex/` ended in IsADirectoryError's traceback."""
    from rrg_review.app.cli import main

    path = demo_db(tmp_path)
    (tmp_path / "ex").mkdir()
    assert main(["export", "--format", "csv", "--out", str(tmp_path / "ex"), "--db",
                 str(path)]) == 2
    err = capsys.readouterr().err
    assert "is a folder: name the file to write" in err and "Traceback" not in err, err
    assert err.count("\n") == 1 and list((tmp_path / "ex").iterdir()) == []


def test_a_password_asked_with_no_terminal_is_one_sentence(demo_db, tmp_path):
    """`readers add NAME` with no terminal (a script, `</dev/null`): getpass's termios.error and
    EOFError came out as tracebacks."""
    path = demo_db(tmp_path)
    added = subprocess.run([sys.executable, "-m", "rrg_review.app.cli", "readers", "add", "zed",
                            "--db", str(path)], stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, cwd=ROOT, timeout=120,
                           env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    one_sentence(added, "no terminal to ask the password on", "--password-stdin")
    with sqlite3.connect(path) as con:
        assert con.execute("SELECT count(*) FROM reader WHERE name = 'zed'").fetchone() == (0,)
