"""Open-i Indiana University chest X-ray collection: `NLMCXR_reports.tgz` XML reports.

Each `ecgen-radiology/N.xml` is one study; its images (`parentImage id="CXR..."`) come separately
as `NLMCXR_png/<id>.png`, found from `--images`, or beside the archive, or beside (or inside) the
extracted `ecgen-radiology/` folder. Reports import without images when no image folder exists
(as references for scoring); a later import with the images adds them to the stored studies.
The collection has no view labels, patient ids or study dates: views stay unknown (the first
image is the lateral in about one study in ten, so none is assumed frontal), each report is its
own patient and dates stay empty.
"""

from __future__ import annotations

import re
import tarfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

from rrg_review.studies.errors import DatasetLayoutError, StudyLoadError
from rrg_review.studies.importers.base import ImportOptions, Item, build, file_failure
from rrg_review.studies.records import ImageSource, RecordError, StudyRecord, reference, text
from rrg_review.studies.safety import Guard

SOURCE = "iu-xray"
_XML_DIR = "ecgen-radiology"
_PNG_DIR = "NLMCXR_png"
_IMAGE_ID = re.compile(r"^[A-Za-z0-9_.-]+$")


class IUXrayImporter:
    name = "iu-xray"

    def __init__(self, options: ImportOptions) -> None:
        self.options = options

    def detect(self, path: Path) -> bool:
        if path.is_file():
            return path.name.endswith((".tgz", ".tar.gz", ".tar")) and "NLMCXR" in path.name
        if not path.is_dir():
            return False
        folder = path / _XML_DIR if (path / _XML_DIR).is_dir() else path
        return any(_looks_like_iu(x) for x in sorted(folder.glob("*.xml"), key=_numeric_key)[:5])

    def root(self, path: Path) -> Path:
        base = path.parent if path.is_file() else path
        return base.parent if base.name == _XML_DIR else base

    def count(self, path: Path) -> int | None:
        if path.is_file():
            return None  # counting would read the archive twice
        folder = path / _XML_DIR if (path / _XML_DIR).is_dir() else path
        return sum(1 for _ in folder.glob("*.xml"))

    def read(self, path: Path) -> Iterator[Item]:
        images_dir = self._images_dir(path)
        guard = self.options.guard_for(self.root(path))
        for item in self._documents(path, guard):
            if isinstance(item, RecordError):
                yield item
                continue
            name, payload = item
            yield build(name, parse_report, payload, name, images_dir, guard)

    def _images_dir(self, path: Path) -> Path | None:
        if self.options.images is not None:
            if not self.options.images.is_dir():
                raise DatasetLayoutError(str(self.options.images), "image folder does not exist")
            return self.options.images
        root = self.root(path)
        base = path.parent if path.is_file() else path
        for candidate in dict.fromkeys((base / _PNG_DIR, root / _PNG_DIR)):
            if candidate.is_dir():
                return candidate
        return None

    def _documents(self, path: Path, guard: Guard) -> Iterator[tuple[str, bytes] | RecordError]:
        limit = self.options.limits.text_bytes
        if path.is_file():
            done = 0
            try:
                with guard.open_metadata(path) as raw, tarfile.open(fileobj=raw) as tar:
                    for member in tar:
                        if not member.name.endswith(".xml"):
                            continue
                        origin = f"{path}:{member.name}"
                        if not member.isfile():
                            yield RecordError(origin, "not a regular file in the archive")
                        elif member.size > limit:
                            yield RecordError(origin, f"report too large ({member.size:,} bytes)")
                        else:
                            fh = tar.extractfile(member)
                            yield origin, fh.read() if fh else b""
                        done += 1
            except (tarfile.TarError, EOFError, OSError, StudyLoadError, ValueError) as exc:
                if done == 0:
                    reason = exc.reason if isinstance(exc, StudyLoadError) else str(exc)
                    raise DatasetLayoutError(str(path), f"cannot read archive ({reason})") \
                        from None
                yield file_failure(path, exc, done)
            return
        folder = path / _XML_DIR if (path / _XML_DIR).is_dir() else path
        for xml in sorted(folder.glob("*.xml"), key=_numeric_key):
            try:
                yield str(xml), guard.read(xml, limit=limit, what="report")
            except StudyLoadError as exc:
                yield RecordError(exc.path, exc.reason)


def _numeric_key(p: Path) -> tuple[int, str]:
    return (int(p.stem), "") if p.stem.isdigit() else (1 << 30, p.stem)


def _looks_like_iu(xml: Path) -> bool:
    try:
        if not xml.is_file() or xml.is_symlink():
            return False
        with open(xml, "rb") as fh:
            head = fh.read(2048)
    except OSError:
        return False
    return b"<eCitation" in head and b"uId" in head


def parse_report(payload: bytes, origin: str, images_dir: Path | None, guard: Guard) -> StudyRecord:
    if b"<!DOCTYPE" in payload[:4096] or b"<!ENTITY" in payload:
        raise StudyLoadError(origin, "XML with a DOCTYPE/ENTITY declaration refused")
    try:
        root = ET.fromstring(payload)  # noqa: S314 - DOCTYPE/ENTITY refused just above
    except ET.ParseError as exc:
        raise StudyLoadError(origin, f"malformed XML ({exc})") from None
    uid = root.find("uId")
    key = text(uid.get("id")) if uid is not None else None
    key = key or Path(origin.split(":")[-1]).stem
    sections = {
        (node.get("Label") or "").upper(): text(node.text)
        for node in root.iter("AbstractText")
    }
    images: list[ImageSource] = []
    if images_dir is not None:
        for node in root.iter("parentImage"):
            image_id = node.get("id")
            if not image_id:
                continue
            if not _IMAGE_ID.match(image_id) or image_id in (".", ".."):
                raise StudyLoadError(origin, f"invalid image id {image_id!r}")
            file = guard.inside(images_dir, f"{image_id}.png", origin)
            images.append(ImageSource(name=str(file), path=str(file)))
    return StudyRecord(
        source=SOURCE,
        study_key=key,
        patient_key=key,
        origin=origin,
        indication=sections.get("INDICATION"),
        comparison=sections.get("COMPARISON"),
        images=tuple(images),
        reference=reference(sections.get("FINDINGS"), sections.get("IMPRESSION")),
    )
