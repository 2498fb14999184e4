"""Linear mixed-effects model with crossed random intercepts (reader, case), fitted by REML.

Why not statsmodels' MixedLM: it fits crossed effects as variance components of one group, and
on a 20-reader x 500-case x 2-session study (20,000 readings) one fit took 26 s under load
(use_sparse=True; lme4 0.3 s on the same data), once per outcome: a study with six outcomes
misses the one-minute target. Why this is sound: it is lme4's own formulation (Bates, Maechler,
Bolker & Walker 2015, J Stat Softw 67(1), section 3: the profiled REML deviance of the relative
covariance factor theta), evaluated from the model's cross-products only, so that one deviance
costs a Cholesky factorisation of the small readers' block, not a pass over the readings:

- b = Lambda(theta) u, u ~ N(0, sigma^2 I), Lambda diagonal (theta_k = sd_k / sigma for factor k);
- A = Lambda' Z'Z Lambda + I. With random intercepts, each factor's own block of Z'Z is diagonal
  (a reading has one level of each factor), so the largest factor (cases) is eliminated exactly
  and the rest (readers) is a dense Schur complement S: log|A| = sum log D + log|S|;
- with W = Lambda' Z' [X y] and T = [X y]' [X y], P = T - W' A^-1 W gives everything lme4 profiles:
  beta = P_XX^-1 P_Xy, r^2 = P_yy - P_Xy' beta, and the REML deviance
  log|A| + log|P_XX| + (n - p) (1 + log(2 pi r^2 / (n - p)));
- theta minimises it (scipy's bounded Powell search, theta >= 0; lme4 uses BOBYQA on the
  same criterion); sigma^2 = r^2 / (n - p), Var(beta) = sigma^2 P_XX^-1 (lme4's vcov), Wald
  intervals.

tests/test_reader_study_lme4.py checks estimates and intervals against lme4 itself (Rscript).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

logger = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
Z95 = 1.959963984540054  # the standard normal's 97.5 % quantile (Wald 95 % intervals)


@dataclass(frozen=True)
class Factor:
    """A grouping factor with a random intercept: each reading's level code, 0..len(levels)-1."""

    name: str
    codes: IntArray
    levels: tuple[str, ...]


@dataclass(frozen=True)
class Wald:
    """A fixed effect with its standard error, Wald 95 % interval and two-sided normal p."""

    estimate: float
    se: float
    lo: float
    hi: float
    p: float


@dataclass(frozen=True)
class MixedFit:
    """A fitted model: fixed effects (beta, Var(beta)), each factor's and the residual SD, the
    conditional modes of the random intercepts (per level) and the REML deviance at the optimum.
    """

    names: tuple[str, ...]
    beta: FloatArray
    vcov: FloatArray
    sd: dict[str, float]
    residual_sd: float
    modes: dict[str, FloatArray]
    theta: tuple[float, ...]
    reml_deviance: float
    n: int
    converged: bool

    def wald(self, name: str) -> Wald:
        i = self.names.index(name)
        estimate, se = float(self.beta[i]), float(math.sqrt(self.vcov[i, i]))
        return Wald(estimate, se, estimate - Z95 * se, estimate + Z95 * se,
                    _two_sided_p(estimate / se) if se > 0 else math.nan)


def _two_sided_p(z: float) -> float:
    return math.erfc(abs(z) / math.sqrt(2.0))


class _Crossprods:
    """The cross-products a deviance needs, computed once per fit (one pass over the readings).
    """

    def __init__(self, y: FloatArray, x: FloatArray, factors: Sequence[Factor]) -> None:
        from scipy import sparse

        xy = np.column_stack([x, y])
        self.n, self.p = x.shape
        self.t = xy.T @ xy
        self.sizes = [len(f.levels) for f in factors]
        self.counts = [np.bincount(f.codes, minlength=q).astype(float)
                       for f, q in zip(factors, self.sizes, strict=True)]
        self.zxy = [_sum_by(f.codes, xy, q) for f, q in zip(factors, self.sizes, strict=True)]
        # cross-counts of factor 0 with each later one, and among the later ones (dense: the
        # later factors are the small ones, readers)
        ones = np.ones(self.n)

        def cross(a: Factor, b: Factor, qa: int, qb: int) -> FloatArray:
            m = sparse.coo_matrix((ones, (a.codes, b.codes)), shape=(qa, qb)).toarray()
            return np.asarray(m, dtype=float)

        self.cross = {(i, j): cross(factors[i], factors[j], self.sizes[i], self.sizes[j])
                      for i in range(len(factors)) for j in range(i + 1, len(factors))}


def _sum_by(codes: IntArray, values: FloatArray, levels: int) -> FloatArray:
    """Z_k' values: the column sums of `values` per level of one factor."""
    out = np.zeros((levels, values.shape[1]))
    np.add.at(out, codes, values)
    return out


