"""Decode DICOM, PNG and JPEG chest radiographs into display pixels.

The DICOM path follows the ReXGradient-160K conversion: pixel data through pydicom's handlers
(compressed transfer syntaxes included), Modality LUT, VOI LUT or window, MONOCHROME1 inverted so
bone is white, then min-max to 0..255. The full-bit-depth array after the Modality LUT is kept so
the viewer can window/level on it.

Speed: the VOI/invert/min-max chain is evaluated once per distinct stored value (a lookup table
built with pydicom's own `apply_voi_lut`) and applied with one gather, so the display image costs
little more than the decode itself (see bench/ingest.py).
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import struct
import warnings
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from rrg_review.studies.errors import StudyLoadError
from rrg_review.studies.records import ImageSource
from rrg_review.studies.safety import Guard

if TYPE_CHECKING:  # pydicom and Pillow are imported where used: importing studies stays fast
    from PIL.Image import Image as PILImage
    from pydicom import Dataset

log = logging.getLogger(__name__)

# Integer ranges up to this many distinct values go through a lookup table.
_LUT_MAX_RANGE = 1 << 20


@dataclass(frozen=True)
class ImageInfo:
    """What the study store keeps about an image (no pixels, no PHI)."""

    format: str  # "dicom" | "png" | "jpeg"
    rows: int
    cols: int
    photometric: str
    bits_stored: int
    checksum: str  # sha256 of the file bytes
    view_position: str | None = None
    laterality: str | None = None
    body_part: str | None = None
    modality: str | None = None
    view_source: str | None = None  # "dicom" | "metadata" | None (unknown)
    # (row, column) spacing in mm from PixelSpacing, else ImagerPixelSpacing; None: uncalibrated
    pixel_spacing: tuple[float, float] | None = None
    # the spacing is ImagerPixelSpacing's: at the detector, not corrected for magnification
    spacing_at_detector: bool = False


@dataclass(frozen=True)
class DecodedImage:
    """Pixels ready to show, plus the full-bit-depth array for window/level."""

    info: ImageInfo
    raw: np.ndarray  # grayscale, after the Modality LUT (DICOM) or as stored (PNG/JPEG)
    display: np.ndarray  # uint8, bone white
    window: tuple[float, float] | None  # default (center, width) from the file, if any

    @property
    def inverted(self) -> bool:
        """True when `raw` has bone dark (MONOCHROME1) and must be flipped for display."""
        return self.info.photometric == "MONOCHROME1"


def sniff_format(head: bytes, name: str) -> str:
    """Tell DICOM, PNG and JPEG apart from the first bytes (extension only as a fallback)."""
    if len(head) >= 132 and head[128:132] == b"DICM":
        return "dicom"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head.startswith(b"\xff\xd8"):
        return "jpeg"
    if name.lower().endswith((".dcm", ".dicom")):
        return "dicom"  # DICOM without preamble; pydicom decides with force=False
    if not head:
        raise StudyLoadError(name, "not a DICOM, PNG or JPEG file (an empty file, 0 bytes)")
    raise StudyLoadError(name, "not a DICOM, PNG or JPEG file")


def read_bytes(source: ImageSource, limit: int = -1) -> bytes:
    """The image's bytes (all, or the first `limit`), with a clear error when unreadable."""
    if source.data is not None:
        return source.data if limit < 0 else source.data[:limit]
    try:
        if source.path is None:
            raise OSError("the image has neither bytes nor a path")
        with open(source.path, "rb") as fh:
            return fh.read(limit)
    except OSError as exc:
        raise StudyLoadError(source.name, f"cannot read file ({exc.strerror or exc})") from exc


def decode(source: ImageSource) -> DecodedImage:
    """Decode one image into display pixels; errors name the file and the reason.

    No checksum here (that is `inspect`'s job at import): the viewer's hot path stays at
    decode cost.
    """
    fmt = sniff_format(read_bytes(source, 132), source.name)
    if fmt == "dicom":
        return _decode_dicom(source)
    return _decode_raster(read_bytes(source), source, fmt, checksum="")


