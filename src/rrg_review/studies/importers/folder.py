"""A plain folder, a PACS/CD export or a DICOMDIR tree.

- **DICOM**: every file that is DICOM (by its `DICM` preamble, with or without an extension:
  `IM000001`, UID-named files, series sub-folders, DICOMDIR trees) is read (header only) and
  grouped into studies by StudyInstanceUID, wherever it lies in the tree. Non-image objects
  (SR, KO, PR, RTSTRUCT, ...) are skipped and reported, never fatal. Patient, study date and
  time come from the header; PatientID and StudyInstanceUID are pseudonymised by the store.
- **PNG/JPEG**: one sub-folder per study holding its images.
- Either may have a `report.json` ({"findings", "impression", "indication", "comparison",
  "patient_id", "study_date", "split", "sex", "age"}) or a sectioned `report.txt`
  ("FINDINGS: ... IMPRESSION: ...") in the folder of its files.

Symbolic links are not followed (and reported) unless --follow-symlinks; FIFOs, sockets and
devices are reported and never opened.
"""

from __future__ import annotations

import json
import logging
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rrg_review.studies.dates import parse_date, parse_time
from rrg_review.studies.errors import DatasetLayoutError, StudyLoadError
from rrg_review.studies.importers.base import ImportOptions, Item, build
from rrg_review.studies.records import (
    ImageSource,
    RecordError,
    ReportSections,
    StudyRecord,
    normalise_split,
    reference,
    text,
)
from rrg_review.studies.reports import split_sections
from rrg_review.studies.safety import Guard

log = logging.getLogger(__name__)

SOURCE = "folder"
RASTER_SUFFIXES = (".png", ".jpg", ".jpeg")
_REPORT_FILES = ("report.json", "report.txt")
_MAX_DEPTH = 16
_HEADER_TAGS = ("PatientID", "StudyInstanceUID", "StudyDate", "StudyTime", "PatientSex",
                "PatientAge", "SOPClassUID", "Modality", "SeriesNumber", "InstanceNumber")


@dataclass
class _Scan:
    dicom: list[Path] = field(default_factory=list)
    raster: dict[Path, list[Path]] = field(default_factory=dict)
    skipped: list[RecordError] = field(default_factory=list)


def _sniff(path: Path) -> str | None:
    try:
        with open(path, "rb") as fh:  # a regular file (lstat-checked by the caller)
            head = fh.read(132)
    except OSError:
        return None
    if len(head) >= 132 and head[128:132] == b"DICM":
        return "dicom"
    if head.startswith(b"\x89PNG\r\n\x1a\n") or head.startswith(b"\xff\xd8"):
        return "raster"
    if path.suffix.lower() in (".dcm", ".dicom"):
        return "dicom"
    return None


