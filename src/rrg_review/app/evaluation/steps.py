"""The evaluation of a review session, one small step per result: score the rows, automatic
metrics per model and section, paired comparisons between models, the readers' ratings, how
much they edited, and how metrics and readers agree. Each step returns the typed records of
`evaluation_results`; `evaluate` strings them together."""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import asdict, replace
from datetime import UTC, datetime
from typing import TypeVar

import numpy as np
from sqlalchemy import select

from rrg_review.app.evaluation.aids import flag_outcomes, suggestion_agreements
from rrg_review.app.evaluation.results import (
    COMPARISONS,
    AutomaticResult,
    CaseList,
    EditSummary,
    Evaluation,
    ExportFilters,
    MetricAgreement,
    ModelInfo,
    ModelReview,
    PairedComparison,
    ReaderAgreement,
    ReviewRow,
    ReviewSummary,
    TimeOnTask,
)
from rrg_review.app.evaluation.rows import collect_rows
from rrg_review.core.vocabulary import ERROR_KINDS, REXVAL_CATEGORIES, SECTIONS
from rrg_review.db.engine import Database
from rrg_review.db.metric_cache import DatabaseScoreCache
from rrg_review.db.models import Draft, Reader, Study, WorklistItem
from rrg_review.metrics.agreement import (
    Agreement,
    cohen_kappa,
    fleiss_kappa,
    kendall_tau_b,
    krippendorff_alpha,
)
from rrg_review.metrics.base import Metric, MetricUnavailable, by_reason
from rrg_review.metrics.cache import ScoreCache
from rrg_review.metrics.edits import word_error_rate
from rrg_review.metrics.registry import MetricConfig, build
from rrg_review.metrics.scoring import attempt_rows, score
from rrg_review.metrics.stats import paired_test

HEADLINE = ("radgraph_partial", "bertscore", "rougeL", "bleu4")  # first available ranks cases
_SIDES = {"draft_vs_reference": ("draft", "reference"),
          "final_vs_reference": ("final", "reference"),
          "draft_vs_final": ("draft", "final")}
log = logging.getLogger(__name__)
K = TypeVar("K", bound=Hashable)
ModelSection = dict[tuple[str, str], list[ReviewRow]]


def evaluate(db: Database, filters: ExportFilters | None = None,
             metrics: Sequence[Metric] | None = None, n_resamples: int = 1000) -> Evaluation:
    """The whole evaluation of the rows that `filters` select.

    Args:
        db: the database.
        filters: what to cover (default everything).
        metrics: the metrics to run (default the available set, no downloads).
        n_resamples: bootstrap resamples for confidence intervals (0: none).
    Returns:
        Every result the writers need.
    """
    filters = filters or ExportFilters()
    metrics = list(metrics) if metrics is not None else build(None, MetricConfig(download=False))
    cache = DatabaseScoreCache(db)
    rows, unavailable = score_rows(collect_rows(db, filters), metrics, cache)
    for why, keys in by_reason(unavailable).items():
        log.warning("evaluation without %s: %s", ", ".join(keys), why)
    unique = unique_drafts(rows)
    by_model_section = with_reference(unique)
    ratings = rated_once(rows)
    headline, cases = pick_cases(rows, unique, ratings)
    return Evaluation(
        generated_at=datetime.now(UTC).isoformat(timespec="seconds"),
        filters={k: (str(v) if v is not None else None) for k, v in asdict(filters).items()},
        rows=tuple(rows), models=model_infos(rows),
        sources=dict(sorted(Counter(src for _, src in {(r.study_id, r.source)
                                                        for r in rows}).items())),
        readers=tuple(sorted({r.reader for r in rows if r.reader})),
        automatic=automatic_results(by_model_section, metrics, cache, n_resamples),
        paired=paired_comparisons(by_model_section, metrics, cache, n_resamples, unavailable),
        unavailable=unavailable,
        review=ReviewSummary(review_by_model(ratings), time_on_task(db, filters)),
        edits=edit_summaries(rows), metric_agreement=metric_agreements(ratings),
        reader_agreement=reader_agreements(ratings), cases=cases, headline=headline,
        suggestion_agreement=suggestion_agreements(ratings), flag_outcomes=flag_outcomes(rows))


