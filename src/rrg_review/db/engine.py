"""Engine and session set-up: SQLite in WAL mode with foreign keys, schema upgraded by Alembic,
and the start-up checks that turn a broken or unusable database file into one clear sentence.

A bare path means a SQLite file; `postgresql+psycopg://user@host/db` a team's PostgreSQL server
(tested against a real server); other SQLAlchemy URLs are passed through untested.

Durability: `synchronous=FULL` in WAL mode makes every acknowledged commit survive an OS crash or
power cut (NORMAL only survives an application crash); `bench/durability.py` prints the cost.
`busy_timeout` is set before anything else on a new connection so that even the first
statement (switching to WAL) waits for a writer instead of failing at once.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, create_engine, event, inspect, text
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from rrg_review.core.files import atomic_write
from rrg_review.db.writer_queue import WriterQueue

if TYPE_CHECKING:
    from alembic.config import Config

log = logging.getLogger(__name__)

DEFAULT_DB = "rrg-review.sqlite"
DEFAULT_BUSY_TIMEOUT_S = 10.0
_BEGIN_OPTION = "rrg_begin"
_RELAXED_OPTION = "rrg_relaxed_commit"  # Database.write(durable=False)
_TURN_OPTION = "rrg_sqlite_turn"  # Database.write on SQLite: short asks for the write lock
_TURN_WAIT_MS = 20
# tables every rrg-review schema has; a file with other tables is someone else's database
_OUR_TABLES = {"alembic_version", "study", "patient", "reader"}


class DatabaseProblem(RuntimeError):
    """The database cannot be used as asked; the message is one sentence for the user.

    `retryable` is True when trying again later may work (a lock held by another process).
    """

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


def database_url(value: str | Path | None) -> str:
    """A SQLAlchemy URL from a URL or a file path (default ./rrg-review.sqlite)."""
    text_ = str(value or DEFAULT_DB)
    if "://" in text_:
        return text_
    return f"sqlite:///{Path(text_).expanduser().resolve()}"


def sqlite_path(url: str) -> Path | None:
    """The file behind a sqlite URL, or None for other databases and in-memory SQLite."""
    prefix = "sqlite:///"
    if url.startswith(prefix) and url[len(prefix):] not in ("", ":memory:"):
        return Path(url[len(prefix):].split("?", 1)[0])
    return None


def _reason(exc: OSError) -> str:
    """An OS error's reason in lower case ("permission denied"), whatever raised it."""
    return (exc.strerror or str(exc)).lower()


def _configure_sqlite(engine: Engine, *, read_only: bool, timeout_s: float) -> None:
    """busy_timeout first, then WAL, foreign keys, synchronous=FULL, and BEGIN issued by us.

    pysqlite's own transaction handling defers BEGIN until the first write; taking it over lets
    writers start with BEGIN IMMEDIATE, so two writers queue on the lock (busy_timeout) instead of
    failing half-way through a read-then-write.
    """

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        dbapi_connection.isolation_level = None
        cur = dbapi_connection.cursor()
        cur.execute(f"PRAGMA busy_timeout={int(timeout_s * 1000)}")
        if not read_only:
            cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA synchronous=FULL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        options = conn.get_execution_options()
        # a measurement's transaction (Database.write(durable=False)) commits without fsync;
        # the next other transaction on the same connection restores synchronous=FULL
        relaxed, info = options.get(_RELAXED_OPTION, False), conn.connection.info
        if relaxed != info.get(_RELAXED_OPTION, False):
            conn.exec_driver_sql(f"PRAGMA synchronous={'NORMAL' if relaxed else 'FULL'}")
            info[_RELAXED_OPTION] = relaxed
        begin = options.get(_BEGIN_OPTION, "BEGIN")
        if not options.get(_TURN_OPTION):
            conn.exec_driver_sql(begin)
            return
        # a writer of Database.write asks for the lock for a moment only and asks again in
        # Database._begin: SQLite's own wait sleeps up to 100 ms between looks, in no order,
        # so under load one process could miss turn after turn for seconds
        conn.exec_driver_sql(f"PRAGMA busy_timeout={_TURN_WAIT_MS}")
        try:
            conn.exec_driver_sql(begin)
        finally:
            conn.exec_driver_sql(f"PRAGMA busy_timeout={int(timeout_s * 1000)}")


