"""Each dataset layout as its users download it (issue 11), through the ingest service and the
CLI: exact values stored, splits normalised with the raw kept, missing = no text, no empty
reference rows, views read or unknown (never assumed), re-import merges."""

from __future__ import annotations

import json
import shutil
from datetime import date, time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from rrg_review.app.cli import main as cli
from rrg_review.app.ingest.service import import_path
from rrg_review.db.models import Image, ReferenceReport, ReferenceReportVersion, Study
from rrg_review.db.store import get_study, priors, pseudonym
from rrg_review.studies.importers import detect_format
from tests import layouts


def run_import(db, settings, path, **kw):
    return import_path(db, path, blobs=settings.blobs, workers=1, **kw)


def by_key(s, key):
    return get_study(s, s.scalar(select(Study.id).where(Study.study_key == key)))


def all_text(db) -> str:
    with db.engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT findings, impression FROM reference_report UNION ALL "
            "SELECT indication, comparison FROM study UNION ALL "
            "SELECT demographics, split FROM study UNION ALL "
            "SELECT view_position, view_group FROM image").all()
    return "\n".join(str(v) for r in rows for v in r if v is not None)


def assert_invariant(report):
    assert report.added + report.updated + report.unchanged + report.failed == report.found


# --- ReXGradient-160K ---------------------------------------------------------------------------

@pytest.mark.parametrize("point_at", ["root", "metadata", "file"])
def test_rexgradient_as_downloaded(db, settings, tmp_path, rg1_small, point_at):
    root = layouts.rexgradient_download(tmp_path / "ReXGradient-160K", rg1_small)
    target = {"root": root, "metadata": root / "metadata",
              "file": root / "metadata" / "train_metadata_view_position.json"}[point_at]
    assert detect_format(target).name == "rexgradient"
    report = run_import(db, settings, target)
    assert_invariant(report)
    assert report.failed == 0, report.problems
    expected = 3 if point_at == "file" else 5
    assert report.added == expected
    with db.read() as s:
        a1, a2, a3 = by_key(s, "GRDNA001"), by_key(s, "GRDNA002"), by_key(s, "GRDNA003")
        assert (a1.split, a1.split_raw, a1.study_date) == ("train", "train", date(2013, 1, 5))
        assert a1.demographics == {"sex": "F", "age": "062Y"}
        assert [(i.view_position, i.view_group, i.view_source) for i in a1.images] == [
            ("PA", "frontal", "metadata"), ("LATERAL", "lateral", "metadata")]
        assert a1.images[0].uri.endswith(
            "deid_png/GRDN0001/GRDNA001/studies/1.2.1/series/1.2.1.0/instances/1.2.1.0.1.png")
        assert a1.images[0].bits_stored == 16 and a1.comparison is None
        # NaN is missing: no "nan" text, no reference section, no sex
        assert a2.reference.impression is None and a2.demographics == {"age": "062Y"}
        assert a3.reference.findings is None and a3.indication is None
        assert a3.images[0].view_position is None and a3.images[0].view_group is None
        assert a1.patient_id == a2.patient_id
        if point_at != "file":
            valid = by_key(s, "GRDNA004")  # only the plain tables: a reference, no images
            assert (valid.split, valid.images, valid.reference.findings) == (
                "valid", [], "Normal heart size.")
            assert by_key(s, "GRDNA005").split == "test"
    text = all_text(db).lower()
    assert "nan" not in text.split() and "none" not in text.split()


