"""Previews off the hot path: opening decodes nothing, JPEG 2000 previews decode at a reduced
resolution level (real RG1_J2KR/J2KI files), previews on disk are served without decoding, the
full image only for window/level, and a study without images says so."""

from __future__ import annotations

import shutil
from datetime import date

import numpy as np
import pytest

from rrg_review.app.ingest.service import import_records
from rrg_review.app.viewer.service import NO_IMAGES_NOTICE, StudyViewer
from rrg_review.studies.pixels import decode, decode_reduced, reduction_for
from rrg_review.studies.records import ImageSource, ReportSections, StudyRecord
from tests.conftest import rg1


def src(path: str) -> ImageSource:
    return ImageSource(name=path, path=path)


def test_reduction_level_is_the_smallest_that_fits():
    assert reduction_for(1955, 1841, 1024) == 1
    assert reduction_for(1955, 1841, 512) == 2
    assert reduction_for(1955, 1841, 4096) == 0
    assert reduction_for(100_000, 10, 16, levels=5) == 5


@pytest.mark.parametrize("name", ["RG1_J2KR.dcm", "RG1_J2KI.dcm"])
@pytest.mark.parametrize(("max_side", "shape"), [(1024, (978, 921)), (512, (489, 461))])
def test_jpeg2000_decodes_at_a_reduced_level(name, max_side, shape):
    reduced = decode_reduced(src(rg1(name)), max_side)
    full = decode(src(rg1(name)))
    assert reduced is not None
    assert reduced.raw.shape == reduced.display.shape == shape  # 1841/4 rounds up to 461
    assert reduced.display.dtype == np.uint8
    # same values scale as the full decode (Pillow's 16-bit scaling undone) and same picture
    assert abs(reduced.raw.mean() - full.raw.mean()) / full.raw.mean() < 0.01
    step = full.raw.shape[0] // shape[0] + (full.raw.shape[0] % shape[0] > 0)
    strided = full.display[::step, ::step][:shape[0], :shape[1]].astype(float)
    assert np.abs(reduced.display.astype(float) - strided).mean() < 3
    assert reduced.window == full.window and reduced.info.photometric == "MONOCHROME1"


def test_formats_without_a_reduced_decode_say_so(tmp_path, rg1_small):
    from PIL import Image

    assert decode_reduced(src(rg1("RG1_UNCI.dcm")), 512) is None  # uncompressed DICOM
    png = tmp_path / "x.png"
    Image.fromarray(rg1_small).save(png)
    assert decode_reduced(src(str(png)), 64) is None
    jpg = tmp_path / "x.jpg"
    Image.fromarray(np.kron(rg1_small, np.ones((4, 4), np.uint8))).save(jpg, quality=90)
    small = decode_reduced(src(str(jpg)), 256)
    assert small is not None and max(small.display.shape) <= 256 * 2
    broken = tmp_path / "broken.dcm"
    broken.write_bytes(b"\0" * 128 + b"DICM" + b"\1" * 50)
    assert decode_reduced(src(str(broken)), 512) is None  # the full decode names the error


def _import(db, settings, *studies: tuple[str, tuple[str, ...]]):
    records = (StudyRecord(source="t", study_key=key, patient_key=f"p-{key}", origin=key,
                           study_date=date(2024, 1, 1),
                           images=tuple(ImageSource(name=p, path=p, view_position=v)
                                        for p, v in zip(paths, ("PA", "LATERAL"),
                                                        strict=False)),
                           reference=ReportSections("Clear.", "Normal."))
               for key, paths in studies)
    report = import_records(db, records, blobs=settings.blobs, fmt="test")
    assert not report.failed
    return report


def test_opening_decodes_nothing_and_previews_skip_the_full_decode(db, settings, tmp_path):
    folder = tmp_path / "images"
    folder.mkdir()
    paths = []
    for name in ("RG1_J2KR.dcm", "RG1_J2KI.dcm"):
        paths.append(str(shutil.copy(rg1(name), folder / name)))
    _import(db, settings, ("J2K", tuple(paths)))
    viewer = StudyViewer(db, settings.blobs, preview_dir=tmp_path / "previews")
    view = viewer.open(1)
    assert view.has_images and view.notice is None
    assert [im.label[:2] for im in view.images] == ["1:", "2:"]
    assert viewer.cache.get(view.images[0].image_id) is None  # opening decoded nothing
    files = [viewer.preview_file(im) for im in view.images]
    assert viewer.cache.get(view.images[0].image_id) is None  # nor did the previews
    from PIL import Image

    assert Image.open(files[0]).size == (921, 978)
    # the full image is decoded for window/level only
    r = viewer.value_range(view.images[0].image_id)
    lo, hi = r.lo, r.hi
    assert viewer.cache.get(view.images[0].image_id) is not None
    assert viewer.window(view.images[0].image_id, (lo + hi) / 2, hi - lo).shape == (1955, 1841)