# -- PostgreSQL (a reading team's shared server) ------------------------------------------------
_PG_WRITER_OPTION = "rrg_pg_writer"  # WHOLE_DATABASE or ROWS: how a write transaction locks
_PG_WRITER_LOCK = 0x7272_6776  # an arbitrary advisory-lock key owned by rrg-review ("rrgv")
WHOLE_DATABASE = "database"
ROWS = "rows"


def _configure_postgresql(engine: Engine) -> None:
    """Every write transaction takes rrg-review's advisory lock, in one of two modes.

    * `WHOLE_DATABASE` (the default of `Database.write`): exclusive, so such writes are
      serialised as SQLite's BEGIN IMMEDIATE serialises them. An import allocating ids as
      max(id) + 1, an assignment renumbering a worklist, an account change: each reads and
      then writes rows that any other transaction may touch, and sees every committed write
      before it.
    * `ROWS` (a reader's save, rating, time on task): shared, so these never wait for each
      other here; each locks the rows it must serialise itself (its worklist entry, FOR
      UPDATE: one reader's study), and all of them wait for a whole-database write.

    Reads take no lock and never wait. The lock is transaction-level: released by the commit or
    rollback, never left behind by a dropped connection."""

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        options = conn.get_execution_options()
        mode = options.get(_PG_WRITER_OPTION)
        if mode == WHOLE_DATABASE:
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_WRITER_LOCK})")
        elif mode == ROWS:
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock_shared({_PG_WRITER_LOCK})")
        if options.get(_RELAXED_OPTION):  # a measurement: this transaction only
            conn.exec_driver_sql("SET LOCAL synchronous_commit TO OFF")


class DatabaseBusy(DatabaseProblem):
    """Another writer held the database longer than the busy timeout: nothing was written."""

    def __init__(self, name: str, timeout_s: float) -> None:
        super().__init__(f"{name} is busy: another writer held it for more than {timeout_s:g} s "
                         "and nothing was saved; try again in a moment (or raise the busy "
                         "timeout)", retryable=True)


def _is_busy(exc: BaseException) -> bool:
    """SQLite's "database is locked" / "database is busy" (SQLITE_BUSY and its kinds)."""
    message = str(getattr(exc, "orig", exc)).lower()
    return "database is locked" in message or "database is busy" in message


