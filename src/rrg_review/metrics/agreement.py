"""Agreement statistics, each from a kept library: metric vs radiologists (Kendall's tau-b, the
ReXVal method, scipy) and between readers (Krippendorff's alpha, Cohen's and Fleiss' kappa)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np


@dataclass(frozen=True)
class Agreement:
    statistic: str
    value: float
    p_value: float | None
    n: int


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> Agreement:
    """Rank agreement of a metric with reader judgements (tau-b handles the many ties of
    error counts).

    Args:
        x, y: paired values, one per unit (e.g. a metric and an error count per report).

    Returns:
        Tau-b with its two-sided p-value and n; NaN and no p-value for fewer than 3 units
        or a constant side (tau is undefined then).
    """
    from scipy.stats import kendalltau

    a, b = np.asarray(x, float), np.asarray(y, float)
    if len(a) < 3 or np.all(a == a[0]) or np.all(b == b[0]):
        return Agreement("kendall_tau_b", float("nan"), None, len(a))
    res = kendalltau(a, b, variant="b")
    return Agreement("kendall_tau_b", float(res.statistic), float(res.pvalue), len(a))


def krippendorff_alpha(ratings: np.ndarray,
                       level: Literal["nominal", "ordinal", "interval", "ratio"]) -> Agreement:
    """`ratings`: readers x units, NaN where a reader did not rate a unit.

    Args:
        ratings: readers x units, NaN where a reader did not rate a unit.
        level: the scale: "ordinal" for Likert, "ratio" for counts.

    Returns:
        Alpha (no p-value) and n = the units rated by at least two readers; NaN when fewer
        than two such units or only one distinct value overall.
    """
    import krippendorff

    units = int(np.sum(np.sum(~np.isnan(ratings), axis=0) >= 2))
    if units < 2 or len(np.unique(ratings[~np.isnan(ratings)])) < 2:
        return Agreement(f"krippendorff_alpha_{level}", float("nan"), None, units)
    value = krippendorff.alpha(reliability_data=ratings, level_of_measurement=level)
    return Agreement(f"krippendorff_alpha_{level}", float(value), None, units)


def cohen_kappa(a: Sequence[int], b: Sequence[int], categories: Sequence[int],
                weights: str | None = "linear") -> Agreement:
    """Two readers' ratings of the same units (statsmodels; weighted for ordinal scales).

    Args:
        a, b: the two readers' ratings, one per unit, in the same order.
        categories: every possible rating, in scale order (e.g. 1..5).
        weights: "linear" or "quadratic" for a weighted kappa; None: unweighted.

    Returns:
        Kappa, its two-sided p-value (None when not finite) and n; NaN for fewer than two
        units.

    Raises:
        KeyError: a rating is not one of `categories`.
    """
    from statsmodels.stats.inter_rater import cohens_kappa

    index = {c: i for i, c in enumerate(categories)}
    table = np.zeros((len(categories), len(categories)))
    for x, y in zip(a, b, strict=True):
        table[index[x], index[y]] += 1
    if len(a) < 2:
        return Agreement("cohen_kappa", float("nan"), None, len(a))
    res = cohens_kappa(table, wt=weights) if weights else cohens_kappa(table)
    return Agreement(f"cohen_kappa_{weights or 'unweighted'}", float(res.kappa),
                     float(res.pvalue_two_sided) if np.isfinite(res.pvalue_two_sided) else None,
                     len(a))


def fleiss_kappa(ratings: np.ndarray) -> Agreement:
    """`ratings`: units x raters (every unit rated by the same number of raters).

    Args:
        ratings: units x raters, whole-number categories, no missing values (they are cast
            to int).

    Returns:
        Fleiss' kappa (no p-value) and n units; NaN for fewer than two units.
    """
    from statsmodels.stats.inter_rater import aggregate_raters
    from statsmodels.stats.inter_rater import fleiss_kappa as fk

    if len(ratings) < 2:
        return Agreement("fleiss_kappa", float("nan"), None, len(ratings))
    table, _ = aggregate_raters(ratings.astype(int))
    return Agreement("fleiss_kappa", float(fk(table, method="fleiss")), None, len(ratings))
