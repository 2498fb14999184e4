"""Scoring files of predictions against references: what `rrg-review score` reports.

The command line reads the files and prints; this module computes: the corpus values with
their bootstrap intervals, the values per pair and per source, the metrics that could not run
and why, the paired randomization test against a second system (`--compare`) and the parity
against expected per-pair values (`--expect`). The result is a frozen `ScoreSummary` whose
`to_json()` is the `--out` file.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rrg_review.core.progress import Progress
from rrg_review.metrics.base import Metric, MetricUnavailable
from rrg_review.metrics.expect import KeyParity, compare
from rrg_review.metrics.pairs import Pairs
from rrg_review.metrics.scoring import ScoreReport, attempt_rows, score

log = logging.getLogger(__name__)

MIN_PAIRED_RESAMPLES = 200  # a randomization test with fewer gives p-values too coarse to read
SCORED_AS_EMPTY = ("score (as the reference scorer: an empty reference is scored as an empty "
                   "text)")


@dataclass(frozen=True)
class PairedTest:
    """One key's paired approximate-randomization test: main predictions vs --compare."""

    predictions: float
    compare: float
    difference: float
    p_value: float
    n: int

    def to_json(self) -> dict[str, float | int]:
        return {"predictions": self.predictions, "compare": self.compare,
                "difference": self.difference, "p_value": self.p_value, "n": self.n}


@dataclass(frozen=True)
class PairedTests:
    """The tests by key, and the metrics whose run on the --compare side failed (with why)."""

    tests: Mapping[str, PairedTest]
    failures: Mapping[str, str]


@dataclass(frozen=True)
class Expectation:
    """`--expect`: the file, the tolerance, and each key's largest difference."""

    file: str
    tolerance: float
    parity: tuple[KeyParity, ...]

    def passed(self, key: KeyParity) -> bool:
        return key.compared > 0 and key.max_abs_diff <= self.tolerance

    @property
    def failed(self) -> bool:
        """No key to compare, or a key over the tolerance."""
        return not self.parity or not all(self.passed(p) for p in self.parity)

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "tolerance": self.tolerance,
                "keys": {p.key: {"compared": p.compared, "max_abs_diff": p.max_abs_diff,
                                 "worst_id": p.worst_id, "missing": p.missing}
                         for p in self.parity}}


@dataclass(frozen=True)
class ScoreSummary:
    """What one `score` run reports, restricted to the keys asked for."""

    n: int
    section: str
    metrics: Mapping[str, float]
    metric_info: Mapping[str, Mapping[str, str]]
    ci: Mapping[str, tuple[float, float]]
    per_sample: tuple[Mapping[str, Any], ...]
    unavailable: Mapping[str, str]
    by_source: Mapping[str, Mapping[str, float]]
    empty_policy: str  # "score" or "skip"
    empty_ids: tuple[str, ...]  # ids whose reference is empty (skipped or scored as empty)
    paired: PairedTests | None = None
    expect: Expectation | None = None

    def to_json(self) -> dict[str, Any]:
        """The `--out` document (values may be NaN: the writer turns them into null)."""
        out: dict[str, Any] = {
            "n": self.n, "section": self.section, "metrics": dict(self.metrics),
            "metric_info": {k: dict(v) for k, v in self.metric_info.items()},
            "ci": {k: list(v) for k, v in self.ci.items()},
            "per_sample": [dict(row) for row in self.per_sample],
            "unavailable": dict(self.unavailable),
            "by_source": {g: dict(v) for g, v in self.by_source.items()},
            "empty_references": (
                {"policy": "skip", "skipped": list(self.empty_ids)}
                if self.empty_policy == "skip"
                else {"policy": SCORED_AS_EMPTY, "scored": list(self.empty_ids)}),
        }
        if self.paired is not None:
            out["paired"] = {k: t.to_json() for k, t in self.paired.tests.items()}
        if self.expect is not None:
            out["expect"] = self.expect.to_json()
        return out


def requested_keys(names: Sequence[str] | None, metrics: Sequence[Metric]) -> list[str]:
    """The keys to show: every key of a set or metric asked for, or just a key asked for."""
    from rrg_review.metrics.registry import SETS, resolve_names

    built = dict(zip(resolve_names(list(names) if names else None), metrics, strict=True))
    keys: list[str] = []
    for raw in names or list(built):
        for item in SETS.get(raw, (raw,)):
            chosen = built[item].keys if item in built else (item,)
            keys += [k for k in chosen if k not in keys]
    return keys


def paired_tests(report: ScoreReport, other_hyps: Sequence[str], refs: Sequence[str],
                 cache: Any, n_resamples: int) -> PairedTests:
    """Paired approximate-randomization test of the scored predictions against `other_hyps`.

    A metric whose run on the other side fails (retried once, like an export's) is listed in
    `failures` with the reason while the other metrics' tests go on."""
    from rrg_review.metrics.stats import paired_test

    tests: dict[str, PairedTest] = {}
    failures: dict[str, str] = {}
    for rows in report.rows.values():
        try:
            other = attempt_rows(rows.metric, other_hyps, refs, cache, None, failures)
        except MetricUnavailable:
            continue  # in `failures` with its reason
        for r in paired_test(rows.matrix, other, rows.metric.corpus, rows.metric.keys,
                             n_resamples=max(n_resamples, MIN_PAIRED_RESAMPLES)):
            tests[r.key] = PairedTest(r.a, r.b, r.difference, r.p_value, r.n)
    return PairedTests(tests, failures)


def score_pairs(pairs: Pairs, names: Sequence[str] | None, metrics: Sequence[Metric],
                cache: Any, *, section: str, empty_policy: str, n_resamples: int,
                progress: Progress | None = None,
                compare_hyps: Sequence[str] | None = None,
                expected: Mapping[str, Mapping[str, float]] | None = None,
                expect_file: Path | None = None,
                expect_tolerance: float = 1e-5) -> ScoreSummary:
    """Score `pairs` with `metrics` and gather what `rrg-review score` reports (see the
    module's docstring); `compare_hyps` adds the paired tests, `expected` the parity."""
    report = score(pairs.hyps, pairs.refs, metrics, cache, pairs.sources,
                   n_resamples=n_resamples, progress=progress)
    if progress is not None:
        progress(-1, None)
    requested = requested_keys(names, metrics)
    keep = [k for k in requested if k in report.values]
    unavailable = {k: v for k, v in report.unavailable.items() if k in requested or not names}
    paired = None
    if compare_hyps is not None:
        paired = paired_tests(report, compare_hyps, pairs.refs, cache, n_resamples)
        unavailable |= {f"{name} (paired test)": why for name, why in paired.failures.items()}
    expect = None
    if expected is not None:
        expect = Expectation(str(expect_file), expect_tolerance,
                             tuple(compare(expected, pairs.ids, report.per_sample)))
    return ScoreSummary(
        n=report.n, section=section,
        metrics={k: report.values[k] for k in keep},
        metric_info={k: report.meta[k] for k in requested if k in report.meta},
        ci={k: report.ci[k] for k in keep if k in report.ci},
        per_sample=tuple({"id": i, **{k: report.per_sample[k][j] for k in keep
                                      if k in report.per_sample}}
                         for j, i in enumerate(pairs.ids)),
        unavailable=unavailable,
        by_source={g: {k: v[k] for k in keep if k in v} | {"n": report.group_sizes[g]}
                   for g, v in report.groups.items()},
        empty_policy=empty_policy,
        empty_ids=tuple(pairs.skipped if empty_policy == "skip" else pairs.empty_references),
        paired=paired, expect=expect)