# Modalities a chest radiograph comes as (DX digital, CR computed radiography).
CHEST_MODALITIES = frozenset({"CR", "DX"})
_CHEST_BODY_PARTS = ("CHEST", "THORAX", "LUNG", "TORAX", "THORAC", "CXR", "PORT CHEST")


@dataclass(frozen=True)
class ImageCheck:
    """What `inspect` enforces: file access (a Guard), pixel limits and allowed modalities.

    `allow_modality` adds modalities to CR/DX; "ANY" turns the modality and body-part check off.
    """

    guard: Guard | None = None
    allow_modality: frozenset[str] = frozenset()
    max_pixels: int = 60_000_000
    max_bytes: int = 256 << 20


def inspect(source: ImageSource, check: ImageCheck | None = None) -> ImageInfo:
    """Validate an image as the viewer will show it and return what the store keeps about it.

    The file is read through the import's Guard (contained, regular, size-capped), refused when
    its header announces more pixels than the limit (decompression bombs) or a modality that is
    not a chest radiograph, then decoded by the same display pipeline the viewer runs (Modality
    LUT, VOI LUT/window, MONOCHROME1 inversion, min-max) including the default window/level, so
    an image that imports can be shown.
    """
    return inspect_file(source, check)[0]


def inspect_file(source: ImageSource, check: ImageCheck | None = None
                 ) -> tuple[ImageInfo, str | None]:
    """`inspect`, plus the file's real path as the Guard resolved it (None for embedded bytes).

    The file is read once; the checksum is taken over the bytes read and the decode works on the
    same bytes (no second read, no second resolve).
    """
    check = check or ImageCheck()
    real: str | None = None
    if source.data is not None:
        data = source.data
        if len(data) > check.max_bytes:
            raise StudyLoadError(source.name, f"image too large ({len(data):,} bytes; the "
                                              f"limit is {check.max_bytes:,})")
    elif check.guard is not None:
        real_path, data = check.guard.read_real(source.path,  # type: ignore[arg-type]
                                                source.name, what="image")
        real = str(real_path)
    else:
        data = read_bytes(source)
        assert source.path is not None  # noqa: S101 - read_bytes read it from this path
        real = os.path.realpath(source.path)
    fmt = sniff_format(data[:132], source.name)
    checksum = hashlib.sha256(data).hexdigest()
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # hostile headers warn; the refusal says why
        return _inspect_decoded(data, fmt, checksum, source, check), real


def _inspect_decoded(data: bytes, fmt: str, checksum: str, source: ImageSource,
                     check: ImageCheck) -> ImageInfo:
    try:
        if fmt == "dicom":
            decoded = _decode_dicom_bytes(_cut_after_pixel_data(data, source.name), source,
                                          checksum, check)
        else:
            decoded = _decode_raster(data, source, fmt, checksum, max_pixels=check.max_pixels)
        _check_displayable(decoded, source.name)
    except StudyLoadError:
        raise
    except MemoryError:
        raise StudyLoadError(source.name, "image too large to decode (out of memory)") from None
    except Exception as exc:  # a decoder's own error on hostile input: name it, never raise it
        raise StudyLoadError(source.name, f"cannot be displayed ({type(exc).__name__}: {exc})") \
            from None
    return decoded.info


def _check_displayable(image: DecodedImage, name: str) -> None:
    """Run what the viewer runs on top of `decode`: the default window and a finite range."""
    raw = image.raw
    if raw.size == 0 or raw.ndim != 2:
        raise StudyLoadError(name, f"no displayable pixels (array shape {raw.shape})")
    if raw.dtype.kind == "f" and not np.isfinite(raw).all():
        raise StudyLoadError(name, "pixel values are not finite after the Modality LUT "
                                   "(bad RescaleSlope/RescaleIntercept)")
    if image.display.shape != raw.shape or image.display.dtype != np.uint8:
        raise StudyLoadError(name, "display image has the wrong shape or type")
    if image.window is not None:
        center, width = image.window
        if not (np.isfinite(center) and np.isfinite(width)):
            raise StudyLoadError(name, f"default window {image.window} is not finite")
        window_level(image, center, width)
    if raw.dtype.kind not in "ui":  # integer pixels always window; others are tried once
        lo, hi = float(raw.min()), float(raw.max())
        window_level(image, (lo + hi) / 2, max(hi - lo, 1.0))


