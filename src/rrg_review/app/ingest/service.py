"""Importing studies: read a dataset layout, check every image, store studies in bulk.

Guarantees, in order of importance:

- **A bad record never ends or escapes an import.** Importers yield a StudyRecord or a
  RecordError per record; a reader that dies half-way (truncated .gz, bad encoding, nested JSON)
  is reported with its file and the reason; an image that fails fails only its own study. Every
  record found ends as exactly one of added / updated / unchanged / failed.
- **All-or-nothing per study.** A study's images are all checked (read through the import's
  Guard, decoded by the viewer's display pipeline) before any row is written; a batch of studies
  is written in one transaction, and if that transaction fails the batch is retried study by
  study, so one bad study never takes others with it and never leaves half of itself stored.
- **Re-import merges.** A stored study whose record is unchanged (same fingerprint) is skipped
  without touching its files; a changed one gains its new images and reference sections (a
  changed reference becomes a new version, the old text kept).
- **Throughput.** Metadata is parsed once; the known studies and patients are loaded once; new
  studies go in with executemany; images are checked in a process pool.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path

from sqlalchemy import event, select
from sqlalchemy.orm import Session

from rrg_review.core.children import end_with_parent
from rrg_review.core.progress import Progress
from rrg_review.db.blobs import BlobStore
from rrg_review.db.engine import Database
from rrg_review.db.models import Image
from rrg_review.db.store import (
    KnownStudy,
    StoredImage,
    insert_studies,
    known_patients,
    known_studies,
    merge_study,
    pseudonym,
    pseudonymise_folder_study_keys,
)
from rrg_review.studies.errors import DatasetLayoutError, StudyLoadError
from rrg_review.studies.importers import ImportOptions, detect_format, get_importer
from rrg_review.studies.pixels import ImageCheck, ImageInfo, inspect_file, sniff_format
from rrg_review.studies.records import ImageSource, RecordError, StudyRecord
from rrg_review.studies.safety import Guard, Limits

log = logging.getLogger(__name__)


# Studies written per transaction, and images per parallel check round (small enough that the
# parent's write of one round overlaps the workers' decoding of the next).
BATCH_STUDIES = 5000
BATCH_IMAGES = 128
# Images per task sent to a worker: paths out, small results back.
CHUNK_IMAGES = 4
# Fewer images than this are checked in-process (a pool costs more than it saves).
POOL_MIN_IMAGES = 16


@dataclass(frozen=True)
class ImportProblem:
    where: str
    reason: str
    record: str | None = None

    def __str__(self) -> str:
        where = self.where
        if self.record and self.record not in where:
            where = f"{where} [{self.record}]"
        return f"{where}: {self.reason}"


@dataclass
class ImportReport:
    format: str
    found: int = 0
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    images: int = 0  # images added (to new or updated studies)
    problems: list[ImportProblem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # objects skipped on purpose (DICOM SR, ...)
    # records of a study met before in the same import (a duplicated XML, a repeated metadata
    # key): each updates the study (the last one's text wins), and is said so, not silently
    repeats: list[str] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return len(self.problems)

    @property
    def already_present(self) -> int:
        """Studies stored before and unchanged (the name earlier callers use)."""
        return self.unchanged

    def summary(self) -> str:
        """Returns:
            One line of the counts, for the CLI and the admin panel.
        """
        return (f"{self.format}: {self.found} records: {self.added} added, {self.updated} "
                f"updated, {self.unchanged} unchanged, {self.failed} failed "
                f"({self.images} images added)")


def import_path(
    db: Database,
    path: Path,
    *,
    blobs: BlobStore,
    fmt: str = "auto",
    images: Path | None = None,
    follow_symlinks: bool = False,
    allow_modality: Iterable[str] = (),
    limits: Limits | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
    keep_folder_names: bool = False,
) -> ImportReport:
    """Import a dataset folder/file in the given (or detected) layout.

    A layout error (no metadata file, wrong columns) raises DatasetLayoutError before anything
    is stored; everything after that is reported in the ImportReport, never raised.

    Args:
        db: the database.
        path: the dataset's folder or metadata file.
        blobs: where image files are stored.
        fmt: an importer name, or "auto" to detect the layout.
        images: the images' folder when it is not where the layout expects it.
        follow_symlinks: let image paths follow symbolic links out of the dataset's root.
        allow_modality: DICOM modalities accepted besides CR and DX (case-insensitive, blanks
            ignored); "ANY" turns the modality and body-part check off.
        limits: size limits for images and files; None: the defaults.
        workers: image-checking processes; None: one per CPU.
        progress: called with (records read, records expected or None).
        keep_folder_names: a plain folder's path is stored as its study key as it is, not as
            a pseudonym (only for folders named by dataset ids, never by patients).

    Returns:
        The counts (found, added, updated, unchanged, failed, images) and every problem with
        the file and reason.

    Raises:
        DatasetLayoutError: the layout is not recognised or not readable, before anything is
            stored.
        ValueError: an unknown importer name.
    """
    path = Path(os.path.abspath(path))
    options = ImportOptions(
        images=Path(os.path.abspath(images)) if images is not None else None,
        follow_symlinks=follow_symlinks,
        allow_modality=frozenset(m.strip().upper() for m in allow_modality if m.strip()),
        limits=limits or Limits(),
        workers=workers if workers is not None else (os.cpu_count() or 1),
        keep_folder_names=keep_folder_names,
    )
    importer = detect_format(path, options) if fmt == "auto" else get_importer(fmt, options)
    guard = options.guard_for(importer.root(path))
    check = ImageCheck(guard=guard, allow_modality=options.allow_modality,
                       max_pixels=options.limits.image_pixels,
                       max_bytes=options.limits.image_bytes)
    return import_records(db, importer.read(path), blobs=blobs, fmt=importer.name,
                          total=importer.count(path), progress=progress, check=check,
                          workers=workers)


def import_records(
    db: Database,
    records: Iterable[StudyRecord | RecordError],
    *,
    blobs: BlobStore,
    fmt: str,
    total: int | None = None,
    progress: Progress | None = None,
    check: ImageCheck | None = None,
    workers: int | None = None,
) -> ImportReport:
    """Store records (each one's outcome counted once); see the module docstring.

    Args:
        db: the database.
        records: what an importer yields: a record or the error of one.
        blobs: where image files are stored.
        fmt: the importer's name, for the report (and its problems when reading fails).
        total: how many records are expected, for progress; None: unknown.
        progress: called with (records read, total).
        check: how images are checked; None: records from code (demo, tests), trusted apart
            from file-type and size checks.
        workers: image-checking processes; None: the default.

    Returns:
        The counts and problems. A reader failing after the first record stops reading and
        is reported (counted as one failed record); later records are not read.

    Raises:
        DatasetLayoutError: the reader fails before yielding any record; nothing is stored.
    """
    report = ImportReport(format=fmt)
    # Records from code (the demo, tests) are trusted: only file-type and size checks apply.
    check = check or ImageCheck(guard=Guard.for_roots(Path("/"), follow_symlinks=True))
    with ExitStack() as stack:
        writer = _BatchWriter(db, blobs, check, report, _PoolHandle(workers, stack))
        for item in _read(records, report, fmt):
            if isinstance(item, RecordError):
                report.problems.append(ImportProblem(item.where, item.reason, item.record))
            else:
                writer.add(item)
            if progress is not None:
                progress(report.found, total)
        writer.close()
    return report


def _read(records: Iterable[StudyRecord | RecordError], report: ImportReport,
          fmt: str) -> Iterator[StudyRecord | RecordError]:
    """The importer's records, each counted in `report.found` before it is handed on. A reader
    failing after the first record stops reading and is reported as one failed record; one
    failing before it raises (nothing read, nothing stored: a layout error)."""
    iterator = iter(records)
    while True:
        try:
            item = next(iterator)
        except StopIteration:
            return
        except DatasetLayoutError as exc:
            if report.found == 0:
                raise  # nothing read yet, nothing stored: a layout error (exit 2)
            report.problems.append(ImportProblem(exc.path, f"{exc.reason} (reading stopped "
                                                 "here; records after it were not read)"))
            report.found += 1
            return
        except StudyLoadError as exc:
            report.problems.append(ImportProblem(exc.path, f"{exc.reason} (reading stopped "
                                                 "here; records after it were not read)"))
            report.found += 1
            return
        except Exception as exc:  # an importer bug or a reader failing on hostile input
            log.debug("import reader failed", exc_info=True)
            report.problems.append(ImportProblem(
                fmt, f"reading stopped after {report.found} records: "
                     f"{type(exc).__name__}: {exc}"))
            report.found += 1
            return
        report.found += 1
        yield item


def fingerprint(record: StudyRecord, patient_key: str | None = None,
                study_key: str | None = None) -> str:
    """A digest of everything an import would store for the record (not where it came from);
    computed with the stored (pseudonymised) keys, never the raw identifiers.

    Args:
        record: the record as imported.
        patient_key: the stored (pseudonymised) patient key; None: the record's own.
        study_key: the stored study key; None: the record's own.

    Returns:
        A SHA-256 in hex; equal digests mean a re-import has nothing to change.
    """
    images = tuple(
        (im.name, im.path, hashlib.sha256(im.data).hexdigest() if im.data is not None else None,
         im.view_position, im.view_source)
        for im in record.images
    )
    parts = (record.source, study_key or record.study_key, patient_key or record.patient_key,
             record.study_date,
             record.study_time, record.split, record.split_raw, record.indication,
             record.comparison, tuple(sorted(record.demographics.items())), images,
             record.reference, record.notes)
    return hashlib.sha256(repr(parts).encode()).hexdigest()


# --- image checks ------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Checked:
    """One image's check as it comes back from a worker: small (its info and real path, or the
    failure), never pixels."""

    info: ImageInfo | None
    real_path: str | None
    error: str | None
    name: str


def _check_one(source: ImageSource, check: ImageCheck) -> _Checked:
    """Never raises: a worker's exception would fail its whole chunk."""
    try:
        info, real = inspect_file(source, check)  # read once through the Guard, decoded once
        return _Checked(info, real, None, source.name)
    except StudyLoadError as exc:
        return _Checked(None, None, exc.reason, exc.path)
    except MemoryError:
        return _Checked(None, None, "out of memory while decoding", source.name)
    except Exception as exc:  # listed with the study; the traceback at DEBUG
        log.debug("checking %s failed", source.name, exc_info=True)
        return _Checked(None, None, f"{type(exc).__name__}: {exc}", source.name)


