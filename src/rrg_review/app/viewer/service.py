"""Opening studies for the viewer: metadata, display-ready images (cached), priors, window/level."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session, joinedload, selectinload

from rrg_review.core.files import atomic_write
from rrg_review.db.blobs import BlobStore, resolve_uri
from rrg_review.db.engine import Database
from rrg_review.db.models import Image, ReferenceReport, Study
from rrg_review.db.store import prior_ids as store_prior_ids
from rrg_review.studies.pixels import DecodedImage, decode, decode_reduced, window_level
from rrg_review.studies.records import ImageSource, ReportSections


@dataclass(frozen=True)
class WorklistRow:
    study_id: int
    source: str
    study_key: str
    study_date: date | None
    images: int
    has_reference: bool


@dataclass(frozen=True)
class ImageView:
    """One image of an opened study. Nothing is decoded to open a study: the pixels are read
    when first asked for (`display`, `window`), previews by `StudyViewer.preview_file`."""

    image_id: int
    label: str
    view_group: str | None
    checksum: str
    rows: int
    cols: int
    _decoded: Callable[[], DecodedImage] = field(repr=False, compare=False)
    _preview: Callable[[int], np.ndarray] = field(repr=False, compare=False)

    @property
    def display(self) -> np.ndarray:
        """uint8, bone white, full resolution (decodes the full image once, then cached)."""
        return self._decoded().display

    @property
    def window(self) -> tuple[float, float] | None:
        return self._decoded().window

    def preview(self, max_side: int = 1024) -> np.ndarray:
        """A display image with sides at most `max_side`; JPEG 2000 decodes at a reduced
        resolution level, other formats from the (cached) full decode, binned (block means).

        Args:
            max_side: the longest side wanted, in pixels (sides may come out smaller: the
                image is binned by a whole step, never scaled up).

        Returns:
            uint8 display pixels (bone white).
        """
        return self._preview(max_side)


NO_IMAGES_NOTICE = ("This study has no images: it was imported as a report-only reference "
                    "(for scoring), so there is nothing to read here.")


@dataclass(frozen=True)
class ValueRange:
    """An image's raw values as window/level sees them."""

    lo: float
    hi: float
    window: tuple[float, float]  # the default (center, width), in raw units
    # MONOCHROME1: high raw values are shown dark (bone is low), so a preset placed "towards
    # bone" lies at the low end of the range, not the high end
    inverted: bool = False
    # (q, raw value) pairs: q percent of the image's pixels are shown darker than the value
    brightness: tuple[tuple[float, float], ...] = ()

    def at(self, fraction: float) -> float:
        """The raw value a fraction of the way from the darkest to the brightest shown value."""
        span = max(self.hi - self.lo, 1.0)
        return self.hi - span * fraction if self.inverted else self.lo + span * fraction

    def between(self, darker: float, brighter: float) -> tuple[float, float]:
        """The (center, width) of a window from one brightness percentile to another (both
        in BRIGHTNESS_PERCENTILES): it follows the film's own histogram, so "lung" grades the
        lungs whatever the exposure and bit depth (fractions of the raw range washed them
        out; found in a new-user trial). In whole raw units on a film of integer scale (a
        span of 100 or more): the percentiles interpolate, and the viewer's Level box read
        "12169.04", a precision no reader sets or a PACS shows (a new-user trial)."""
        at = dict(self.brightness)
        a, b = at[darker], at[brighter]
        return self.whole((a + b) / 2, max(abs(b - a), 1.0))

    def whole(self, center: float, width: float) -> tuple[float, float]:
        """A window in whole raw units where the film's values span 100 or more (as set)."""
        if self.hi - self.lo >= 100:
            return float(round(center)), float(max(round(width), 1))
        return center, width


# the brightness percentiles a ValueRange carries (the window presets are built from them)
BRIGHTNESS_PERCENTILES = (2.0, 10.0, 30.0, 60.0, 92.0, 99.5)


