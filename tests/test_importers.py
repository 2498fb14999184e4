"""Each dataset importer on a faithful layout, end to end through the ingest service."""

from __future__ import annotations

import json
from datetime import date

import pydicom
import pytest
from sqlalchemy import select, text

from rrg_review.app.ingest.service import import_path
from rrg_review.db.models import Image, Patient, Study
from rrg_review.db.store import counts, get_study, priors, pseudonym
from rrg_review.studies.errors import DatasetLayoutError
from rrg_review.studies.importers import detect_format
from tests import layouts
from tests.conftest import rg1


def run_import(db, settings, path, **kw):
    return import_path(db, path, blobs=settings.blobs, **kw)


def test_iu_xray_reports_with_images(db, settings, tmp_path, rg1_small):
    archive = layouts.iu_archive(tmp_path / "iu", rg1_small)
    assert detect_format(archive).name == "iu-xray"
    report = run_import(db, settings, archive)
    assert (report.added, report.images, report.failed) == (3, 3, 0)
    with db.read() as s:
        study = s.scalar(select(Study).where(Study.study_key == "CXR1"))
        study = get_study(s, study.id)
        assert study.indication == "Cough" and study.comparison == "None."
        assert study.reference.findings == "Heart size normal. Lungs clear."
        assert [i.format for i in study.images] == ["png", "png"]
        assert study.images[0].rows == rg1_small.shape[0]
        three = s.scalar(select(Study).where(Study.study_key == "CXR3"))
        assert get_study(s, three.id).reference.findings is None


def test_iu_xray_missing_image_fails_only_that_study(db, settings, tmp_path, rg1_small):
    archive = layouts.iu_archive(tmp_path / "iu", rg1_small)
    (tmp_path / "iu" / "NLMCXR_png" / "CXR2_1_IM-0652-1001.png").unlink()
    report = run_import(db, settings, archive)
    assert report.added == 2 and report.failed == 1
    assert "CXR2_1_IM-0652-1001.png" in report.problems[0].where
    with db.read() as s:
        assert s.scalar(select(Study).where(Study.study_key == "CXR2")) is None


def test_real_iu_archive_imports_all_reports(db, settings, iu_archive):
    report = run_import(db, settings, iu_archive)
    assert (report.added, report.failed) == (3955, 0)
    with db.read() as s:
        c = counts(s)
    # 28 reports have neither findings nor impression: no empty reference rows
    assert (c.studies, c.references, c.with_both_sections, c.images) == (3955, 3927, 3419, 0)
    again = run_import(db, settings, iu_archive)
    assert (again.added, again.already_present) == (0, 3955)


def test_mimic_cxr_jpg(db, settings, tmp_path, rg1_small):
    root = layouts.mimic_cxr(tmp_path / "mimic", rg1_small)
    assert detect_format(root).name == "mimic-cxr"
    report = run_import(db, settings, root)
    assert (report.added, report.images, report.failed) == (3, 4, 0)
    with db.read() as s:
        study = s.scalar(select(Study).where(Study.study_key == "53189527"))
        assert study.split == "train" and study.study_date == date(2018, 3, 5)
        assert study.comparison == "Prior of January"
        assert [p.study_key for p in priors(s, study)] == ["50414267"]
        first = get_study(s, priors(s, study)[0].id)
        assert [(i.view_position, i.view_group) for i in first.images] == [
            ("PA", "frontal"), ("LATERAL", "lateral")]
        assert first.reference.findings == "Lungs are clear, heart normal."
        no_report = s.scalar(select(Study).where(Study.study_key == "57375967"))
        assert get_study(s, no_report.id).reference is None and no_report.split == "test"


def test_mimic_cxr_wrong_csv_is_a_layout_error_and_stores_nothing(db, settings, tmp_path,
                                                                  rg1_small):
    root = layouts.mimic_cxr(tmp_path / "mimic", rg1_small)
    (root / "mimic-cxr-2.0.0-metadata.csv").write_text("dicom,subject\nx,y\n")
    with pytest.raises(DatasetLayoutError) as err:
        run_import(db, settings, root)
    assert "mimic-cxr-2.0.0-metadata.csv" in str(err.value)
    assert "dicom_id" in str(err.value)
    with db.read() as s:
        assert counts(s).studies == 0


