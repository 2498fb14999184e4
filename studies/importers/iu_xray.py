"""Open-i Indiana University chest X-ray collection: `NLMCXR_reports.tgz` XML reports.

Each `ecgen-radiology/N.xml` is one study; its images (`parentImage id="CXR..."`) come separately
as `NLMCXR_png/<id>.png`. Reports import without images when no image folder is given (as
references for scoring); with one, a missing image file fails that study. The collection has no
patient ids or study dates, so each report is its own patient and dates stay empty.
"""

from __future__ import annotations

import tarfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

from studies.errors import DatasetLayoutError, StudyLoadError
from studies.importers.base import ImportOptions
from studies.records import ImageSource, ReportSections, StudyRecord
from studies.reports import clean

SOURCE = "iu-xray"
_XML_DIR = "ecgen-radiology"


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
        first = next(folder.glob("*.xml"), None)
        return first is not None and _looks_like_iu(first)

    def count(self, path: Path) -> int | None:
        return sum(1 for _ in self._documents(path, names_only=True))

    def read(self, path: Path) -> Iterator[StudyRecord]:
        images_dir = self._images_dir(path)
        for name, payload in self._documents(path):
            yield parse_report(payload, name, images_dir)

    def _images_dir(self, path: Path) -> Path | None:
        if self.options.images is not None:
            if not self.options.images.is_dir():
                raise DatasetLayoutError(str(self.options.images), "image folder does not exist")
            return self.options.images
        sibling = (path.parent if path.is_file() else path) / "NLMCXR_png"
        return sibling if sibling.is_dir() else None

    def _documents(self, path: Path, names_only: bool = False) -> Iterator[tuple[str, bytes]]:
        if path.is_file():
            try:
                with tarfile.open(path) as tar:
                    for member in tar:
                        if member.isfile() and member.name.endswith(".xml"):
                            origin = f"{path}:{member.name}"
                            if names_only:
                                yield origin, b""
                                continue
                            fh = tar.extractfile(member)
                            yield origin, fh.read() if fh else b""
            except (tarfile.TarError, EOFError, OSError) as exc:
                raise DatasetLayoutError(str(path), f"cannot read archive ({exc})") from exc
            return
        folder = path / _XML_DIR if (path / _XML_DIR).is_dir() else path
        for xml in sorted(folder.glob("*.xml"), key=_numeric_key):
            yield str(xml), b"" if names_only else xml.read_bytes()


def _numeric_key(p: Path) -> tuple[int, str]:
    return (int(p.stem), "") if p.stem.isdigit() else (1 << 30, p.stem)


def _looks_like_iu(xml: Path) -> bool:
    try:
        head = xml.read_bytes()[:2048]
    except OSError:
        return False
    return b"<eCitation" in head and b"uId" in head


def parse_report(payload: bytes, origin: str, images_dir: Path | None) -> StudyRecord:
    try:
        root = ET.fromstring(payload)
    except ET.ParseError as exc:
        raise StudyLoadError(origin, f"malformed XML ({exc})") from exc
    uid = root.find("uId")
    key = uid.get("id") if uid is not None and uid.get("id") else Path(origin).stem
    sections = {
        (node.get("Label") or "").upper(): clean(node.text)
        for node in root.iter("AbstractText")
    }
    images: list[ImageSource] = []
    if images_dir is not None:
        for node in root.iter("parentImage"):
            image_id = node.get("id")
            if image_id:
                file = images_dir / f"{image_id}.png"
                images.append(ImageSource(name=str(file), path=str(file)))
    return StudyRecord(
        source=SOURCE,
        study_key=key,
        patient_key=key,
        origin=origin,
        indication=sections.get("INDICATION"),
        comparison=sections.get("COMPARISON"),
        images=tuple(images),
        reference=ReportSections(
            findings=sections.get("FINDINGS"), impression=sections.get("IMPRESSION")
        ),
    )