def _cut_after_pixel_data(data: bytes, name: str) -> bytes:
    """The file up to the end of its Pixel Data element.

    Anything after the pixel data (padding, signatures, or gigabytes of zeros in a hostile
    file) is never needed for display, and parsing it element by element can take minutes.
    """
    import pydicom

    fp = io.BytesIO(data)
    try:
        ds = pydicom.dcmread(fp, stop_before_pixels=True)
    except Exception as exc:
        raise StudyLoadError(name, f"not a valid DICOM file ({type(exc).__name__}: {exc})") \
            from None
    start = fp.tell()
    ts = getattr(getattr(ds, "file_meta", None), "TransferSyntaxUID", None)
    if start >= len(data) or ts is None:
        return data
    little = ts.is_little_endian if ts.is_transfer_syntax else True
    implicit = ts.is_implicit_VR if ts.is_transfer_syntax else False
    order = "<" if little else ">"
    head = data[start:start + 12]
    if len(head) < 8:
        return data
    if implicit:
        length, pos = struct.unpack(order + "I", head[4:8])[0], start + 8
    elif head[4:6] in (b"OB", b"OW", b"OF", b"OD", b"UN", b"OL", b"OV"):
        if len(head) < 12:
            return data
        length, pos = struct.unpack(order + "I", head[8:12])[0], start + 12
    else:
        length, pos = struct.unpack(order + "H", head[6:8])[0], start + 8
    if length != 0xFFFFFFFF:
        return data[:pos + length]
    # Encapsulated: items until the sequence delimiter (FFFE,E0DD).
    while pos + 8 <= len(data):
        group, elem, item_len = struct.unpack(order + "HHI", data[pos:pos + 8])
        pos += 8
        if (group, elem) == (0xFFFE, 0xE0DD):
            return data[:pos]
        if (group, elem) != (0xFFFE, 0xE000) or item_len == 0xFFFFFFFF:
            raise StudyLoadError(name, "corrupt encapsulated pixel data (bad item tag)")
        pos += item_len
    return data


def _path(source: ImageSource) -> str:
    if source.path is None:
        raise StudyLoadError(source.name, "the image has neither bytes nor a path")
    return source.path


# --- DICOM -----------------------------------------------------------------------------------

def _read_dataset(data: bytes | str | None, name: str) -> Dataset:
    """Parse a DICOM file (bytes or a path) and refuse what is not a single-frame image."""
    import pydicom
    from pydicom.errors import InvalidDicomError

    try:
        if data is None:
            raise StudyLoadError(name, "the image has neither bytes nor a path")
        ds = pydicom.dcmread(io.BytesIO(data) if isinstance(data, bytes) else data)
    except InvalidDicomError as exc:
        raise StudyLoadError(name, f"not a valid DICOM file ({exc})") from exc
    except Exception as exc:  # truncated files raise EOFError/ValueError/struct.error
        raise StudyLoadError(name, f"corrupt DICOM file ({type(exc).__name__}: {exc})") from exc
    if "PixelData" not in ds and "FloatPixelData" not in ds:
        sop = ds.get("SOPClassUID")
        what = getattr(sop, "name", None) or str(sop or "unknown SOP class")
        raise StudyLoadError(name, f"DICOM has no pixel data (not an image: {what})")
    frames = int(ds.get("NumberOfFrames", 1) or 1)
    if frames > 1:
        raise StudyLoadError(name, f"multi-frame DICOM ({frames} frames) is not a radiograph")
    photometric = str(ds.get("PhotometricInterpretation", ""))
    if photometric not in ("MONOCHROME1", "MONOCHROME2", "RGB", "YBR_FULL", "YBR_FULL_422"):
        raise StudyLoadError(name, f"unsupported photometric interpretation {photometric!r}")
    return ds