@dataclass(frozen=True)
class FullDepth:
    """An image's modality-LUT output as the browser receives it: `path` holds width x height
    little-endian uint16 values v, the raw value being offset + slope * v (slope 1 for integer
    data spanning at most 65,536 values, so nothing is lost there; float or wider data are
    quantised over their range). The browser windows these itself, so a window/level change
    costs no request."""

    path: Path
    width: int
    height: int
    offset: float
    slope: float
    inverted: bool  # MONOCHROME1: high raw values are shown dark
    pixel_spacing: tuple[float, float] | None  # (row, column) mm; None: uncalibrated
    stand_in: StandIn  # the same values, binned small (block means): shown (and windowed) first
    spacing_at_detector: bool = False  # ImagerPixelSpacing: not corrected for magnification


# the stand-in's longest side: at most 400 x 400 x 2 bytes = 320 KB, a few seconds on a slow link
STAND_IN_SIDE = 400


@dataclass(frozen=True)
class StandIn:
    """The full-depth values with every `step`-th pixel kept each way (the same offset and
    slope): the page fetches it first and windows it exactly as it windows the full image, so
    whatever window the reader picks while the full image is on its way shows faithfully (an
    8-bit preview windowed again showed black lungs at a lung window, a new-user trial)."""

    path: Path
    width: int
    height: int
    step: int


def full_depth_u16(raw: np.ndarray) -> tuple[np.ndarray, float, float]:
    """(uint16 little-endian values, offset, slope) with raw == offset + slope * values.

    Args:
        raw: the full-bit-depth pixels (integer or float).

    Returns:
        The encoded values and how to read them back.
    """
    lo, hi = float(raw.min()), float(raw.max())
    if raw.dtype.kind in "iu" and hi - lo <= 65535:
        return (raw.astype(np.int64) - int(lo)).astype("<u2"), lo, 1.0
    slope = max(hi - lo, 1e-9) / 65535.0
    values = np.rint((raw.astype(np.float64) - lo) / slope).clip(0, 65535).astype("<u2")
    return values, lo, slope


@dataclass(frozen=True)
class StudyView:
    study_id: int
    source: str
    study_key: str
    patient_key: str
    study_date: date | None
    split: str | None
    indication: str | None
    comparison: str | None
    demographics: dict[str, str]
    images: tuple[ImageView, ...]  # in film order (film_order), numbered so in their labels
    reference: ReportSections | None
    prior_ids: tuple[int, ...]

    @property
    def has_images(self) -> bool:
        return bool(self.images)

    @property
    def notice(self) -> str | None:
        """What the viewer must say instead of showing an empty gallery (None: nothing)."""
        return None if self.images else NO_IMAGES_NOTICE


def film_order(images: Sequence[Image]) -> list[Image]:
    """Frontal first, then lateral, then the rest, each in stored order (side by side)."""
    rank = {"frontal": 0, "lateral": 1}
    return sorted(images, key=lambda i: rank.get(i.view_group or "", 2))


def at_file_default(decoded: DecodedImage) -> np.ndarray:
    """The pixels a preview shows: the file's own window exactly as the viewer draws "file
    default" (`window_level`), so that the preview, the full-depth stand-in and the full image
    agree at that window. The display pipeline (VOI, then stretched over the values present)
    differs wherever a film does not reach both ends of its window: a new-user trial saw the
    preview's corner at grey 1 where the viewer drew 47, and the picture jump when the full
    image came. Without a window in the file, "file default" is the full range, which is what
    the display pipeline shows."""
    if decoded.window is None:
        return decoded.display
    return window_level(decoded, *decoded.window)


