"""A folder study whose every image is bad (an empty file, a truncated one, text under an image's
name) is listed as failed with the file and the reason, never dropped without a word: before,
"2 records: 2 added, 0 failed" was printed and the study was gone (15 cases: 3 kinds x 5 names)."""

from __future__ import annotations

import io

import numpy as np
import pydicom
import pytest
from sqlalchemy import select

from rrg_review.app.ingest.service import import_path
from rrg_review.db.models import Study
from rrg_review.db.store import pseudonym
from tests import layouts
from tests.conftest import rg1

PIXELS = (np.arange(64 * 64) % 251).astype(np.uint8).reshape(64, 64)
NAMES = ("frontal.png", "FRONTAL.PNG", "frontal.jpg", "frontal.jpeg", "frontal.dcm")


def _whole(name: str) -> bytes:
    if name.lower().endswith(".png"):
        return layouts.png_bytes(PIXELS)
    if name.lower().endswith((".jpg", ".jpeg")):
        return layouts.jpeg_bytes(PIXELS)
    buf = io.BytesIO()
    pydicom.dcmread(rg1("RG1_UNCR.dcm")).save_as(buf, enforce_file_format=True)
    return buf.getvalue()


def _bad(kind: str, name: str) -> bytes:
    if kind == "empty":
        return b""
    if kind == "truncated":
        data = _whole(name)
        return data[:len(data) // 3]
    return b"This is a report, not an image.\n"


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("kind", ["empty", "truncated", "text"])
def test_a_study_whose_only_image_is_bad_is_listed_as_failed(db, settings, tmp_path, kind,
                                                              name):
    data = tmp_path / "data"
    layouts.write(data / "good" / "frontal.png", layouts.png_bytes(PIXELS))
    layouts.write(data / "good" / "report.txt", "FINDINGS: Clear.\nIMPRESSION: Normal.\n")
    bad = layouts.write(data / "bad" / name, _bad(kind, name))
    layouts.write(data / "bad" / "report.txt", "FINDINGS: Nodule.\nIMPRESSION: Mass.\n")

    report = import_path(db, data, blobs=settings.blobs, workers=1)

    assert (report.found, report.added, report.failed) == (2, 1, 1), report.summary()
    assert "2 records: 1 added" in report.summary() and "1 failed" in report.summary()
    (problem,) = report.problems
    line = str(problem)
    assert str(bad) in line, line
    reason = line.split(f"{bad}", 1)[1]
    assert len(reason.strip(" :[]")) > 5 and "Traceback" not in line, line
    with db.read() as s:
        assert list(s.scalars(select(Study.study_key))) == [pseudonym(s, "data/good")]


def test_a_bad_image_beside_good_ones_fails_its_whole_study_with_the_file(db, settings,
                                                                           tmp_path):
    data = tmp_path / "data"
    layouts.write(data / "case" / "frontal.png", layouts.png_bytes(PIXELS))
    empty = layouts.write(data / "case" / "lateral.png", b"")
    report = import_path(db, data, blobs=settings.blobs, workers=1)
    assert (report.found, report.added, report.failed) == (1, 0, 1), report.summary()
    assert str(report.problems[0]).startswith(f"{empty}: not a DICOM, PNG or JPEG file (an empty")


def test_every_failed_image_of_a_study_is_named_with_its_reason(db, settings, tmp_path):
    """"(and 1 more image(s) failed)" hid the second image's file and reason (a trial: a
    decompression bomb beside a missing file). Each is named with its reason, up to four."""
    data = tmp_path / "data"
    empty = layouts.write(data / "case" / "a.png", b"")
    text = layouts.write(data / "case" / "b.png", b"This is a report, not an image.\n")
    report = import_path(db, data, blobs=settings.blobs, workers=1)
    [problem] = report.problems
    said = str(problem)
    assert said.startswith(f"{empty}: not a DICOM, PNG or JPEG file (an empty"), said
    assert f"; {text}: not a DICOM, PNG or JPEG file" in said, said
    for i in range(4):
        layouts.write(data / "case" / f"c{i}.png", b"")
    [problem] = import_path(db, data, blobs=settings.blobs, workers=1).problems
    assert str(problem).endswith("; and 2 more image(s) failed"), str(problem)
