"""Export safety on its own: CSV neutralisation, file-name filtering, the private spool, and the
server-side scope of ExportService on a real database (no metrics: they are not the point)."""

from __future__ import annotations

import csv
import stat

import pytest

from rrg_review.app.accounts.service import AccountService
from rrg_review.app.evaluation.export import (
    ExportService,
    ExportSpool,
    neutralise_cell,
    safe_name,
)
from rrg_review.app.review.service import ReviewService
from rrg_review.app.worklist.service import WorklistService
from tests.conftest import TEST_PASSWORD_COST


def test_cells_that_a_spreadsheet_would_run_are_neutralised():
    for hostile in ("=1+1", "+SUM(A1)", "-2+3", "@cmd", "\t=1", "\r=1",
                    '=HYPERLINK("http://x","y")'):
        assert neutralise_cell(hostile) == "'" + hostile
    for harmless in ("Heart normal.", "", " =not at start", "a=b"):
        assert neutralise_cell(harmless) == harmless
    for number in (-0.25, 3, None, True):
        assert neutralise_cell(number) == number


def test_file_names_never_carry_paths_or_odd_characters():
    assert safe_name("../../etc/passwd") == "etc_passwd"
    assert safe_name("DOE JOHN/MRN:5550001") == "DOE_JOHN_MRN_5550001"
    assert safe_name("...", "model") == "model"
    assert safe_name("ok-name_1.2") == "ok-name_1.2"
    assert len(safe_name("x" * 500)) == 64


def test_the_spool_is_private_and_emptied(tmp_path):
    spool = ExportSpool(tmp_path / "spool", keep_s=3600)
    folder = spool.new_folder()
    assert stat.S_IMODE(spool.root.stat().st_mode) == 0o700
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    (folder / "rrg-review-report.csv").write_text("x")
    spool.finished(folder)
    assert spool.purge() == 0 and folder.exists()
    assert spool.purge(older_than_s=-1) == 1 and not folder.exists()
    building = spool.new_folder()  # an export still being built is never purged
    assert spool.purge(older_than_s=-1) == 0 and building.exists()
    spool.finished(building)
    assert spool.purge(older_than_s=-1) == 1
    again = spool.new_folder()
    (again / "f.csv").write_text("x")
    spool.discard(again / "f.csv")
    assert not again.exists()
    spool.discard(tmp_path / "elsewhere" / "f.csv")  # never outside the spool
    spool.close()
    assert not spool.root.exists()


def test_purge_skips_a_folder_removed_between_listing_and_stat(tmp_path):
    """A download's `discard` runs outside the spool's lock: a folder listed by purge may be
    gone when it is looked at (a dangling link is exactly that state, without timing luck)."""
    spool = ExportSpool(tmp_path / "spool", keep_s=3600)
    done = spool.new_folder()
    spool.finished(done)
    (spool.root / "export-gone").symlink_to(spool.root / "export-removed-meanwhile")
    assert spool.purge(older_than_s=-1) == 1 and not done.exists()
    spool.finished(done)  # finishing an export already discarded is fine too


@pytest.fixture
def two_readers(demo_db, settings, tmp_path):
    db = demo_db
    review, worklists = ReviewService(db), WorklistService(db)
    accounts = AccountService(db, password_cost=TEST_PASSWORD_COST)
    ids = {}
    for name, role in (("dr.one", "reader"), ("dr.two", "reader"), ("dr.lead", "admin")):
        ids[name] = accounts.add(name, f"passphrase-{len(name)}-xyz", role=role)
        worklists.assign(ids[name])
    study = worklists.items(ids["dr.one"])[0].study_id
    from rrg_review.app.drafting.service import DraftingService, RuntimeConfig

    DraftingService(db, settings, RuntimeConfig()).draft([study], "retrieval")
    for name in ("dr.one", "dr.two"):
        review.save(ids[name], study, "findings", f"=text by {name}", None)
        review.rate(ids[name], study, likert=2, acceptable=False, comment=f"{name} says",
                    preset="retrieval")
    return ExportService(db, accounts.audit, ExportSpool(tmp_path / "spool")), accounts, ids


def _rows(path):
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_the_server_decides_the_scope_of_an_export(two_readers):
    exports, accounts, ids = two_readers
    mine = exports.export_as(accounts.by_id(ids["dr.one"]), "csv", everyone=True, metrics=[])
    assert mine.scope == "own work of dr.one" and "admin" in mine.note
    rows = _rows(mine.files[0])
    assert {r["reader"] for r in rows} == {"dr.one"}
    assert all(r["study_key"].startswith("study-") for r in rows)
    assert any(r["final"] == "'=text by dr.one" for r in rows)
    assert stat.S_IMODE(mine.files[0].parent.stat().st_mode) == 0o700
    # a reader cannot ask for dataset keys; an admin can, and sees everyone
    asked = exports.export_as(accounts.by_id(ids["dr.two"]), "csv", dataset_keys=True,
                              metrics=[])
    assert all(r["study_key"].startswith("study-") for r in _rows(asked.files[0]))
    admin = exports.export_as(accounts.by_id(ids["dr.lead"]), "csv", everyone=True,
                              dataset_keys=True, metrics=[])
    rows = _rows(admin.files[0])
    assert {r["reader"] for r in rows} >= {"dr.one", "dr.two"} and admin.note is None
    assert any(r["study_key"].startswith("DEMO-") for r in rows)
    events = [(e.actor, e.target) for e in accounts.audit.recent(action="export")]
    assert ("dr.one", "csv: own work of dr.one") in events
    assert ("dr.lead", "csv: all readers") in events
