"""Marginal logistic model of a binary reading outcome (`accepted`) with standard errors
clustered two ways, on reader and on case: readings share both, and neither nests the other.

The fit is statsmodels' GLM (binomial, logit link: GEE with an independence working
correlation); the covariance is the two-way cluster-robust sandwich of Cameron, Gelbach & Miller
(2011), V = V_reader + V_case - V_reader&case, each one-way term with its own G / (G - 1) for its
G clusters. That is what R gives for `glm(...)` with `sandwich::vcovCL(fit, cluster = ~ reader +
case)` (its defaults for a glm: `type = "HC0"`, `cadjust = TRUE`, `multi0 = FALSE`), and Stata's
`vce(cluster)` for logit: the convention a statistician reviewing a study re-runs and expects.
statsmodels' `cov_type="cluster"` multiplies every term by (N - 1) / (N - K) as well (vcovCL's
`type = "HC1"`), a residual-degrees-of-freedom correction of least squares that has no footing
in a maximum-likelihood fit; as that factor is common to the three terms, it is divided out
here. tests/test_reader_study_binary_r.py checks the estimates and standard errors against R
through a real Rscript, and the interval's coverage of a known marginal effect."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rrg_review.reader_study.mixed import FloatArray

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LogisticFit:
    """Coefficients (log odds), their two-way clustered covariance, and whether IRLS converged."""

    params: FloatArray
    cov: FloatArray
    converged: bool

    @property
    def se(self) -> FloatArray:
        """Standard errors; NaN where the variance is not positive, which the two-way sum
        V_reader + V_case - V_both can be with few readers or cases (as R's vcovCL gives it,
        without `fix = TRUE`): such a coefficient has no interval."""
        var = np.diag(self.cov)
        return np.sqrt(np.where(var > 0, var, np.nan))


def fit(y: FloatArray, x: FloatArray, reader: npt.NDArray[np.str_],
        case: npt.NDArray[np.str_]) -> LogisticFit:
    """logit P(y = 1) = x beta by maximum likelihood; covariance clustered on reader and case
    (ValueError or LinAlgError when it cannot be fitted, e.g. perfect separation)."""
    # the GLM module, not statsmodels.api (which imports every model: ~1.4 s)
    from statsmodels.genmod.families import Binomial
    from statsmodels.genmod.generalized_linear_model import GLM

    groups = np.column_stack([np.unique(reader, return_inverse=True)[1],
                              np.unique(case, return_inverse=True)[1]])
    res = GLM(y, x, family=Binomial()).fit(cov_type="cluster", cov_kwds={"groups": groups})
    n, k = x.shape
    # statsmodels' CRV1 has G / (G - 1) * (N - 1) / (N - K) on each term: keep G / (G - 1)
    cov = np.asarray(res.cov_params(), dtype=np.float64) * ((n - k) / (n - 1))
    converged = bool(getattr(res, "converged", True))
    if not converged:
        logger.warning("the logistic model's IRLS did not converge (%d readings)", n)
    return LogisticFit(np.asarray(res.params, dtype=np.float64), cov, converged)
