"""DICOM/PNG/JPEG decoding on the real RG1 radiograph and its encodings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pydicom
import pytest
from pydicom.pixels import apply_voi_lut

from rrg_review.studies.errors import StudyLoadError
from rrg_review.studies.pixels import decode, inspect, window_level
from rrg_review.studies.records import ImageSource
from tests.conftest import rg1
from tests.layouts import SPACING, calibrated_dicom, jpeg_bytes, png_bytes


def src(path: str) -> ImageSource:
    return ImageSource(name=path, path=path)


def test_lossless_jpeg2000_decodes_to_exactly_the_uncompressed_pixels():
    reference = pydicom.dcmread(rg1("RG1_UNCR.dcm")).pixel_array
    j2k = decode(src(rg1("RG1_J2KR.dcm")))
    assert j2k.raw.shape == (1955, 1841)
    np.testing.assert_array_equal(j2k.raw, reference)
    np.testing.assert_array_equal(j2k.display, decode(src(rg1("RG1_UNCR.dcm"))).display)


def test_lossy_jpeg2000_decodes_close_to_the_original():
    lossy = decode(src(rg1("RG1_J2KI.dcm"))).raw.astype(np.int64)
    exact = decode(src(rg1("RG1_UNCR.dcm"))).raw.astype(np.int64)
    assert lossy.shape == exact.shape
    assert np.mean(np.abs(lossy - exact)) < 0.01 * (exact.max() - exact.min())


def _regions(image: np.ndarray) -> tuple[float, float]:
    """Mean of the spine/mediastinum strip and of both mid-lung fields of a PA chest."""
    h, w = image.shape
    rows = slice(int(0.30 * h), int(0.55 * h))
    spine = image[rows, int(0.47 * w):int(0.53 * w)].mean()
    lungs = np.concatenate([image[rows, int(0.20 * w):int(0.30 * w)].ravel(),
                            image[rows, int(0.70 * w):int(0.80 * w)].ravel()]).mean()
    return float(spine), float(lungs)


def test_monochrome1_radiograph_is_shown_with_bone_white():
    image = decode(src(rg1("RG1_UNCI.dcm")))
    assert image.info.photometric == "MONOCHROME1" and image.inverted
    raw_spine, raw_lungs = _regions(image.raw.astype(float))
    assert raw_spine < raw_lungs  # stored MONOCHROME1: dense bone has low values
    spine, lungs = _regions(image.display.astype(float))
    assert spine > lungs + 40  # displayed: bone white, aerated lung dark
    assert image.display.dtype == np.uint8
    assert image.display.min() == 0 and image.display.max() == 255


def test_display_equals_the_plain_pipeline_on_the_whole_array():
    """The lookup-table shortcut gives the same pixels as VOI -> invert -> min-max done directly."""
    ds = pydicom.dcmread(rg1("RG1_UNCI.dcm"))
    voi = apply_voi_lut(ds.pixel_array, ds).astype(np.float64)
    voi = voi.max() - voi
    expected = np.rint((voi - voi.min()) / (voi.max() - voi.min()) * 255).astype(np.uint8)
    np.testing.assert_array_equal(decode(src(rg1("RG1_UNCI.dcm"))).display, expected)


def test_header_fields_and_default_window_are_read():
    image = decode(src(rg1("RG1_UNCI.dcm")))
    assert image.info.view_position == "PA"
    assert image.info.body_part == "CHEST"
    assert image.info.bits_stored == 15
    assert image.window == (15000.0, 30000.0)


def test_window_level_narrows_contrast_and_keeps_bone_white():
    image = decode(src(rg1("RG1_UNCI.dcm")))
    wide = window_level(image, 15000, 30000)
    narrow = window_level(image, 12000, 4000)
    assert narrow.std() > wide.std()  # a narrow window stretches contrast
    spine, lungs = _regions(narrow.astype(float))
    assert spine > lungs


@pytest.mark.parametrize(("bits", "rgb"), [(8, False), (16, False), (8, True)])
def test_png_in_8_and_16_bit_gray_and_rgb(tmp_path, rg1_small, bits, rgb):
    path = tmp_path / "x.png"
    path.write_bytes(png_bytes(rg1_small, bits=bits, rgb=rgb))
    image = decode(src(str(path)))
    assert image.info.format == "png" and image.info.bits_stored == bits
    assert image.display.shape == rg1_small.shape and image.display.dtype == np.uint8
    expected = rg1_small.astype(float)
    if bits == 16:  # full bit depth kept; display is min-max of the stored range
        assert image.raw.dtype == np.uint16 and int(image.raw.max()) > 255
        expected = (expected - expected.min()) / (expected.max() - expected.min()) * 255
    assert np.abs(image.display.astype(float) - expected).max() <= 1
    spine, lungs = _regions(image.display.astype(float))
    assert spine > lungs


def test_jpeg_and_embedded_bytes(rg1_small):
    image = decode(ImageSource(name="mem.jpg", data=jpeg_bytes(rg1_small)))
    assert image.info.format == "jpeg"
    assert np.abs(image.display.astype(int) - rg1_small.astype(int)).mean() < 3


def test_inspect_checksums_file_bytes(tmp_path, rg1_small):
    import hashlib

    path = tmp_path / "x.png"
    data = png_bytes(rg1_small)
    path.write_bytes(data)
    info = inspect(src(str(path)))
    assert info.checksum == hashlib.sha256(data).hexdigest()
    assert (info.rows, info.cols) == rg1_small.shape


def test_truncated_dicom_is_a_clear_error(tmp_path):
    data = Path(rg1("RG1_UNCI.dcm")).read_bytes()
    bad = tmp_path / "broken.dcm"
    bad.write_bytes(data[: len(data) // 3])
    with pytest.raises(StudyLoadError) as err:
        inspect(src(str(bad)))
    assert str(bad) in str(err.value)


def test_non_image_dicom_is_refused():
    from pydicom.data import get_testdata_file

    path = get_testdata_file("rtplan.dcm")
    with pytest.raises(StudyLoadError, match="no pixel data"):
        decode(src(path))


def test_multi_frame_dicom_is_refused():
    from pydicom.data import get_testdata_file

    path = get_testdata_file("emri_small.dcm")
    with pytest.raises(StudyLoadError, match=r"multi-frame DICOM \(10 frames\)"):
        decode(src(path))


def test_text_file_and_truncated_png_are_refused(tmp_path, rg1_small):
    text = tmp_path / "notes.dcm"
    text.write_text("not an image at all " * 20)
    with pytest.raises(StudyLoadError, match=r"notes.dcm"):
        decode(src(str(text)))
    png = tmp_path / "cut.png"
    png.write_bytes(png_bytes(rg1_small)[:200])
    with pytest.raises(StudyLoadError, match="corrupt PNG"):
        inspect(src(str(png)))
    with pytest.raises(StudyLoadError, match="cannot read file"):
        decode(src(str(tmp_path / "missing.png")))


def _testdata(name: str) -> str:
    from pydicom.data import get_testdata_file

    return get_testdata_file(name)


def test_jpeg_ls_lossless_equals_the_uncompressed_pixels():
    plain = decode(src(_testdata("MR_small.dcm")))
    jls = decode(src(_testdata("MR_small_jpeg_ls_lossless.dcm")))
    assert plain.raw.dtype.kind == "i"  # signed data goes through the LUT path too
    np.testing.assert_array_equal(jls.raw, plain.raw)
    np.testing.assert_array_equal(jls.display, plain.display)
    assert plain.display.min() == 0 and plain.display.max() == 255


@pytest.mark.parametrize(("name", "shape"), [
    ("JPGLosslessP14SV1_1s_1f_8b.dcm", (768, 1024)),  # JPEG lossless, process 14
    ("SC_rgb_jpeg_dcmtk.dcm", (100, 100)),  # JPEG baseline, YBR colour -> luminance
    ("MR_small_RLE.dcm", (64, 64)),  # RLE lossless
])
def test_other_compressed_transfer_syntaxes_decode(name, shape):
    image = decode(src(_testdata(name)))
    assert image.display.shape == shape and image.display.dtype == np.uint8
    assert image.display.max() > image.display.min()


def test_16_bit_png_decoded_into_the_array_equals_pillows_own_copy(tmp_path, rg1_small):
    """A 16-bit PNG is decoded straight into the numpy array (no copy out of Pillow): the pixels
    are exactly Pillow's, the array is not shared with anything else, and a PNG cut short is
    still a clear error naming the file."""
    import io

    from PIL import Image

    data = png_bytes(rg1_small, bits=16)
    path = tmp_path / "x16.png"
    path.write_bytes(data)
    with Image.open(io.BytesIO(data)) as im:
        im.load()
        assert im.mode == "I;16"
        expected = np.asarray(im)
    image = decode(src(str(path)))
    assert image.raw.dtype == np.uint16 and np.array_equal(image.raw, expected)
    assert image.raw.flags.owndata and image.raw.flags.c_contiguous
    cut = tmp_path / "cut16.png"
    cut.write_bytes(data[:len(data) // 2])
    with pytest.raises(StudyLoadError, match=r"cut16\.png: corrupt PNG"):
        inspect(src(str(cut)))


@pytest.mark.parametrize("keyword", ["PixelSpacing", "ImagerPixelSpacing"])
def test_pixel_spacing_is_read_and_a_zero_one_is_none(tmp_path, keyword):
    path = str(calibrated_dicom(tmp_path / "c.dcm", keyword))
    assert decode(ImageSource(name=path, path=path)).info.pixel_spacing == SPACING
    rg = rg1("RG1_UNCI.dcm")  # PixelSpacing 0.000\\0.000: not mm
    assert decode(ImageSource(name=rg, path=rg)).info.pixel_spacing is None
