"""Window/level in the enlarged view on real decoded files: the value range and default window
of an image, the window itself, the presets and invert (Desk), and the byte-bounded cache of
decoded images."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage
from sqlalchemy import select

from bench.synthetic import SyntheticImage, add_studies
from rrg_review.app.review.desk import WINDOW_PRESETS, Desk
from rrg_review.app.review.service import ReviewError, ReviewService
from rrg_review.app.viewer.service import DecodedCache, StudyViewer
from rrg_review.db.blobs import BlobStore
from rrg_review.db.models import Image
from rrg_review.studies.pixels import decode
from rrg_review.studies.records import ImageSource
from tests.conftest import rg1

LO, HI = 1000, 5095  # the 16-bit PNG's values: a ramp of 4096 levels


@pytest.fixture
def ramp(tmp_path: Path) -> Path:
    """A 16-bit grayscale PNG whose values rise 1000..5095 along each row."""
    values = (LO + np.arange(64 * 64, dtype=np.uint16)).reshape(64, 64)
    path = tmp_path / "ramp.png"
    PILImage.fromarray(values).save(path)
    return path


@pytest.fixture
def viewer_and_image(db, settings, ramp) -> tuple[StudyViewer, int]:
    add_studies(db, 1, image=SyntheticImage(str(ramp), 64, 64, bits_stored=16, fmt="png"))
    with db.read() as s:
        image_id = s.scalar(select(Image.id))
    return StudyViewer(db, BlobStore(settings.blobs.root)), image_id


def test_value_range_is_the_full_bit_depth_and_its_default_window(viewer_and_image):
    viewer, image_id = viewer_and_image
    r = viewer.value_range(image_id)
    lo, hi, (center, width) = r.lo, r.hi, r.window
    assert (lo, hi) == (LO, HI)  # not the 8-bit display values
    assert (center, width) == ((LO + HI) / 2, HI - LO)  # a PNG has no window: the full range
    with pytest.raises(LookupError, match="image 999 does not exist"):
        viewer.value_range(999)


def test_window_maps_below_to_black_above_to_white_and_the_center_to_grey(viewer_and_image):
    viewer, image_id = viewer_and_image
    raw = LO + np.arange(64 * 64).reshape(64, 64)
    img = viewer.window(image_id, 3000, 1000)
    assert img.dtype == np.uint8 and img.shape == (64, 64)
    assert (img[raw <= 2500] == 0).all() and (img[raw >= 3500] == 255).all()
    assert abs(int(img[raw == 3000][0]) - 128) <= 1
    assert (np.diff(img.ravel().astype(int)) >= 0).all()  # monotone along the ramp
    wide = viewer.window(image_id, (LO + HI) / 2, HI - LO)
    assert wide.min() == 0 and wide.max() == 255
    saturated = np.isin(img, (0, 255)).sum()
    assert np.isin(wide, (0, 255)).sum() < saturated  # the narrow window clips more
    with pytest.raises(LookupError):
        viewer.window(999, 3000, 1000)


def test_a_dicom_window_comes_from_its_header(db, settings):
    decoded = decode(ImageSource(name="RG1", path=rg1()))
    add_studies(db, 1, source="dcm", image=SyntheticImage(rg1(), *decoded.raw.shape))
    with db.read() as s:
        image_id = s.scalar(select(Image.id))
    viewer = StudyViewer(db, BlobStore(settings.blobs.root))
    r = viewer.value_range(image_id)
    lo, hi, window = r.lo, r.hi, r.window
    assert (lo, hi) == (float(decoded.raw.min()), float(decoded.raw.max()))
    assert window == (decoded.window or ((lo + hi) / 2, max(hi - lo, 1.0)))


def test_presets_follow_the_brightness_histogram(db, viewer_and_image):
    """On a ramp (every value equally often) a preset from brightness percentile a to b is
    about the window from a % to b % of the range."""
    viewer, image_id = viewer_and_image
    desk = Desk(viewer, ReviewService(db))
    span = HI - LO

    def percent(a: float, b: float) -> tuple[float, float]:
        return LO + span * (a + b) / 200, span * (b - a) / 100

    expected = {"file default": ((LO + HI) / 2, span), "full range": (LO + span / 2, span),
                "soft tissue": percent(30, 92), "bone": percent(10, 99.5),
                "lung": percent(2, 60)}
    assert set(expected) == set(WINDOW_PRESETS)
    for name, (center, width) in expected.items():
        assert desk.window_preset(image_id, name) == pytest.approx(
            (center, width), abs=0.05 * span), name  # (percentiles of every 4th pixel)
    # whole raw units on a film of integer scale (the Level box read "12169.04": a trial)
    for name in ("soft tissue", "bone", "lung", "full range"):
        assert all(v.is_integer() for v in desk.window_preset(image_id, name)), name
    with pytest.raises(ReviewError, match="unknown window preset 'x'"):
        desk.window_preset(image_id, "x")
    # (invert is the browser's: tests/test_viewer_canvas.py reads the canvas back)
    # a width of 0 or less is treated as 1 (a hard threshold), never a division by zero
    raw = LO + np.arange(64 * 64).reshape(64, 64)
    for center in (3000, 3000.5):  # x.5: the linear formula would give 0/0 at a pixel
        for width in (0, 1, -5):
            hard = viewer.window(image_id, center, width)
            assert np.array_equal(hard, np.where(raw > center - 0.5, 255, 0)), (center, width)


def _decoded(ramp: Path):
    return decode(ImageSource(name=str(ramp), path=str(ramp)))


def test_the_decoded_cache_is_bounded_in_bytes_least_recent_first(ramp):
    image = _decoded(ramp)
    size = image.raw.nbytes + image.display.nbytes
    cache = DecodedCache(max_bytes=2 * size)
    cache.put(1, image)
    cache.put(2, image)
    assert cache.get(1) is image  # 1 is now the most recently used
    cache.put(3, image)  # over the bound: the least recently used (2) goes
    assert cache.get(2) is None and cache.get(1) is image and cache.get(3) is image
    cache.put(3, image)  # putting a cached key again neither duplicates nor counts twice
    cache.put(4, image)
    assert [k for k in (1, 3, 4) if cache.get(k) is not None] == [3, 4]
    tiny = DecodedCache(max_bytes=1)  # an image larger than the bound is still kept, alone
    tiny.put(1, image)
    tiny.put(2, image)
    assert tiny.get(1) is None and tiny.get(2) is image


def test_the_viewer_decodes_each_image_once_through_the_cache(viewer_and_image):
    viewer, image_id = viewer_and_image
    viewer.value_range(image_id)
    with viewer.db.read() as s:
        image = s.get(Image, image_id)
    first = viewer.cache.get(image_id)
    assert first is not None and viewer.decoded(image) is first


@pytest.mark.parametrize("raw", [
    np.array([[1000, 5095], [2048, 1000]], np.uint16),        # a 16-bit PNG: exact
    np.array([[-1024, 3071], [0, -1]], np.int16),              # signed CT-like values: exact
    np.array([[0.0, 0.5], [1234.567, 99999.25]], np.float64),  # a float modality LUT
])
def test_full_depth_values_give_back_the_raw_pixels(raw):
    """What the browser windows is the modality-LUT output: integers exactly, float data within
    half a quantisation step."""
    from rrg_review.app.viewer.service import full_depth_u16

    values, offset, slope = full_depth_u16(raw)
    assert values.dtype == np.dtype("<u2") and values.shape == raw.shape
    back = offset + slope * values.astype(np.float64)
    tolerance = 0.0 if raw.dtype.kind in "iu" else slope / 2 + 1e-9
    assert np.abs(back - raw).max() <= tolerance
