"""Exported evaluation reports: one row per (study, section, model, reader) with draft, final,
reference, metrics, rating and time on task, the statistics a research team needs, and writers
for JSON, CSV, RRG24-style prediction files and a self-contained HTML report.

Exports carry no patient keys, names, dates of birth or DICOM headers, and study keys (which
may be folder names carrying a name or MRN) are replaced by opaque keyed ids unless an admin
asks for the datasets' own keys. `ExportService` decides on the server what a requester may
see: a reader gets only their own work, an admin (or the CLI) anyone's. Files for the web go to
a private (0700) spool that is emptied as exports age and removed at shutdown. CSV cells that a
spreadsheet would run as a formula are neutralised (OWASP "CSV injection").
"""

from __future__ import annotations

import csv
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import select

from app.services.accounts import Account
from app.services.audit import AuditLog
from app.services.review import edit_rate
from db.engine import Database
from db.metric_cache import DatabaseScoreCache
from db.models import (
    REXVAL_CATEGORIES,
    SECTIONS,
    Draft,
    Rating,
    Reader,
    Revision,
    Study,
    WorklistItem,
)
from db.store import opaque_study_id, pseudonym_key
from metrics.agreement import (
    Agreement,
    cohen_kappa,
    fleiss_kappa,
    kendall_tau_b,
    krippendorff_alpha,
)
from metrics.base import Metric
from metrics.registry import MetricConfig, build
from metrics.scoring import metric_rows, score
from metrics.stats import paired_test

log = logging.getLogger(__name__)

HEADLINE = ("radgraph_partial", "bertscore", "rougeL", "bleu4")  # first available ranks cases


@dataclass(frozen=True)
class ExportFilters:
    model: str | None = None
    reader: str | None = None
    source: str | None = None
    since: date | None = None
    dataset_keys: bool = False  # the datasets' own study keys instead of opaque ids (admins)


@dataclass
class ReviewRow:
    study_id: int
    source: str
    study_key: str
    split: str | None
    section: str
    preset: str
    model_id: str
    model_revision: str | None
    reader: str | None
    draft: str
    final: str | None
    reference: str | None
    likert: int | None = None
    acceptable: bool | None = None
    errors: dict[str, dict[str, int]] = field(default_factory=dict)
    comment: str | None = None
    active_seconds: float | None = None
    rated_at: str | None = None
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)  # comparison -> key -> v

    @property
    def significant_errors(self) -> int:
        return sum(c.get("significant", 0) for c in self.errors.values())

    @property
    def all_errors(self) -> int:
        return sum(c.get("significant", 0) + c.get("insignificant", 0)
                   for c in self.errors.values())


@dataclass
class Evaluation:
    generated_at: str
    filters: dict[str, Any]
    rows: list[ReviewRow]
    models: list[dict[str, Any]]
    sources: dict[str, int]
    readers: list[str]
    automatic: list[dict[str, Any]]  # per model & section (& source): value, ci, n
    paired: list[dict[str, Any]]
    unavailable: dict[str, str]
    review: dict[str, Any]
    edits: list[dict[str, Any]]
    metric_agreement: list[dict[str, Any]]
    reader_agreement: list[dict[str, Any]]
    cases: dict[str, list[ReviewRow]]


