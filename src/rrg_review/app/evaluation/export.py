"""Exported evaluation reports: one row per (study, section, model, reader) with draft, final,
reference, metrics, rating and time on task, and the statistics a research team needs, written
as JSON, CSV or a self-contained HTML report plus RRG24-style prediction files. The rows come
from `export_rows`, the statistics from `evaluation_steps` (typed records of
`evaluation_results`), the files from `export_writers` and `report_html`; this module writes
them (atomically) and decides what a requester may export.

Exports carry no patient keys, names, dates of birth or DICOM headers, and study keys (which
may be folder names carrying a name or MRN) are replaced by opaque keyed ids unless an admin
asks for the datasets' own keys. `ExportService` decides on the server what a requester may
see: a reader gets only their own work, an admin (or the CLI) anyone's. Files for the web go to
a private (0700) spool that is emptied as exports age and removed at shutdown. CSV cells that a
spreadsheet would run as a formula are neutralised (OWASP "CSV injection").
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from rrg_review.app.accounts.audit import AuditLog
from rrg_review.app.accounts.service import Account
from rrg_review.app.evaluation.report_html import render
from rrg_review.app.evaluation.results import Evaluation, ExportFilters, ReviewRow
from rrg_review.app.evaluation.rows import collect_rows
from rrg_review.app.evaluation.steps import evaluate
from rrg_review.app.evaluation.writers import (
    csv_text,
    json_text,
    neutralise_cell,
    prediction_files,
    safe_name,
)
from rrg_review.core.files import atomic_write
from rrg_review.db.engine import Database
from rrg_review.metrics.base import Metric

__all__ = ["Evaluation", "ExportFilters", "ExportResult", "ExportService", "ExportSpool",
           "ReviewRow", "collect_rows", "evaluate", "export", "neutralise_cell", "safe_name"]

log = logging.getLogger(__name__)
FORMATS = {"html": render, "csv": csv_text, "json": json_text}


def export(db: Database, fmt: str, out: Path, filters: ExportFilters | None = None,
           metrics: Sequence[Metric] | None = None, n_resamples: int = 1000) -> list[Path]:
    """Write the report in `fmt` (html, csv or json) to `out`, plus the RRG24 prediction files
    beside it.

    Args:
        db: the database.
        fmt: "html", "csv" or "json".
        out: the report's path (its stem is made safe for a file name).
        filters: what to cover (default everything).
        metrics: the metrics to run (default the available set, no downloads).
        n_resamples: bootstrap resamples for confidence intervals.
    Returns:
        Every file written, the report first.

    Raises:
        ValueError: an unknown format (before anything is computed or written).
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r} (html, csv or json)")
    evaluation = evaluate(db, filters, metrics, n_resamples)
    out = out.with_name(safe_name(out.stem) + out.suffix)
    out.parent.mkdir(parents=True, exist_ok=True)
    files = {out: FORMATS[fmt](evaluation)} | prediction_files(evaluation, out.parent, out.stem)
    for path, text in files.items():
        atomic_write(path, text)
    log.info("%s export of %d rows written to %s (%d prediction files)", fmt,
             len(evaluation.rows), out, len(files) - 1)
    return list(files)