def test_rexgradient_cli_exit_0_and_reimport_unchanged(settings, tmp_path, rg1_small, capsys):
    root = layouts.rexgradient_download(tmp_path / "rex", rg1_small)
    db_path = settings.db_url.removeprefix("sqlite:///")
    assert cli(["import", str(root), "--db", db_path, "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "5 records: 5 added, 0 updated, 0 unchanged, 0 failed" in out
    assert cli(["import", str(root), "--db", db_path]) == 0
    assert "5 unchanged" in capsys.readouterr().out


# --- ReXrank ------------------------------------------------------------------------------------

def test_rexrank_json(db, settings, tmp_path, rg1_small):
    path = layouts.rexrank_mimic(tmp_path / "mimic-cxr", rg1_small)
    assert detect_format(path).name == "rexrank"
    report = run_import(db, settings, path)
    assert (report.added, report.failed, report.images) == (2, 0, 3)
    with db.read() as s:
        a = by_key(s, "50051329")
        assert a.source == "rexrank-mimiccxr_test" and a.split == "test"
        assert a.indication == "___-year-old male with confusion."
        assert a.demographics == {"age": "50-60", "sex": "M"}
        assert [(i.view_position, i.view_group) for i in a.images] == [
            ("lateral", "lateral"), ("antero-posterior", "frontal")]
        assert a.images[0].uri.endswith("mimic-cxr/files/p10/p10046166/s50051329/aa-1.jpg")
        b = by_key(s, "57977208")
        assert b.reference.impression is None and b.comparison == "Chest radiograph, ___."
        assert a.patient_id == b.patient_id
        assert b.patient.key == pseudonym(s, "10046166")


# --- interpret-cxr ------------------------------------------------------------------------------

def test_interpret_cxr_variants(db, settings, tmp_path, rg1_small):
    paths = layouts.interpret_cxr_variants(tmp_path / "icxr", rg1_small)
    for name in ("single", "cache"):
        assert detect_format(paths[name]).name == "interpret-cxr", name
        report = run_import(db, settings, paths[name])
        assert report.failed == 0, report.problems
    with db.read() as s:
        splits = set(s.execute(select(Study.split, Study.split_raw)).all())
        assert splits == {("valid", "validation")}
        # the row with no findings and a blank impression has no (empty) reference row
        empty = s.scalar(select(Study).where(Study.source == "OpenI"))
        assert empty is not None and get_study(s, empty.id).reference is None
        assert s.scalar(select(func.count()).select_from(ReferenceReport).where(
            ReferenceReport.findings.is_(None), ReferenceReport.impression.is_(None))) == 0


def test_interpret_cxr_images_by_path_and_mimic_root_and_test_set(db, settings, tmp_path,
                                                                   rg1_small):
    paths = layouts.interpret_cxr_variants(tmp_path / "icxr", rg1_small)
    report = run_import(db, settings, paths["bypath"])
    assert (report.added, report.images, report.failed) == (1, 1, 0), report.problems
    assert detect_format(paths["mimic-root"]).name == "interpret-cxr"
    report = run_import(db, settings, paths["mimic-root"])
    assert report.failed == 0, report.problems
    assert (report.added, report.updated) == (1, 1)  # the same study in train and val
    assert detect_format(paths["test"]).name == "interpret-cxr"
    report = run_import(db, settings, paths["test"])
    assert (report.added, report.failed) == (1, 0)
    with db.read() as s:
        mimic = s.scalar(select(Study).where(Study.source == "MIMIC-CXR"))
        assert (mimic.split, mimic.split_raw) == ("valid", "val")
        assert get_study(s, mimic.id).patient.key == pseudonym(s, "mimic-cxr/p10000032")
        test = s.scalar(select(Study).where(Study.split == "test"))
        assert get_study(s, test.id).reference is None


# --- MIMIC-CXR-JPG ------------------------------------------------------------------------------

def test_mimic_from_the_parent_folder_with_times_and_validate(db, settings, tmp_path, rg1_small):
    parent = layouts.mimic_download(tmp_path, rg1_small)
    assert detect_format(parent).name == "mimic-cxr"
    report = run_import(db, settings, parent)
    assert (report.added, report.failed, report.images) == (4, 0, 5), report.problems
    with db.read() as s:
        morning, evening = by_key(s, "50414267"), by_key(s, "53189527")
        assert morning.study_time == time(8, 45, 5, 328000)
        assert evening.study_time == time(21, 30, 14, 531000)
        # same-day portable films: the morning one is the evening one's prior
        assert [p.study_key for p in priors(s, evening)] == ["50414267", "56699142"]
        assert [p.study_key for p in priors(s, morning)] == ["56699142"]
        assert by_key(s, "56699142").study_time == time(0, 12, 0)
        assert morning.indication == "Cough." and morning.comparison == "___"
        last_only = by_key(s, "56699142")
        assert last_only.reference is None  # only last_paragraph: no empty reference row
        assert last_only.images[0].view_position is None
        v = by_key(s, "57375967")
        assert (v.split, v.split_raw) == ("valid", "validate")


# --- Open-i -------------------------------------------------------------------------------------

def test_open_i_extracted_folder_finds_sibling_pngs_and_images_arrive_later(
        db, settings, tmp_path, rg1_small):
    archive = layouts.iu_archive(tmp_path / "iu", rg1_small)
    import tarfile

    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "iu", filter="data")
    png = tmp_path / "iu" / "NLMCXR_png"
    hidden = tmp_path / "later-png"
    shutil.move(png, hidden)
    xml_dir = tmp_path / "iu" / "ecgen-radiology"
    first = run_import(db, settings, xml_dir)
    assert (first.added, first.images, first.failed) == (3, 0, 0)
    shutil.move(hidden, png)  # the images are downloaded later
    again = run_import(db, settings, xml_dir)
    assert (again.updated, again.unchanged, again.images, again.failed) == (2, 1, 3, 0)
    with db.read() as s:
        cxr1 = by_key(s, "CXR1")
        assert len(cxr1.images) == 2
        assert all(i.view_position is None and i.view_group is None for i in cxr1.images)
        assert all(i.uri.startswith(str(png.resolve())) for i in cxr1.images)
    third = run_import(db, settings, xml_dir)
    assert (third.unchanged, third.images) == (3, 0)


@pytest.mark.both_databases
def test_two_imports_of_one_dataset_at_once_store_it_once(db, settings, tmp_path, rg1_small):
    """The reports' archive and the extracted folder with its images imported at the same time
    (two commands on one database): the second to write found every patient and study it meant
    to add stored by the first, and all its records failed on the unique keys ("400 failed"
    in a trial). It now merges into them: the images arrive, nothing is stored twice."""
    archive = layouts.iu_archive(tmp_path / "iu", rg1_small)
    reports_only = tmp_path / "reports" / archive.name  # no image folder beside this copy
    reports_only.parent.mkdir()
    shutil.copy(archive, reports_only)
    import tarfile

    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "iu", filter="data")
    other = []

    def meanwhile(done, total):  # the other import runs, whole, after this one read the db
        if not other:
            other.append(run_import(db, settings, reports_only))

    with_images = run_import(db, settings, tmp_path / "iu" / "ecgen-radiology",
                             progress=meanwhile)
    assert (other[0].added, other[0].images, other[0].failed) == (3, 0, 0)
    assert with_images.failed == 0, [str(p) for p in with_images.problems]
    assert (with_images.updated, with_images.unchanged, with_images.images) == (2, 1, 3)
    assert_invariant(with_images)
    with db.read() as s:
        assert s.scalar(select(func.count()).select_from(Study)) == 3
        assert s.scalar(select(func.count()).select_from(Image)) == 3
        assert len(by_key(s, "CXR1").images) == 2
    again = run_import(db, settings, tmp_path / "iu" / "ecgen-radiology")
    assert (again.unchanged, again.images, again.failed) == (3, 0, 0)


