"""Shared fixtures: a real database per test (a SQLite file; for tests marked `both_databases`
also a database on a real PostgreSQL server), real radiographs, the shared data folder."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from rrg_review.app.settings import Settings
from rrg_review.db.engine import Database
from tests import module_seconds
from tests.db_templates import POSTGRES_KEY, Templates, copy_tree

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
IU_ARCHIVE = SHARED_DATA / "NLMCXR_reports.tgz"
# scrypt's N for the tests' passwords (RRG_REVIEW_PASSWORD_COST, and `password_cost=` where a
# test makes an AccountService itself): 2^14, 16 ms a hash where the default 2^17 takes 0.5 s
# of a core and 128 MiB; the suite hashed about 210 passwords. The tests of the hashing itself
# (test_accounts, test_review) and the login flood (test_server_origins) keep the default.
TEST_PASSWORD_COST = 2**14


def rg1(name: str = "RG1_UNCI.dcm") -> str:
    from pydicom.data import get_testdata_file

    return get_testdata_file(name)


def pytest_configure(config: pytest.Config) -> None:
    """Imports check their images in-process (no process pool per import, also in the CLI
    subprocesses the tests start); the tests of the pool itself pass `workers=2`. Passwords are
    hashed at TEST_PASSWORD_COST by the apps and commands the tests start."""
    os.environ.setdefault("RRG_REVIEW_IMPORT_WORKERS", "1")
    os.environ.setdefault("RRG_REVIEW_PASSWORD_COST", str(TEST_PASSWORD_COST))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules longest first, by their seconds in a recent run (tests/module_seconds.py); a
    module not measured yet goes by its marks: with browser tests, as long as the longest
    measured, then slow ones, then the rest. `make test` hands whole modules to its
    pytest-xdist workers in this order (`--dist loadfile --no-loadscope-reorder`): the long
    ones start first, so the short ones fill the gaps at the end instead of one worker
    running a long module alone."""
    measured = module_seconds.load()
    longest = max(measured.values(), default=0.0)

    def guess(item: pytest.Item) -> float:
        if item.get_closest_marker("browser"):
            return longest
        return 30.0 if item.get_closest_marker("slow") else 1.0

    seconds: dict[str, float] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        if module not in seconds:
            seconds[module] = measured.get(module, 0.0)
        if module not in measured:
            seconds[module] = max(seconds[module], guess(item))
    items.sort(key=lambda item: -seconds[item.nodeid.split("::", 1)[0]])


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests marked `both_databases` that use a database run on SQLite and on PostgreSQL."""
    if ("db_backend" in metafunc.fixturenames
            and metafunc.definition.get_closest_marker("both_databases")
            and not metafunc.definition.get_closest_marker("sqlite_only")):
        metafunc.parametrize("db_backend", ["sqlite", "postgresql"], indirect=True)


@pytest.fixture
def db_backend(request: pytest.FixtureRequest) -> str:
    return getattr(request, "param", "sqlite")


def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """The folder a pytest-xdist run's workers share (each worker's base folder lies in it,
    and it is its controller's), or None in a run of one process."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return None
    return tmp_path_factory.getbasetemp().parent


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory):
    """One real PostgreSQL server for the run (or the reason there is none): a worker's
    server is the run's, stopped by its controller (`pytest_sessionfinish`)."""
    from tests.postgres_server import NoPostgres, shared_server, start_server

    shared = run_folder(tmp_path_factory)
    try:
        server = start_server() if shared is None else shared_server(shared / "postgres")
    except NoPostgres as exc:
        yield f"no PostgreSQL server could be started: {exc}"
        return
    yield server
    if shared is None:
        server.stop()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The controller of a pytest-xdist run stops the PostgreSQL server its workers shared,
    once every worker is done (their base folders lie in its own, see `run_folder`)."""
    if os.environ.get("PYTEST_XDIST_WORKER") or not getattr(session.config.option,
                                                            "numprocesses", None):
        return
    from tests.postgres_server import stop_shared_server

    factory = session.config._tmp_path_factory  # (private: xdist itself reads it there)
    stop_shared_server(factory.getbasetemp() / "postgres")


@pytest.fixture(scope="session")
def database_templates(tmp_path_factory: pytest.TempPathFactory,
                       request: pytest.FixtureRequest) -> Iterator[Templates]:
    """The session's template databases (tests/db_templates.py), built on first use."""
    shared = run_folder(tmp_path_factory)  # the run's workers share the templates
    templates = Templates(tmp_path_factory.mktemp("db-templates"),
                          lambda: request.getfixturevalue("postgres_server"),
                          shared / "db-templates" if shared else None)
    yield templates
    templates.drop_postgres_templates()