def score_rows(rows: Sequence[ReviewRow], metrics: Sequence[Metric], cache: ScoreCache
               ) -> tuple[list[ReviewRow], dict[str, str]]:
    """Each row with its per-sample metrics for the comparisons it has both texts of, and the
    metrics that could not run (key -> reason).

    A comparison is scored for a row only when its hypothesis is not None and its reference
    side is non-empty; no bootstrap (per-sample values only).

    Args:
        rows: the review rows.
        metrics: the metrics to run.
        cache: the score cache.

    Returns:
        The rows, in order, with `metrics` set (comparison -> key -> value), and the
        unavailable keys with their reasons.
    """
    filled: list[dict[str, dict[str, float]]] = [{} for _ in rows]
    unavailable: dict[str, str] = {}
    for name in COMPARISONS:
        hyp, ref = _SIDES[name]
        chosen = [i for i, r in enumerate(rows)
                  if getattr(r, hyp) is not None and getattr(r, ref)]
        if not chosen:
            continue
        report = score([getattr(rows[i], hyp) for i in chosen],
                       [getattr(rows[i], ref) for i in chosen], metrics, cache, n_resamples=0)
        unavailable.update(report.unavailable)
        for j, i in enumerate(chosen):
            filled[i][name] = {k: v[j] for k, v in report.per_sample.items()}
    return [replace(r, metrics=m) for r, m in zip(rows, filled, strict=True)], unavailable


def unique_drafts(rows: Iterable[ReviewRow]) -> list[ReviewRow]:
    """One row per (study, section, model): automatic metrics are not weighted by readers.

    Args:
        rows: review rows (several readers may repeat a draft).

    Returns:
        The first row of each (study, section, model), in first-seen order.
    """
    unique: dict[tuple[int, str, str], ReviewRow] = {}
    for r in rows:
        unique.setdefault((r.study_id, r.section, r.preset), r)
    return list(unique.values())


def with_reference(unique: Iterable[ReviewRow]) -> ModelSection:
    """(model, section) -> its drafts that have a reference, in study-key order.

    Args:
        unique: one row per draft (`unique_drafts`); rows keep the order given, so the
            study-key order is the caller's.

    Returns:
        (model, section) -> rows with a non-empty reference, sorted by (model, section).
    """
    out: ModelSection = defaultdict(list)
    for r in unique:
        if r.reference:
            out[(r.preset, r.section)].append(r)
    return dict(sorted(out.items()))


def automatic_results(by_model_section: ModelSection, metrics: Sequence[Metric],
                      cache: ScoreCache, n_resamples: int) -> tuple[AutomaticResult, ...]:
    """Corpus value, bootstrap CI and n per model, section and metric key; per source too
    when there is more than one.

    Args:
        by_model_section: (model, section) -> drafts with a reference (`with_reference`).
        metrics: the metrics to run.
        cache: the score cache.
        n_resamples: bootstrap resamples for the CIs (0: no CI).

    Returns:
        One result per model, section and key for source "all" (CI (None, None) when not
        computed), plus one per source, without CI, when the group spans several sources.
    """
    out: list[AutomaticResult] = []
    for (preset, section), group in by_model_section.items():
        report = score([r.draft for r in group], [r.reference or "" for r in group], metrics,
                       cache, groups=[r.source for r in group], n_resamples=n_resamples)
        for key, value in report.values.items():
            low, high = report.ci.get(key, (None, None))
            out.append(AutomaticResult(preset, section, "all", key, value, (low, high),
                                       report.n))
            if len(report.groups) > 1:
                out += [AutomaticResult(preset, section, src, key, values[key], (None, None),
                                        report.group_sizes[src])
                        for src, values in report.groups.items()]
    return tuple(out)