def collect_rows(db: Database, filters: ExportFilters) -> list[ReviewRow]:
    """Latest successful draft per (study, section, preset) crossed with the readers who
    reviewed the study; drafts nobody reviewed give one row with reader None."""
    with db.read() as s:
        drafts: dict[tuple[int, str, str], Draft] = {}
        stmt = select(Draft).where(Draft.error.is_(None)).order_by(Draft.id)
        if filters.model:
            stmt = stmt.where(Draft.preset == filters.model)
        for d in s.scalars(stmt):
            drafts[(d.study_id, d.section, d.preset)] = d
        studies = {st.id: st for st in s.scalars(select(Study).where(
            Study.id.in_({k[0] for k in drafts})))}
        readers = dict(s.execute(select(Reader.id, Reader.name)).all())
        draft_preset = dict(s.execute(select(Draft.id, Draft.preset)).all())
        revisions: dict[tuple[int, int, str], Revision] = {}
        for r in s.scalars(select(Revision).order_by(Revision.number)):
            revisions[(r.reader_id, r.study_id, r.section)] = r
        ratings: dict[tuple[int, int], list[Rating]] = defaultdict(list)
        for r in s.scalars(select(Rating).order_by(Rating.number)):
            ratings[(r.reader_id, r.study_id)].append(r)
        active = {(w.reader_id, w.study_id): w.active_seconds
                  for w in s.scalars(select(WorklistItem))}
        refs = {st_id: st.reference for st_id, st in studies.items()}
        key = None if filters.dataset_keys else _export_key(db, s)
        rows: list[ReviewRow] = []
        for (study_id, section, preset), d in sorted(
                drafts.items(), key=lambda kv: (studies[kv[0][0]].study_key, kv[0][1:])):
            study = studies[study_id]
            if filters.source and study.source != filters.source:
                continue
            # a reader reviewed this model's draft if they rated it, or edited from it
            reviewers = sorted(
                {rid for (rid, sid), rs in ratings.items() if sid == study_id
                 and any(r.preset in (None, preset) for r in rs)}
                | {rid for (rid, sid, _), rev in revisions.items() if sid == study_id
                   and draft_preset.get(rev.draft_id) == preset})
            if filters.reader:
                reviewers = [r for r in reviewers if readers.get(r) == filters.reader]
            ref = refs.get(study_id)
            shown_key = (study.study_key if key is None
                         else opaque_study_id(key, study.source, study.study_key))
            base = dict(study_id=study_id, source=study.source, study_key=shown_key,
                        split=study.split, section=section, preset=preset,
                        model_id=d.model_id, model_revision=d.model_revision,
                        draft=d.text or "",
                        reference=getattr(ref, section, None) if ref else None)
            if not reviewers:
                if filters.reader is None and filters.since is None:
                    rows.append(ReviewRow(**base, reader=None, final=None))
                continue
            for rid in reviewers:
                rating = next((r for r in reversed(ratings.get((rid, study_id), []))
                               if r.preset in (None, preset)), None)
                revision = revisions.get((rid, study_id, section))
                stamps = [x.created_at for x in (rating, revision) if x is not None]
                if filters.since and (not stamps or max(stamps).date() < filters.since):
                    continue
                final = revision.text if revision else (d.text if rating else None)
                rows.append(ReviewRow(
                    **base, reader=readers.get(rid), final=final,
                    likert=rating.likert if rating else None,
                    acceptable=rating.acceptable if rating else None,
                    errors=dict(rating.errors or {}) if rating else {},
                    comment=rating.comment if rating else None,
                    active_seconds=active.get((rid, study_id)),
                    rated_at=rating.created_at.isoformat() if rating else None))
    return rows


def _export_key(db: Database, session) -> bytes:
    """The pseudonym key (kept outside the database) that makes opaque study ids."""
    if db._key is not None:
        return db._key
    if db.read_only:
        return pseudonym_key(session)
    with db.write() as w:
        return pseudonym_key(w)


def _score_rows(rows: list[ReviewRow], metrics: Sequence[Metric], cache,
                unavailable: dict[str, str]) -> None:
    comparisons = {"draft_vs_reference": ("draft", "reference"),
                   "final_vs_reference": ("final", "reference"),
                   "draft_vs_final": ("draft", "final")}
    for name, (hyp, ref) in comparisons.items():
        chosen = [r for r in rows if getattr(r, hyp) is not None and getattr(r, ref)]
        if not chosen:
            continue
        report = score([getattr(r, hyp) for r in chosen], [getattr(r, ref) for r in chosen],
                       metrics, cache, n_resamples=0)
        unavailable.update(report.unavailable)
        for i, row in enumerate(chosen):
            row.metrics[name] = {k: v[i] for k, v in report.per_sample.items()}