def _check_chunk(check: ImageCheck, sources: list[ImageSource]) -> list[_Checked]:
    """Runs in a worker process: one pickled ImageCheck per chunk, paths in, small results out."""
    return [_check_one(source, check) for source in sources]


@dataclass
class _Round:
    """A round of image checks under way in the pool (or already done in-process)."""

    sources: list[ImageSource]
    chunks: list[tuple[int, Future[list[_Checked]]]] = field(default_factory=list)
    done: list[_Checked] | None = None

    def results(self) -> list[_Checked]:
        """The checks in task order; a chunk whose worker died fails its images, not the
        import."""
        if self.done is not None:
            return self.done
        out: list[_Checked] = []
        for start, future in self.chunks:
            try:
                out.extend(future.result())
            except Exception as exc:  # BrokenProcessPool: a decoder crashed a worker (segfault,
                # OOM kill); every chunk still queued fails with it
                end = start + CHUNK_IMAGES
                out.extend(_Checked(None, None, f"image checker crashed ({exc}); check the file "
                                    "alone", s.name) for s in self.sources[start:end])
        self.done = out
        return out


class _PoolHandle:
    """A process pool made on first need, shut down with the import.

    Rounds are submitted without waiting, so workers decode the next round while the parent
    reads metadata and writes the previous one.
    """

    def __init__(self, workers: int | None, stack: ExitStack) -> None:
        self.workers = workers if workers is not None else (os.cpu_count() or 1)
        self._stack = stack
        self._pool: ProcessPoolExecutor | None = None

    def submit(self, sources: list[ImageSource], check: ImageCheck) -> _Round:
        if self.workers <= 1 or (self._pool is None and len(sources) < POOL_MIN_IMAGES):
            return _Round(sources, done=[_check_one(s, check) for s in sources])
        pool = self._pool
        if pool is None or getattr(pool, "_broken", False):
            import PIL.Image  # noqa: F401  (imported once here, inherited by forked workers)

            pool = self._pool = ProcessPoolExecutor(self.workers, initializer=end_with_parent,
                                                    initargs=(os.getpid(),))
            # At the end (or on Ctrl-C) rounds still queued are dropped, not decoded first.
            self._stack.callback(pool.shutdown, wait=True, cancel_futures=True)
        round_ = _Round(sources)
        try:
            for start in range(0, len(sources), CHUNK_IMAGES):
                round_.chunks.append((start, pool.submit(
                    _check_chunk, check, sources[start:start + CHUNK_IMAGES])))
        except BrokenProcessPool:  # broke while submitting: the rest fail in results()
            self._pool = None
            failed: Future[list[_Checked]] = Future()
            failed.set_exception(BrokenProcessPool("a worker died"))
            done = len(round_.chunks) * CHUNK_IMAGES
            round_.chunks.extend((start, failed)
                                 for start in range(done, len(sources), CHUNK_IMAGES))
        return round_