def test_rexgradient(db, settings, tmp_path, rg1_small):
    root = layouts.rexgradient(tmp_path / "rex", rg1_small)
    assert detect_format(root).name == "rexgradient"
    report = run_import(db, settings, root)
    assert (report.added, report.images, report.failed) == (3, 4, 0)
    with db.read() as s:
        study = s.scalar(select(Study).where(Study.study_key == "GRDNA2"))
        assert study.split == "train" and study.indication == "Shortness of breath."
        assert study.demographics == {"sex": "F", "age": "061Y"}
        assert [p.study_key for p in priors(s, study)] == ["GRDNA1"]
        full = get_study(s, study.id)
        assert full.reference.findings == "New left basilar opacity."
        assert full.images[0].bits_stored == 16
        test_study = s.scalar(select(Study).where(Study.study_key == "GRDNA3"))
        assert test_study.split == "test"


def test_rexgradient_corrupt_png_leaves_no_half_study(db, settings, tmp_path, rg1_small):
    root = layouts.rexgradient(tmp_path / "rex", rg1_small)
    meta = json.loads((root / "metadata" / "train_metadata.json").read_text())
    bad = root / meta["s1"]["ImagePath"][1]
    bad.write_bytes(bad.read_bytes()[:100])
    report = run_import(db, settings, root)
    assert report.added == 2 and report.failed == 1
    assert str(bad) in str(report.problems[0])
    with db.read() as s:
        assert s.scalar(select(Study).where(Study.study_key == "GRDNA1")) is None
        assert s.scalar(select(Image).where(Image.uri.like("%GRDNA1%"))) is None
    # fixing the file and importing again adds just the missing study
    bad.write_bytes(layouts.png_bytes(rg1_small, bits=16))
    again = run_import(db, settings, root)
    assert (again.added, again.already_present) == (1, 2)


@pytest.mark.parametrize("builder", ["interpret_cxr_parquet", "interpret_cxr_saved"])
def test_interpret_cxr(db, settings, tmp_path, rg1_small, builder):
    path = getattr(layouts, builder)(tmp_path / "icxr", rg1_small)
    assert detect_format(path).name == "interpret-cxr"
    report = run_import(db, settings, path)
    n_splits = 2 if builder == "interpret_cxr_saved" else 1
    # the same rows in two splits share image paths, hence study keys: stored once, and the
    # second split's rows update the split (a merge, not a duplicate)
    assert report.added == 2 and report.updated == 2 * (n_splits - 1)
    assert report.images == 3 and report.failed == 0
    with db.read() as s:
        sources = sorted(s.scalars(select(Study.source)))
        assert sources == ["CheXpert", "PadChest"]
        pad = get_study(s, s.scalar(select(Study.id).where(Study.source == "PadChest")))
        assert pad.reference.findings is None and pad.reference.impression == "Cardiomegaly."
        assert [i.format for i in pad.images] == ["png", "jpeg"]
        assert all(i.uri.startswith("blob:") for i in pad.images)
        assert all(settings.blobs.path(i.uri).is_file() for i in pad.images)


def test_interpret_cxr_json_without_image_columns_is_refused(db, settings, tmp_path):
    path = tmp_path / "valid.json"
    path.write_text(json.dumps([{"findings": "a", "impression": "b"}]))
    with pytest.raises(DatasetLayoutError, match="images or images_path"):
        run_import(db, settings, path, fmt="interpret-cxr")


def test_plain_folder_with_dicom_and_png(db, settings, tmp_path, rg1_small):
    root = layouts.plain_folder(tmp_path / "cases", rg1_small, rg1())
    assert detect_format(root).name == "folder"
    report = run_import(db, settings, root)
    assert (report.added, report.images, report.failed) == (2, 2, 0)
    with db.read() as s:
        # DICOM studies are keyed by their (pseudonymised) StudyInstanceUID
        a = get_study(s, s.scalar(select(Study.id).join(Image).where(Image.format == "dicom")))
        assert a.reference.impression == "Metastases likely." and a.indication == "Cough."
        assert a.study_date == date(2004, 8, 26)  # from the DICOM header
        assert a.demographics == {"sex": "F"}
        assert a.images[0].photometric == "MONOCHROME1" and a.images[0].view_group == "frontal"
        # a folder of PNGs is keyed by its path, stored as a pseudonym (folder names often
        # name the patient: found by a new-user trial, shown in the worklist and the header)
        b = get_study(s, s.scalar(select(Study.id).where(
            Study.study_key == pseudonym(s, "cases/case-b"))))
        assert b.patient.key == pseudonym(s, "P-7") and b.study_date == date(2022, 2, 2)
        assert b.images[0].bits_stored == 8
        assert all(k.startswith("anon-") for k in s.scalars(select(Study.study_key)))