def evaluate(db: Database, filters: ExportFilters | None = None,
             metrics: Sequence[Metric] | None = None, n_resamples: int = 1000) -> Evaluation:
    filters = filters or ExportFilters()
    metrics = list(metrics) if metrics is not None else build(None, MetricConfig(download=False))
    cache = DatabaseScoreCache(db)
    rows = collect_rows(db, filters)
    unavailable: dict[str, str] = {}
    _score_rows(rows, metrics, cache, unavailable)

    # one draft per (study, section, model): automatic metrics are not weighted by readers
    unique: dict[tuple[int, str, str], ReviewRow] = {}
    for r in rows:
        unique.setdefault((r.study_id, r.section, r.preset), r)
    automatic, paired = [], []
    by_model_section: dict[tuple[str, str], list[ReviewRow]] = defaultdict(list)
    for r in unique.values():
        if r.reference:
            by_model_section[(r.preset, r.section)].append(r)
    for (preset, section), group in sorted(by_model_section.items()):
        report = score([r.draft for r in group], [r.reference for r in group], metrics, cache,
                       groups=[r.source for r in group], n_resamples=n_resamples)
        for key, value in report.values.items():
            automatic.append({"model": preset, "section": section, "source": "all", "key": key,
                              "value": value, "ci": list(report.ci.get(key, (None, None))),
                              "n": report.n})
            for src, values in report.groups.items():
                if len(report.groups) > 1:
                    automatic.append({"model": preset, "section": section, "source": src,
                                      "key": key, "value": values[key], "ci": [None, None],
                                      "n": report.group_sizes[src]})
    presets = sorted({p for p, _ in by_model_section})
    for section in SECTIONS:
        for i, a in enumerate(presets):
            for b in presets[i + 1:]:
                ra = {r.study_id: r for r in by_model_section.get((a, section), [])}
                rb = {r.study_id: r for r in by_model_section.get((b, section), [])}
                common = sorted(set(ra) & set(rb))
                if len(common) < 2:
                    continue
                refs = [ra[s].reference for s in common]
                for metric in metrics:
                    if metric.keys[0] in unavailable or not metric.available()[0]:
                        continue
                    ma = metric_rows(metric, [ra[s].draft for s in common], refs, cache)
                    mb = metric_rows(metric, [rb[s].draft for s in common], refs, cache)
                    for res in paired_test(ma, mb, metric.corpus, metric.keys,
                                           n_resamples=max(200, n_resamples)):
                        paired.append({"section": section, "model_a": a, "model_b": b,
                                       **asdict(res)})

    rated = [r for r in rows if r.reader and r.likert is not None]
    per_rating: dict[tuple[int, str, str], ReviewRow] = {}
    for r in rated:  # ratings are per study: count each (study, reader, model) once
        per_rating.setdefault((r.study_id, r.reader, r.preset), r)
    ratings = list(per_rating.values())
    review: dict[str, Any] = {"models": {}}
    for preset in sorted({r.preset for r in ratings}):
        mine = [r for r in ratings if r.preset == preset]
        errors = {c: {k: sum((r.errors.get(c) or {}).get(k, 0) for r in mine)
                      for k in ("significant", "insignificant")} for c in REXVAL_CATEGORIES}
        review["models"][preset] = {
            "ratings": len(mine),
            "likert": {str(v): sum(1 for r in mine if r.likert == v) for v in range(1, 6)},
            "accepted_share": sum(1 for r in mine if r.acceptable) / len(mine),
            "errors": errors,
            "active_minutes_mean": float(np.mean([(r.active_seconds or 0) / 60 for r in mine])),
        }
    review["time_on_task"] = _time_on_task(db, filters)

    edits = []
    for (preset, section), group in sorted(_group(rows, lambda r: (r.preset, r.section)).items()):
        finals = [r for r in group if r.final is not None and r.reader]
        if not finals:
            continue
        item = {"model": preset, "section": section, "n": len(finals),
                "edit_rate": float(np.mean([edit_rate(r.draft, r.final) for r in finals])),
                "unchanged_share": sum(1 for r in finals if r.final == r.draft) / len(finals)}
        keys = sorted({k for r in finals for k in r.metrics.get("draft_vs_final", {})})
        item["draft_vs_final"] = {k: float(np.mean([r.metrics["draft_vs_final"][k]
                                                    for r in finals
                                                    if k in r.metrics.get("draft_vs_final", {})]))
                                  for k in keys}
        edits.append(item)

    metric_agreement = []
    keys = sorted({k for r in ratings for k in r.metrics.get("draft_vs_reference", {})})
    report_level = _report_level(ratings)
    for key in keys:
        pairs = [(m[key], sig, tot) for m, sig, tot in report_level if key in m]
        if not pairs:
            continue
        for target, idx in (("significant errors", 1), ("all errors", 2)):
            a = kendall_tau_b([p[0] for p in pairs], [p[idx] for p in pairs])
            metric_agreement.append({"metric": key, "against": target, **asdict(a)})

    reader_agreement = _reader_agreement(ratings)
    headline = next((k for k in HEADLINE if any(k in r.metrics.get("draft_vs_reference", {})
                                                for r in rows)), None)
    scored = [r for r in unique.values() if headline and headline in r.metrics.get(
        "draft_vs_reference", {})]
    scored.sort(key=lambda r: r.metrics["draft_vs_reference"][headline])
    by_rating = sorted(ratings, key=lambda r: (r.likert, r.all_errors * -1))
    cases = {f"worst by {headline}": scored[:3], f"best by {headline}": scored[::-1][:3],
             "worst rated": by_rating[:3], "best rated": by_rating[::-1][:3]} if headline else {
             "worst rated": by_rating[:3], "best rated": by_rating[::-1][:3]}

    models = []
    for preset, model_id, revision in sorted({(r.preset, r.model_id, r.model_revision)
                                              for r in rows}):
        models.append({"preset": preset, "model_id": model_id, "revision": revision,
                       "studies": len({r.study_id for r in rows if r.preset == preset})})
    return Evaluation(
        generated_at=datetime.now(UTC).isoformat(timespec="seconds"),
        filters={k: (str(v) if v is not None else None) for k, v in asdict(filters).items()},
        rows=rows, models=models,
        sources=dict(Counter(src for _, src in {(r.study_id, r.source) for r in rows})),
        readers=sorted({r.reader for r in rows if r.reader}),
        automatic=automatic, paired=paired, unavailable=unavailable, review=review,
        edits=edits, metric_agreement=metric_agreement, reader_agreement=reader_agreement,
        cases=cases)