def _decoded_pixels(ds: Dataset, name: str) -> np.ndarray:
    try:
        arr = ds.pixel_array
    except Exception as exc:
        ts = getattr(getattr(ds, "file_meta", None), "TransferSyntaxUID", None)
        ts_name = getattr(ts, "name", ts)
        raise StudyLoadError(
            name, f"pixel data cannot be decoded (transfer syntax {ts_name}): {exc}"
        ) from exc
    if arr.ndim == 3:  # colour secondary capture: luminance, the radiograph itself is gray
        arr = (arr[..., :3].astype(np.float32) @ np.array([0.299, 0.587, 0.114], np.float32))
        arr = np.rint(arr).astype(np.uint16)
    if arr.ndim != 2:
        raise StudyLoadError(name, f"unexpected pixel array shape {arr.shape}")
    return arr


def _text(ds: Dataset, keyword: str) -> str | None:
    value = ds.get(keyword)
    if value is None or value == "":
        return None
    return str(value).strip() or None


def _dicom_info(ds: Dataset, checksum: str, source: ImageSource) -> ImageInfo:
    photometric = str(ds.PhotometricInterpretation)
    if photometric not in ("MONOCHROME1", "MONOCHROME2"):
        photometric = "MONOCHROME2"  # colour input is converted to luminance
    dicom_view = _text(ds, "ViewPosition")
    return ImageInfo(
        format="dicom",
        rows=int(ds.Rows),
        cols=int(ds.Columns),
        photometric=photometric,
        bits_stored=int(ds.get("BitsStored", 8) or 8),
        checksum=checksum,
        view_position=dicom_view or source.view_position,
        laterality=_text(ds, "ImageLaterality"),
        body_part=_text(ds, "BodyPartExamined"),
        modality=_text(ds, "Modality"),
        view_source="dicom" if dicom_view else (
            (source.view_source or "metadata") if source.view_position else None),
        pixel_spacing=_pixel_spacing(ds),
        spacing_at_detector=_pixel_spacing(ds, "PixelSpacing") is None
        and _pixel_spacing(ds) is not None,
    )


def _pixel_spacing(ds: Dataset, *keywords: str) -> tuple[float, float] | None:
    """(row, column) mm per pixel for measuring: PixelSpacing (calibrated to the patient), else
    ImagerPixelSpacing (at the detector); None when absent, zero or unreadable (RG1 carries
    "0.000\\0.000"), so a length is never given in mm that are not mm. `keywords`: only these."""
    for keyword in keywords or ("PixelSpacing", "ImagerPixelSpacing"):
        value = ds.get(keyword)
        try:
            row, col = (float(v) for v in value)
        except (TypeError, ValueError):
            continue
        if row > 0 and col > 0 and np.isfinite(row) and np.isfinite(col):
            return row, col
    return None


def _default_window(ds: Dataset) -> tuple[float, float] | None:
    center, width = ds.get("WindowCenter"), ds.get("WindowWidth")
    if center is None or width is None:
        return None
    return _first_value(center), _first_value(width)


def _first_value(value: Any) -> float:  # a DS, an IS or pydicom's MultiValue
    """WindowCenter/Width may be multi-valued; the first pair is the default."""
    if hasattr(value, "__len__") and not isinstance(value, str):
        return float(value[0])
    return float(value)


def _decode_dicom(source: ImageSource) -> DecodedImage:
    ds = _read_dataset(source.data if source.data is not None else source.path, source.name)
    return _display_dicom(ds, _dicom_info(ds, "", source), source)


def _check_dicom(ds: Dataset, name: str, check: ImageCheck) -> None:
    """Pixel-count limit and chest-radiograph modality/body part, before any decode."""
    rows, cols = int(ds.get("Rows", 0) or 0), int(ds.get("Columns", 0) or 0)
    samples = int(ds.get("SamplesPerPixel", 1) or 1)
    if rows <= 0 or cols <= 0:
        raise StudyLoadError(name, f"DICOM without a valid image size ({rows}x{cols})")
    if rows * cols * samples > check.max_pixels:
        raise StudyLoadError(name, f"image of {cols}x{rows} pixels refused (decompression-bomb "
                                   f"limit {check.max_pixels:,} pixels)")
    if "ANY" in check.allow_modality:
        return
    modality = str(ds.get("Modality", "") or "").strip().upper()
    allowed = CHEST_MODALITIES | check.allow_modality
    if modality not in allowed:
        sop = ds.get("SOPClassUID")
        what = getattr(sop, "name", None) or str(sop or "")
        raise StudyLoadError(
            name, f"modality {modality or 'unknown'} ({what}) is not a chest radiograph "
                  f"(CR/DX); use --allow-modality {modality or 'ANY'} to import it"
        )
    body = str(ds.get("BodyPartExamined", "") or "").strip().upper()
    if modality in CHEST_MODALITIES and body and not any(b in body for b in _CHEST_BODY_PARTS):
        raise StudyLoadError(name, f"body part {body} is not the chest; "
                                   "use --allow-modality ANY to import it")