def test_pseudonymous_keys_sort_by_date_not_by_pseudonym(db, settings, tmp_path, rg1_small):
    """A worklist of pseudonyms came out in no order, a patient's study before its own prior (a
    new-user trial): studies keyed by a pseudonym sort oldest first."""
    root = layouts.plain_folder(tmp_path / "cases", rg1_small, rg1())
    run_import(db, settings, root)
    with db.read() as s:
        dates = [d for (d,) in s.execute(select(Study.study_date).order_by(Study.sort_key))]
    assert dates == [date(2004, 8, 26), date(2022, 2, 2)]
    from rrg_review.db.sorting import study_sort_key

    assert study_sort_key("CXR10", False, None, None) > study_sort_key("CXR9", False, None, None)
    undated = study_sort_key("anon-0000000000000000", True, None, None)
    assert study_sort_key("anon-ffffffffffffffff", True, date(2030, 1, 1), None) < undated


def test_folder_names_are_kept_as_keys_only_when_asked(db, settings, tmp_path, rg1_small):
    root = layouts.plain_folder(tmp_path / "cases", rg1_small, rg1())
    run_import(db, settings, root, keep_folder_names=True)
    with db.read() as s:
        keys = set(s.scalars(select(Study.study_key)))
    assert "cases/case-b" in keys  # the DICOM study's UID is a pseudonym all the same
    assert len(keys) == 2 and sum(k.startswith("anon-") for k in keys) == 1
    # kept on purpose: a later import (and its one-off rewrite of old keys) leaves them alone
    run_import(db, settings, root, keep_folder_names=True)
    with db.read() as s:
        assert set(s.scalars(select(Study.study_key))) == keys


def test_folder_names_stored_by_an_older_version_become_pseudonyms_with_no_twin(
        db, settings, tmp_path, rg1_small):
    """A database written before folder keys were pseudonymised holds `cases/case-b`: the app's
    start, or an import into it, rewrites such keys once, and a re-import of the same folder
    updates that study (same id, so its reviews and readings stay) instead of adding a twin."""
    from rrg_review.app.setup import prepare
    from rrg_review.db.models import Meta

    def as_an_older_version_left_it(root):
        run_import(db, settings, root, keep_folder_names=True)
        with db.write() as s:  # no record of the one-off rewrite
            s.delete(s.get(Meta, "folder_study_keys_pseudonymised"))
        with db.read() as s:
            return s.scalar(select(Study.id).where(Study.study_key == f"{root.name}/case-b"))

    for name, rewrite in (("cases", lambda: prepare(settings, demo=False).dispose()),
                          ("others", lambda: None)):  # the import itself rewrites
        root = layouts.plain_folder(tmp_path / name, rg1_small, rg1())
        old_id = as_an_older_version_left_it(root)
        rewrite()
        report = run_import(db, settings, root)
        assert (report.added, report.failed) == (0, 0), report
        with db.read() as s:
            assert s.scalar(select(Study.id).where(
                Study.study_key == pseudonym(s, f"{name}/case-b"))) == old_id
    with db.read() as s:
        keys = list(s.scalars(select(Study.study_key)))
    assert len(keys) == 3 and all(k.startswith("anon-") for k in keys), keys  # one DICOM UID


def test_dicom_patient_id_is_never_stored(db, settings, tmp_path, rg1_small):
    root = layouts.plain_folder(tmp_path / "cases", rg1_small, rg1())
    run_import(db, settings, root)
    with db.read() as s:
        keys = set(s.scalars(select(Patient.key)))
    assert "9RG1" not in keys and any(k.startswith("anon-") for k in keys)
    with db.engine.connect() as conn:
        dump = "\n".join(str(row) for t in ("patient", "study", "image")
                         for row in conn.execute(text(f"SELECT * FROM {t}")))
    assert "9RG1" not in dump


def test_plain_folder_corrupt_dicom_is_reported_and_skipped(db, settings, tmp_path, rg1_small):
    root = layouts.plain_folder(tmp_path / "cases", rg1_small, rg1())
    (root / "case-c").mkdir()
    other = pydicom.dcmread(rg1())
    other.StudyInstanceUID = "1.2.826.0.1.3680043.8.498.1"
    other.save_as(root / "case-c" / "ok.dcm")
    broken = root / "case-c" / "broken.dcm"
    broken.write_bytes((root / "case-c" / "ok.dcm").read_bytes()[:5000])
    report = run_import(db, settings, root)
    assert report.added == 2 and report.failed == 1
    assert report.problems[0].where == str(broken)
    with db.read() as s:
        assert s.scalar(select(Image).where(Image.uri.like("%case-c%"))) is None


def test_unknown_layout_names_the_path(db, settings, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetLayoutError, match="no known dataset layout"):
        run_import(db, settings, tmp_path / "empty")
