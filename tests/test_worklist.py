"""Reader worklists at dataset scale: paging, search, filters, natural order, progress, next
unfinished, bulk assignment, report-only studies, hostile input. Real SQLite files."""

from __future__ import annotations

import pytest

from bench.synthetic import SyntheticImage, add_studies
from rrg_review.app.accounts.service import AccountService
from rrg_review.app.review.service import ReviewService
from rrg_review.app.worklist.service import (
    Progress,
    WorklistError,
    WorklistFilter,
    WorklistService,
)
from rrg_review.db.models import Draft
from rrg_review.db.sorting import natural_key
from tests.conftest import rg1


@pytest.fixture
def image() -> SyntheticImage:
    return SyntheticImage(rg1(), 1955, 1841)


@pytest.fixture
def service(db) -> WorklistService:
    return WorklistService(db)


def reader(db, name: str = "alice") -> int:
    return AccountService(db).add(name, None)


def keys(page) -> list[str]:
    return [r.study_key for r in page.rows]


def test_natural_key_orders_numbers_by_value():
    names = ["CXR10", "CXR2", "CXR100", "CXR1", "cxr3", "CXR10_IM-0002", "CXR10_IM-0010"]
    assert sorted(names, key=natural_key) == [
        "CXR1", "CXR2", "cxr3", "CXR10", "CXR10_IM-0002", "CXR10_IM-0010", "CXR100"]
    assert natural_key("A007") == natural_key("a7")


def test_assign_puts_studies_in_natural_order_and_pages_them(db, service, image):
    add_studies(db, 120, image=image)
    alice = reader(db)
    assert service.assign(alice) == 120
    first = service.page(alice, page_size=12)
    assert keys(first)[:12] == [f"CXR{i}" for i in range(1, 13)]
    assert (first.total, first.pages, first.page, first.first, first.last) == (120, 10, 1, 1, 12)
    second = service.page(alice, page=2, page_size=12)
    assert keys(second)[0] == "CXR13"
    assert service.assign(alice) == 0  # idempotent: nothing twice, places kept
    assert keys(service.page(alice, page_size=12)) == keys(first)


def test_page_past_the_end_and_negative_page_clamp(db, service, image):
    add_studies(db, 25, image=image)
    alice = reader(db)
    service.assign(alice)
    last = service.page(alice, page=99, page_size=10)
    assert (last.page, keys(last)) == (3, [f"CXR{i}" for i in range(21, 26)])
    assert service.page(alice, page=-5, page_size=10).page == 1
    assert keys(service.page(alice, page=0, page_size=10))[0] == "CXR1"
    with pytest.raises(WorklistError, match="page size"):
        service.page(alice, page_size=0)
    with pytest.raises(WorklistError, match="page size"):
        service.page(alice, page_size=10_000)


def test_search_by_study_or_patient_key_prefix_case_insensitive(db, service, image):
    add_studies(db, 150, image=image)
    alice = reader(db)
    service.assign(alice)
    assert keys(service.page(alice, WorklistFilter(search="CXR12"), page_size=50)) == [
        "CXR12", *[f"CXR{i}" for i in range(120, 130)]]
    assert keys(service.page(alice, WorklistFilter(search="cxr77"))) == ["CXR77"]
    by_patient = service.page(alice, WorklistFilter(search="bench-P10"))
    assert {r.patient_key for r in by_patient.rows} >= {"bench-P10"}
    assert all(r.patient_key.startswith("bench-P10") for r in by_patient.rows)


@pytest.mark.parametrize("text", ["%", "_", "CXR%", "C_R1", "'", "\"; DROP TABLE study; --",
                                  "CXR1' OR '1'='1", "\\", "%'_\\"])
def test_search_with_wildcards_and_quotes_matches_literally(db, service, image, text):
    add_studies(db, 30, image=image)
    add_studies(db, 1, image=image, prefix="odd%_'\\", start=31)
    alice = reader(db)
    service.assign(alice)
    page = service.page(alice, WorklistFilter(search=text))
    assert all(r.study_key.lower().startswith(text.lower())
               or r.patient_key.lower().startswith(text.lower()) for r in page.rows)
    assert page.total == len(page.rows) == 0
    assert service.page(alice).total == 31  # nothing was dropped or changed
    hit = service.page(alice, WorklistFilter(search="odd%_'\\"))
    assert keys(hit) == ["odd%_'\\31"]