def _decode_dicom_bytes(data: bytes, source: ImageSource, checksum: str,
                        check: ImageCheck) -> DecodedImage:
    ds = _read_dataset(data, source.name)
    _check_dicom(ds, source.name, check)
    return _display_dicom(ds, _dicom_info(ds, checksum, source), source)


def _display_dicom(ds: Dataset, info: ImageInfo, source: ImageSource) -> DecodedImage:
    from pydicom.pixels.processing import apply_modality_lut, apply_voi_lut

    stored = _decoded_pixels(ds, source.name)
    if str(ds.PhotometricInterpretation).startswith("MONO"):
        raw = apply_modality_lut(stored, ds)

        def voi(values: np.ndarray) -> np.ndarray:
            return apply_voi_lut(values, ds, index=0)

        display = _display_via_lut(raw, voi, invert=info.photometric == "MONOCHROME1")
    else:  # colour input already reduced to luminance
        raw = stored
        display = _minmax_u8(raw.astype(np.float32))
    return DecodedImage(info=info, raw=raw, display=display, window=_default_window(ds))


def _display_via_lut(raw: np.ndarray, voi: Callable[[np.ndarray], np.ndarray],
                     invert: bool) -> np.ndarray:
    """VOI -> invert -> min-max over the pixels present, evaluated once per stored value."""
    span = _lut_span(raw)
    if span is not None:
        lo, hi, first = span
        values = np.arange(first, hi + 1, dtype=np.int64).astype(raw.dtype)
        curve = np.asarray(voi(values), dtype=np.float64)
        if invert:
            curve = curve.max() - curve
        index = raw - first if first else raw
        used = curve[lo - first:]
        diffs = np.diff(used)
        if np.all(diffs >= 0) or np.all(diffs <= 0):
            cmin, cmax = min(used[0], used[-1]), max(used[0], used[-1])
        else:  # non-monotone VOI LUT: min/max over the values actually present
            present = np.bincount(index.ravel(), minlength=curve.size).astype(bool)
            cmin, cmax = curve[present].min(), curve[present].max()
        return _gather(_scale_u8(curve, cmin, cmax), index)
    out = np.asarray(voi(raw), dtype=np.float32)
    if invert:
        out = out.max() - out
    return _minmax_u8(out)


def _scale_u8(values: np.ndarray, vmin: float, vmax: float) -> np.ndarray:
    if vmax <= vmin:
        return np.zeros(values.shape, np.uint8)
    return np.rint((values - vmin) * (255.0 / (vmax - vmin))).clip(0, 255).astype(np.uint8)


def _minmax_u8(values: np.ndarray) -> np.ndarray:
    return _scale_u8(values, float(values.min()), float(values.max()))


def window_level(image: DecodedImage, center: float, width: float) -> np.ndarray:
    """Render full-bit-depth pixels with a linear window (DICOM PS3.3 C.11.2.1.2), bone white."""
    raw = image.raw
    width = max(float(width), 1.0)

    def curve(v: np.ndarray) -> np.ndarray:
        if width <= 1.0:  # a threshold at the center (the linear formula would divide by 0)
            x = (v.astype(np.float64) > center - 0.5).astype(np.float64)
        else:
            x = np.clip((v.astype(np.float64) - (center - 0.5)) / (width - 1.0) + 0.5, 0.0, 1.0)
        return 1.0 - x if image.inverted else x

    span = _lut_span(raw)
    if span is not None:
        _, hi, first = span
        return _gather(_scale_u8(curve(np.arange(first, hi + 1)), 0.0, 1.0),
                       raw - first if first else raw)
    return _scale_u8(curve(raw), 0.0, 1.0)


