"""Score hypotheses against references with several metrics: cached per pair, per-sample and
corpus values, bootstrap CIs, per-group breakdown; unavailable metrics reported with reasons."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from rrg_review.core.progress import Progress
from rrg_review.metrics.base import Metric, MetricUnavailable, text_hash
from rrg_review.metrics.cache import ScoreCache
from rrg_review.metrics.stats import bootstrap_ci

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MetricRows:
    """One metric's rows for the scored pairs (what stats and breakdowns resample)."""

    metric: Metric
    matrix: np.ndarray


@dataclass(frozen=True)
class ScoreReport:
    n: int
    values: dict[str, float]  # corpus value per key
    per_sample: dict[str, list[float]]
    ci: dict[str, tuple[float, float]]
    unavailable: dict[str, str]  # key (or metric name) -> reason
    groups: dict[str, dict[str, float]] = field(default_factory=dict)  # group -> key -> value
    group_sizes: dict[str, int] = field(default_factory=dict)
    rows: dict[str, MetricRows] = field(default_factory=dict)  # metric name -> rows
    # key -> {"metric", "version", "direction", "reference"}: every output names them
    meta: dict[str, dict[str, str]] = field(default_factory=dict)


RETRIES = 1  # a metric that crashes (say a GPU out of memory) is freed and run once more


def metric_rows(metric: Metric, hyps: Sequence[str], refs: Sequence[str],
                cache: ScoreCache | None = None,
                progress: Progress | None = None,
                failures: dict[str, str] | None = None) -> np.ndarray:
    """The metric's matrix for all pairs: one lookup when these exact lists were scored before,
    else computing only the pairs missing from the cache. A composite metric (one with
    `components`) is the stack of its components' per-sample columns, each cached on its own.

    Args:
        metric: the metric to run.
        hyps, refs: the pairs, in order.
        cache: where payloads and matrices are kept between calls, if anywhere.
        progress: called with (pairs done, pairs to do).
        failures: this call's memory of metrics that failed (name -> reason), shared by a
            composite and its components so a failed component is not run twice in one call.

    Returns:
        One row per pair, one column per key.
    """
    components = getattr(metric, "components", None)
    if components:
        return _composite_rows(metric, components, hyps, refs, cache, progress,
                               {} if failures is None else failures)
    digest = corpus_digest(hyps, refs)
    model_id = metric.cache_id() if cache is not None else metric.model_id
    if cache is not None:
        known = cache.get_matrix(metric.name, metric.version, model_id, digest)
        if known is not None and len(known) == len(hyps):
            return known
    keys = [(text_hash(h), text_hash(r)) for h, r in zip(hyps, refs, strict=True)]
    found = cache.get_many(metric.name, metric.version, model_id, keys) if cache else {}
    missing = list(dict.fromkeys(k for k in keys if k not in found))
    if missing:
        texts: dict[tuple[str, str], tuple[str, str]] = {}
        for k, h, r in zip(keys, hyps, refs, strict=True):
            texts.setdefault(k, (h, r))
        chunk = metric.chunk or len(missing)
        for start in range(0, len(missing), chunk):
            part = missing[start:start + chunk]
            payloads = metric.compute([texts[k][0] for k in part], [texts[k][1] for k in part])
            fresh = dict(zip(part, payloads, strict=True))
            found.update(fresh)
            if cache is not None:
                cache.put_many(metric.name, metric.version, model_id, fresh)
            if progress:
                progress(min(start + chunk, len(missing)), len(missing))
    m = metric.matrix([found[k] for k in keys])
    if cache is not None:
        cache.put_matrix(metric.name, metric.version, model_id, digest, m)
    return m


def _composite_rows(metric: Metric, components: Sequence[Metric], hyps: Sequence[str],
                    refs: Sequence[str], cache: ScoreCache | None,
                    progress: Progress | None, failures: dict[str, str]) -> np.ndarray:
    columns = []
    for part in components:
        try:
            m = attempt_rows(part, hyps, refs, cache, progress, failures)
        except MetricUnavailable as exc:
            raise MetricUnavailable(f"needs {part.keys[0]}, which is unavailable: {exc}") from exc
        columns.append(part.per_sample(m)[part.keys[0]])
    return np.column_stack(columns) if columns else np.zeros((len(hyps), 0))