def test_filters_by_status_source_split_and_images(db, service, image):
    add_studies(db, 20, image=image, source="iu", splits=("train", "test"))
    add_studies(db, 10, image=image, source="rexgradient", start=21, report_only_every=5)
    alice = reader(db)
    service.assign(alice, include_report_only=True)
    assert service.page(alice, WorklistFilter(source="iu")).total == 20
    assert service.page(alice, WorklistFilter(source="rexgradient", has_images=False)).total == 2
    assert service.page(alice, WorklistFilter(has_images=True)).total == 28
    assert service.page(alice, WorklistFilter(source="iu", split="test")).total == 10
    assert service.sources() == ("iu", "rexgradient")
    assert service.splits() == ("test", "train")
    # a value that does not exist: an empty page (source/split), a named error (status)
    nothing = service.page(alice, WorklistFilter(source="no-such-source"))
    assert (nothing.total, nothing.rows, nothing.page, nothing.pages) == (0, (), 1, 1)
    assert service.page(alice, WorklistFilter(split="nope")).total == 0
    with pytest.raises(WorklistError, match="unknown status 'finished'"):
        WorklistFilter(status="finished")
    with pytest.raises(WorklistError, match="unknown image filter"):
        WorklistFilter.from_ui(images="some")
    assert WorklistFilter.from_ui("done", "all", "all", "report only", "  x ") == WorklistFilter(
        status="done", has_images=False, search="x")


def test_report_only_studies_stay_off_reading_worklists_unless_asked(db, service, image):
    with_images = add_studies(db, 10, image=image, report_only_every=2)
    alice, bob = reader(db, "alice"), reader(db, "bob")
    assert service.assign(alice) == 5
    assert all(r.images == 1 for r in service.page(alice).rows)
    assert service.assign(bob, include_report_only=True) == 10
    assert service.assign(alice, with_images[:4], include_report_only=True) == 2


def test_progress_and_next_unfinished(db, service, image):
    ids = add_studies(db, 10, image=image)
    alice = reader(db)
    service.assign(alice)
    review = ReviewService(db)
    for sid in ids[1:4]:
        review.rate(alice, sid, likert=4, acceptable=True)
    review.save(alice, ids[5], "findings", "Edited.", None)
    assert service.progress(alice) == Progress(new=6, drafted=0, in_review=1, done=3)
    assert service.progress(alice).unfinished == 7
    assert service.next_unfinished(alice) == ids[0]
    assert service.next_unfinished(alice, ids[0]) == ids[4]  # skips the three done
    assert service.next_unfinished(alice, ids[4], step=-1) == ids[0]
    assert service.next_unfinished(alice, ids[0], step=-1) is None
    assert service.next_unfinished(alice, ids[9]) is None
    # a hurried reader at the end of the list is taken round to the unfinished ones above
    assert service.next_unfinished(alice, ids[9], wrap=True) == ids[0]
    assert service.next_unfinished(alice, ids[0], step=-1, wrap=True) == ids[9]
    assert service.positions(alice, (ids[0], ids[9])) == {ids[0]: 0, ids[9]: 9}
    assert service.next_unfinished(alice, 10_000) == ids[0]  # not on the list: first open
    assert service.next_unfinished(alice, ids[0], flt=WorklistFilter(search="CXR7")) == ids[6]
    # under the status filter "done", Next and Previous go through the done studies (the
    # list on screen), round its ends; they left it for an unfinished study before
    done = WorklistFilter(status="done")
    assert service.next_unfinished(alice, ids[1], 1, done, wrap=True) == ids[2]
    assert service.next_unfinished(alice, ids[3], 1, done, wrap=True) == ids[1]
    assert service.next_unfinished(alice, ids[1], -1, done, wrap=True) == ids[3]
    assert service.next_unfinished(alice, ids[0], 1, done) == ids[1]  # from off the list
    # pre-drafting: studies not yet drafted (ids[5] is in review), round the end of the list
    assert service.undrafted(alice, ids[0], 3) == [ids[4], ids[6], ids[7]]
    assert service.undrafted(alice, ids[8], 3) == [ids[9], ids[0], ids[4]]
    assert service.undrafted(alice, None, 2) == [ids[0], ids[4]]
    assert service.undrafted(alice, ids[0], 0) == []
    assert service.resume(alice) == ids[5]
    assert service.page_of(alice, ids[9], page_size=4) == 3
    assert service.page_of(alice, ids[9], WorklistFilter(status="done")) is None