# -- exports on behalf of a signed-in requester ------------------------------------------------
class ExportSpool:
    """A private folder (0700) for web exports: one sub-folder per export, removed once older
    than `keep_s` (at the next export) and all of it at shutdown (`close`)."""

    def __init__(self, root: Path | None = None, keep_s: float = 600.0) -> None:
        if root is None:
            root = Path(tempfile.mkdtemp(prefix="rrg-exports-"))
        else:
            root.mkdir(mode=0o700, parents=True, exist_ok=True)
            root.chmod(0o700)
        self.root, self.keep_s = root, keep_s
        self._lock = threading.Lock()
        self._busy: set[Path] = set()  # folders of exports still being built: never purged

    def new_folder(self) -> Path:
        """A fresh folder for one export, kept from purging until `finished` (older finished
        exports are purged first).

        Returns:
            The new folder, inside the spool.
        """
        self.purge()
        folder = Path(tempfile.mkdtemp(prefix="export-", dir=self.root))
        with self._lock:
            self._busy.add(folder)
        return folder

    def finished(self, folder: Path) -> None:
        """The export in `folder` is written: from now on it may be purged.

        Args:
            folder: a folder from `new_folder` (one already removed is fine).
        """
        with self._lock:
            self._busy.discard(folder)
        with contextlib.suppress(FileNotFoundError):  # already discarded or purged: fine
            os.utime(folder)  # its age counts from the end of the export

    def purge(self, older_than_s: float | None = None) -> int:
        """Remove finished exports older than `older_than_s` (default `keep_s`).

        Args:
            older_than_s: age in seconds since the export finished; 0 removes every finished
                export; None: `keep_s`.

        Returns:
            How many export folders were removed.
        """
        limit = time.time() - (self.keep_s if older_than_s is None else older_than_s)
        removed = 0
        with self._lock:
            for folder in self.root.glob("export-*"):
                if folder in self._busy:
                    continue
                try:  # `discard` (a download) may remove it between the listing and here
                    finished_at = folder.stat().st_mtime
                except FileNotFoundError:
                    continue
                if finished_at <= limit:
                    shutil.rmtree(folder, ignore_errors=True)
                    removed += 1
        return removed

    def discard(self, path: Path) -> None:
        """Remove the export folder holding `path` (after it was downloaded).

        Args:
            path: a file of an export; a path not directly inside one of this spool's export
                folders is left alone.
        """
        path = Path(path).resolve()
        if path.parent.parent == self.root.resolve():
            shutil.rmtree(path.parent, ignore_errors=True)

    def close(self) -> None:
        """Remove the whole spool (at shutdown)."""
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass(frozen=True)
class ExportResult:
    files: list[Path]
    scope: str  # "own work of NAME" | "all readers"
    note: str | None = None  # why the scope differs from what was asked


class ExportService:
    """Exports on behalf of an account: the server, not the page, decides what it may see."""

    def __init__(self, db: Database, audit: AuditLog | None = None,
                 spool: ExportSpool | None = None) -> None:
        self.db = db
        self.audit = audit or AuditLog(db)
        self._spool = spool

    @property
    def spool(self) -> ExportSpool:
        if self._spool is None:
            self._spool = ExportSpool()
        return self._spool

    def export_as(self, account: Account, fmt: str, *, everyone: bool = False,
                  dataset_keys: bool = False, metrics: Sequence[Metric] | None = None,
                  address: str | None = None, n_resamples: int = 1000,
                  filters: ExportFilters | None = None) -> ExportResult:
        """A reader's export holds only their own work whatever they ask; an admin may export
        every reader's and ask for the datasets' own study keys.

        What was asked but not allowed is narrowed, not refused, and said in the result's
        `note`; the export is audited. A failed export leaves no folder behind.

        Args:
            account: who asks.
            fmt: "html", "csv" or "json".
            everyone: every reader's work (admins only); otherwise only `account`'s.
            dataset_keys: the datasets' own study keys instead of opaque ids (admins only).
            metrics: the metrics to run; None: the available set, no downloads.
            address: the client's address, for the audit log.
            n_resamples: bootstrap resamples for confidence intervals.
            filters: what to cover; its reader is replaced by `account` unless an admin
                asked for everyone.

        Returns:
            The files written (report first) in a spool folder, the scope actually exported
            and the note, if any.

        Raises:
            ValueError: an unknown format.
        """
        filters = filters or ExportFilters()
        note = None
        if account.is_admin and everyone:
            scope = "all readers"
        else:
            if everyone or (filters.reader not in (None, account.name)):
                note = "only your own work: exporting other readers' work needs an admin"
            filters = replace(filters, reader=account.name)
            scope = f"own work of {account.name}"
        if dataset_keys and not account.is_admin:
            note = (note + "; " if note else "") + "dataset study keys need an admin"
            dataset_keys = False
        filters = replace(filters, dataset_keys=dataset_keys)
        folder = self.spool.new_folder()
        try:
            files = export(self.db, fmt, folder / f"rrg-review-report.{fmt}", filters, metrics,
                           n_resamples=n_resamples)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        finally:
            self.spool.finished(folder)
        self.audit.record("export", actor=account.name, address=address,
                          target=f"{fmt}: {scope}", detail=note)
        return ExportResult(files, scope, note)

    def close(self) -> None:
        """Remove the spool and every export in it, if one was made (at shutdown)."""
        if self._spool is not None:
            self._spool.close()