def attempt_rows(metric: Metric, hyps: Sequence[str], refs: Sequence[str],
                 cache: ScoreCache | None, progress: Progress | None,
                 failures: dict[str, str]) -> np.ndarray:
    """`metric_rows`, with a crash retried once after freeing the metric's model; what still
    fails is remembered in `failures` for this call only (the next call tries again: a GPU out
    of memory now says nothing about the next export).

    Args:
        metric: the metric to run.
        hyps, refs: the pairs, in order.
        cache: the score cache, if any.
        progress: called with (pairs done, pairs to do).
        failures: name -> reason of the metrics that failed earlier in this call.

    Returns:
        The metric's matrix.

    Raises:
        MetricUnavailable: the metric cannot run here, or failed every attempt; says why.
    """
    if metric.name in failures:
        raise MetricUnavailable(failures[metric.name])
    ok, why = metric.available()
    if not ok:
        failures[metric.name] = why
        raise MetricUnavailable(why)
    last: Exception | None = None
    for attempt in range(1 + RETRIES):
        try:
            return metric_rows(metric, hyps, refs, cache, progress, failures)
        except MetricUnavailable as exc:
            log.warning("metric %s is unavailable: %s", metric.name, exc)
            failures[metric.name] = str(exc)
            raise
        except Exception as exc:
            last = exc
            log.warning("metric %s failed on %d pairs (attempt %d of %d)", metric.name,
                        len(hyps), attempt + 1, 1 + RETRIES, exc_info=True)
            metric.close()  # free its model (and GPU memory); the next attempt reloads it
    reason = f"failed to run: {type(last).__name__}: {last}"
    failures[metric.name] = reason
    raise MetricUnavailable(reason) from last


def corpus_digest(hyps: Sequence[str], refs: Sequence[str]) -> str:
    """One hash of the exact ordered pairs (JSON keeps the texts' boundaries unambiguous), so a
    whole scored list is found again in the cache with one lookup.

    Args:
        hyps, refs: the pairs, in order (order and duplicates change the digest).

    Returns:
        The SHA-256 as 64 hex digits.
    """
    import hashlib
    import json

    return hashlib.sha256(json.dumps([list(hyps), list(refs)]).encode("utf-8")).hexdigest()


def score(hyps: Sequence[str], refs: Sequence[str], metrics: Sequence[Metric],
          cache: ScoreCache | None = None, groups: Sequence[str] | None = None,
          n_resamples: int = 1000, progress: Progress | None = None) -> ScoreReport:
    """Score the pairs with every metric, one report for all of them: a metric that cannot run
    (or keeps crashing) is listed with its reason while the others are still scored, and a
    failure is remembered only for this call.

    Args:
        hyps: generated reports, one per pair.
        refs: reference reports, in the same order.
        metrics: the metrics to run (as `registry.build` returns them).
        cache: the score cache, if any; only missing pairs are computed.
        groups: one group label per pair for the per-group breakdown; None: no breakdown.
        n_resamples: bootstrap resamples for the confidence intervals; 0: no intervals.
        progress: called with (pairs done, pairs to do) while a metric computes.

    Returns:
        Corpus and per-sample values, CIs, group values and sizes, each metric's rows, what
        each key is (metric, version, direction) and the unavailable keys with their reasons.

    Raises:
        ValueError: the lists differ in length, or `groups` does not have one label per pair.
    """
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    if groups is not None and len(groups) != len(hyps):
        raise ValueError("one group label per pair is needed")
    values: dict[str, float] = {}
    per_sample: dict[str, list[float]] = {}
    ci: dict[str, tuple[float, float]] = {}
    unavailable: dict[str, str] = {}
    by_group: dict[str, dict[str, float]] = {}
    rows: dict[str, MetricRows] = {}
    meta = {key: describe(metric, key) for metric in metrics for key in metric.keys}
    failures: dict[str, str] = {}  # this call's failures: the next call tries again
    for metric in metrics:
        try:
            m = attempt_rows(metric, hyps, refs, cache, progress, failures)
        except MetricUnavailable as exc:  # unavailable or broken: report why, score the others
            for key in metric.keys:
                unavailable[key] = str(exc)
            continue
        rows[metric.name] = MetricRows(metric, m)
        values.update(metric.corpus(m))
        per_sample.update({k: v.tolist() for k, v in metric.per_sample(m).items()})
        if n_resamples:
            ci.update(bootstrap_ci(m, metric.corpus, metric.keys, n_resamples))
        if groups is not None:
            labels = np.asarray(groups)
            for g in sorted(set(groups)):
                by_group.setdefault(g, {}).update(metric.corpus(m[labels == g]))
    sizes = {g: int(sum(1 for x in groups if x == g)) for g in by_group} if groups else {}
    return ScoreReport(len(hyps), values, per_sample, ci, unavailable, by_group, sizes, rows,
                       meta)


def describe(metric: Metric, key: str) -> dict[str, str]:
    """What a reader of a number needs: which metric and version, and which way is better.

    Args:
        metric: the metric that reports the number.
        key: one of its keys.

    Returns:
        {"metric", "version", "direction" (e.g. "higher is better"), "reference"}.
    """
    return {"metric": metric.name, "version": metric.version,
            "direction": f"{metric.direction(key)} is better", "reference": metric.reference}