def test_a_study_met_twice_in_one_import_is_said_not_merged_silently(db, settings, tmp_path,
                                                                     rg1_small, capsys):
    """Two Open-i XML files with one uId (a copied file edited): the second's text became the
    reference and the first a version of it, "1 added, 1 updated", with no word (a trial). The
    second is still stored as an update (its text is the later), and the import says so."""
    folder = tmp_path / "ecgen-radiology"
    layouts.write(folder / "1.xml", layouts.iu_xml("CXR1", "Lungs clear.", "Normal.", []))
    layouts.write(folder / "1dup.xml", layouts.iu_xml("CXR1", "Small effusion.", "Effusion.",
                                                       []))
    report = run_import(db, settings, folder)
    assert (report.added, report.updated, report.failed) == (1, 1, 0)
    [said] = report.repeats
    assert said.startswith(f"{folder / '1dup.xml'}") and f"{folder / '1.xml'}" in said, said
    assert run_import(db, settings, folder).repeats == [said]  # each import says it again
    capsys.readouterr()
    assert cli(["import", str(folder), "--db", settings.db_url]) == 0  # not a failure
    assert f"  again: {said}" in capsys.readouterr().err


# --- DICOM exports ------------------------------------------------------------------------------

def test_pacs_export_grouped_by_study_uid_with_non_images_skipped(db, settings, tmp_path):
    root = layouts.pacs_export(tmp_path / "cd")
    assert detect_format(root).name == "folder"
    report = run_import(db, settings, root)
    assert_invariant(report)
    assert report.added == 2, report.problems
    assert len(report.notes) == 2 and all("not an image" in n for n in report.notes)
    assert any("Basic Text SR" in n for n in report.notes)
    reasons = {Path(p.where).parent.name: p.reason for p in report.problems}
    assert "modality CT" in reasons["CT"] and "--allow-modality CT" in reasons["CT"]
    assert "modality OT" in reasons["SC"]
    with db.read() as s:
        studies = list(s.scalars(select(Study)))
        by_images = sorted(len(get_study(s, st.id).images) for st in studies)
        assert by_images == [1, 2]
        two = next(st for st in studies if len(st.images) == 2)
        assert [(i.view_position, i.view_source) for i in two.images] == [
            ("PA", "dicom"), ("LL", "dicom")]
        assert "1.2.826.0.1.3680043.8.498.10" not in {st.study_key for st in studies}
        assert studies[0].patient_id == studies[1].patient_id  # same (pseudonymised) patient
        one = next(st for st in studies if len(st.images) == 1)
        assert one.study_time == time(8, 10)


