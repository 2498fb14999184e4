"""Engine and session set-up: SQLite in WAL mode with foreign keys, schema upgraded by Alembic.

A bare path means a SQLite file; `postgresql+psycopg://user@host/db` a team's PostgreSQL server
(tested against a real server); other SQLAlchemy URLs are passed through untested.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

DEFAULT_DB = "rrg-review.sqlite"
_BEGIN_OPTION = "rrg_begin"


def database_url(value: str | Path | None) -> str:
    """A SQLAlchemy URL from a URL or a file path (default ./rrg-review.sqlite)."""
    text = str(value or DEFAULT_DB)
    if "://" in text:
        return text
    return f"sqlite:///{Path(text).expanduser().resolve()}"


def sqlite_path(url: str) -> Path | None:
    """The file behind a sqlite URL, or None for other databases and in-memory SQLite."""
    prefix = "sqlite:///"
    if url.startswith(prefix) and url[len(prefix):] not in ("", ":memory:"):
        return Path(url[len(prefix):])
    return None


def _configure_sqlite(engine: Engine) -> None:
    """WAL, foreign keys, synchronous=NORMAL, and BEGIN issued by us (not by pysqlite).

    pysqlite's own transaction handling defers BEGIN until the first write; taking it over lets
    writers start with BEGIN IMMEDIATE, so two writers queue on the lock (busy_timeout) instead of
    failing half-way through a read-then-write.
    """

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:
        dbapi_connection.isolation_level = None
        cur = dbapi_connection.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA busy_timeout=10000")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn) -> None:
        conn.exec_driver_sql(conn.get_execution_options().get(_BEGIN_OPTION, "BEGIN"))


# -- PostgreSQL (a reading team's shared server) ------------------------------------------------
_PG_WRITER_OPTION = "rrg_pg_one_writer"
_PG_WRITER_LOCK = 0x7272_6776  # an arbitrary advisory-lock key owned by rrg-review ("rrgv")


def _configure_postgresql(engine: Engine) -> None:
    """Writers take one advisory lock per transaction, so writes are serialised as SQLite's
    BEGIN IMMEDIATE serialises them: a read-then-write (next revision number, "was this edited
    since?") sees every committed write before it and two saves can never both land. Reads do
    not take the lock and never wait."""

    @event.listens_for(engine, "begin")
    def _on_begin(conn) -> None:
        if conn.get_execution_options().get(_PG_WRITER_OPTION):
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_WRITER_LOCK})")


@dataclass
class Database:
    """An engine plus session factories; `write()` is the one way to change data."""

    url: str
    engine: Engine
    _reads: sessionmaker[Session]
    _writes: sessionmaker[Session]

    @contextmanager
    def read(self) -> Iterator[Session]:
        with self._reads() as session:
            yield session

    @contextmanager
    def write(self) -> Iterator[Session]:
        """One transaction: committed when the block ends, rolled back entirely on any error."""
        with self._writes() as session, session.begin():
            yield session

    def dispose(self) -> None:
        self.engine.dispose()


def _with_driver(url: str) -> str:
    """`postgresql://` means psycopg 3 here (SQLAlchemy's default driver, psycopg2, is not
    installed)."""
    return "postgresql+psycopg://" + url[len("postgresql://"):] if url.startswith(
        "postgresql://") else url


def open_database(url_or_path: str | Path | None, *, upgrade: bool = True) -> Database:
    """Open (and by default create/upgrade to the latest schema) a database."""
    url = database_url(url_or_path)
    path = sqlite_path(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(_with_driver(url))
    writes_bind = engine
    if engine.dialect.name == "sqlite":
        _configure_sqlite(engine)
        writes_bind = engine.execution_options(**{_BEGIN_OPTION: "BEGIN IMMEDIATE"})
    elif engine.dialect.name == "postgresql":
        _configure_postgresql(engine)
        writes_bind = engine.execution_options(**{_PG_WRITER_OPTION: True})
    db = Database(
        url=url,
        engine=engine,
        _reads=sessionmaker(engine, expire_on_commit=False),
        _writes=sessionmaker(writes_bind, expire_on_commit=False),
    )
    if upgrade:
        upgrade_schema(db)
    return db


def alembic_config(db: Database):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).with_name("migrations")))
    cfg.set_main_option("sqlalchemy.url", db.url.replace("%", "%%"))
    return cfg


def upgrade_schema(db: Database, revision: str = "head") -> None:
    """Bring the schema to `revision` with Alembic (the app and the CLI call this on start)."""
    from alembic import command

    cfg = alembic_config(db)
    with db.engine.begin() as connection:
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, revision)