def binned(pixels: np.ndarray, max_side: int) -> np.ndarray:
    """A smaller copy in which each pixel is the mean of a step x step block (the smallest whole
    step that fits `max_side`; the image padded with its own edge to whole blocks), rounded to
    the input's type. Keeping every step-th pixel instead dropped 1-pixel lines from the
    gallery's previews and the stand-in wherever they fell between kept columns (a new-user
    trial: a cross lost an arm, ten thin lines all vanished; a pleural line is as thin).

    Args:
        pixels: the image's pixels (2-D).
        max_side: the longest side wanted, in pixels.

    Returns:
        The block means; the image itself when it already fits.
    """
    step = max(1, int(np.ceil(max(pixels.shape) / max_side)))
    if step == 1:
        return pixels
    h, w = pixels.shape
    padded = np.pad(pixels, ((0, -h % step), (0, -w % step)), mode="edge")
    blocks = padded.reshape(padded.shape[0] // step, step, padded.shape[1] // step, step)
    means = blocks.mean(axis=(1, 3), dtype=np.float32)
    out: np.ndarray = np.rint(means).astype(pixels.dtype)
    return out


def square_pixels(display: np.ndarray, spacing: tuple[float, float] | None) -> np.ndarray:
    """A preview resampled to square pixels, so that the gallery draws a film with non-square
    pixels at its true aspect (a 50 mm circle on a 0.1 x 0.2 mm film was a tall ellipse in a
    new-user trial); the longer pixel side is kept, the other axis shrunk (box filter).

    Args:
        display: the preview's pixels.
        spacing: (row, column) mm per pixel; None: square.

    Returns:
        The pixels as they are when square (within 1 %), else resampled.
    """
    if spacing is None or abs(spacing[0] / spacing[1] - 1) < 0.01:
        return display
    from PIL import Image as PILImage

    rows, cols = display.shape[:2]
    if spacing[0] < spacing[1]:
        rows = max(1, round(rows * spacing[0] / spacing[1]))
    else:
        cols = max(1, round(cols * spacing[1] / spacing[0]))
    resized = PILImage.fromarray(display).resize((cols, rows), PILImage.Resampling.BOX)
    return np.asarray(resized)


class DecodedCache:
    """A small LRU of decoded images, bounded in bytes, shared by the UI and pre-drafting."""

    def __init__(self, max_bytes: int = 512 << 20) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[int, DecodedImage] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: int) -> DecodedImage | None:
        """Args:
            key: the image id.

        Returns:
            The decoded image (now the most recently used), or None when not cached.
        """
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
            return item

    def put(self, key: int, image: DecodedImage) -> None:
        """Keep a decoded image, evicting the least recently used beyond `max_bytes`.

        Args:
            key: the image id (an id already cached is left as it is).
            image: the decoded image; its raw and display arrays count against the bound.
                One image larger than the bound is still kept, alone.
        """
        with self._lock:
            if key in self._items:
                return
            self._items[key] = image
            self._bytes += image.raw.nbytes + image.display.nbytes
            while self._bytes > self.max_bytes and len(self._items) > 1:
                _, old = self._items.popitem(last=False)
                self._bytes -= old.raw.nbytes + old.display.nbytes


class PreviewCache:
    """The last few previews in memory (small: a preview is at most 1024x1024 bytes)."""

    def __init__(self, max_items: int = 64) -> None:
        self.max_items = max_items
        self._items: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[int, int]) -> np.ndarray | None:
        """Args:
            key: (image id, max side).

        Returns:
            The preview (now the most recently used), or None when not cached.
        """
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
            return item

    def put(self, key: tuple[int, int], pixels: np.ndarray) -> None:
        """Keep a preview, forgetting the least recently used beyond `max_items`.

        Args:
            key: (image id, max side).
            pixels: the preview.
        """
        with self._lock:
            self._items[key] = pixels
            while len(self._items) > self.max_items:
                self._items.popitem(last=False)