def paired_comparisons(by_model_section: ModelSection, metrics: Sequence[Metric],
                       cache: ScoreCache, n_resamples: int,
                       unavailable: dict[str, str]) -> tuple[PairedComparison, ...]:
    """Every pair of models on the studies both drafted with a reference (at least two), with
    the metrics that scored in this evaluation (one that failed earlier in it is skipped).
    A metric that crashes here (retried once, as in scoring) is added to `unavailable` with
    its reason and the other metrics' tests go on: one crash does not fail the export.

    Args:
        by_model_section: (model, section) -> drafts with a reference.
        metrics: the metrics to run.
        cache: the score cache (these pairs were usually scored already).
        n_resamples: paired bootstrap resamples (at least 200 are used).
        unavailable: key -> reason of the keys that failed earlier in this evaluation; the
            keys of a metric that fails in these tests are added to it.

    Returns:
        One paired test per section, model pair and metric key; none for a pair with fewer
        than two common studies, none for a metric that failed.
    """
    presets = sorted({p for p, _ in by_model_section})
    out: list[PairedComparison] = []
    failures: dict[str, str] = {}  # metric name -> reason, for all pairs of this call
    for section in SECTIONS:
        for i, a in enumerate(presets):
            for b in presets[i + 1:]:
                out += _paired(section, a, b, by_model_section, metrics, cache, n_resamples,
                               unavailable, failures)
    for metric in metrics:
        if metric.name in failures:
            for key in metric.keys:
                unavailable.setdefault(key, f"paired comparison: {failures[metric.name]}")
    return tuple(out)


def _paired(section: str, a: str, b: str, by_model_section: ModelSection,
            metrics: Sequence[Metric], cache: ScoreCache,
            n_resamples: int, unavailable: Mapping[str, str],
            failures: dict[str, str]) -> list[PairedComparison]:
    ra = {r.study_id: r for r in by_model_section.get((a, section), [])}
    rb = {r.study_id: r for r in by_model_section.get((b, section), [])}
    common = sorted(set(ra) & set(rb))
    if len(common) < 2:
        return []
    refs = [ra[s].reference or "" for s in common]
    out = []
    for metric in metrics:
        if metric.keys[0] in unavailable or not metric.available()[0]:
            continue
        try:
            ma = attempt_rows(metric, [ra[s].draft for s in common], refs, cache, None,
                              failures)
            mb = attempt_rows(metric, [rb[s].draft for s in common], refs, cache, None,
                              failures)
        except MetricUnavailable:  # in `failures` with its reason; the other metrics go on
            continue
        out += [PairedComparison(section, a, b, res)
                for res in paired_test(ma, mb, metric.corpus, metric.keys,
                                       n_resamples=max(200, n_resamples))]
    return out


def rated_once(rows: Iterable[ReviewRow]) -> list[ReviewRow]:
    """Ratings are per study: one row per (study, reader, model) that has a Likert score.

    Args:
        rows: review rows (one per section).

    Returns:
        The first row of each rated (study, reader, model); rows without a reader or Likert
        score are left out.
    """
    per_rating: dict[tuple[int, str, str], ReviewRow] = {}
    for r in rows:
        if r.reader and r.likert is not None:
            per_rating.setdefault((r.study_id, r.reader, r.preset), r)
    return list(per_rating.values())


def review_by_model(ratings: Sequence[ReviewRow]) -> dict[str, ModelReview]:
    """Likert distribution, accepted share, ReXVal error counts and active time per model.

    Args:
        ratings: one row per rating (`rated_once`).

    Returns:
        model -> its summary: Likert counts for "1".."5", the share marked acceptable, error
        totals per ReXVal category and kind, mean active minutes (missing time counts as 0).
        Empty for no ratings.
    """
    out = {}
    for preset in sorted({r.preset for r in ratings}):
        mine = [r for r in ratings if r.preset == preset]
        errors = {c: {k: sum((r.errors.get(c) or {}).get(k, 0) for r in mine)
                      for k in ERROR_KINDS} for c in REXVAL_CATEGORIES}
        out[preset] = ModelReview(
            ratings=len(mine),
            likert={str(v): sum(1 for r in mine if r.likert == v) for v in range(1, 6)},
            accepted_share=sum(1 for r in mine if r.acceptable) / len(mine),
            errors=errors,
            active_minutes_mean=float(np.mean([(r.active_seconds or 0) / 60 for r in mine])))
    return out