@dataclass
class Database:
    """An engine plus session factories; `write()` is the one way to change data."""

    url: str
    engine: Engine
    _reads: sessionmaker[Session]
    # (durable, scope) -> the factory of such write transactions
    _writers: dict[tuple[bool, str], sessionmaker[Session]] = field(repr=False)
    read_only: bool = False
    # the pseudonym key lives outside the database (db/store.py): the key configured by the
    # settings (a team's server has no file beside it), else a key file; cached once loaded
    key_file: Path | None = None
    configured_key: str | None = field(default=None, repr=False)
    busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S
    _key: bytes | None = field(default=None, repr=False)
    # SQLite has one writer at a time: this process's writers queue here in arrival order
    # (see db/writer_queue.py) instead of polling SQLite's lock in no order
    _local_writer: WriterQueue = field(default_factory=WriterQueue, repr=False)

    @contextmanager
    def read(self) -> Iterator[Session]:
        with self._reads() as session:
            session.info["database"] = self
            yield session

    @contextmanager
    def write(self, *, durable: bool = True, scope: str = WHOLE_DATABASE) -> Iterator[Session]:
        """One transaction: committed when the block ends, rolled back entirely on any error.

        `durable=False` is for measurements only (active time on task), never for a reader's
        text or rating: on SQLite that commit runs with synchronous=NORMAL (no fsync; it
        survives an application crash, and an OS crash or power cut may lose it until the next
        durable commit or a checkpoint writes the log out), on PostgreSQL with
        synchronous_commit off. It spares a navigation one fsync (about 10 ms on this machine's
        disk, several times that under load).

        `scope=ROWS` is for a transaction that locks what it must serialise itself (SELECT ...
        FOR UPDATE of the rows it reads and then changes): on PostgreSQL it then waits only for
        whole-database writers and for the holders of those rows, not for every other writer
        (see `_configure_postgresql`). SQLite has a single writer whatever the scope.

        A database kept busy by other writers for longer than the busy timeout is refused with
        `DatabaseBusy` (one sentence, nothing written), never a raw driver error.

        Raises:
            DatabaseProblem: the database is open read-only.
            DatabaseBusy: another writer held the database for longer than the busy timeout.
        """
        if self.read_only:
            raise DatabaseProblem(f"{self.name} is open read-only (--read-only): nothing is "
                                  "saved")
        if scope not in (WHOLE_DATABASE, ROWS):
            raise ValueError(f"unknown write scope {scope!r}")
        factory = self._writers.get((durable, scope)) or self._writers[(True, scope)]
        queued = self.engine.dialect.name == "sqlite"
        deadline = time.monotonic() + self.busy_timeout_s
        if queued and not self._local_writer.acquire(timeout=self.busy_timeout_s):
            raise DatabaseBusy(self.name, self.busy_timeout_s)
        try:
            with self._begin(factory, deadline) as session:
                yield session
        except OperationalError as exc:
            if _is_busy(exc):
                raise DatabaseBusy(self.name, self.busy_timeout_s) from None
            raise
        finally:
            if queued:
                self._local_writer.release()

    @contextmanager
    def _begin(self, factory: sessionmaker[Session], deadline: float) -> Iterator[Session]:
        """A write transaction begun at once (BEGIN IMMEDIATE on SQLite takes the write lock
        here, before the caller's first statement), so a busy database is retried within the
        busy timeout. SQLite is asked for its write lock for 20 ms at a time (`_TURN_OPTION`),
        with pauses of 1 to 10 ms between asks, so a writer of another process that frees the
        lock is followed within milliseconds, not after SQLite's sleeps of up to 100 ms."""
        pause = 0.001
        while True:
            session = factory()
            try:
                session.begin()
                session.connection()
                break
            except OperationalError as exc:
                session.close()
                if not _is_busy(exc) or time.monotonic() + pause >= deadline:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 0.01)
        with session:
            session.info["database"] = self
            try:
                yield session
            except BaseException:
                session.rollback()
                raise
            session.commit()

    @property
    def name(self) -> str:
        path = sqlite_path(self.url)
        return str(path) if path else self.url.split("@")[-1]

    def dispose(self) -> None:
        self.engine.dispose()


def _with_driver(url: str) -> str:
    """`postgresql://` means psycopg 3 here (SQLAlchemy's default driver, psycopg2, is not
    installed)."""
    return "postgresql+psycopg://" + url[len("postgresql://"):] if url.startswith(
        "postgresql://") else url



