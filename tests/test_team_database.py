"""A reading team's shared database: every test here runs on SQLite and on a real PostgreSQL
server (started once per session by conftest), plus `migrate-db` from SQLite into PostgreSQL."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime

import numpy as np
import pytest
from sqlalchemy import func, select

from rrg_review.app.accounts.service import AccountService
from rrg_review.app.cli import main as cli
from rrg_review.app.review.service import ReviewService
from rrg_review.app.setup import seed_demo
from rrg_review.app.worklist.service import WorklistService
from rrg_review.db.metric_cache import DatabaseScoreCache
from rrg_review.db.models import Base, MetricResult, Rating
from tests import layouts

pytestmark = pytest.mark.both_databases


def _utc(row) -> tuple:
    """A row with its timestamps in UTC (SQLite gives them back without their zone)."""
    return tuple(v.replace(tzinfo=UTC) if isinstance(v, datetime) and v.tzinfo is None
                 else v.astimezone(UTC) if isinstance(v, datetime) else v for v in row)


def run_together(*calls) -> list:
    """Start every call at once in its own thread (a barrier lines them up); their results."""
    barrier = threading.Barrier(len(calls))
    out: list = [None] * len(calls)

    def run(i: int, call) -> None:
        barrier.wait()
        try:
            out[i] = call()
        except Exception as exc:  # returned, so the test sees it
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def test_metric_cache_keeps_the_first_of_concurrent_duplicates(db):
    cache = DatabaseScoreCache(db)
    items = {(f"h{i}", f"r{i}"): {"score": i / 10} for i in range(300)}
    results = run_together(*[lambda: cache.put_many("bertscore", "1", "m", items)] * 4)
    assert results == [None] * 4  # no IntegrityError from the losers
    cache.put_many("bertscore", "1", "m", {("h1", "r1"): {"score": 99.0}})
    got = cache.get_many("bertscore", "1", "m", [*list(items), ("nope", "nope")])
    assert len(got) == 300 and got[("h1", "r1")] == {"score": 0.1}
    with db.read() as session:
        assert session.scalar(select(func.count()).select_from(MetricResult)) == 300
    matrix = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert run_together(*[lambda: cache.put_matrix("bleu", "1", "", "d", matrix)] * 3) == [None] * 3
    cache.put_matrix("bleu", "1", "", "d", matrix * 2)
    assert np.array_equal(cache.get_matrix("bleu", "1", "", "d"), matrix * 2)


def test_concurrent_ratings_and_saves_get_distinct_numbers(db, settings):
    seed_demo(db, settings)
    review = ReviewService(db)
    reader = AccountService(review.db).local_reader()
    WorklistService(review.db).assign(reader)
    study = WorklistService(review.db).items(reader)[0].study_id
    ratings = run_together(*[lambda i=i: review.rate(reader, study, likert=1 + i % 5,
                                                      acceptable=None) for i in range(5)])
    assert not [r for r in ratings if isinstance(r, Exception)]
    with db.read() as session:
        numbers = session.scalars(select(Rating.number).where(Rating.study_id == study)).all()
    assert sorted(numbers) == [1, 2, 3, 4, 5]
    # saves that each build on the one before (a fast typist's autosaves) all land in order
    base = None
    for i in range(3):
        base = review.save(reader, study, "findings", f"text {i}", base and base.number).number
        base = review.history(reader, study, "findings")[-1]
    assert [r.number for r in review.history(reader, study, "findings")] == [1, 2, 3]


def test_every_command_on_the_database(settings, tmp_path, rg1_small, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    root = layouts.rexgradient(tmp_path / "rex", rg1_small)
    db = ["--db", settings.db_url, "--data-dir", str(settings.data_dir)]
    assert cli(["import", str(root), *db]) == 0
    assert "3 added, 0 updated, 0 unchanged, 0 failed (4 images added)" in capsys.readouterr().out
    assert cli(["import", str(root), *db]) == 0
    assert "0 added, 0 updated, 3 unchanged, 0 failed" in capsys.readouterr().out
    assert cli(["studies", *db]) == 0
    assert "3 studies, 2 patients, 4 images" in capsys.readouterr().out
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("long enough pw\n"))
    assert cli(["readers", "add", "dr.kim", "--password-stdin", *db]) == 0
    assert "3 studies on the worklist" in capsys.readouterr().out
    assert cli(["draft", "--model", "retrieval", *db]) == 0
    assert "6 sections drafted, 0 failed" in capsys.readouterr().out
    out = tmp_path / "report.json"
    assert cli(["export", "--format", "json", "--out", str(out), *db]) == 0
    capsys.readouterr()
    assert json.loads(out.read_text())  # a report was written from the server's rows
    hyps, refs = tmp_path / "h.jsonl", tmp_path / "r.jsonl"
    hyps.write_text("\n".join(json.dumps({"id": i, "findings": t}) for i, t in
                              enumerate(["the lungs are clear", "small effusion"])))
    refs.write_text("\n".join(json.dumps({"id": i, "findings": t}) for i, t in
                              enumerate(["the lungs are clear", "no effusion"])))
    for _ in range(2):  # the second run reads the scores back from the database cache
        assert cli(["score", "--predictions", str(hyps), "--references", str(refs),
                    "--metrics", "bleu4,rougeL", "--db", settings.db_url]) == 0
    assert "rougeL" in capsys.readouterr().out
    with settings.open_database().read() as session:  # the scores were cached there
        assert session.scalar(select(func.count()).select_from(MetricResult)) > 0


@pytest.mark.sqlite_only
def test_migrate_db_copies_a_single_user_database_into_postgresql(
        settings, tmp_path, capsys, request):
    server = request.getfixturevalue("postgres_server")
    if isinstance(server, str):
        pytest.skip(server)
    source = settings.open_database()
    seed_demo(source, settings)
    review = ReviewService(source)
    reader = AccountService(review.db).local_reader()
    WorklistService(review.db).assign(reader)
    study = WorklistService(review.db).items(reader)[0].study_id
    review.save(reader, study, "findings", "edited on the workstation", None)
    review.rate(reader, study, likert=4, acceptable=True)
    DatabaseScoreCache(source).put_many("bleu4", "1", "", {("h", "r"): {"score": 0.5}})
    # a reader study (its composite-key tables and JSON balance table travel too)
    from rrg_review.app.reader_study.service import ReaderStudyService
    from rrg_review.reader_study.design import load_design
    design = tmp_path / "rs.yaml"
    design.write_text("name: rs\ncases: {source: demo}\nreaders: [local]\n"
                      "arms: [unassisted, reference]\ndesign: parallel\nseed: 4\n")
    assert ReaderStudyService(source, ()).create(load_design(design)).readings == 4
    # a signed-in browser and a login back-off on the workstation: neither travels to the team
    # server (its readers sign in again there)
    from rrg_review.app.accounts.service import LOCAL_READER, LoginThrottle, SessionStore
    SessionStore(source).create(LOCAL_READER)
    LoginThrottle(source).failure("account:alice")
    source.dispose()
    url = server.create_database("rrg_migrate")
    try:
        assert cli(["migrate-db", "--from", settings.db_url, "--to", url]) == 0
        out = capsys.readouterr().out
        assert "copied" in out and "1 revision" in out and "1 rating" in out
        source, target = settings.open_database(), settings.open_database(url)
        copied = 0
        for table in Base.metadata.sorted_tables:  # row for row, ids included
            with source.engine.connect() as a, target.engine.connect() as b:
                order = list(table.primary_key.columns)
                before = [_utc(r) for r in a.execute(select(table).order_by(*order))]
                after = [_utc(r) for r in b.execute(select(table).order_by(*order))]
            if table.name in ("web_session", "login_throttle"):
                assert len(before) == 1 and after == [], table.name
                continue
            assert before == after, table.name
            copied += len(after)
        assert f"copied {copied} rows" in out
        team = ReviewService(target)
        assert team.history(reader, study, "findings")[-1].text == "edited on the workstation"
        # new rows on the server get fresh ids (the id sequences moved past the copied ones)
        saved = team.save(reader, study, "findings", "edited on the server", 1)
        assert saved.number == 2
        team.rate(reader, study, likert=5, acceptable=True)
        # a second copy into a database that holds data is refused and writes nothing
        assert cli(["migrate-db", "--from", settings.db_url, "--to", url]) == 1
        assert "already holds data" in capsys.readouterr().err
        assert len(team.history(reader, study, "findings")) == 2
        assert cli(["migrate-db", "--from", str(tmp_path / "none.sqlite"), "--to", url]) == 2
        assert "no such database file" in capsys.readouterr().err
        source.dispose()
        target.dispose()
    finally:
        server.drop_database(url)


def test_two_commands_starting_together_on_a_new_database_both_open_it(settings):
    """Two imports started at once on a new team database: both created Alembic's version
    table and one stopped with PostgreSQL's duplicate-key error (a trial; SQLite: "table
    alembic_version already exists"). Schema upgrades take turns: three processes opening a
    new database at once all open it at the latest schema."""
    import subprocess
    import sys

    from tests.browser import ROOT

    opening = ("import sys; from rrg_review.app.settings import Settings; "
               "Settings.from_args(sys.argv[1]).open_database().dispose()")
    runs = [subprocess.Popen([sys.executable, "-c", opening, settings.db_url], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(3)]
    said = [run.communicate(timeout=120) for run in runs]
    assert [run.returncode for run in runs] == [0, 0, 0], said
    settings.open_database().dispose()  # (checked: at head, every column there)