def _template_kind(request: pytest.FixtureRequest) -> str | None:
    """Which template the test's database is copied from: the richest state its fixtures ask
    for (`drafted_db`, `demo_db`, `db`), or none (an empty database: the test opens it)."""
    wanted = request.fixturenames
    for kind, fixture in (("review_session", "review_session_db"), ("drafted", "drafted_db"),
                          ("demo", "demo_db"), ("migrated", "db")):
        if fixture in wanted:
            return kind
    return None


@pytest.fixture
def settings(tmp_path: Path, db_backend: str, request: pytest.FixtureRequest):
    """A fresh database per test: a SQLite file, or a new database on the test server.

    A test that uses the `db` fixture gets a copy of a database migrated once per session;
    `demo_db` and `drafted_db` a copy of one that also holds the demo studies (drafted). A test
    that uses `settings` alone gets no database (a new SQLite path, an empty server database)."""
    kind = _template_kind(request)
    templates = request.getfixturevalue("database_templates") if kind else None
    if db_backend == "sqlite":
        settings = Settings.from_args(str(tmp_path / "test.sqlite"))
        if templates is not None and kind is not None:
            templates.copy_sqlite(kind, settings)
        yield settings
        return
    server = request.getfixturevalue("postgres_server")
    if isinstance(server, str):
        pytest.skip(server)
    # a server database has no file to keep the pseudonym key beside: a team sets the key in
    # the environment (README, "Deploying for a team"), and so does this test
    request.getfixturevalue("monkeypatch").setenv("RRG_REVIEW_KEY", POSTGRES_KEY)
    if templates is not None and kind is not None:
        url = server.create_database(template=templates.postgres_template(kind))
        settings = Settings.from_args(url, str(tmp_path / "data"))
        copy_tree(templates.postgres_data(kind), settings.data_dir)
    else:
        url = server.create_database()
        settings = Settings.from_args(url, str(tmp_path / "data"))
    yield settings
    server.drop_database(url)


@pytest.fixture
def db(settings: Settings) -> Iterator[Database]:
    """The test's own database at the latest schema (opened through `open_database`, which
    checks it and finds nothing to upgrade)."""
    database = settings.open_database()
    yield database
    database.dispose()


@pytest.fixture
def demo_db(db: Database) -> Database:
    """The test's own database holding the demo studies (as `seed_demo` stores them); the same
    object as `db`."""
    return db


@pytest.fixture
def drafted_db(db: Database) -> Database:
    """`demo_db` with the local reader's worklist assigned and every demo study drafted by
    the retrieval preset; the same object as `db`."""
    return db


@pytest.fixture
def review_session_db(db: Database, db_backend: str, database_templates: Templates
                      ) -> tuple[Database, list[int], tuple[str, str]]:
    """A review session (tests/export_session.py: the demo studies drafted by two models,
    reviewed by two readers), copied; with its study ids and the two findings texts
    `build_review_session` returns."""
    ids, texts = database_templates.results[(db_backend, "review_session")]
    return db, list(ids), (texts[0], texts[1])


@pytest.fixture
def iu_archive() -> Path:
    if not IU_ARCHIVE.is_file():
        pytest.skip(f"shared IU X-ray archive not found at {IU_ARCHIVE} (../shared is absent)")
    return IU_ARCHIVE


@pytest.fixture(scope="session")
def rg1_small() -> np.ndarray:
    """The real RG1 radiograph as a 16-bit display image (bone white), shrunk to 245x230."""
    from rrg_review.studies.pixels import decode
    from rrg_review.studies.records import ImageSource

    image = decode(ImageSource(name="RG1", path=rg1()))
    return image.display[::8, ::8].copy()


@pytest.fixture(autouse=True)
def _logging_put_back() -> Iterator[None]:
    """The CLI's in-process runs set up logging (a stderr handler on the root logger): put the
    root logger and our packages' levels back after each test, or a later test's log record
    goes to a stderr capture that pytest has already closed ("I/O operation on closed file")."""
    from rrg_review.app.logs import OUR_PACKAGES

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {name: logging.getLogger(name).level for name in OUR_PACKAGES}
    yield
    for handler in list(root.handlers):  # exactly the classes configure_logging adds (pytest's
        if handler not in handlers and type(handler) in (logging.StreamHandler,  # own are
                                                         logging.FileHandler):  # subclasses)
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)
    for name, was in levels.items():
        logging.getLogger(name).setLevel(was)