def test_a_reader_with_an_empty_worklist(db, service):
    alice = reader(db)
    page = service.page(alice)
    assert (page.rows, page.total, page.page, page.pages, page.first, page.last) == (
        (), 0, 1, 1, 0, 0)
    assert service.progress(alice) == Progress()
    assert service.next_unfinished(alice) is None and service.resume(alice) is None
    assert not service.has_worklist(alice)
    assert service.assign(alice) == 0  # nothing stored yet
    assert service.sources() == ()


def test_two_readers_worklists_are_independent(db, service, image):
    ids = add_studies(db, 6, image=image)
    alice, bob = reader(db, "alice"), reader(db, "bob")
    service.assign(alice)
    service.assign(bob, ids[3:])
    ReviewService(db).rate(alice, ids[3], likert=3, acceptable=False)
    assert service.progress(alice).done == 1 and service.progress(bob).done == 0
    assert keys(service.page(bob)) == ["CXR4", "CXR5", "CXR6"]
    assert service.next_unfinished(bob) == ids[3]
    assert service.page(bob, WorklistFilter(status="done")).total == 0
    assert service.page_of(bob, ids[0]) is None


def test_assignment_appends_new_studies_after_the_old_ones(db, service, image):
    add_studies(db, 3, image=image)
    alice = reader(db)
    service.assign(alice)
    add_studies(db, 2, image=image, start=4)
    assert service.assign(alice) == 2
    page = service.page(alice)
    assert keys(page) == ["CXR1", "CXR2", "CXR3", "CXR4", "CXR5"]
    assert [r.position for r in page.rows] == [0, 1, 2, 3, 4]


@pytest.mark.both_databases
def test_a_reader_who_joins_after_drafting_sees_the_drafted_studies_as_drafted(db, service,
                                                                              image):
    """Found in a new-user trial: bob, whose worklist was made after pre-drafting, saw every
    study "new" with the draft in the boxes; a "drafted" filter hid them from him."""
    ids = add_studies(db, 3, image=image)
    alice = reader(db)
    service.assign(alice)
    with db.write() as s:  # a draft of study 1, a failed one of study 2 (from the pre-drafter)
        s.add_all([Draft(study_id=ids[0], section="findings", preset="p", text="t",
                         model_id="m", generation={}),
                   Draft(study_id=ids[1], section="findings", preset="p", text=None,
                         error="out of memory", model_id="m", generation={})])
    bob = reader(db, "bob")
    service.assign(bob)
    statuses = {r.study_id: r.status for r in service.page(bob).rows}
    assert statuses == {ids[0]: "drafted", ids[1]: "new", ids[2]: "new"}
    assert service.progress(bob) == Progress(new=2, drafted=1)  # (the triggers counted it)
    assert service.page(bob, WorklistFilter(status="drafted")).total == 1


def test_assigning_thousands_is_one_statement_and_keeps_positions_unique(db, service, image):
    add_studies(db, 5000, image=image, report_only_every=7)
    alice = reader(db)
    added = service.assign(alice)
    assert added == 5000 - 5000 // 7
    last = service.page(alice, page=10**6, page_size=500)
    assert last.rows[-1].position == added - 1
    assert service.page(alice, page_size=500).total == added


def test_the_migration_backfills_sort_keys_and_image_counts(tmp_path, image):
    from sqlalchemy import text

    from rrg_review.db.engine import open_database, upgrade_schema

    old = open_database(tmp_path / "old.sqlite", upgrade=False)
    upgrade_schema(old, "0002")
    with old.engine.begin() as conn:
        conn.execute(text("INSERT INTO patient (id, source, key) VALUES (1, 's', 'p')"))
        for sid, key in ((1, "CXR10"), (2, "CXR9")):
            conn.execute(text(
                "INSERT INTO study (id, patient_id, source, study_key, demographics, created_at)"
                " VALUES (:i, 1, 's', :k, '{}', '2024-01-01')"), {"i": sid, "k": key})
        conn.execute(text(
            "INSERT INTO image (study_id, position, uri, format, rows, cols, photometric, "
            "bits_stored, checksum) VALUES (2, 0, 'x', 'png', 1, 1, 'MONOCHROME2', 8, 'c')"))
    upgrade_schema(old, "head")
    with old.engine.connect() as conn:
        rows = conn.execute(text("SELECT study_key, sort_key, image_count FROM study "
                                 "ORDER BY sort_key")).all()
    assert rows == [("CXR9", natural_key("CXR9"), 1), ("CXR10", natural_key("CXR10"), 0)]
    old.dispose()