def time_on_task(db: Database, filters: ExportFilters) -> TimeOnTask:
    """Mean active minutes of rated studies that had a draft vs those that had none.

    Args:
        db: the database.
        filters: only its reader and source filters are applied here.

    Returns:
        Mean minutes and counts of "done" worklist items whose study has any successful
        draft (of any model, at any time) vs none; a mean is None when its group is empty.
    """
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
    return TimeOnTask(float(np.mean(with_draft)) if with_draft else None, len(with_draft),
                      float(np.mean(without)) if without else None, len(without))


def edit_summaries(rows: Sequence[ReviewRow]) -> tuple[EditSummary, ...]:
    """Per model and section: mean word error rate of the finals against their drafts, the
    share left unchanged, and the mean draft-vs-final metrics.

    Args:
        rows: scored review rows (`score_rows`).

    Returns:
        One summary per (model, section) with at least one reader's final text, sorted;
        the word error rate is `metrics.edits.word_error_rate` (0 = accepted as is).
    """
    out = []
    for (preset, section), group in sorted(_group(rows, lambda r: (r.preset, r.section))
                                           .items()):
        finals = [r for r in group if r.final is not None and r.reader]
        if not finals:
            continue
        keys = sorted({k for r in finals for k in r.metrics.get("draft_vs_final", {})})
        out.append(EditSummary(
            model=preset, section=section, n=len(finals),
            word_error_rate=float(np.mean([word_error_rate(r.draft, r.final or "")
                                           for r in finals])),
            unchanged_share=sum(1 for r in finals if r.final == r.draft) / len(finals),
            draft_vs_final={k: _mean_metric(finals, "draft_vs_final", k) for k in keys}))
    return tuple(out)


def metric_agreements(ratings: Sequence[ReviewRow]) -> tuple[MetricAgreement, ...]:
    """Kendall's tau-b of each draft-vs-reference metric against significant and all errors,
    one value per rated report.

    Args:
        ratings: one scored row per rating.

    Returns:
        Two agreements per draft-vs-reference key (against significant and against all
        errors); tau is NaN with no p-value for fewer than 3 reports or a constant column.
    """
    keys = sorted({k for r in ratings for k in r.metrics.get("draft_vs_reference", {})})
    report_level = _report_level(ratings)
    out = []
    for key in keys:
        pairs = [(m[key], sig, tot) for m, sig, tot in report_level if key in m]
        if not pairs:
            continue
        for target, idx in (("significant errors", 1), ("all errors", 2)):
            a = kendall_tau_b([p[0] for p in pairs], [p[idx] for p in pairs])
            out.append(MetricAgreement(key, target, **asdict(a)))
    return tuple(out)


def _report_level(ratings: Sequence[ReviewRow]) -> list[tuple[dict[str, float], int, int]]:
    """(mean of the sections' draft-vs-reference metrics, significant, all errors) per rated
    report, so each radiologist judgement counts once (ReXVal scores whole reports)."""
    out = []
    for rows in _group(ratings, lambda r: (r.study_id, r.reader, r.preset)).values():
        keys = {k for r in rows for k in r.metrics.get("draft_vs_reference", {})}
        values = {k: _mean_metric(rows, "draft_vs_reference", k) for k in keys}
        out.append((values, rows[0].significant_errors, rows[0].all_errors))
    return out