def _read_only_fs(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _prepare_file(path: Path, *, read_only: bool, create: bool) -> None:
    """Refuse a directory, or a missing file where none is to be made (a read-only open; a
    command that only reads a database: a mistyped path made a new empty database and the
    command reported "0 studies" on it); create a new file 0600 ourselves (SQLite would
    create it 0644, and its -wal/-shm files copy the main file's mode)."""
    if path.is_dir():
        raise DatabaseProblem(f"{path} is a directory, not a database file")
    if not path.is_file() and (read_only or not create):
        raise DatabaseProblem(f"{path} does not exist (this opens an existing database only; "
                              "`rrg-review import` or `serve` makes a new one)")
    if read_only:
        return
    if path.exists():
        if _read_only_fs(path):
            raise DatabaseProblem(f"{path} is on a read-only file system; `rrg-review serve "
                                  "--read-only` browses it, `rrg-review check` checks it")
        if not os.access(path, os.W_OK):
            raise DatabaseProblem(f"{path} is not writable by this user; fix its permissions, "
                                  "or browse it with `rrg-review serve --read-only`")
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        os.close(fd)
    except FileExistsError:
        pass
    except OSError as exc:
        raise DatabaseProblem(f"cannot create the database {path}: {_reason(exc)} "
                              f"({path.parent} must be a writable folder)") from None


def open_database(url_or_path: str | Path | None, *, upgrade: bool = True,
                  read_only: bool = False, check: bool = True, create: bool = True,
                  key_file: Path | None = None, key: str | None = None,
                  busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S) -> Database:
    """Open (and by default check and create/upgrade to the latest schema) a database.

    Any problem that makes the database unusable raises `DatabaseProblem` with one sentence:
    a directory, an unwritable file or file system, a file that is not SQLite or not ours, a
    schema newer than this version, a lock held longer than the busy timeout.

    Args:
        url_or_path: a SQLAlchemy URL or a SQLite file path (default ./rrg-review.sqlite).
        upgrade: bring the schema to the latest revision.
        read_only: open for reading only (writes are refused with a sentence).
        check: run the start-up checks (ours, not newer, every column there).
        create: make a SQLite file that does not exist (False: refuse it, for commands that
            read what is stored).
        key_file: where the pseudonym key is kept (default: `<db>.key` beside a SQLite file).
        key: the pseudonym key as hex, chosen by the settings (`$RRG_REVIEW_KEY`); overrides
            the key file.
        busy_timeout_s: how long a writer waits for another one before it is refused
            (the settings' `$RRG_REVIEW_BUSY_TIMEOUT`).
    """
    url = database_url(url_or_path)
    path = sqlite_path(url)
    timeout_s = max(0.0, float(busy_timeout_s))
    connect_args: dict[str, object] = {}
    if path is not None:
        _prepare_file(path, read_only=read_only, create=create)
        connect_args["timeout"] = timeout_s
        if read_only:
            # on a read-only file system SQLite cannot make the WAL index (-shm); nobody can
            # write there either, so the file may be read as immutable
            extra = "&immutable=1" if _read_only_fs(path) else ""
            url = f"sqlite:///file:{path}?mode=ro{extra}&uri=true"
    engine = create_engine(_with_driver(url), connect_args=connect_args)
    if engine.dialect.name == "sqlite":
        _configure_sqlite(engine, read_only=read_only, timeout_s=timeout_s)
    elif engine.dialect.name == "postgresql":
        _configure_postgresql(engine)
    if key_file is None and path is not None:
        key_file = path.with_name(path.name + ".key")
    db = Database(
        url=database_url(url_or_path),
        engine=engine,
        _reads=sessionmaker(engine, expire_on_commit=False),
        _writers=_write_factories(engine),
        read_only=read_only,
        key_file=key_file,
        configured_key=key or None,
        busy_timeout_s=timeout_s,
    )
    try:
        if check:
            check_schema(db)
        if upgrade and not read_only:
            upgrade_schema(db)
        if check:
            check_columns(db)
    except DatabaseProblem:
        engine.dispose()
        raise
    except DBAPIError as exc:
        engine.dispose()
        raise describe(exc, db.name, busy_timeout_s=timeout_s) from None
    return db


def _write_factories(engine: Engine) -> dict[tuple[bool, str], sessionmaker[Session]]:
    """A session factory per (durable, scope) of write transaction (see `Database.write`);
    the options reach the "begin" listeners of `_configure_sqlite`/`_configure_postgresql`."""
    dialect = engine.dialect.name
    factories = {}
    for durable in (True, False):
        for scope in (WHOLE_DATABASE, ROWS):
            options: dict[str, object] = {}
            if dialect == "sqlite":
                options[_BEGIN_OPTION] = "BEGIN IMMEDIATE"
                options[_TURN_OPTION] = True
            elif dialect == "postgresql":
                options[_PG_WRITER_OPTION] = scope
            if not durable:
                if dialect not in ("sqlite", "postgresql"):
                    continue  # `write` falls back to a durable transaction
                options[_RELAXED_OPTION] = True
            bind = engine.execution_options(**options) if options else engine
            factories[(durable, scope)] = sessionmaker(bind, expire_on_commit=False)
    return factories


def describe(exc: BaseException, name: str, *,
             busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S) -> DatabaseProblem:
    """One sentence for a database error (sqlite3's messages are terse and technical)."""
    orig = getattr(exc, "orig", exc)
    message = str(orig).lower()
    if "locked" in message or "busy" in message:
        return DatabaseProblem(
            f"{name} is locked by another process (waited {busy_timeout_s:g} s); try again "
            "when it has finished, or raise the busy timeout (RRG_REVIEW_BUSY_TIMEOUT)",
            retryable=True)
    if "readonly" in message or "read-only" in message:
        return DatabaseProblem(f"{name} cannot be written (read-only file or file system); "
                               "`rrg-review serve --read-only` browses it")
    if "not a database" in message or "file is encrypted" in message:
        return DatabaseProblem(f"{name} is not a SQLite database")
    if "malformed" in message or "corrupt" in message:
        return DatabaseProblem(f"{name} is damaged ({orig}); restore it from a backup "
                               "(`rrg-review backup`) or run `rrg-review check`")
    if "unable to open" in message:
        return DatabaseProblem(f"{name} cannot be opened (missing folder, permissions or a "
                               "read-only file system)")
    if "disk i/o" in message or "disk is full" in message:
        return DatabaseProblem(f"{name} cannot be written: {orig}")
    return DatabaseProblem(f"{name}: database error: {orig}")


def _known_revisions(db: Database) -> set[str]:
    from alembic.script import ScriptDirectory

    return {s.revision for s in ScriptDirectory.from_config(alembic_config(db)).walk_revisions()}


def check_schema(db: Database) -> None:
    """Is this an rrg-review database this version can open, and (unless read-only) can we
    write it? Cheap: a few catalogue reads and one empty write transaction."""
    name = db.name
    with db.engine.connect() as conn:
        tables = set(inspect(conn).get_table_names())
        if tables and not (tables & _OUR_TABLES):
            raise DatabaseProblem(f"{name} is not an rrg-review database (it holds other "
                                  f"tables: {', '.join(sorted(tables)[:5])})")
        if tables and "alembic_version" not in tables:
            raise DatabaseProblem(f"{name} is not an rrg-review database (no schema version)")
        if "alembic_version" in tables:
            version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
            if version is not None and version not in _known_revisions(db):
                raise DatabaseProblem(
                    f"{name} has schema revision {version}, newer than this version of "
                    "rrg-review understands; upgrade rrg-review to open it")
    if not db.read_only and db.engine.dialect.name == "sqlite":
        probe = db.engine.execution_options(**{_BEGIN_OPTION: "BEGIN IMMEDIATE"})
        with probe.connect() as conn:
            conn.begin()
            conn.rollback()


def check_columns(db: Database) -> None:
    """A database at the latest revision has every table and column this version uses.

    A file stamped with the right revision but written by another build (a development
    branch's migration under the same number) would otherwise open and then fail every query
    with "no such column"; this says so once, at start-up, naming what is missing."""
    from alembic.script import ScriptDirectory

    from rrg_review.db.models import Base

    head = ScriptDirectory.from_config(alembic_config(db)).get_current_head()
    with db.engine.connect() as conn:
        inspector = inspect(conn)
        if "alembic_version" not in inspector.get_table_names():
            return
        if conn.execute(text("SELECT version_num FROM alembic_version")).scalar() != head:
            return  # an older schema opened read-only: the queries it may run are older too
        missing: list[str] = []
        for table in Base.metadata.sorted_tables:
            if not inspector.has_table(table.name):
                missing.append(table.name)
                continue
            have = {c["name"] for c in inspector.get_columns(table.name)}
            missing += [f"{table.name}.{c.name}" for c in table.columns if c.name not in have]
    if missing:
        listed = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6
                                           else "")
        raise DatabaseProblem(
            f"{db.name} says it has schema revision {head} but lacks {listed}: it was written "
            "by a different build of rrg-review; open it with the build that made it, restore "
            "a backup, or start a new database")