def test_pacs_headers_read_in_worker_processes_group_as_in_one(db, settings, tmp_path,
                                                               monkeypatch):
    """The header scan in a process pool (chunks of 2 files here) groups, skips and reports
    exactly as the in-process scan; the import on it stores the same studies."""
    import rrg_review.studies.importers.folder as folder
    from rrg_review.studies.safety import Guard

    root = layouts.pacs_export(tmp_path / "cd")
    monkeypatch.setattr(folder, "_POOL_MIN_FILES", 1)
    monkeypatch.setattr(folder, "_HEADER_CHUNK", 2)
    files = folder.scan(root, follow_symlinks=False).dicom
    guard = Guard.for_roots(root)
    serial, pooled = folder._group_dicom(files, guard, 1), folder._group_dicom(files, guard, 2)
    assert serial == pooled
    studies, _, notes, unreadable = pooled
    assert len(studies) == 4 and sum(len(v) for v in notes.values()) == 2
    assert unreadable == []
    report = import_path(db, root, blobs=settings.blobs, workers=2)
    assert_invariant(report)
    assert (report.added, report.failed, len(report.notes)) == (2, 2, 2), report.problems


def test_allow_modality_imports_ct_and_secondary_capture(db, settings, tmp_path):
    root = layouts.pacs_export(tmp_path / "cd")
    report = run_import(db, settings, root, allow_modality=["CT", "OT"])
    assert (report.added, report.failed) == (4, 0), report.problems


def test_dicomdir_set_from_pydicom(db, settings, tmp_path):
    from pydicom.data import get_testdata_file

    src = Path(get_testdata_file("DICOMDIR")).parent
    root = tmp_path / "cd"
    shutil.copytree(src, root)
    report = run_import(db, settings, root)
    assert_invariant(report)
    assert report.found > 0 and report.added == 0  # MR/CT: refused with the reason
    reasons = sorted(p.reason.split(" (and")[0] for p in report.problems)
    assert len(reasons) == 7 and all(
        "is not a chest radiograph" in r or "is not the chest" in r or "no pixel data" in r
        for r in reasons), reasons
    allowed = run_import(db, settings, root, allow_modality=["ANY"])
    assert_invariant(allowed)
    # the MR/CT/CR studies import; TINY_ALPHA's CT files carry no pixel data (a test set)
    assert (allowed.added, allowed.failed) == (6, 1), allowed.problems
    assert "no pixel data" in allowed.problems[0].reason
    with db.read() as s:
        assert s.scalar(select(func.count(Image.id))) > 2