def _lut_span(raw: np.ndarray) -> tuple[int, int, int] | None:
    """(min, max, first LUT entry) when a lookup table is cheaper than arithmetic, else None.

    Unsigned data index the table from 0, which spares a subtraction pass over the image.
    """
    if raw.dtype.kind not in "iu":
        return None
    lo, hi = int(raw.min()), int(raw.max())
    if hi - lo >= _LUT_MAX_RANGE:
        return None
    first = 0 if raw.dtype.kind == "u" and hi < _LUT_MAX_RANGE else lo
    return lo, hi, first


_GATHER_CHUNK = 1 << 18


def _gather(lut: np.ndarray, index: np.ndarray) -> np.ndarray:
    """lut[index] into uint8, in cache-sized chunks: numpy widens the indices to intp per call,
    and a chunk's widened copy stays in cache (about 1.5x faster than one whole-image take)."""
    out = np.empty(index.shape, np.uint8)
    flat_in, flat_out = index.reshape(-1), out.reshape(-1)
    for start in range(0, flat_in.size, _GATHER_CHUNK):
        stop = start + _GATHER_CHUNK
        np.take(lut, flat_in[start:stop], out=flat_out[start:stop], mode="clip")
    return out


# --- PNG / JPEG ------------------------------------------------------------------------------

def _decode_into_array(im: PILImage) -> np.ndarray | None:
    """Load a 16-bit grayscale image straight into a numpy array, or None (then the caller
    loads it the usual way and copies it out with np.asarray).

    Pillow maps an I;16 image onto a buffer (`Image.frombuffer`, shared memory) and its loader
    decodes into the image memory it finds, so the decoder writes the array itself: no second
    megabyte-sized copy through `tobytes()` per image, which was a sixth of the import's
    per-image cost. If a Pillow version ever allocates its own memory instead, that is seen
    (the image's memory is not ours) and the array is not used.
    """
    from PIL import Image

    if im.mode != "I;16":
        return None
    width, height = im.size
    pixels = np.empty((height, width), dtype="<u2")
    core = Image.frombuffer("I;16", (width, height), pixels, "raw", "I;16", 0, 1).im
    im.im = core
    im.load()
    return pixels if im.im is core else None


def _open_raster(data: bytes, source: ImageSource, fmt: str, checksum: str,
                 max_pixels: int | None = None
                 ) -> tuple[PILImage, ImageInfo, np.ndarray | None]:
    """The opened image, its facts, and (16-bit PNGs) the array it was decoded into."""
    from PIL import Image, UnidentifiedImageError

    pixels = None
    try:
        im: PILImage = Image.open(io.BytesIO(data))
        if max_pixels is not None and im.width * im.height > max_pixels:
            raise StudyLoadError(
                source.name, f"image of {im.width}x{im.height} pixels refused "
                             f"(decompression-bomb limit {max_pixels:,} pixels)")
        pixels = _decode_into_array(im)
        im.load()
    except Image.DecompressionBombError as exc:
        raise StudyLoadError(
            source.name, f"image refused by the decompression-bomb limit ({exc})") from None
    except UnidentifiedImageError:
        raise StudyLoadError(source.name, f"corrupt {fmt.upper()} image (not decodable)") \
            from None
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise StudyLoadError(source.name, f"corrupt {fmt.upper()} image ({exc})") from None
    if getattr(im, "n_frames", 1) > 1:
        raise StudyLoadError(source.name,
                             f"animated {fmt.upper()} ({getattr(im, 'n_frames', 1)} frames)")
    mode = im.mode
    if mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        bits = 16
        if mode == "F":
            raise StudyLoadError(source.name, "floating-point images are not supported")
        if mode == "I":
            arr = np.asarray(im)
            if arr.min() < 0 or arr.max() > 0xFFFF:
                raise StudyLoadError(source.name, "32-bit integer images are not supported")
    else:
        bits = 8
        if mode != "L":
            im = im.convert("L")  # RGB/palette radiographs are gray: take luminance
    info = ImageInfo(
        format=fmt, rows=im.height, cols=im.width, photometric="MONOCHROME2",
        bits_stored=bits, checksum=checksum, view_position=source.view_position,
        view_source=(source.view_source or "metadata") if source.view_position else None,
    )
    return im, info, pixels