def integrity_problems(db: Database, *, full: bool = False) -> list[str]:
    """SQLite's quick_check (or integrity_check) and foreign_key_check; [] when all is well."""
    if db.engine.dialect.name != "sqlite":
        return []
    pragma = "integrity_check" if full else "quick_check"
    with db.engine.connect() as conn:
        found = [r[0] for r in conn.exec_driver_sql(f"PRAGMA {pragma}")]
        problems = [] if found == ["ok"] else found
        problems += [f"foreign key: {r[0]} row {r[1]} -> {r[2]}"
                     for r in conn.exec_driver_sql("PRAGMA foreign_key_check")]
    return problems


def backup(db: Database, out: Path) -> Path:
    """An online, consistent copy with SQLite's backup API (readers and writers may go on),
    written 0600 next to `out` and moved into place only once complete and checked."""
    path = sqlite_path(db.url)
    if path is None:
        raise DatabaseProblem(f"{db.name}: backup copies SQLite files only; use your "
                              "database server's own backup tool")
    out = Path(out).expanduser().resolve()
    if out == path:
        raise DatabaseProblem(f"{out} is the database itself; choose another file")
    if out.is_dir():
        raise DatabaseProblem(f"{out} is a directory; give a file name")
    if not out.parent.is_dir():
        raise DatabaseProblem(f"cannot write the backup: {out.parent} does not exist")

    def copy_into(tmp: Path) -> None:
        source = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=db.busy_timeout_s)
        target = sqlite3.connect(tmp)
        try:
            source.backup(target, pages=1024)
            result = target.execute("PRAGMA quick_check").fetchone()[0]
            target.execute("PRAGMA journal_mode=DELETE")
        finally:
            target.close()
            source.close()
        if result != "ok":
            raise DatabaseProblem(f"the copy of {db.name} failed its check ({result})")

    try:
        atomic_write(out, copy_into, mode=0o600)
    except sqlite3.Error as exc:
        raise describe(exc, db.name, busy_timeout_s=db.busy_timeout_s) from None
    except OSError as exc:
        raise DatabaseProblem(f"cannot write the backup {out}: {_reason(exc)}") from None
    log.info("backup of %s written to %s", db.name, out)
    return out


# the advisory lock key of schema upgrades on PostgreSQL (any fixed 64-bit number; the rows'
# write locks of `Database.write` use keys of their own)
_UPGRADE_LOCK = 0x7272_6775_7067_7264


def alembic_config(db: Database) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).with_name("migrations")))
    cfg.set_main_option("sqlalchemy.url", db.url.replace("%", "%%"))
    return cfg


def upgrade_schema(db: Database, revision: str = "head") -> None:
    """Bring the schema to `revision` with Alembic (the app and the CLI call this on start)."""
    from alembic import command

    cfg = alembic_config(db)
    # one upgrade at a time per database, the lock taken before Alembic reads the version:
    # two commands started together on a new database both created Alembic's version table,
    # and one stopped (PostgreSQL's duplicate key; SQLite's "table alembic_version already
    # exists"): a trial. The second now waits, then finds the schema at head. (SQLite: the
    # write lock from BEGIN IMMEDIATE; PostgreSQL: an advisory lock released at commit.)
    engine = db.engine.execution_options(**{_BEGIN_OPTION: "BEGIN IMMEDIATE"})
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"),
                               {"key": _UPGRADE_LOCK})
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, revision)