def _time_on_task(db: Database, filters: ExportFilters) -> dict[str, Any]:
    """Mean active minutes of rated studies that had a draft vs those that had none."""
    with db.read() as s:
        drafted = set(s.scalars(select(Draft.study_id).where(Draft.error.is_(None))))
        stmt = (select(WorklistItem.study_id, WorklistItem.active_seconds, Reader.name,
                       Study.source)
                .join(Reader, Reader.id == WorklistItem.reader_id)
                .join(Study, Study.id == WorklistItem.study_id)
                .where(WorklistItem.status == "done"))
        items = [(sid, sec) for sid, sec, name, src in s.execute(stmt)
                 if (not filters.reader or name == filters.reader)
                 and (not filters.source or src == filters.source)]
    with_draft = [sec / 60 for sid, sec in items if sid in drafted]
    without = [sec / 60 for sid, sec in items if sid not in drafted]
    return {"with_draft_minutes": float(np.mean(with_draft)) if with_draft else None,
            "n_with_draft": len(with_draft),
            "without_draft_minutes": float(np.mean(without)) if without else None,
            "n_without_draft": len(without)}


def _group(rows, key):
    out: dict[Any, list[ReviewRow]] = defaultdict(list)
    for r in rows:
        out[key(r)].append(r)
    return out