def _decode_raster(data: bytes, source: ImageSource, fmt: str, checksum: str,
                   max_pixels: int | None = None) -> DecodedImage:
    im, info, pixels = _open_raster(data, source, fmt, checksum, max_pixels)
    raw = pixels if pixels is not None and im.mode == "I;16" else np.asarray(im)
    if info.bits_stored == 8:
        return DecodedImage(info=info, raw=raw, display=raw, window=None)
    raw = raw.astype(np.uint16, copy=False)
    return DecodedImage(info=info, raw=raw, display=_minmax_u8_int(raw), window=None)


def _minmax_u8_int(raw: np.ndarray) -> np.ndarray:
    """Min-max to 0..255 of integer pixels, rint((v - min) * 255 / (max - min)), in place in one
    float32 buffer (5x faster than a lookup-table gather on 16-bit images)."""
    lo, hi = int(raw.min()), int(raw.max())
    if hi <= lo:
        return np.zeros(raw.shape, np.uint8)
    scale, offset = np.float32(255.0 / (hi - lo)), np.float32(lo)
    out = np.empty(raw.shape, np.uint8)
    flat_in, flat_out = raw.reshape(-1), out.reshape(-1)
    buf = np.empty(min(1 << 16, flat_in.size), np.float32)  # 256 KiB: stays in cache
    for start in range(0, flat_in.size, buf.size):
        chunk = flat_in[start:start + buf.size]
        work = buf[:chunk.size]
        np.subtract(chunk, offset, out=work, dtype=np.float32)
        work *= scale
        np.rint(work, out=work)
        flat_out[start:start + chunk.size] = work  # values are in 0..255 by construction
    return out


# --- reduced-resolution previews ---------------------------------------------------------------

_J2K_SYNTAXES = ("1.2.840.10008.1.2.4.90", "1.2.840.10008.1.2.4.91")
_MAX_REDUCE = 5


OPENJPEG_THREADS = "OPJ_NUM_THREADS"


def decode_jpeg2000_on_all_cores(environ: MutableMapping[str, str] | None = None) -> None:
    """Let OpenJPEG (inside Pillow, which decodes the reduced previews) use every core.

    OpenJPEG reads this variable each time it creates a decoder; Pillow never sets a thread
    count, so without it a preview decodes on one core (a 2-image JPEG 2000 study's first open
    took about 460 ms here, 245 ms with both cores). The app's process calls this once at
    start; a value the user set is kept. Import workers are processes of their own and leave it
    unset, one core each.
    """
    (os.environ if environ is None else environ).setdefault(OPENJPEG_THREADS, "ALL_CPUS")