def scan(root: Path, follow_symlinks: bool) -> _Scan:
    """Every image file under root (DICOM by content, PNG/JPEG by content and extension)."""
    out = _Scan()
    seen_dirs: set[tuple[int, int]] = set()
    stack = [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            st = os.stat(folder)
            if (st.st_dev, st.st_ino) in seen_dirs:
                continue  # a symlink loop
            seen_dirs.add((st.st_dev, st.st_ino))
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            out.skipped.append(RecordError(str(folder), f"cannot list folder ({exc.strerror})"))
            continue
        for entry in entries:
            path = Path(entry.path)
            if entry.name.startswith("."):
                continue
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
                if stat.S_ISLNK(mode):
                    if not follow_symlinks:
                        out.skipped.append(RecordError(str(path), "is a symbolic link (not "
                                                       "followed; use --follow-symlinks)"))
                        continue
                    mode = entry.stat(follow_symlinks=True).st_mode
            except OSError as exc:
                out.skipped.append(RecordError(str(path), f"cannot read ({exc.strerror})"))
                continue
            if stat.S_ISDIR(mode):
                if depth + 1 > _MAX_DEPTH:
                    out.skipped.append(RecordError(str(path), "folder nested too deeply"))
                else:
                    stack.append((path, depth + 1))
                continue
            if not stat.S_ISREG(mode):
                kind = "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
                out.skipped.append(RecordError(str(path), f"{kind}: skipped, never opened"))
                continue
            if entry.name in _REPORT_FILES or entry.name.upper() == "DICOMDIR":
                continue
            sniffed = _sniff(path)
            if sniffed == "dicom":
                out.dicom.append(path)
            elif path.suffix.lower() in RASTER_SUFFIXES:
                # by its name an image, whatever it holds: an empty, truncated or text file
                # named .png fails its study with the reason (skipped here, a study whose
                # only image it was vanished without a word)
                out.raster.setdefault(path.parent, []).append(path)
    stack.clear()
    return out


class FolderImporter:
    name = "folder"

    def __init__(self, options: ImportOptions) -> None:
        self.options = options
        self._scans: dict[Path, _Scan] = {}  # detect's walk, reused by read

    def _scan(self, path: Path) -> _Scan:
        if path not in self._scans:
            self._scans[path] = scan(path, self.options.follow_symlinks)
        return self._scans[path]

    def detect(self, path: Path) -> bool:
        if not path.is_dir():
            return False
        found = self._scan(path)
        return bool(found.dicom or found.raster)

    def root(self, path: Path) -> Path:
        return path

    def count(self, path: Path) -> int | None:
        return None

    def read(self, path: Path) -> Iterator[Item]:
        if not path.is_dir():
            raise DatasetLayoutError(str(path), "a folder import needs a directory")
        guard = self.options.guard_for(path)
        found = self._scans.pop(path, None) or scan(path, self.options.follow_symlinks)
        yield from found.skipped
        studies, headers, notes, unreadable = _group_dicom(found.dicom, guard,
                                                           self.options.workers)
        yield from unreadable
        for uid, files in studies.items():
            yield build(str(files[0].parent), _dicom_study, path, uid, files,
                        headers[files[0]], notes.get(uid, ()), guard,
                        self.options.keep_folder_names, record=f"{len(files)} DICOM file(s)")
        for uid, skipped in notes.items():
            if uid not in studies:  # a study made only of non-image objects
                yield RecordError(skipped[0].split(":")[0], "study has no image objects ("
                                  + "; ".join(skipped) + ")")
        for folder, files in sorted(found.raster.items()):
            yield build(str(folder), _raster_study, path, folder, files, guard,
                        self.options.keep_folder_names)


# The last tag `_HEADER_TAGS` needs (InstanceNumber): reading stops after it, so neither the
# rest of the header nor the pixel data is parsed.
_LAST_HEADER_TAG = 0x00200013
# Below this many files the headers are read in-process (a pool costs more than it saves).
_POOL_MIN_FILES = 256
_HEADER_CHUNK = 64


@dataclass(frozen=True)
class _Header:
    """One file's header as a worker returns it (small: a few strings, never a dataset)."""

    path: Path
    tags: dict[str, str] | None = None
    sop_name: str = ""
    error: RecordError | None = None


def _read_header(f: Path, guard: Guard) -> _Header:
    """Header-only read of one DICOM through the Guard; never raises."""
    from pydicom.filereader import read_partial
    from pydicom.tag import BaseTag, Tag

    # as dcmread passes them: tags, not keywords, with the character set that decodes them
    wanted: list[BaseTag | int] = [Tag(0x00080005), *(Tag(k) for k in _HEADER_TAGS)]

    def past_header(tag: BaseTag, _vr: str | None, _length: int) -> bool:
        return int(tag) > _LAST_HEADER_TAG

    try:
        real = guard.check(f)
        size = os.stat(real).st_size
        if size > guard.limits.image_bytes:
            raise StudyLoadError(str(f), f"file too large ({size:,} bytes; the limit is "
                                         f"{guard.limits.image_bytes:,})")
        with open(real, "rb") as fh:
            ds = read_partial(fh, stop_when=past_header, specific_tags=wanted)
        tags = {k: str(v).strip() for k in _HEADER_TAGS if (v := ds.get(k)) not in (None, "")}
        sop = ds.get("SOPClassUID") or getattr(ds, "file_meta", {}).get(
            "MediaStorageSOPClassUID")
        return _Header(f, tags, getattr(sop, "name", None) or str(sop or "unknown SOP class"))
    except StudyLoadError as exc:
        return _Header(f, error=RecordError(exc.path, exc.reason))
    except Exception as exc:  # listed as unreadable; the traceback at DEBUG
        log.debug("%s is not a readable DICOM file", f, exc_info=True)
        return _Header(f, error=RecordError(str(f), f"not a readable DICOM file "
                                                    f"({type(exc).__name__}: {exc})"))


def _read_headers(guard: Guard, files: list[Path]) -> list[_Header]:
    """Runs in a worker process: paths in, small header dicts out."""
    return [_read_header(f, guard) for f in files]


def read_headers(files: list[Path], guard: Guard, workers: int = 1) -> list[_Header]:
    """The headers of `files`, in order; in a process pool when there are many (a PACS export
    holds thousands of files and parsing a header is pure Python)."""
    if workers <= 1 or len(files) < _POOL_MIN_FILES:
        return _read_headers(guard, files)
    from concurrent.futures import ProcessPoolExecutor

    import pydicom.filereader  # noqa: F401  (imported once here, inherited by forked workers)

    chunks = [files[i:i + _HEADER_CHUNK] for i in range(0, len(files), _HEADER_CHUNK)]
    out: list[_Header] = []
    from rrg_review.core.children import end_with_parent

    pool = ProcessPoolExecutor(min(workers, len(chunks)), initializer=end_with_parent,
                               initargs=(os.getpid(),))
    try:
        for part in pool.map(_read_headers, [guard] * len(chunks), chunks):
            out.extend(part)
    except Exception as exc:  # BrokenProcessPool: a worker died; read the rest here
        log.warning("header workers failed (%s); reading headers in this process", exc)
        out.extend(_read_headers(guard, files[len(out):]))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # Ctrl-C: queued chunks are dropped
    return out


def _group_dicom(files: list[Path], guard: Guard, workers: int = 1) -> tuple[
        dict[str, list[Path]], dict[Path, dict[str, str]], dict[str, tuple[str, ...]],
        list[RecordError]]:
    """Header-only read of every DICOM: studies by StudyInstanceUID (image objects only),
    skipped non-image objects per study, and files that cannot be read."""
    studies: dict[str, list[Path]] = {}
    headers: dict[Path, dict[str, str]] = {}
    notes: dict[str, list[str]] = {}
    unreadable: list[RecordError] = []
    for found in read_headers(files, guard, workers):
        f = found.path
        if found.error is not None or found.tags is None:
            unreadable.append(found.error or RecordError(str(f), "not a readable DICOM file"))
            continue
        header, sop_name = found.tags, found.sop_name
        uid = header.get("StudyInstanceUID") or f"folder:{f.parent}"
        if "Media Storage Directory" in sop_name:
            continue  # a DICOMDIR (under any name): an index of the files the walk finds anyway
        if "Image Storage" not in sop_name:
            notes.setdefault(uid, []).append(f"{f}: skipped {sop_name} (not an image)")
            continue
        headers[f] = header
        studies.setdefault(uid, []).append(f)
    for group in studies.values():
        group.sort(key=lambda p: (_int(headers[p].get("SeriesNumber")),
                                  _int(headers[p].get("InstanceNumber")), str(p)))
    return studies, headers, {k: tuple(v) for k, v in notes.items()}, unreadable


def _int(value: str | None) -> int:
    try:
        return int(float(value)) if value else 0
    except ValueError:
        return 0


def _folder_report(folder: Path, guard: Guard) -> tuple[dict[str, Any], ReportSections | None]:
    """(report.json fields, reference) of a folder, or ({}, None)."""
    meta: dict[str, Any] = {}
    if (folder / "report.json").exists():
        name = str(folder / "report.json")
        try:
            meta = json.loads(guard.read_text(folder / "report.json"))
        except RecursionError:
            raise StudyLoadError(name, "JSON nested too deeply") from None
        except json.JSONDecodeError as exc:
            raise StudyLoadError(name, f"invalid JSON ({exc})") from None
        if not isinstance(meta, dict):
            raise StudyLoadError(name, "expected a JSON object")
        return meta, reference(meta.get("findings"), meta.get("impression"))
    if (folder / "report.txt").exists():
        sections = split_sections(guard.read_text(folder / "report.txt"))
        meta = {k: v for k, v in sections.items() if k in ("indication", "comparison")}
        return meta, reference(sections.get("findings"), sections.get("impression"))
    return {}, None


def _record(root: Path, key: str, origin: str, meta: dict[str, Any],
            ref: ReportSections | None, images: Sequence[ImageSource], header: dict[str, str],
            notes: Sequence[str] = (), phi_key: bool = False) -> StudyRecord:
    patient = text(meta.get("patient_id"))
    if patient is None:
        patient = header.get("PatientID")
    date_value = meta.get("study_date") or header.get("StudyDate")
    split, raw = normalise_split(meta.get("split"))
    demographics = {k: v for k, v in (
        ("sex", text(meta.get("sex")) or header.get("PatientSex")),
        ("age", text(meta.get("age")) or header.get("PatientAge"))) if v}
    return StudyRecord(
        source=SOURCE,
        study_key=key,
        patient_key=patient or key,
        origin=origin,
        study_date=parse_date(text(date_value), origin),
        study_time=parse_time(header.get("StudyTime")),
        split=split,
        split_raw=raw,
        indication=text(meta.get("indication")),
        comparison=text(meta.get("comparison")),
        demographics=demographics,
        images=tuple(images),
        reference=ref,
        identifiers_are_phi=phi_key,
        notes=tuple(notes),
    )


def _dicom_study(root: Path, uid: str, files: list[Path], header: dict[str, str],
                 notes: Sequence[str], guard: Guard, keep_folder_names: bool) -> StudyRecord:
    folder = files[0].parent
    meta, ref = _folder_report(folder, guard)
    origin = f"{folder} (StudyInstanceUID)" if not uid.startswith("folder:") else str(folder)
    if uid.startswith("folder:"):  # no StudyInstanceUID: the folder is the study
        key, phi = f"{root.name}/{folder.relative_to(root)}", not keep_folder_names
    else:
        key, phi = uid, True
    images = [ImageSource(name=str(f), path=str(f)) for f in files]
    return _record(root, key, origin, meta, ref, images, header, notes, phi_key=phi)


def _raster_study(root: Path, folder: Path, files: list[Path], guard: Guard,
                  keep_folder_names: bool) -> StudyRecord:
    """A folder of PNG/JPEG images is one study, keyed by its path under the import (stored
    as a pseudonym unless the folder names are kept: they often name the patient)."""
    meta, ref = _folder_report(folder, guard)
    rel = folder.relative_to(root)
    key = f"{root.name}/{rel}" if str(rel) != "." else root.name
    images = [ImageSource(name=str(f), path=str(f)) for f in sorted(files)]
    return _record(root, key, str(folder), meta, ref, images, {}, phi_key=not keep_folder_names)