def test_readers_add_leaves_report_only_studies_off_unless_asked(db, settings, image):
    import subprocess
    import sys
    from pathlib import Path

    add_studies(db, 6, image=image, report_only_every=3)
    root = Path(__file__).resolve().parents[1]

    def add(name: str, *flags: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "rrg_review.app.cli", "readers", "add", name, "--password-stdin",
             "--db", settings.db_url, *flags], input="long enough password\n", cwd=root,
            capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "(4 studies on the worklist)" in add("dr.a")
    assert "(6 studies on the worklist)" in add("dr.b", "--include-report-only")
    service = WorklistService(db)
    accounts = AccountService(db)
    assert service.page(accounts.account("dr.a").id).total == 4
    assert service.page(accounts.account("dr.b").id, WorklistFilter(has_images=False)).total == 2


def test_launch_takes_include_report_only(db, image):
    from rrg_review.app.serve import parse_args

    assert parse_args([]).include_report_only is False
    assert parse_args(["--include-report-only"]).include_report_only is True
    add_studies(db, 4, image=image, report_only_every=2)
    accounts = AccountService(db)
    assert WorklistService(db, include_report_only=True).assign(accounts.local_reader()) == 4
    assert WorklistService(db).assign(accounts.add("x", None)) == 2


def test_a_page_may_take_its_total_from_the_progress_counts(db, service, image):
    ids = add_studies(db, 12, image=image, source="a")
    add_studies(db, 3, image=image, source="b", start=13)
    alice = reader(db)
    service.assign(alice)
    ReviewService(db).rate(alice, ids[0], likert=2, acceptable=False)
    counts = service.progress(alice)
    for flt in (WorklistFilter(), WorklistFilter(status="done"), WorklistFilter(status="new"),
                WorklistFilter(source="b"), WorklistFilter(search="CXR1")):
        assert service.page(alice, flt, 1, 5, counts) == service.page(alice, flt, 1, 5)


@pytest.mark.parametrize("threshold", [0, 10_000])
def test_search_pages_are_in_list_order_whether_matches_are_walked_or_sorted(
        db, service, image, monkeypatch, threshold):
    import rrg_review.app.worklist.service as worklist_module

    monkeypatch.setattr(worklist_module, "_DRIVE_FROM_MATCHES", threshold)
    add_studies(db, 130, image=image)
    alice = reader(db)
    service.assign(alice)
    first = service.page(alice, WorklistFilter(search="CXR1"), page_size=5)
    assert keys(first) == ["CXR1", "CXR10", "CXR11", "CXR12", "CXR13"]
    last = service.page(alice, WorklistFilter(search="CXR1"), page=99, page_size=5)
    assert keys(last)[-1] == "CXR130" and last.total == 42


def test_pages_stay_right_when_a_study_leaves_the_list(db, service, image):
    from sqlalchemy import delete

    from rrg_review.db.models import Study

    ids = add_studies(db, 12, image=image)
    alice = reader(db)
    service.assign(alice)
    dense = [keys(service.page(alice, page=p, page_size=5)) for p in (1, 2, 3)]
    assert dense == [[f"CXR{i}" for i in range(a, min(a + 5, 13))] for a in (1, 6, 11)]
    with db.write() as s:  # a study deleted: its worklist row goes (cascade), a hole remains
        s.execute(delete(Study).where(Study.id == ids[2]))
    holes = [keys(service.page(alice, page=p, page_size=5)) for p in (1, 2, 3)]
    assert holes == [["CXR1", "CXR2", "CXR4", "CXR5", "CXR6"],
                     ["CXR7", "CXR8", "CXR9", "CXR10", "CXR11"], ["CXR12"]]