def reduction_for(rows: int, cols: int, max_side: int, levels: int = _MAX_REDUCE) -> int:
    """The smallest power-of-two reduction r with ceil(side / 2**r) <= max_side (<= levels)."""
    r, side = 0, max(rows, cols)
    while r < levels and -(-side // (1 << r)) > max_side:
        r += 1
    return r


def decode_reduced(source: ImageSource, max_side: int) -> DecodedImage | None:
    """A preview decoded at a lower resolution directly, or None when this file cannot be.

    JPEG 2000 DICOM: OpenJPEG decodes only the wavelet levels needed for a side of at most
    `max_side` (about 4x faster per halving; the full image is decoded only for window/level).
    Baseline JPEG: libjpeg's DCT scaling (Pillow's draft mode). Everything else (uncompressed,
    PNG, lossless JPEG, signed or colour data) returns None and is decoded in full. The preview
    follows the same Modality LUT / VOI / invert / min-max chain as `decode`.
    """
    try:
        fmt = sniff_format(read_bytes(source, 132), source.name)
    except StudyLoadError:
        return None
    if fmt == "dicom":
        return _reduced_j2k_dicom(source, max_side)
    if fmt == "jpeg":
        return _reduced_jpeg(source, max_side)
    return None


def _codestream_facts(frame: bytes) -> tuple[int, bool, int] | None:
    """(precision, signed, decomposition levels) from a J2K codestream's SIZ and COD markers."""
    if frame[:4] != b"\xff\x4f\xff\x51" or len(frame) < 43:
        return None
    csiz = int.from_bytes(frame[40:42], "big")
    if csiz != 1:
        return None
    ssiz = frame[42]
    cod = frame.find(b"\xff\x52", 4)
    if cod < 0 or len(frame) < cod + 10:
        return None
    return (ssiz & 0x7F) + 1, bool(ssiz & 0x80), frame[cod + 9]


def _pillow_j2k(frame: bytes, reduce: int) -> np.ndarray:
    """Decode a J2K codestream at 1/2**reduce with Pillow's OpenJPEG.

    Pillow rounds the reduced size to nearest where OpenJPEG rounds up (1841 px at 1/4 is 461,
    Pillow expects 460 and fails with "broken data stream"), so the tile is sized here.
    """
    from PIL import Image, ImageFile

    im = Image.open(io.BytesIO(frame))
    width, height = im.size
    size = (-(-width // (1 << reduce)), -(-height // (1 << reduce)))
    tile = im.tile[0]
    codec_args: Any = tile[3]  # the JPEG 2000 decoder's (mode, reduce, layers, ...) tuple
    args = (codec_args[0], reduce, getattr(im, "layers", 0), *codec_args[3:])
    im._size = size
    im.tile = [ImageFile._Tile(tile[0], (0, 0, *size), tile[2], args)]
    ImageFile.ImageFile.load(im)
    return np.asarray(im)


def _reduced_j2k_dicom(source: ImageSource, max_side: int) -> DecodedImage | None:
    import pydicom
    from pydicom.encaps import get_frame
    from pydicom.pixels.processing import apply_modality_lut, apply_voi_lut

    try:
        ds = pydicom.dcmread(io.BytesIO(source.data) if source.data else _path(source))
        syntax = str(getattr(ds.file_meta, "TransferSyntaxUID", ""))
        photometric = str(ds.get("PhotometricInterpretation", ""))
        if (syntax not in _J2K_SYNTAXES or not photometric.startswith("MONO")
                or int(ds.get("NumberOfFrames", 1) or 1) != 1
                or int(ds.get("PixelRepresentation", 0) or 0) != 0):
            return None
        frame = get_frame(ds.PixelData, 0, number_of_frames=1)
        facts = _codestream_facts(frame)
        if facts is None or facts[1]:
            return None
        precision, _, levels = facts
        reduce = reduction_for(int(ds.Rows), int(ds.Columns), max_side, min(levels, _MAX_REDUCE))
        if reduce == 0:
            return None
        pixels = _pillow_j2k(frame, reduce)
        if pixels.dtype == np.uint16 and precision < 16:
            pixels = pixels >> (16 - precision)  # Pillow scales samples up to 16 bits
    except Exception:  # any surprise: the full decode path reports errors properly
        log.debug("reduced JPEG 2000 decode of %s failed; decoding in full", source.name,
                  exc_info=True)
        return None
    info = _dicom_info(ds, "", source)
    raw = apply_modality_lut(pixels, ds)

    def voi(values: np.ndarray) -> np.ndarray:
        return apply_voi_lut(values, ds, index=0)

    display = _display_via_lut(raw, voi, invert=info.photometric == "MONOCHROME1")
    return DecodedImage(info=info, raw=raw, display=display, window=_default_window(ds))


def _reduced_jpeg(source: ImageSource, max_side: int) -> DecodedImage | None:
    from PIL import Image

    try:
        im: PILImage = Image.open(io.BytesIO(read_bytes(source)))
        if max(im.size) <= max_side:
            return None
        im.draft("L", (max_side, max_side))
        im = im.convert("L")
    except Exception:  # the full decode path reports errors properly
        log.debug("reduced JPEG decode of %s failed; decoding in full", source.name,
                  exc_info=True)
        return None
    raw = np.asarray(im)
    info = ImageInfo(format="jpeg", rows=im.height, cols=im.width, photometric="MONOCHROME2",
                     bits_stored=8, checksum="", view_position=source.view_position)
    return DecodedImage(info=info, raw=raw, display=raw, window=None)
