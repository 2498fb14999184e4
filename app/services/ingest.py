"""Importing studies: read a dataset layout, validate every image, store each study atomically.

A study is stored whole or not at all: its images are decoded (DICOM) or verified (PNG/JPEG)
first, embedded image bytes go to the blob store, and the rows are written in one transaction;
if anything fails, the blobs it created are removed and the failure is reported with the file
and the reason. Re-importing adds nothing twice (studies are keyed by source + study key).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from sqlalchemy.exc import SQLAlchemyError

from db.blobs import BlobStore
from db.engine import Database
from db.store import StoredImage, add_study, find_study, pseudonym
from studies.errors import DatasetLayoutError, StudyLoadError
from studies.importers import ImportOptions, detect_format, get_importer
from studies.pixels import inspect, sniff_format
from studies.records import ImageSource, StudyRecord

Progress = Callable[[int, int | None], None]  # (done so far, total if known)


@dataclass(frozen=True)
class ImportProblem:
    where: str
    reason: str

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}"


@dataclass
class ImportReport:
    format: str
    added: int = 0
    already_present: int = 0
    images: int = 0
    problems: list[ImportProblem] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return len(self.problems)


def import_path(
    db: Database,
    path: Path,
    *,
    blobs: BlobStore,
    fmt: str = "auto",
    images: Path | None = None,
    progress: Progress | None = None,
) -> ImportReport:
    """Import a dataset folder/file in the given (or detected) layout.

    A layout error (missing metadata file, wrong CSV columns) raises DatasetLayoutError before
    anything is stored; a bad study is reported in ImportReport.problems and the rest go on.
    """
    options = ImportOptions(images=images)
    importer = detect_format(path, options) if fmt == "auto" else get_importer(fmt, options)
    total = importer.count(path)
    return import_records(
        db, importer.read(path), blobs=blobs, fmt=importer.name, total=total, progress=progress
    )


def import_records(
    db: Database,
    records: Iterable[StudyRecord],
    *,
    blobs: BlobStore,
    fmt: str,
    total: int | None = None,
    progress: Progress | None = None,
) -> ImportReport:
    report = ImportReport(format=fmt)
    done = 0
    iterator = iter(records)
    while True:
        try:
            record = next(iterator)
        except StopIteration:
            break
        except DatasetLayoutError:
            raise
        except StudyLoadError as exc:  # one record the importer could not build
            report.problems.append(ImportProblem(exc.path, exc.reason))
        else:
            _import_one(db, record, blobs, report)
        done += 1
        if progress is not None:
            progress(done, total)
    return report


def _import_one(db: Database, record: StudyRecord, blobs: BlobStore, report: ImportReport) -> None:
    with db.read() as session:
        if find_study(session, record.source, record.study_key) is not None:
            report.already_present += 1
            return
    created: list[str] = []
    try:
        # Decode/verify outside the write transaction so the write lock is held only briefly.
        stored = [StoredImage(uri=_place(source, blobs, created), info=inspect(source))
                  for source in record.images]
        with db.write() as session:
            if find_study(session, record.source, record.study_key) is not None:
                _undo(blobs, created)
                report.already_present += 1
                return
            if record.identifiers_are_phi:
                record = replace(record, patient_key=pseudonym(session, record.patient_key),
                                 identifiers_are_phi=False)
            add_study(session, record, stored)
    except StudyLoadError as exc:
        _undo(blobs, created)
        report.problems.append(ImportProblem(exc.path, exc.reason))
        return
    except SQLAlchemyError as exc:
        _undo(blobs, created)
        reason = getattr(exc, "orig", None) or exc
        report.problems.append(ImportProblem(record.origin, f"database error: {reason}"))
        return
    except BaseException:
        _undo(blobs, created)
        raise
    report.added += 1
    report.images += len(record.images)


def _place(source: ImageSource, blobs: BlobStore, created: list[str]) -> str:
    """Where the stored image lives: its absolute path, or a blob for embedded bytes."""
    if source.data is None:
        return str(Path(source.path).resolve())  # type: ignore[arg-type]
    ext = sniff_format(source.data[:132], source.name)
    uri, new = blobs.put(source.data, {"jpeg": "jpg", "dicom": "dcm"}.get(ext, ext))
    if new:
        created.append(uri)
    return uri


def _undo(blobs: BlobStore, created: list[str]) -> None:
    for uri in created:
        blobs.remove(uri)