def reader_agreements(ratings: Sequence[ReviewRow]) -> tuple[ReaderAgreement, ...]:
    """Krippendorff's alpha on Likert and error counts; Cohen's (two readers) or Fleiss' kappa
    on the studies every reader rated.

    Args:
        ratings: one row per rating (`rated_once`); a unit is a (study, model).

    Returns:
        Alpha on Likert and on all-error counts, plus a kappa when at least two units were
        rated by every reader; empty with fewer than two readers.
    """
    readers = sorted({r.reader for r in ratings if r.reader})
    units = sorted({(r.study_id, r.preset) for r in ratings})
    if len(readers) < 2 or not units:
        return ()
    col = {u: i for i, u in enumerate(units)}
    likert = np.full((len(readers), len(units)), np.nan)
    errors = np.full((len(readers), len(units)), np.nan)
    for r in ratings:
        i, j = readers.index(r.reader or ""), col[(r.study_id, r.preset)]
        likert[i, j], errors[i, j] = r.likert, r.all_errors
    out = [_reader("Likert", krippendorff_alpha(likert, "ordinal")),
           _reader("error count", krippendorff_alpha(errors, "ratio"))]
    complete = ~np.isnan(likert).any(axis=0)
    if len(readers) == 2 and complete.sum() >= 2:
        out.append(_reader("Likert", cohen_kappa(likert[0, complete].astype(int).tolist(),
                                                 likert[1, complete].astype(int).tolist(),
                                                 [1, 2, 3, 4, 5])))
    elif complete.sum() >= 2:
        out.append(_reader("Likert", fleiss_kappa(likert[:, complete].T)))
    return tuple(out)


def _reader(on: str, agreement: Agreement) -> ReaderAgreement:
    return ReaderAgreement(on, **asdict(agreement))


def pick_cases(rows: Sequence[ReviewRow], unique: Sequence[ReviewRow],
               ratings: Sequence[ReviewRow]) -> tuple[str | None, tuple[CaseList, ...]]:
    """The headline metric (first of HEADLINE that was computed) and the three worst and best
    drafts by it, then the three worst and best rated.

    Args:
        rows: scored review rows (to find the headline metric).
        unique: one row per draft (ranked by the headline metric).
        ratings: one row per rating (ranked by Likert, then by more errors as worse).

    Returns:
        The headline key (None when none of HEADLINE was computed) and the case lists; the
        metric lists are left out without a headline. A list holds fewer than three rows
        when there are fewer.
    """
    headline = next((k for k in HEADLINE
                     if any(r.metric("draft_vs_reference", k) is not None for r in rows)), None)
    by_rating = sorted(ratings, key=lambda r: (r.likert or 0, r.all_errors * -1))
    cases = []
    if headline:
        scored = sorted((r for r in unique if r.metric("draft_vs_reference", headline)
                         is not None),
                        key=lambda r: r.metrics["draft_vs_reference"][headline])
        cases += [CaseList(f"worst by {headline}", tuple(scored[:3])),
                  CaseList(f"best by {headline}", tuple(scored[::-1][:3]))]
    cases += [CaseList("worst rated", tuple(by_rating[:3])),
              CaseList("best rated", tuple(by_rating[::-1][:3]))]
    return headline, tuple(cases)


def model_infos(rows: Sequence[ReviewRow]) -> tuple[ModelInfo, ...]:
    """Each model preset with its model id, revision and number of studies.

    Args:
        rows: review rows.

    Returns:
        One entry per distinct (preset, model id, revision), sorted; a preset drafted with
        two revisions appears twice, each counting all of the preset's studies.
    """
    return tuple(ModelInfo(preset, model_id, revision,
                           len({r.study_id for r in rows if r.preset == preset}))
                 for preset, model_id, revision in sorted(
                     {(r.preset, r.model_id, r.model_revision) for r in rows},
                     key=lambda t: (t[0], t[1], t[2] or "")))


def _mean_metric(rows: Iterable[ReviewRow], comparison: str, key: str) -> float:
    return float(np.mean([r.metrics[comparison][key] for r in rows
                          if key in r.metrics.get(comparison, {})]))


def _group(rows: Iterable[ReviewRow], key: Callable[[ReviewRow], K]
           ) -> dict[K, list[ReviewRow]]:
    out: dict[K, list[ReviewRow]] = defaultdict(list)
    for r in rows:
        out[key(r)].append(r)
    return out
