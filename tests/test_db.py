"""The SQLite store: pragmas, migrations matching the ORM, atomic writes, priors, append-only."""

from __future__ import annotations

from datetime import date

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from rrg_review.db.engine import open_database
from rrg_review.db.models import Base, Reader, Revision, Study
from rrg_review.db.store import add_study, counts, priors, pseudonym
from rrg_review.studies.records import ReportSections, StudyRecord

pytestmark = pytest.mark.both_databases  # SQLite and a real PostgreSQL server


def record(key: str, patient: str, day: date | None) -> StudyRecord:
    return StudyRecord(source="test", study_key=key, patient_key=patient, origin=key,
                       study_date=day, reference=ReportSections("f", "i"))


@pytest.mark.sqlite_only
def test_sqlite_pragmas(db):
    with db.engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
        assert conn.execute(text("PRAGMA synchronous")).scalar() in (1, 2, 3)  # NORMAL or stricter


def test_migrations_produce_exactly_the_orm_schema(db):
    with db.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
        version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    assert diff == []
    assert version == _head(db)


def _head(db) -> str:
    from alembic.script import ScriptDirectory

    from rrg_review.db.engine import alembic_config

    return ScriptDirectory.from_config(alembic_config(db)).get_current_head()


def test_a_database_at_the_first_revision_upgrades_to_head(tmp_path):
    from rrg_review.db.engine import upgrade_schema

    old = open_database(tmp_path / "old.sqlite", upgrade=False)
    upgrade_schema(old, "0001")
    upgrade_schema(old, "head")
    with old.engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    old.dispose()


def test_reopening_an_upgraded_database_is_a_no_op(settings, db):
    with db.write() as s:
        add_study(s, record("a", "p", None), [])
    again = settings.open_database()
    with again.read() as s:
        assert counts(s).studies == 1
    again.dispose()


def test_a_failed_write_leaves_nothing(db):
    # the failure must come after the write, inside its transaction
    with pytest.raises(RuntimeError), db.write() as s:  # noqa: PT012
        add_study(s, record("a", "p", None), [])
        raise RuntimeError("boom")
    with db.read() as s:
        assert counts(s).studies == 0 and counts(s).patients == 0


def test_priors_are_the_same_patients_earlier_studies(db):
    with db.write() as s:
        add_study(s, record("old", "p1", date(2019, 1, 1)), [])
        add_study(s, record("mid", "p1", date(2020, 1, 1)), [])
        current = add_study(s, record("new", "p1", date(2021, 1, 1)), [])
        add_study(s, record("other", "p2", date(2018, 1, 1)), [])
        current_id = current.id
    with db.read() as s:
        study = s.get(Study, current_id)
        assert [p.study_key for p in priors(s, study)] == ["mid", "old"]


def test_revisions_are_append_only_per_number(db):
    with db.write() as s:
        study = add_study(s, record("a", "p", None), [])
        reader = Reader(name="r")
        s.add(reader)
        s.flush()
        s.add(Revision(reader_id=reader.id, study_id=study.id, section="findings", number=1,
                       text="one"))
    with pytest.raises(IntegrityError), db.write() as s:
        s.add(Revision(reader_id=reader.id, study_id=study.id, section="findings", number=1,
                       text="clash"))
    with db.read() as s:
        assert [r.text for r in s.query(Revision).all()] == ["one"]


def test_foreign_keys_are_enforced(db):
    with pytest.raises(IntegrityError), db.write() as s:
        s.add(Revision(reader_id=999, study_id=999, section="findings", number=1, text="x"))


def test_pseudonyms_are_stable_and_hide_the_identifier(db):
    with db.write() as s:
        a = pseudonym(s, "MRN-123")
        b = pseudonym(s, "MRN-123")
        c = pseudonym(s, "MRN-124")
    assert a == b != c and "123" not in a


def test_a_measurement_commits_without_fsync_and_the_next_write_is_durable_again(db):
    """Database.write(durable=False) (active time only): synchronous=NORMAL on SQLite,
    synchronous_commit off on PostgreSQL, for that transaction only."""
    sqlite = db.engine.dialect.name == "sqlite"
    ask = text("PRAGMA synchronous" if sqlite else "SHOW synchronous_commit")
    if sqlite:
        relaxed, durable = 1, 2
    else:  # the server's own setting (the test server may run with it off already)
        with db.read() as s:
            relaxed, durable = "off", s.execute(ask).scalar()
    with db.write() as s:
        add_study(s, record("m", "p", None), [])
        assert s.execute(ask).scalar() == durable
    for _ in range(3):  # the same pooled connection, alternating
        with db.write(durable=False) as s:
            assert s.execute(ask).scalar() == relaxed
            s.add(Reader(name=f"r{_}"))
        with db.write() as s:
            assert s.execute(ask).scalar() == durable
        with db.read() as s:
            assert s.execute(ask).scalar() == durable
    with pytest.raises(RuntimeError), db.write(durable=False) as s:  # a failed one too
        raise RuntimeError("x")
    with db.write() as s:
        assert s.execute(ask).scalar() == durable
    with db.read() as s:
        assert len(s.query(Reader).all()) == 3