def _report_level(ratings: list[ReviewRow]) -> list[tuple[dict[str, float], int, int]]:
    """(mean of the sections' draft-vs-reference metrics, significant, all errors) per rated
    report, so each radiologist judgement counts once (ReXVal scores whole reports)."""
    out = []
    for (_, _, _), rows in _group(ratings, lambda r: (r.study_id, r.reader, r.preset)).items():
        keys = {k for r in rows for k in r.metrics.get("draft_vs_reference", {})}
        values = {k: float(np.mean([r.metrics["draft_vs_reference"][k] for r in rows
                                    if k in r.metrics.get("draft_vs_reference", {})]))
                  for k in keys}
        out.append((values, rows[0].significant_errors, rows[0].all_errors))
    return out


def _reader_agreement(ratings: list[ReviewRow]) -> list[dict[str, Any]]:
    readers = sorted({r.reader for r in ratings})
    units = sorted({(r.study_id, r.preset) for r in ratings})
    if len(readers) < 2 or not units:
        return []
    col = {u: i for i, u in enumerate(units)}
    likert = np.full((len(readers), len(units)), np.nan)
    errors = np.full((len(readers), len(units)), np.nan)
    for r in ratings:
        i, j = readers.index(r.reader), col[(r.study_id, r.preset)]
        likert[i, j], errors[i, j] = r.likert, r.all_errors
    out = [{"on": "Likert", **asdict(krippendorff_alpha(likert, "ordinal"))},
           {"on": "error count", **asdict(krippendorff_alpha(errors, "ratio"))}]
    complete = ~np.isnan(likert).any(axis=0)
    if len(readers) == 2 and complete.sum() >= 2:
        a: Agreement = cohen_kappa(likert[0, complete].astype(int).tolist(),
                                   likert[1, complete].astype(int).tolist(), [1, 2, 3, 4, 5])
        out.append({"on": "Likert", **asdict(a)})
    elif complete.sum() >= 2:
        out.append({"on": "Likert", **asdict(fleiss_kappa(likert[:, complete].T))})
    return out


# -- writers ---------------------------------------------------------------------------------
CSV_FIELDS = ["study_key", "source", "split", "section", "preset", "model_id", "model_revision",
              "reader", "draft", "final", "reference", "likert", "acceptable", "comment",
              "active_seconds", "rated_at"]


def _flat(row: ReviewRow) -> dict[str, Any]:
    out = {k: getattr(row, k) for k in CSV_FIELDS}
    for category in REXVAL_CATEGORIES:
        for kind in ("significant", "insignificant"):
            out[f"{category}_{kind}"] = (row.errors.get(category) or {}).get(kind) \
                if row.errors else None
    for comparison, values in row.metrics.items():
        for key, value in values.items():
            out[f"{comparison}.{key}"] = value
    return out


def write_json(evaluation: Evaluation, path: Path) -> None:
    data = asdict(evaluation)
    data["rows"] = [_flat(r) | {"errors": r.errors} for r in evaluation.rows]
    data["cases"] = {k: [_flat(r) for r in v] for k, v in evaluation.cases.items()}
    _atomic(path, json.dumps(data, indent=2, default=str))


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def neutralise_cell(value: Any) -> Any:
    """OWASP's defence against CSV injection: a text cell starting with = + - @ tab or CR is
    prefixed with a single quote, so a spreadsheet shows it as text instead of running it.
    (Every text cell is also quoted, and embedded quotes doubled, by the csv writer.)"""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def write_csv(evaluation: Evaluation, path: Path) -> None:
    flat = [{k: neutralise_cell(v) for k, v in _flat(r).items()} for r in evaluation.rows]
    fields = list(dict.fromkeys(k for row in flat for k in row)) or CSV_FIELDS
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=[neutralise_cell(f) for f in fields],
                                quoting=csv.QUOTE_NONNUMERIC)
        writer.writeheader()
        writer.writerows({neutralise_cell(k): v for k, v in row.items()} for row in flat)
    tmp.replace(path)