# --- batching and writing ----------------------------------------------------------------------

@dataclass
class _Pending:
    record: StudyRecord
    fingerprint: str
    known: KnownStudy | None


@dataclass
class _Batch:
    """Records whose images are being checked; written once the checks are back."""

    pending: list[_Pending]
    keys: set[tuple[str, str]]
    wanted: list[list[int]]  # per pending record: indexes into round_.sources
    round_: _Round


class _BatchWriter:
    """Collects records, skips unchanged ones, checks the images of the rest in the pool and
    writes them in one transaction per batch (retried study by study if it fails).

    One batch stays in flight: while the workers check batch k+1, the parent writes batch k
    and reads the records of batch k+2, so neither waits on the other.
    """

    def __init__(self, db: Database, blobs: BlobStore, check: ImageCheck, report: ImportReport,
                 pool: _PoolHandle) -> None:
        self.db, self.blobs, self.check, self.report, self.pool = db, blobs, check, report, pool
        self.pending: list[_Pending] = []
        self.seen: dict[tuple[str, str], str] = {}  # study -> the record it came from first
        self.pending_keys: set[tuple[str, str]] = set()
        self.pending_images = 0
        self.in_flight: deque[_Batch] = deque()
        self.in_flight_keys: set[tuple[str, str]] = set()
        with db.write() as session:
            pseudonym(session, "")  # makes sure the pseudonym key exists before reading with it
            # folder names stored as keys by older versions: pseudonyms now, before the look-up
            # of known studies, so that this import updates them instead of adding twins
            pseudonymise_folder_study_keys(session)
        with db.read() as session:
            self.index = known_studies(session)
            self.patients = known_patients(session)
        self._ids_ctx: ExitStack | None = None
        self._ids_session: Session | None = None
        self._ids_loaded: list[object] = []  # keeps what pseudonym() loaded in the identity map
        self._pseudonyms: dict[str, str] = {}

    # identifiers --------------------------------------------------------------------------

    def _pseudonym(self, identifier: str) -> str:
        """db.store.pseudonym, memoised for the import (patients repeat across studies)."""
        known = self._pseudonyms.get(identifier)
        if known is not None:
            return known
        if self._ids_session is None:
            self._ids_ctx = ExitStack()
            self._ids_session = self._ids_ctx.enter_context(self.db.read())
            # The identity map holds objects weakly: keep what pseudonym() loads (its key)
            # alive, or every call would query it again.
            event.listen(self._ids_session, "loaded_as_persistent",
                         lambda _session, instance: self._ids_loaded.append(instance))
        value = pseudonym(self._ids_session, identifier)
        self._pseudonyms[identifier] = value
        return value

    def _end_ids_session(self) -> None:
        if self._ids_ctx is not None:
            self._ids_ctx.close()
            self._ids_ctx, self._ids_session, self._ids_loaded = None, None, []

    # records ------------------------------------------------------------------------------

    def add(self, record: StudyRecord) -> None:
        self.report.notes.extend(record.notes)
        patient_key = self._pseudonym(record.patient_key)
        study_key = self._pseudonym(record.study_key) if record.identifiers_are_phi \
            else record.study_key
        key = (record.source, study_key)
        first = self.seen.get(key)
        if first is None:
            self.seen[key] = record.origin
        else:
            self.report.repeats.append(f"{record.origin}: the same study as {first} (one study "
                                       "key), stored as an update of it")
        if key in self.pending_keys or key in self.in_flight_keys:
            self.close()  # the same study twice: the first must be stored before the second
        digest = fingerprint(record, patient_key, study_key)
        known = self.index.get(key)
        if known is not None and known.fingerprint == digest:
            self.report.unchanged += 1
            return
        record = replace(record, patient_key=patient_key, study_key=study_key,
                         identifiers_are_phi=False)
        self.pending.append(_Pending(record, digest, known))
        self.pending_keys.add(key)
        self.pending_images += len(record.images)
        if len(self.pending) >= BATCH_STUDIES or self.pending_images >= BATCH_IMAGES:
            self.flush()

    def flush(self) -> None:
        """Start checking the pending records' images, then write the batch before it."""
        self._end_ids_session()
        pending, self.pending = self.pending, []
        keys, self.pending_keys, self.pending_images = self.pending_keys, set(), 0
        if pending:
            self.in_flight.append(self._start(pending, keys))
            self.in_flight_keys |= keys
        while len(self.in_flight) > 1:
            self._finish(self.in_flight.popleft())

    def close(self) -> None:
        """Check and write everything still pending or in flight."""
        self.flush()
        while self.in_flight:
            self._finish(self.in_flight.popleft())

    def _start(self, pending: list[_Pending], keys: set[tuple[str, str]]) -> _Batch:
        existing = self._existing_images([p.known.id for p in pending if p.known is not None])
        sources: list[ImageSource] = []
        wanted: list[list[int]] = []
        for p in pending:
            have = existing.get(p.known.id, (set(), set())) if p.known else (set(), set())
            idx = []
            for source in p.record.images:
                if _already_stored(source, have):
                    continue
                idx.append(len(sources))
                sources.append(source)
            wanted.append(idx)
        round_ = self.pool.submit(sources, self.check) if sources else _Round([], done=[])
        return _Batch(pending, keys, wanted, round_)

    def _finish(self, batch: _Batch) -> None:
        self._end_ids_session()
        results = batch.round_.results()
        ready: list[tuple[_Pending, list[StoredImage], list[str]]] = []
        for p, idx in zip(batch.pending, batch.wanted, strict=True):
            checked = [results[i] for i in idx]
            errors = [c for c in checked if c.error is not None]
            if errors:
                self.report.problems.append(_failed_images(errors, p.record.origin))
                continue
            created: list[str] = []
            try:
                stored = [StoredImage(self._place(batch.round_.sources[i], c, created),
                                      c.info)  # type: ignore[arg-type]
                          for i, c in zip(idx, checked, strict=True)]
            except (OSError, StudyLoadError) as exc:
                self._undo(created)
                self.report.problems.append(ImportProblem(p.record.origin, f"cannot store "
                                                          f"embedded image ({exc})"))
                continue
            ready.append((p, stored, created))
        try:
            if ready:
                self._write_or_retry(ready)
        finally:
            self.in_flight_keys -= batch.keys

    def _write_or_retry(self, ready: list[tuple[_Pending, list[StoredImage], list[str]]]) -> None:
        try:
            self._write(ready)
        except Exception:
            log.info("batch write failed; retrying study by study", exc_info=True)
            for item in self._caught_up(ready):
                try:
                    self._write([item])
                except Exception as exc:
                    log.warning("storing %s failed: %s", item[0].record.origin, exc)
                    self._undo(item[2])
                    reason = getattr(exc, "orig", None) or exc
                    self.report.problems.append(ImportProblem(
                        item[0].record.origin, f"database error: {reason}"))

    def _caught_up(self, ready: list[tuple[_Pending, list[StoredImage], list[str]]]
                   ) -> list[tuple[_Pending, list[StoredImage], list[str]]]:
        """The batch again, after what other writers stored since this import read the
        database: another import running at the same time (the reports' archive and the
        images' folder of one dataset, say) adds the same patients and studies, and every
        insert of this batch then broke their unique keys (400 of 400 records failed). The
        known patients and studies are read again; a study stored meanwhile is merged into,
        with only the images it does not hold yet."""
        with self.db.read() as session:
            self.patients = known_patients(session)
            self.index = known_studies(session)
        now_known = {id(p): k for p, _, _ in ready if p.known is None and
                     (k := self.index.get((p.record.source, p.record.study_key))) is not None}
        have = self._existing_images([k.id for k in now_known.values()])  # one look-up
        out = []
        for pending, stored, created in ready:
            known = now_known.get(id(pending))
            if known is not None:
                uris, sums = have.get(known.id, (set(), set()))
                stored = [im for im in stored
                          if im.uri not in uris and im.info.checksum not in sums]
                pending = replace(pending, known=known)
            out.append((pending, stored, created))
        return out

    def _existing_images(self, study_ids: list[int]) -> dict[int, tuple[set[str], set[str]]]:
        """(uris, checksums) of the stored images of studies being merged."""
        out: dict[int, tuple[set[str], set[str]]] = {}
        if not study_ids:
            return out
        with self.db.read() as session:
            for start in range(0, len(study_ids), 500):
                rows = session.execute(select(Image.study_id, Image.uri, Image.checksum)
                                       .where(Image.study_id.in_(study_ids[start:start + 500])))
                for sid, uri, checksum in rows:
                    uris, sums = out.setdefault(sid, (set(), set()))
                    uris.add(uri)
                    sums.add(checksum)
        return out

    def _place(self, source: ImageSource, checked: _Checked, created: list[str]) -> str:
        if source.data is None:
            return checked.real_path  # type: ignore[return-value]
        ext = sniff_format(source.data[:132], source.name)
        uri, new = self.blobs.put(source.data, {"jpeg": "jpg", "dicom": "dcm"}.get(ext, ext))
        if new:
            created.append(uri)
        return uri

    def _undo(self, created: list[str]) -> None:
        for uri in created:
            self.blobs.remove(uri)

    def _write(self, items: list[tuple[_Pending, list[StoredImage], list[str]]]) -> None:
        new = [(p.record, stored, p.fingerprint) for p, stored, _ in items if p.known is None]
        outcomes: list[tuple[tuple[str, str], KnownStudy, str, int]] = []
        with self.db.write() as session:
            patients = dict(self.patients)
            ids = insert_studies(session, new, patients)
            for (record, stored, digest), sid in zip(new, ids, strict=True):
                pid = patients[(record.source, record.patient_key)]
                outcomes.append(((record.source, record.study_key), KnownStudy(sid, pid, digest),
                                 "added", len(stored)))
            for p, stored, _ in items:
                if p.known is None:
                    continue
                changes = merge_study(session, p.known.id, p.record, stored, p.fingerprint)
                outcomes.append(((p.record.source, p.record.study_key),
                                 KnownStudy(p.known.id, p.known.patient_id, p.fingerprint),
                                 "updated" if changes else "unchanged", len(stored)))
        self.patients = patients  # committed: the new patients exist now
        for key, known, outcome, n_images in outcomes:
            self.index[key] = known
            setattr(self.report, outcome, getattr(self.report, outcome) + 1)
            self.report.images += n_images


SHOWN_IMAGE_FAILURES = 4  # a study's failed images named with their reasons; more are counted


def _failed_images(errors: list[_Checked], origin: str) -> ImportProblem:
    """A study whose images failed: the first image's file and reason, then the others' (each
    with its own reason: "and 1 more image(s) failed" hid a decompression bomb beside a missing
    file from a trial), the rest counted."""
    first, others = errors[0], errors[1:SHOWN_IMAGE_FAILURES]
    more = "".join(f"; {c.name}: {c.error}" for c in others)
    if len(errors) > SHOWN_IMAGE_FAILURES:
        more += f"; and {len(errors) - SHOWN_IMAGE_FAILURES} more image(s) failed"
    return ImportProblem(first.name, f"{first.error}{more}", origin)


def _already_stored(source: ImageSource, have: tuple[set[str], set[str]]) -> bool:
    uris, checksums = have
    if not uris:
        return False
    if source.data is not None:
        return hashlib.sha256(source.data).hexdigest() in checksums
    return source.path is not None and os.path.realpath(source.path) in uris
