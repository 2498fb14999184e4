"""The session's template databases (tests/db_templates.py) give each test a database of its
own: what one test writes never reaches the template or another test's copy, `db` is as empty
as a new database, and the copies hold what the real code stored."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from rrg_review.app.accounts.service import AccountService
from rrg_review.app.settings import Settings
from rrg_review.app.worklist.service import WorklistService
from rrg_review.db.models import Draft, Study, WorklistItem
from tests.conftest import TEST_PASSWORD_COST

pytestmark = pytest.mark.both_databases


def _count(db, model) -> int:
    with db.read() as session:
        return session.scalar(select(func.count()).select_from(model)) or 0


def test_db_is_a_new_database_at_the_latest_schema(db, settings):
    assert _count(db, Study) == 0
    if settings.db_url.startswith("sqlite"):  # no pseudonym key until one is needed
        assert not list(settings.data_dir.parent.glob("*.key"))


def test_a_write_to_a_copy_reaches_neither_the_template_nor_the_next_copy(
        demo_db, settings, database_templates, db_backend, tmp_path):
    assert _count(demo_db, Study) == 4 and _count(demo_db, Draft) == 0
    AccountService(demo_db, password_cost=TEST_PASSWORD_COST).add("dr.copy", "a-fine-password")
    with demo_db.write() as session:
        session.execute(Study.__table__.update().values(indication="changed by a test"))
    # the next test's copy of the same template
    if db_backend == "sqlite":
        again = Settings.from_args(str(tmp_path / "again.sqlite"))
        database_templates.copy_sqlite("demo", again)
        url = again.db_url
    else:
        server = database_templates._server
        url = server.create_database(template=database_templates.postgres_template("demo"))
    other = settings.open_database(url)
    try:
        assert AccountService(other).account("dr.copy") is None
        with other.read() as session:
            assert "changed by a test" not in session.scalars(select(Study.indication)).all()
    finally:
        other.dispose()
        if db_backend != "sqlite":
            server.drop_database(url)


def test_drafted_db_holds_the_local_readers_drafted_worklist(drafted_db):
    reader = AccountService(drafted_db).local_reader()
    assert len(WorklistService(drafted_db).items(reader)) == _count(drafted_db, WorklistItem) == 4
    assert _count(drafted_db, Draft) > 0


def test_the_postgresql_template_takes_no_connections(database_templates):
    server = database_templates.postgres()
    if isinstance(server, str):
        pytest.skip(server)
    name = database_templates.postgres_template("migrated")
    url = server.admin_url.rsplit("/", 1)[0] + "/" + name
    with pytest.raises(Exception, match="not currently accepting connections"):
        Settings.from_args(url).open_database().dispose()


@pytest.mark.sqlite_only
def test_workers_sharing_a_folder_build_each_sqlite_template_once(tmp_path, monkeypatch):
    """The run's pytest-xdist workers share the SQLite templates: the first that wants a kind
    builds it, the next finds it, step result and all; a build cut off before its end (a
    killed worker) is built again, not taken as done."""
    from tests import db_templates
    from tests.db_templates import Templates

    calls: list[str] = []

    def step(db, settings) -> dict[str, list[int]]:
        calls.append(settings.db_url)
        return {"ids": [1, 2]}

    monkeypatch.setitem(db_templates._STEPS, "demo", ("migrated", step))
    shared = tmp_path / "shared"

    def worker(n: int) -> Templates:
        return Templates(tmp_path / f"gw{n}", lambda: "no server here", shared)

    first, second = worker(0), worker(1)
    assert first.sqlite("demo") == second.sqlite("demo")
    assert len(calls) == 1
    assert first.results[("sqlite", "demo")] == second.results[("sqlite", "demo")] == {
        "ids": [1, 2]}
    copy = Settings.from_args(str(tmp_path / "copy.sqlite"))
    second.copy_sqlite("demo", copy)
    copy.open_database().dispose()  # a whole database at the latest schema
    (shared / "sqlite" / "demo.built.json").unlink()  # as if its builder was killed
    assert worker(2).sqlite("demo").is_file() and len(calls) == 2


@pytest.mark.sqlite_only
def test_workers_sharing_a_folder_build_each_postgresql_template_once(
        postgres_server, tmp_path, monkeypatch):
    """The same on the run's one PostgreSQL server: the first worker makes the template
    database, the next copies it by the name the first recorded."""
    from tests import db_templates
    from tests.db_templates import Templates

    if isinstance(postgres_server, str):
        pytest.skip(postgres_server)
    if postgres_server.folder is None:
        pytest.skip("an RRG_TEST_POSTGRES_URL server: each worker keeps its own templates")
    calls: list[str] = []

    def step(db, settings) -> list[int]:
        calls.append(settings.db_url)
        return [3, 4]

    monkeypatch.setitem(db_templates._STEPS, "demo", ("migrated", step))
    first, second = (Templates(tmp_path / f"gw{n}", lambda: postgres_server, tmp_path / "shared")
                     for n in (0, 1))
    name = first.postgres_template("demo")
    assert second.postgres_template("demo") == name and len(calls) == 1
    assert second.results[("postgresql", "demo")] == [3, 4]
    assert second.postgres_data("demo") == first.postgres_data("demo")
    url = postgres_server.create_database(template=name)
    try:
        Settings.from_args(url).open_database().dispose()  # at the latest schema
    finally:
        postgres_server.drop_database(url)


def test_the_run_shares_one_postgresql_server_its_controller_stops(tmp_path):
    """What each pytest-xdist worker gets from `shared_server`: the server the first one
    started; after `stop_shared_server` (the controller, the run over) it is gone. A start
    that failed is the same sentence for every worker."""
    import psycopg

    from tests.postgres_server import NoPostgres, shared_server, stop_shared_server

    folder = tmp_path / "postgres"
    try:
        one = shared_server(folder)
    except NoPostgres as exc:
        pytest.skip(str(exc))
    two = shared_server(folder)
    assert one.admin_url == two.admin_url and one.folder == two.folder
    url = two.create_database()
    one.drop_database(url)
    if one.folder is not None:  # (not one given by RRG_TEST_POSTGRES_URL: never stopped)
        stop_shared_server(folder)
        with pytest.raises(psycopg.OperationalError):
            one._admin()
        assert not one.folder.exists()
    failed = tmp_path / "failed"
    failed.mkdir()
    (failed / "failed.txt").write_text("initdb failed (exit 1): no space left")
    with pytest.raises(NoPostgres, match="no space left"):
        shared_server(failed)