_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(text: str, fallback: str = "export") -> str:
    """A file-name part from free text (a preset name, a stem): no separators, no `..`,
    no leading dot, at most 64 characters."""
    cleaned = _UNSAFE_NAME.sub("_", text).strip("._")[:64]
    return cleaned or fallback


def write_predictions(evaluation: Evaluation, folder: Path, stem: str) -> list[Path]:
    """RRG24-style files: `<stem>.<model>.<section>.txt`, one generated section per line, in
    the order of `<stem>.<model>.<section>.ids.txt` (studies sorted by source, study key)."""
    written = []
    unique: dict[tuple[str, str], dict[tuple[str, str], str]] = defaultdict(dict)
    for r in evaluation.rows:
        unique[(r.preset, r.section)][(r.source, r.study_key)] = r.draft
    for (preset, section), texts in sorted(unique.items()):
        order = sorted(texts)
        base = folder / f"{safe_name(stem)}.{safe_name(preset, 'model')}.{section}"
        lines = [" ".join(texts[k].split()) for k in order]
        texts_file, ids_file = Path(f"{base}.txt"), Path(f"{base}.ids.txt")
        _atomic(texts_file, "\n".join(lines) + "\n")
        _atomic(ids_file, "\n".join(f"{s}/{k}" for s, k in order) + "\n")
        written += [texts_file, ids_file]
    return written


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def export(db: Database, fmt: str, out: Path, filters: ExportFilters | None = None,
           metrics: Sequence[Metric] | None = None, n_resamples: int = 1000) -> list[Path]:
    """Write the report in `fmt` (html, csv or json) to `out`, plus the RRG24 prediction files
    beside it; returns every file written."""
    if fmt not in ("html", "csv", "json"):
        raise ValueError(f"unknown export format {fmt!r} (html, csv or json)")
    evaluation = evaluate(db, filters, metrics, n_resamples)
    out = out.with_name(safe_name(out.stem) + out.suffix)
    out.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "json":
        write_json(evaluation, out)
    elif fmt == "csv":
        write_csv(evaluation, out)
    else:
        from app.services.report_html import render

        _atomic(out, render(evaluation))
    return [out, *write_predictions(evaluation, out.parent, out.stem)]


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
        self.purge()
        folder = Path(tempfile.mkdtemp(prefix="export-", dir=self.root))
        with self._lock:
            self._busy.add(folder)
        return folder

    def finished(self, folder: Path) -> None:
        """The export in `folder` is written: from now on it may be purged."""
        with self._lock:
            self._busy.discard(folder)
        if folder.exists():
            os.utime(folder)  # its age counts from the end of the export

    def purge(self, older_than_s: float | None = None) -> int:
        """Remove finished exports older than `older_than_s` (default `keep_s`)."""
        limit = time.time() - (self.keep_s if older_than_s is None else older_than_s)
        removed = 0
        with self._lock:
            for folder in self.root.glob("export-*"):
                if folder not in self._busy and folder.stat().st_mtime <= limit:
                    shutil.rmtree(folder, ignore_errors=True)
                    removed += 1
        return removed

    def discard(self, path: Path) -> None:
        """Remove the export folder holding `path` (after it was downloaded)."""
        path = Path(path).resolve()
        if path.parent.parent == self.root.resolve():
            shutil.rmtree(path.parent, ignore_errors=True)

    def close(self) -> None:
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
        every reader's and ask for the datasets' own study keys."""
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
        if self._spool is not None:
            self._spool.close()