def packed(path: Path) -> Path:
    """The packed copy of a pixel file, beside it: what the server sends a browser that accepts
    gzip (server.py), and `viewer.js` unpacks. On a 1 MB/s link a film's full image took
    10-24 s as raw 16-bit values (a new-user trial). Packed, as PNG's Sub filter does: each
    value minus the one before it (mod 2^16), the high bytes of all of them, then the low
    bytes, gzipped (level 1): neighbouring pixels differ by little, so the high bytes are
    nearly all 0 or 255. A real radiograph (pydicom-data's RG1_UNCI, 15 bits) goes at 0.66 of
    its size, against 0.87 gzipped as it is; a smooth synthetic film at 0.30."""
    return path.with_name(path.name + ".gz")


def pack_pixels(values: np.ndarray) -> bytes:
    """The packed bytes (see `packed`) of uint16 values, row after row."""
    import gzip

    flat = np.ascontiguousarray(values, dtype=np.uint16).ravel()
    delta = flat.copy()
    delta[1:] -= flat[:-1]  # (uint16: wraps, as the page's unpacking does)
    planes = np.concatenate([(delta >> 8).astype(np.uint8), (delta & 0xFF).astype(np.uint8)])
    return gzip.compress(planes.tobytes(), compresslevel=1, mtime=0)