# -- progress counts kept by triggers (migration 0007) -----------------------------------------
def _agree(service: WorklistService, *readers: int) -> list[Progress]:
    """The trigger-kept counts equal a GROUP BY over the worklist, for every reader."""
    out = []
    for r in readers:
        kept, counted = service.progress(r), service.counted_progress(r)
        assert kept == counted, (r, kept, counted)
        out.append(kept)
    return out


@pytest.mark.both_databases
def test_progress_counts_follow_every_status_change_and_path(db, service, image):
    from sqlalchemy import delete, update

    from rrg_review.db.models import Reader, Study, WorklistItem

    ids = add_studies(db, 10, image=image, report_only_every=5)  # 8 with images
    alice, bob = reader(db, "alice"), reader(db, "bob")
    review = ReviewService(db)
    assert service.assign(alice) == 8  # bulk INSERT ... SELECT: one trigger run per row
    service.assign(bob, ids[:4])
    assert _agree(service, alice, bob) == [Progress(new=8), Progress(new=4)]
    with db.write() as s:  # the drafting worker's path: the ORM sets 'drafted'
        s.scalar(select_item(alice, ids[0])).status = "drafted"
        s.scalar(select_item(alice, ids[1])).status = "drafted"
    review.save(alice, ids[1], "findings", "Clear lungs.", None)  # drafted -> in_review
    review.save(alice, ids[2], "findings", "Clear lungs.", None)  # new -> in_review
    review.save(alice, ids[2], "findings", "Clear lungs again.", 1)  # in_review stays
    review.rate(alice, ids[2], likert=4, acceptable=False)  # in_review -> done
    review.rate(alice, ids[2], likert=5, acceptable=False)  # done stays done
    review.rate(alice, ids[3], likert=2, acceptable=False)  # new -> done
    review.heartbeat(alice, ids[5], 10.0)  # time only: no status change
    kept = _agree(service, alice, bob)
    assert kept[0] == Progress(new=4, drafted=1, in_review=1, done=2)
    assert kept[1] == Progress(new=4)  # bob's list of the same studies is untouched
    with db.write() as s:  # a bulk Core UPDATE (no ORM) is counted too
        s.execute(update(WorklistItem).where(WorklistItem.reader_id == alice,
                                             WorklistItem.status == "new")
                  .values(status="drafted"))
    assert _agree(service, alice, bob)[0] == Progress(drafted=5, in_review=1, done=2)
    with db.write() as s:  # a study deleted: its items go by cascade, and leave the counts
        s.execute(delete(Study).where(Study.id == ids[0]))
    assert _agree(service, alice, bob) == [Progress(drafted=4, in_review=1, done=2),
                                           Progress(new=3)]
    with db.write() as s:  # a reader deleted: their counts go with them
        s.execute(delete(Reader).where(Reader.id == bob))
    assert service.progress(bob) == Progress()
    _agree(service, alice)


def select_item(reader_id: int, study_id: int):
    from sqlalchemy import select

    from rrg_review.db.models import WorklistItem

    return select(WorklistItem).where(WorklistItem.reader_id == reader_id,
                                      WorklistItem.study_id == study_id)


@pytest.mark.both_databases
def test_a_rolled_back_status_change_leaves_the_counts(db, service, image):
    ids = add_studies(db, 3, image=image)
    alice = reader(db)
    service.assign(alice)
    # the failure must come after the write, inside its transaction
    with pytest.raises(RuntimeError), db.write() as s:  # noqa: PT012
        s.scalar(select_item(alice, ids[0])).status = "done"
        s.flush()  # the trigger ran inside this transaction ...
        raise RuntimeError("killed before commit")
    assert _agree(service, alice)[0] == Progress(new=3)  # ... and went with its rollback