class _Deviance:
    """The profiled REML deviance as a function of theta, and what it implies at an optimum."""

    def __init__(self, cp: _Crossprods) -> None:
        self.cp = cp

    def blocks(self, theta: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray,
                                                 FloatArray, FloatArray]:
        """D (diagonal of factor 0's block), B (factor 0 x rest), S (the rest's Schur
        complement), W0 and Wr (Lambda' Z' [X y] split the same way)."""
        cp = self.cp
        d = theta[0] ** 2 * cp.counts[0] + 1.0
        w0 = theta[0] * cp.zxy[0]
        rest = range(1, len(cp.sizes))
        if not rest:
            empty = np.zeros((0, 0))
            return d, np.zeros((len(d), 0)), empty, w0, np.zeros((0, w0.shape[1]))
        b = np.hstack([theta[0] * theta[j] * cp.cross[(0, j)] for j in rest])
        e = np.diag(np.concatenate([theta[j] ** 2 * cp.counts[j] + 1.0 for j in rest]))
        offsets = np.cumsum([0, *(cp.sizes[j] for j in rest)])
        for a, i in enumerate(rest):
            for c, j in enumerate(rest):
                if i < j:
                    block = theta[i] * theta[j] * cp.cross[(i, j)]
                    e[offsets[a]:offsets[a + 1], offsets[c]:offsets[c + 1]] = block
                    e[offsets[c]:offsets[c + 1], offsets[a]:offsets[a + 1]] = block.T
        s = e - b.T @ (b / d[:, None])
        wr = np.vstack([theta[j] * cp.zxy[j] for j in rest])
        return d, b, s, w0, wr

    def profile(self, theta: FloatArray) -> tuple[float, FloatArray, FloatArray, float]:
        """(REML deviance, beta, P_XX, r^2) at theta."""
        from scipy.linalg import cho_factor, cho_solve

        cp = self.cp
        d, b, s, w0, wr = self.blocks(theta)
        logdet_a = float(np.sum(np.log(d)))
        m = w0.T @ (w0 / d[:, None])
        if s.shape[0]:
            factor = cho_factor(s, lower=True, check_finite=False)
            logdet_a += 2.0 * float(np.sum(np.log(np.diag(factor[0]))))
            g = wr - b.T @ (w0 / d[:, None])
            m = m + g.T @ cho_solve(factor, g, check_finite=False)
        p = cp.t - m
        pxx, pxy, pyy = p[:cp.p, :cp.p], p[:cp.p, cp.p], p[cp.p, cp.p]
        pfac = cho_factor(pxx, lower=True, check_finite=False)
        beta = cho_solve(pfac, pxy, check_finite=False)
        r2 = max(float(pyy - pxy @ beta), 1e-300)
        dof = cp.n - cp.p
        logdet_x = 2.0 * float(np.sum(np.log(np.diag(pfac[0]))))
        deviance = logdet_a + logdet_x + dof * (1.0 + math.log(2.0 * math.pi * r2 / dof))
        return deviance, beta, pxx, r2

    def modes(self, theta: FloatArray, beta: FloatArray) -> list[FloatArray]:
        """Conditional modes b_k = theta_k u_k, u = A^-1 Lambda' Z' (y - X beta), per factor."""
        from scipy.linalg import solve

        cp = self.cp
        d, b, s, w0, wr = self.blocks(theta)
        coef = np.append(-beta, 1.0)
        v0, vr = w0 @ coef, wr @ coef
        xr = solve(s, vr - b.T @ (v0 / d), assume_a="pos") if s.shape[0] else vr
        x0 = (v0 - b @ xr) / d
        u = [x0, *np.split(xr, np.cumsum(cp.sizes[1:-1]))] if s.shape[0] else [x0]
        return [theta[k] * u[k] for k in range(len(cp.sizes))]


def fit(y: FloatArray, x: FloatArray, names: Sequence[str],
        factors: Sequence[Factor]) -> MixedFit:
    """REML fit of y = X beta + sum_k Z_k b_k + e with independent random intercepts per factor.

    X must have full column rank (the caller drops confounded terms and says so)."""
    from scipy.optimize import minimize

    if not factors:
        raise ValueError("a mixed model needs at least one grouping factor")
    order = sorted(range(len(factors)), key=lambda k: -len(factors[k].levels))
    ordered = [factors[k] for k in order]
    dev = _Deviance(_Crossprods(np.asarray(y, float), np.asarray(x, float), ordered))

    def objective(theta: FloatArray) -> float:
        return dev.profile(theta)[0]

    start = np.ones(len(ordered))
    # derivative-free and bounded, like lme4's BOBYQA: on this smooth, cheap criterion it
    # reaches lme4's optimum to ~1e-7 in the deviance, where L-BFGS-B's finite differences
    # stop short (5e-5) and report failures of their line search
    result = minimize(objective, start, method="Powell", bounds=[(0.0, None)] * len(ordered),
                      options={"xtol": 1e-6, "ftol": 1e-10, "maxiter": 10_000})
    theta = np.asarray(result.x, float)
    deviance, beta, pxx, r2 = dev.profile(theta)
    n, p = x.shape
    sigma2 = r2 / (n - p)
    vcov = sigma2 * np.linalg.inv(pxx)
    sigma = math.sqrt(sigma2)
    modes = dev.modes(theta, beta)
    logger.debug("REML fit: theta %s, deviance %.6f, %d evaluations", theta, deviance,
                 result.nfev)
    back = {k: i for i, k in enumerate(order)}  # original factor index -> fitted position
    return MixedFit(
        names=tuple(names), beta=beta, vcov=vcov,
        sd={f.name: float(theta[back[k]] * sigma) for k, f in enumerate(factors)},
        residual_sd=sigma,
        modes={f.name: modes[back[k]] for k, f in enumerate(factors)},
        theta=tuple(float(theta[back[k]]) for k in range(len(factors))),
        reml_deviance=float(deviance), n=int(n), converged=bool(result.success))