# --- re-import merges ---------------------------------------------------------------------------

def test_reimport_with_a_changed_reference_keeps_the_old_version(db, settings, tmp_path,
                                                                 rg1_small):
    root = layouts.rexgradient_download(tmp_path / "rex", rg1_small)
    run_import(db, settings, root)
    meta = root / "metadata" / "train_metadata_view_position.json"
    data = json.loads(meta.read_text())
    key = next(iter(data))
    data[key]["Findings"] = "Clear lungs. Small granuloma."
    meta.write_text(json.dumps(data))
    again = run_import(db, settings, root)
    assert (again.updated, again.unchanged, again.added, again.failed) == (1, 4, 0, 0)
    with db.read() as s:
        study = by_key(s, "GRDNA001")
        assert study.reference.findings == "Clear lungs. Small granuloma."
        assert study.reference.version == 2
        old = s.scalar(select(ReferenceReportVersion).where(
            ReferenceReportVersion.study_id == study.id))
        assert (old.version, old.findings) == (1, "Clear lungs.")
        assert len(study.images) == 2  # images not added twice


def test_mimic_sectioned_reports_added_later_arrive(db, settings, tmp_path, rg1_small):
    parent = layouts.mimic_download(tmp_path, rg1_small)
    sectioned = parent / "2.0.0" / "mimic_cxr_sectioned.csv"
    saved = sectioned.read_text()
    sectioned.unlink()
    first = run_import(db, settings, parent)
    assert (first.added, first.failed) == (4, 0)
    with db.read() as s:
        assert by_key(s, "50414267").reference is None
    sectioned.write_text(saved)
    again = run_import(db, settings, parent)
    assert (again.updated, again.unchanged, again.images) == (2, 2, 0)
    with db.read() as s:
        assert by_key(s, "50414267").reference.impression == "No acute process."


def test_images_checked_in_a_process_pool(db, settings, tmp_path, rg1_small):
    root = tmp_path / "cases"
    for i in range(12):
        for j in range(2):
            layouts.write(root / f"case{i}" / f"{j}.png", layouts.png16(rg1_small))
    layouts.write(root / "case5" / "1.png", b"\x89PNG\r\n\x1a\n broken")
    report = import_path(db, root, blobs=settings.blobs, workers=2)
    assert (report.added, report.failed, report.images) == (11, 1, 22)
    assert report.problems[0].where.endswith("case5/1.png")


def test_a_failing_write_in_a_batch_fails_only_its_study(db, settings, tmp_path, rg1_small,
                                                         monkeypatch):
    from sqlalchemy.exc import IntegrityError

    import rrg_review.app.ingest.service as ingest

    real = ingest.insert_studies

    def flaky(session, items, patients):
        if any(r.study_key == "GRDNA002" for r, _, _ in items):
            raise IntegrityError("INSERT", {}, Exception("simulated constraint failure"))
        return real(session, items, patients)

    monkeypatch.setattr(ingest, "insert_studies", flaky)
    root = layouts.rexgradient_download(tmp_path / "rex", rg1_small)
    report = run_import(db, settings, root)
    assert (report.added, report.failed) == (4, 1)
    assert "simulated constraint failure" in report.problems[0].reason
    with db.read() as s:
        assert s.scalar(select(Study).where(Study.study_key == "GRDNA002")) is None
        # no image rows of the failed study
        assert s.scalar(select(func.count(Image.id)).where(Image.uri.like("%GRDNA002%"))) == 0


def _records_with_images(root: Path, pixels, n: int, broken: int | None = None):
    """n studies of two 16-bit PNGs each (study `broken` with an undecodable second image)."""
    from rrg_review.studies.records import ImageSource, StudyRecord

    records = []
    for i in range(n):
        images = []
        for j in range(2):
            data = b"\x89PNG\r\n\x1a\n broken" if (i == broken and j == 1) else \
                layouts.png16(pixels)
            path = layouts.write(root / f"s{i}" / f"{j}.png", data)
            images.append(ImageSource(name=str(path), path=str(path)))
        records.append(StudyRecord(source="pipe", study_key=f"S{i:02d}", patient_key=f"P{i}",
                                   origin=f"s{i}", images=tuple(images)))
    return records