def test_two_readers_changing_statuses_at_once_keep_exact_counts(db, service, image):
    """Two readers (and a second tab of one of them) saving and rating in parallel threads,
    each on its own connection: every count still equals the GROUP BY."""
    import threading

    ids = add_studies(db, 60, image=image)
    alice, bob = reader(db, "alice"), reader(db, "bob")
    service.assign(alice)
    service.assign(bob)
    review = ReviewService(db)
    failures: list[BaseException] = []

    def work(who: int, studies: list[int]) -> None:
        try:
            for n, sid in enumerate(studies):
                review.save(who, sid, "findings", f"text {who} {sid}", None)
                if n % 2:
                    review.rate(who, sid, likert=3, acceptable=False)
        except BaseException as exc:  # reported below, not lost in the thread
            failures.append(exc)

    threads = [threading.Thread(target=work, args=args) for args in (
        (alice, ids[0:30:2]), (alice, ids[1:30:2]), (bob, ids[10:40]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not failures
    a, b = _agree(service, alice, bob)
    assert (a.in_review, a.done, a.new) == (16, 14, 30)  # 7 of each tab's 15 rated
    assert (b.in_review, b.done, b.new) == (15, 15, 30)


def test_the_migration_counts_existing_worklists(tmp_path, image):
    from sqlalchemy import text

    from rrg_review.db.engine import open_database, upgrade_schema

    db = open_database(tmp_path / "old.sqlite", upgrade=False)
    upgrade_schema(db, "0006")
    ids = add_studies(db, 7, image=image)
    alice = AccountService(db).add("alice", None)
    WorklistService(db).assign(alice)
    # one study done before 0007, written in SQL: the ORM already knows later columns
    # (0009's active_until) that a 0006 database lacks
    with db.write() as s:
        s.execute(text("UPDATE worklist_item SET status = 'done' "
                       "WHERE reader_id = :r AND study_id = :s"), {"r": alice, "s": ids[0]})
    upgrade_schema(db, "head")
    service = WorklistService(db)
    assert _agree(service, alice)[0] == Progress(new=6, done=1)
    ReviewService(db).save(alice, ids[1], "impression", "Normal.", None)  # triggers now on
    assert _agree(service, alice)[0] == Progress(new=5, in_review=1, done=1)
    db.dispose()


def test_the_migration_marks_drafted_studies_of_existing_worklists(tmp_path, image):
    """0010: a worklist made after pre-drafting (all 'new') is put right, and the progress
    counts follow (the triggers of 0007)."""
    from sqlalchemy import text

    from rrg_review.db.engine import open_database, upgrade_schema

    db = open_database(tmp_path / "old.sqlite", upgrade=False)
    upgrade_schema(db, "0009")
    ids = add_studies(db, 3, image=image)
    bob = AccountService(db).add("bob", None)
    WorklistService(db).assign(bob)
    with db.write() as s:  # as 0009 left it: 'new' although study 1 has a draft
        s.execute(text("UPDATE worklist_item SET status = 'new'"))
        s.add(Draft(study_id=ids[0], section="findings", preset="p", text="t", model_id="m",
                    generation={}))
    upgrade_schema(db, "head")
    service = WorklistService(db)
    assert {r.study_id: r.status for r in service.page(bob).rows} == {
        ids[0]: "drafted", ids[1]: "new", ids[2]: "new"}
    assert _agree(service, bob)[0] == Progress(new=2, drafted=1)
    db.dispose()


@pytest.mark.both_databases
def test_next_unfinished_agrees_with_walking_the_list(db, service, image):
    """Random statuses (most done, as for a reader far into the list): every direction, start,
    status filter and wrap-around gives what walking the list in order gives."""
    import random

    from sqlalchemy import update

    from rrg_review.db.models import WorklistItem

    ids = add_studies(db, 120, image=image)
    alice = reader(db)
    service.assign(alice)
    rng = random.Random(7)
    status = {sid: rng.choice(("done",) * 6 + ("new", "drafted", "in_review")) for sid in ids}
    with db.write() as s:
        for st in STATUSES_ALL:
            s.execute(update(WorklistItem).where(
                WorklistItem.reader_id == alice,
                WorklistItem.study_id.in_([i for i, v in status.items() if v == st]))
                .values(status=st))
    order = ids  # positions follow the natural order of CXR1..CXR120

    def walk(after, step, only, exclude):
        seq = order if step > 0 else order[::-1]
        start = seq.index(after) + 1 if after in seq else 0
        for sid in seq[start:]:
            if status[sid] != "done" and (only is None or status[sid] == only) \
                    and sid != exclude:
                return sid
        return None

    for _ in range(150):
        after = rng.choice([None, 10**6, *order])
        step, only = rng.choice((1, -1)), rng.choice((None, "new", "drafted", "in_review"))
        got = service.next_unfinished(alice, after, step, WorklistFilter(status=only))
        assert got == walk(after, step, only, None), (after, step, only)
        if after in order:
            wrapped = service.next_unfinished(alice, after, step, WorklistFilter(status=only),
                                              wrap=True)
            expect = walk(after, step, only, None)
            if expect is None:
                expect = walk(None, step, only, after)
            assert wrapped == expect
    assert service.progress(alice) == service.counted_progress(alice)


STATUSES_ALL = ("new", "drafted", "in_review", "done")


def test_studies_left_off_are_on_no_page_count_or_step(db, service, image):
    """WorklistFilter.left_off (the cases of a reader's unfinished blinded study): every page
    (the index seek of a dense list and the OFFSET of a filtered one), the totals, the page of a
    study and Next/Previous are as if those studies were not on the list."""
    ids = add_studies(db, 30, image=image)
    alice = reader(db)
    service.assign(alice)
    held = frozenset(ids[i] for i in (0, 4, 5, 6, 11, 29))
    shown = [f"CXR{i + 1}" for i in range(30) if ids[i] not in held]
    flt = WorklistFilter(left_off=held)
    pages = [service.page(alice, flt, n, 5, service.progress(alice)) for n in range(1, 6)]
    assert [k for p in pages for k in keys(p)] == shown
    assert {(p.total, p.pages) for p in pages} == {(24, 5)}
    assert keys(service.page(alice, flt, 99, 5)) == shown[20:]  # counted, clamped
    assert service.page_of(alice, ids[12], flt, page_size=5) == 2  # CXR13: the 8th shown
    assert service.page_of(alice, ids[4], flt, page_size=5) is None
    assert service.next_unfinished(alice, ids[3], 1, flt) == ids[7]
    assert service.next_unfinished(alice, ids[7], -1, flt) == ids[3]
    assert service.next_unfinished(alice, ids[28], 1, flt, wrap=True) == ids[1]
    assert service.resume(alice, held) == ids[1]
    in_review = WorklistFilter(status="in_review", left_off=held)
    ReviewService(db).save(alice, ids[5], "findings", "Mine.", None)
    assert service.page(alice, in_review, 1, 5, service.progress(alice)).total == 0
    assert service.resume(alice, held) == ids[1] and service.resume(alice) == ids[5]


@pytest.mark.both_databases
def test_a_search_no_key_starts_with_finds_the_keys_that_contain_it(db, service, image):
    """The end or middle of a key ("0414267" of "s50414267") found nothing (a new-user
    trial): where no study or patient key starts with the text, the keys containing it are
    the matches, literally and in any case; where one starts with it, only the prefix
    matches count (a short search stays the index's range scan)."""
    add_studies(db, 30, image=image)
    add_studies(db, 1, image=image, prefix="odd%_'\\", start=31)
    alice = reader(db)
    service.assign(alice)
    from rrg_review.app.worklist.panel import WorklistPanelLogic

    logic = WorklistPanelLogic(service)
    found = logic.view(alice, search="xr2")
    assert [r[1] for r in found.rows] == ["CXR2", *[f"CXR{i}" for i in range(20, 30)]]
    assert "No key on your list starts with `xr2`" in found.message
    assert [r[1] for r in logic.view(alice, search="CXR2").rows][:2] == ["CXR2", "CXR20"]
    assert logic.view(alice, search="CXR2").message == ""
    assert [r[1] for r in logic.view(alice, search="%_'\\").rows] == ["odd%_'\\31"]
    assert [r[1] for r in logic.view(alice, search="_").rows] == ["odd%_'\\31"]  # escaped
    nothing = logic.view(alice, search="zzz")
    assert nothing.rows == [] and nothing.message == "" and nothing.label == "No study matches."
    # Next under the search steps through what the list shows
    first = found.rows[0][0]
    assert logic.target(alice, first, 1, search="xr2") == found.rows[1][0]
    # patient keys are not searched within (stored pseudonymised, any few characters are in
    # thousands of them): "ench" is in every "bench-P…", on no study key
    assert logic.view(alice, search="ench").rows == []
    # a key off the reader's list that starts with the text does not stop the search within
    # the keys on it
    add_studies(db, 1, image=image, prefix="XR", start=99)
    assert "XR99" not in [r[1] for r in logic.view(alice).rows]
    assert [r[1] for r in logic.view(alice, search="XR9").rows] == ["CXR9"]