def test_previews_on_disk_are_served_without_reading_the_image(db, settings, tmp_path):
    folder = tmp_path / "images"
    folder.mkdir()
    path = str(shutil.copy(rg1("RG1_UNCI.dcm"), folder / "a.dcm"))
    _import(db, settings, ("A", (path,)))
    first = StudyViewer(db, settings.blobs, preview_dir=tmp_path / "previews")
    written = first.preview_file(first.open(1).images[0])
    (folder / "a.dcm").rename(folder / "moved.dcm")  # the image itself is gone now
    fresh = StudyViewer(db, settings.blobs, preview_dir=tmp_path / "previews")
    view = fresh.open(1)
    assert fresh.preview_file(view.images[0]) == written  # served from disk, nothing decoded
    from rrg_review.studies.errors import StudyLoadError

    with pytest.raises(StudyLoadError, match=r"a.dcm"):  # window/level needs the real file
        fresh.value_range(view.images[0].image_id)


def test_a_study_without_images_says_so(db, settings):
    _import(db, settings, ("REF", ()))
    view = StudyViewer(db, settings.blobs).open(1)
    assert not view.has_images and view.images == ()
    assert view.notice == NO_IMAGES_NOTICE and "no images" in view.notice


@pytest.mark.parametrize("photometric", ["MONOCHROME2", "MONOCHROME1"])
def test_a_preview_is_the_files_window_as_the_viewer_draws_it(db, settings, tmp_path,
                                                              photometric):
    """A film whose values fill only the middle half of its own window: the preview shows
    that window as the viewer's "file default" draws it (a new-user trial saw the preview
    stretched black to white, its corner at grey 1 where the viewer drew 47), not the display
    pipeline's stretch over the values present."""
    import pydicom

    from rrg_review.app.viewer.service import at_file_default, binned
    from rrg_review.studies.pixels import window_level

    raw = decode(src(rg1("RG1_UNCR.dcm"))).raw
    lo, hi = float(raw.min()), float(raw.max())
    center, width = (lo + hi) / 2, 2 * (hi - lo)
    ds = pydicom.dcmread(rg1("RG1_UNCR.dcm"))
    ds.WindowCenter, ds.WindowWidth = round(center), round(width)
    ds.PhotometricInterpretation = photometric
    path = tmp_path / "windowed.dcm"
    ds.save_as(path)
    decoded = decode(src(str(path)))
    shown = at_file_default(decoded)
    assert np.array_equal(shown, window_level(decoded, round(center), round(width)))
    assert decoded.display.min() == 0 and decoded.display.max() == 255  # the stretch
    assert shown.min() > 50 and shown.max() < 205  # the middle half of the window
    # and that is the preview file the page shows
    _import(db, settings, ("WIN", (str(path),)))
    viewer = StudyViewer(db, settings.blobs, preview_dir=tmp_path / "previews")
    from PIL import Image

    preview = np.asarray(Image.open(viewer.preview_file(viewer.open(1).images[0])))
    assert np.array_equal(preview, binned(shown, 1024))


def test_a_preview_keeps_one_pixel_lines_wherever_they_fall():
    """A ninth new-user trial (medium): previews kept every n-th pixel, so a 1-pixel line
    vanished from the gallery unless it fell on a kept column (a cross lost an arm; ten thin
    lines 6 px apart all went). Each preview pixel is now its block's mean: every line stays,
    at 1/step of its contrast, wherever it falls."""
    from rrg_review.app.viewer.service import binned

    film = np.full((2500, 2000), 40, dtype=np.uint8)
    columns = [601 + 6 * k for k in range(10)]  # none of them on a multiple of 3
    film[:, columns] = 250
    small = binned(film, 1024)
    assert small.shape == (834, 667)  # step 3, the edge padded
    for x in columns:
        assert small[:, x // 3].min() >= 40 + (250 - 40) // 3 - 1, x  # each line's block shows it
    assert np.abs(small.astype(int)[:, :150] - 40).max() == 0  # and nothing else changes
    sixteen = np.arange(6 * 4, dtype=np.uint16).reshape(6, 4) * 1000
    assert binned(sixteen, 2).dtype == np.uint16  # (the stand-in: full-depth values)
    assert binned(sixteen, 2)[0, 0] == round(np.mean(sixteen[:3, :3]))