def test_image_rounds_overlap_writes_and_keep_each_study_whole(db, settings, tmp_path,
                                                             rg1_small, monkeypatch):
    """Many small rounds in flight at once (checked in the pool while earlier ones are written):
    a broken image fails only its study, and a record of a study still in flight waits for it
    and merges (its new image added, nothing twice)."""
    from dataclasses import replace

    import rrg_review.app.ingest.service as ingest
    from rrg_review.app.ingest.service import import_records
    from rrg_review.studies.records import ImageSource

    monkeypatch.setattr(ingest, "BATCH_IMAGES", 4)
    monkeypatch.setattr(ingest, "CHUNK_IMAGES", 1)
    monkeypatch.setattr(ingest, "POOL_MIN_IMAGES", 1)
    records = _records_with_images(tmp_path / "pipe", rg1_small, 12, broken=5)
    extra = layouts.write(tmp_path / "pipe" / "s3" / "2.png", layouts.png16(rg1_small[::-1]))
    again = replace(records[3], images=(
        *records[3].images, ImageSource(name=str(extra), path=str(extra))))
    report = import_records(db, [*records, again], blobs=settings.blobs, fmt="pipe", workers=2)
    assert (report.found, report.added, report.updated, report.failed, report.images) == \
        (13, 11, 1, 1, 23), report.summary()
    assert report.problems[0].where.endswith("s5/1.png")
    with db.read() as s:
        assert s.scalar(select(func.count()).select_from(Image)) == 23
        assert s.scalar(select(func.count()).select_from(Study)) == 11
        assert by_key(s, "S05") is None
        assert [im.position for im in by_key(s, "S03").images] == [0, 1, 2]
    rerun = import_records(db, [*records, again], blobs=settings.blobs, fmt="pipe", workers=2)
    assert (rerun.unchanged, rerun.failed, rerun.images) == (12, 1, 0), rerun.summary()


def _crashing_chunk(check, sources):
    """A worker that dies (as a segfaulting decoder would) on a file named crash."""
    import os

    from rrg_review.app.ingest.service import _check_one

    if any(s.name.endswith("crash.png") for s in sources):
        os._exit(1)
    return [_check_one(s, check) for s in sources]


def test_a_crashing_worker_fails_its_images_and_the_import_goes_on(db, settings, tmp_path,
                                                                   rg1_small, monkeypatch):
    import rrg_review.app.ingest.service as ingest
    from rrg_review.app.ingest.service import import_records

    monkeypatch.setattr(ingest, "BATCH_IMAGES", 2)
    monkeypatch.setattr(ingest, "CHUNK_IMAGES", 1)
    monkeypatch.setattr(ingest, "POOL_MIN_IMAGES", 1)
    monkeypatch.setattr(ingest, "_check_chunk", _crashing_chunk)
    records = _records_with_images(tmp_path / "pipe", rg1_small, 12)
    crash = layouts.write(tmp_path / "pipe" / "crash.png", layouts.png16(rg1_small))
    records[2] = replace_images(records[2], crash)
    report = import_records(db, records, blobs=settings.blobs, fmt="pipe", workers=2)
    assert report.found == 12 and report.added + report.failed == 12, report.summary()
    crashed = [p for p in report.problems if p.where.endswith("crash.png")]
    assert crashed and "image checker crashed" in crashed[0].reason, report.problems
    with db.read() as s:  # rounds after the crash run in a new pool
        assert by_key(s, "S11") is not None, report.problems
        assert len(by_key(s, "S11").images) == 2
        assert by_key(s, "S02") is None


def replace_images(record, path: Path):
    from dataclasses import replace

    from rrg_review.studies.records import ImageSource

    return replace(record, images=(ImageSource(name=str(path), path=str(path)),))