def _write_packed(path: Path, values: np.ndarray) -> None:
    """A pixel file and its packed copy, each written once (atomically) where missing."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, np.ascontiguousarray(values).tobytes())
    if not packed(path).exists():
        atomic_write(packed(path), pack_pixels(values))


class StudyViewer:
    def __init__(self, db: Database, blobs: BlobStore, cache: DecodedCache | None = None,
                 preview_dir: Path | None = None) -> None:
        self.db = db
        self.blobs = blobs
        self.cache = cache or DecodedCache()
        self.preview_dir = preview_dir
        self._previews = PreviewCache()

    def worklist(self, source: str | None = None, limit: int = 500) -> list[WorklistRow]:
        """Stored studies for a plain study list (not a reader's worklist: see
        WorklistService), with their image count and whether they have a reference.

        Args:
            source: only this import source; None or "": all.
            limit: how many rows at most.

        Returns:
            Rows ordered by source, newest study date first, then id.
        """
        n_images = (select(func.count(Image.id)).where(Image.study_id == Study.id)
                    .correlate(Study).scalar_subquery())
        has_ref = (select(func.count(ReferenceReport.id))
                   .where(ReferenceReport.study_id == Study.id).correlate(Study).scalar_subquery())
        stmt = select(Study.id, Study.source, Study.study_key, Study.study_date, n_images, has_ref)
        if source:
            stmt = stmt.where(Study.source == source)
        stmt = stmt.order_by(Study.source, Study.study_date.desc(), Study.id).limit(limit)
        with self.db.read() as session:
            return [WorklistRow(r[0], r[1], r[2], r[3], int(r[4]), bool(r[5]))
                    for r in session.execute(stmt)]

    def open(self, study_id: int) -> StudyView:
        """A study's metadata and image handles: two queries, nothing decoded.

        Args:
            study_id: the study.

        Returns:
            Its metadata, reference sections (None without a reference), prior study ids
            and one lazily decoded handle per image (an empty tuple for a report-only study,
            whose `notice` says so).

        Raises:
            LookupError: the study does not exist.
        """
        with self.db.read() as session:
            study = session.scalar(
                select(Study).where(Study.id == study_id)
                .options(joinedload(Study.reference), joinedload(Study.patient),
                         selectinload(Study.images)))
            if study is None:
                raise LookupError(f"study {study_id} does not exist")
            prior_ids = self._prior_ids(session, study)
            images = tuple(self._image_view(img, n)
                           for n, img in enumerate(film_order(study.images), 1))
            reference = (ReportSections(study.reference.findings, study.reference.impression)
                         if study.reference else None)
            return StudyView(
                study_id=study.id, source=study.source, study_key=study.study_key,
                patient_key=study.patient.key, study_date=study.study_date, split=study.split,
                indication=study.indication, comparison=study.comparison,
                demographics=dict(study.demographics or {}), images=images,
                reference=reference, prior_ids=prior_ids,
            )

    @staticmethod
    def _prior_ids(session: Session, study: Study) -> tuple[int, ...]:
        """The same patient's earlier studies, newest first (ids only, on the patient index;
        the rule and order of db.store.priors, same-day studies by time included)."""
        return tuple(store_prior_ids(session, study))

    def prior_ids(self, study_id: int) -> tuple[int, ...]:
        """The same patient's earlier studies, newest first, without loading any images.

        Args:
            study_id: the study.

        Returns:
            Their ids; empty for an unknown study or one without priors.
        """
        with self.db.read() as session:
            study = session.get(Study, study_id)
            return self._prior_ids(session, study) if study else ()

    def decoded(self, image: Image) -> DecodedImage:
        """An image decoded once and kept in the shared cache (the viewer and drafting read
        the same pixels).

        Args:
            image: the stored image row.

        Returns:
            Its full-bit-depth and display pixels and default window.
        """
        cached = self.cache.get(image.id)
        if cached is None:
            path = str(resolve_uri(image.uri, self.blobs))
            cached = decode(ImageSource(name=path, path=path))
            self.cache.put(image.id, cached)
        return cached

    def preview_pixels(self, image_id: int, uri: str, max_side: int = 1024) -> np.ndarray:
        """A preview without the full decode where the format allows it (JPEG 2000 at a
        reduced resolution level, JPEG by DCT scaling); a full image already decoded (for
        window/level or drafting) is binned instead of decoded again.

        Args:
            image_id: the image's id (the cache key).
            uri: where its file is stored.
            max_side: the longest side wanted, in pixels.

        Returns:
            uint8 display pixels, kept in the preview cache.

        Raises:
            LookupError: a full decode was needed and the image does not exist.
        """
        key = (image_id, max_side)
        hit = self._previews.get(key)
        if hit is not None:
            return hit
        full = self.cache.get(image_id)
        if full is None:
            path = str(resolve_uri(uri, self.blobs))
            reduced = decode_reduced(ImageSource(name=path, path=path), max_side)
            if reduced is not None:
                pixels = square_pixels(binned(at_file_default(reduced), max_side),
                                       reduced.info.pixel_spacing)
                self._previews.put(key, pixels)
                return pixels
            full = self._decoded_by_id(image_id)
        pixels = square_pixels(binned(at_file_default(full), max_side),
                               full.info.pixel_spacing)
        self._previews.put(key, pixels)
        return pixels

    def _decoded_by_id(self, image_id: int) -> DecodedImage:
        cached = self.cache.get(image_id)
        if cached is not None:
            return cached
        with self.db.read() as session:
            image = session.get(Image, image_id)
            if image is None:
                raise LookupError(f"image {image_id} does not exist")
            return self.decoded(image)

    def _image_view(self, image: Image, number: int) -> ImageView:
        """The handle of the study's `number`th image as the film shows it (1, 2...): numbered
        in film order, as the keys pick them, not by the stored position (a study stored
        lateral first showed "2: PA" as its first film: a new-user trial)."""
        label = " · ".join(x for x in (image.view_position, image.view_group) if x) or "image"
        image_id, uri = image.id, image.uri
        return ImageView(image_id, f"{number}: {label}", image.view_group,
                         image.checksum, image.rows, image.cols,
                         lambda: self._decoded_by_id(image_id),
                         lambda side: self.preview_pixels(image_id, uri, side))

    def preview_path(self, view: ImageView, max_side: int = 1024) -> Path:
        """Where an image's preview PNG is kept: named by checksum (by id when it has none)
        and size, in a sub-folder of the name's first two characters.

        Args:
            view: the image handle.
            max_side: the preview's longest side.

        Returns:
            The path (the file may not exist yet).

        Raises:
            ValueError: the viewer has no preview folder.
        """
        if self.preview_dir is None:
            raise ValueError("no preview folder configured")
        name = f"{view.checksum or view.image_id}-{max_side}.png"
        return self.preview_dir / name[:2] / name

    def preview_file(self, view: ImageView, max_side: int = 1024) -> str:
        """The preview as a lossless PNG file, written once per image (keyed by checksum).

        A preview already on disk is served as it is: nothing is decoded. Handing Gradio a
        file also spares a PNG encode on every open (about 150 ms at Pillow's default
        compression for a radiograph preview; level 1 takes about 25 ms, once).

        Args:
            view: the image handle.
            max_side: the preview's longest side.

        Returns:
            The PNG's path, as a string.

        Raises:
            ValueError: the viewer has no preview folder.
        """
        path = self.preview_path(view, max_side)
        if not path.exists():
            from PIL import Image as PILImage

            path.parent.mkdir(parents=True, exist_ok=True)
            pixels = PILImage.fromarray(view.preview(max_side))
            atomic_write(path, lambda tmp: pixels.save(tmp, format="PNG", compress_level=1))
        return str(path)

    def full_depth(self, view: ImageView) -> FullDepth:
        """The image's full-bit-depth pixels as a file the page fetches once (behind the same
        login and file route as the previews), written once per image (keyed by checksum).

        Args:
            view: the image handle.

        Returns:
            Where the values are and how to read them.

        Raises:
            ValueError: the viewer has no preview folder.
        """
        decoded = self._decoded_by_id(view.image_id)
        values, offset, slope = full_depth_u16(decoded.raw)
        path = self.preview_path(view, 0).with_suffix(".u16")
        _write_packed(path, values)
        rows, cols = values.shape[:2]
        return FullDepth(path, int(cols), int(rows), offset, slope, decoded.inverted,
                         decoded.info.pixel_spacing, self._stand_in(view, values),
                         decoded.info.spacing_at_detector)

    def _stand_in(self, view: ImageView, values: np.ndarray) -> StandIn:
        """The full-depth values binned (block means) to at most `STAND_IN_SIDE`, written once
        beside them (`<checksum>-400.u16`)."""
        small = binned(values, STAND_IN_SIDE)
        step = max(1, int(np.ceil(max(values.shape[:2]) / STAND_IN_SIDE)))
        path = self.preview_path(view, STAND_IN_SIDE).with_suffix(".u16")
        _write_packed(path, small)
        rows, cols = small.shape[:2]
        return StandIn(path, int(cols), int(rows), step)

    def value_range(self, image_id: int) -> ValueRange:
        """The range of an image's full-bit-depth values, its default window and polarity.

        Args:
            image_id: the image.

        Returns:
            The minimum and maximum raw values, the image's own window (without one, the
            middle of the range and its width, at least 1), and whether high values are dark.

        Raises:
            LookupError: the image does not exist.
        """
        with self.db.read() as session:
            image = session.get(Image, image_id)
            if image is None:
                raise LookupError(f"image {image_id} does not exist")
            decoded = self.decoded(image)
        lo, hi = float(decoded.raw.min()), float(decoded.raw.max())
        # percentiles of every 4th pixel each way: a few ms for a 3,000 x 3,000 film
        qs = [100.0 - q if decoded.inverted else q for q in BRIGHTNESS_PERCENTILES]
        values = np.percentile(decoded.raw[::4, ::4], qs)
        return ValueRange(lo, hi, decoded.window or ((lo + hi) / 2, max(hi - lo, 1.0)),
                          decoded.inverted,
                          tuple(zip(BRIGHTNESS_PERCENTILES, (float(v) for v in values),
                                    strict=True)))

    def window(self, image_id: int, center: float, width: float) -> np.ndarray:
        """Window/level on the full-bit-depth pixels of one image.

        Args:
            image_id: the image.
            center: the window's center, in raw pixel units.
            width: the window's width, in raw pixel units.

        Returns:
            The windowed display pixels.

        Raises:
            LookupError: the image does not exist.
        """
        with self.db.read() as session:
            image = session.get(Image, image_id)
            if image is None:
                raise LookupError(f"image {image_id} does not exist")
            return window_level(self.decoded(image), center, width)
