"""Confidence intervals and paired tests over per-pair metric rows (scipy does the resampling).

Every statistic is recomputed from resampled rows of a metric's matrix with the metric's own
`corpus`, so corpus-level metrics (BLEU-4, CheXbert F1) get correct intervals, not the mean of
per-sample values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Corpus = Callable[[np.ndarray], dict[str, float]]


def bootstrap_ci(m: np.ndarray, corpus: Corpus, keys: tuple[str, ...], n_resamples: int = 1000,
                 confidence: float = 0.95, seed: int = 0) -> dict[str, tuple[float, float]]:
    """Percentile bootstrap interval of each key's corpus value (scipy.stats.bootstrap).

    Rows of the metric matrix are resampled and `corpus` recomputed, so a non-mean corpus
    value (BLEU) gets a correct interval without rescoring.

    Args:
        m: the metric matrix, one row per pair.
        corpus: the metric's corpus function.
        keys: the keys to report.
        n_resamples: bootstrap resamples.
        confidence: the interval's level (0.95: 95 %).
        seed: the random seed (same inputs, same interval).

    Returns:
        key -> (low, high); (NaN, NaN) for fewer than two rows.
    """
    from scipy.stats import bootstrap

    n = len(m)
    if n < 2:
        return {k: (float("nan"), float("nan")) for k in keys}

    def statistic(idx: np.ndarray) -> np.ndarray:
        values = corpus(m[idx.astype(int)])
        return np.array([values[k] for k in keys])

    res = bootstrap((np.arange(n),), statistic, vectorized=False, n_resamples=n_resamples,
                    confidence_level=confidence, method="percentile",
                    random_state=np.random.default_rng(seed))
    lo, hi = np.atleast_1d(res.confidence_interval.low), np.atleast_1d(res.confidence_interval.high)
    return {k: (float(lo[i]), float(hi[i])) for i, k in enumerate(keys)}


@dataclass(frozen=True)
class PairedResult:
    key: str
    a: float
    b: float
    difference: float  # a - b
    p_value: float
    n: int


def paired_test(ma: np.ndarray, mb: np.ndarray, corpus: Corpus, keys: tuple[str, ...],
                n_resamples: int = 1000, seed: int = 0) -> list[PairedResult]:
    """Paired approximate randomization: swap the two systems' outputs per sample at random
    (scipy.stats.permutation_test, permutation_type='samples'), two-sided p of a - b.

    Args:
        ma: system a's metric matrix, one row per pair.
        mb: system b's matrix for the same pairs, in the same order.
        corpus: the metric's corpus function.
        keys: the keys to test.
        n_resamples: random swaps.
        seed: the random seed.

    Returns:
        Per key: both corpus values, a - b, the p-value and the number of pairs.

    Raises:
        ValueError: the two matrices differ in shape (not the same pairs).
    """
    from scipy.stats import permutation_test

    if ma.shape != mb.shape:
        raise ValueError("paired test needs the same samples scored for both systems")
    n = len(ma)
    both = np.vstack([ma, mb])
    base_a, base_b = corpus(ma), corpus(mb)
    out = []
    for key in keys:
        def statistic(x: np.ndarray, y: np.ndarray, key: str = key) -> float:
            return corpus(both[x.astype(int)])[key] - corpus(both[y.astype(int)])[key]

        res = permutation_test((np.arange(n), np.arange(n, 2 * n)), statistic,
                               permutation_type="samples", vectorized=False,
                               n_resamples=n_resamples, alternative="two-sided",
                               random_state=np.random.default_rng(seed))
        out.append(PairedResult(key, base_a[key], base_b[key], base_a[key] - base_b[key],
                                float(res.pvalue), n))
    return out
