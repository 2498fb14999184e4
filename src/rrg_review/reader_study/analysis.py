"""The analysis of a reader study from its readings: per-arm summaries and each arm's effect
against a reference arm, as the field publishes them (Huang et al. 2025, Hong et al. 2025).

- Reading time (`seconds`, and first-to-last keystroke when present): a linear mixed-effects
  model of log(seconds) with crossed random intercepts for reader and case and session as a
  fixed effect, REML (mixed.py, checked against lme4); an arm's effect is the ratio
  exp(beta) of its geometric-mean time to the reference arm's, Wald 95 % CI, normal p.
- Other numeric outcomes (Likert, WER, words changed, error counts, metric columns): the same
  model on their own scale; an effect is a difference.
- Binary outcomes (`accepted`): a marginal logistic model (statsmodels GLM: GEE with an
  independence working correlation) with standard errors clustered two ways, on reader and on
  case (Cameron, Gelbach & Miller 2011), since readings share both; an effect is an odds ratio.
  Each one-way term has its own G / (G - 1) and nothing more, as R's sandwich::vcovCL gives for
  a glm (and Stata for logit): the convention a reviewing statistician re-runs; statsmodels'
  extra least-squares (N - 1) / (N - K) is divided out (logistic.py; checked against R).
- Per-reader effects (the forest plot): each reader's own ratio, from their log times less the
  cases' conditional modes (so case difficulty is taken out), arm + session by least squares.

A session confounded with the arm (e.g. "session 1 without AI, session 2 with") cannot be a
separate term: it is dropped and the result says so (the arm effect then includes any learning
between sessions)."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from rrg_review.reader_study import logistic, mixed
from rrg_review.reader_study.readings import FIRST_TO_LAST, Exclusion, FloatArray, Readings

logger = logging.getLogger(__name__)

DEFAULT_REFERENCE = "unassisted"
TIMES = ("seconds", FIRST_TO_LAST)


class AnalysisError(ValueError):
    """A readings table that loads but cannot be analysed (one sentence for the user)."""


@dataclass(frozen=True)
class Summary:
    """Median, quartiles and mean of one outcome in one arm (n readings with a value)."""

    n: int
    median: float
    q1: float
    q3: float
    mean: float

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, "median": _num(self.median), "q1": _num(self.q1),
                "q3": _num(self.q3), "mean": _num(self.mean)}


@dataclass(frozen=True)
class ArmSummary:
    """One arm's readings: count, and the summary of each outcome present in the table."""

    arm: str
    n: int
    readers: int
    cases: int
    outcomes: dict[str, Summary]

    def to_json(self) -> dict[str, Any]:
        return {"arm": self.arm, "n": self.n, "readers": self.readers, "cases": self.cases,
                **{name: s.to_json() for name, s in self.outcomes.items()}}


@dataclass(frozen=True)
class Contrast:
    """One arm against the reference arm on one outcome. `scale` says what `estimate` is:
    "ratio" (exp of a log-scale difference), "odds_ratio" or "difference"; `model_estimate`
    and `se` are on the model's scale (log for ratios and odds ratios)."""

    arm: str
    reference: str
    scale: str
    estimate: float
    ci95: tuple[float, float]
    p: float
    model_estimate: float
    se: float

    def to_json(self) -> dict[str, Any]:
        out = {"arm": self.arm, "reference": self.reference, self.scale: _num(self.estimate),
               "ci95": [_num(self.ci95[0]), _num(self.ci95[1])], "p": _num(self.p),
               "scale": self.scale}
        if self.scale != "difference":
            out["log_" + self.scale] = _num(self.model_estimate)
        out["se"] = _num(self.se)
        return out


@dataclass(frozen=True)
class ReaderEffect:
    """One reader's own effect of an arm (ratio on reading time) for the forest plot."""

    reader: str
    arm: str
    n: int
    ratio: float
    ci95: tuple[float, float]

    def to_json(self) -> dict[str, Any]:
        return {"reader": self.reader, "arm": self.arm, "n": self.n, "ratio": _num(self.ratio),
                "ci95": [_num(self.ci95[0]), _num(self.ci95[1])]}


@dataclass(frozen=True)
class OutcomeResult:
    """One outcome's model: what it was, on how many readings, the contrasts, the random
    effects' SDs (mixed models), per-reader effects (reading time) and notes."""

    outcome: str
    model: str
    n: int
    contrasts: tuple[Contrast, ...]
    random_effects: dict[str, float] | None = None
    session_effects: tuple[Contrast, ...] = ()
    per_reader: tuple[ReaderEffect, ...] = ()
    converged: bool = True
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"model": self.model, "n": self.n,
                               "contrasts": [c.to_json() for c in self.contrasts]}
        if self.random_effects is not None:
            out["random_effects"] = {k: _num(v) for k, v in self.random_effects.items()}
        if self.session_effects:
            out["sessions"] = [c.to_json() for c in self.session_effects]
        if self.per_reader:
            out["per_reader"] = [r.to_json() for r in self.per_reader]
        out["converged"] = self.converged
        out["notes"] = list(self.notes)
        return out


@dataclass(frozen=True)
class BalanceCell:
    """Readings of one reader in one arm and session (the design's balance, as read)."""

    reader: str
    arm: str
    session: str
    n: int


@dataclass(frozen=True)
class StudyAnalysis:
    """The whole analysis, as the JSON contract (README, "Reader studies: analysis") has it."""

    source: str
    reference: str
    arms: tuple[ArmSummary, ...]
    outcomes: dict[str, OutcomeResult]
    n: dict[str, int]
    excluded: tuple[Exclusion, ...]
    balance: tuple[BalanceCell, ...]
    sessions: tuple[str, ...]
    ignored_columns: tuple[str, ...] = ()
    software: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source, "reference": self.reference, "n": dict(self.n),
            "excluded": [e.to_json() for e in self.excluded],
            "arms": [a.to_json() for a in self.arms],
            "outcomes": {name: o.to_json() for name, o in self.outcomes.items()},
            "sessions": list(self.sessions),
            "balance": [{"reader": c.reader, "arm": c.arm, "session": c.session, "n": c.n}
                        for c in self.balance],
            "ignored_columns": list(self.ignored_columns),
            "software": dict(self.software),
        }


def _num(value: float) -> float | None:
    """JSON has no NaN: a value that could not be computed is null."""
    return None if value is None or not math.isfinite(value) else float(value)


def analyze(readings: Readings, reference: str | None = None) -> StudyAnalysis:
    """Summaries and models of every outcome the table has (AnalysisError when it cannot)."""
    arms = readings.arms
    reference = reference or DEFAULT_REFERENCE
    if len(arms) < 2:
        raise AnalysisError(f"{readings.source}: the readings have {len(arms)} arm "
                            f"({', '.join(arms)}); comparing arms needs at least 2")
    if reference not in arms:
        raise AnalysisError(f"{readings.source}: no arm {reference!r} to compare against (arms: "
                            f"{', '.join(arms)}); choose one with --reference")
    design = Design(readings, reference)
    outcomes: dict[str, OutcomeResult] = {"seconds": _time_model(design, readings.seconds,
                                                                 "seconds", per_reader=True)}
    if readings.first_to_last is not None:
        outcomes[FIRST_TO_LAST] = _time_model(design, readings.first_to_last, FIRST_TO_LAST)
    for name, values in readings.outcomes.items():
        if name == "accepted":
            outcomes[name] = _binary_model(design, values, name)
        else:
            outcomes[name] = _linear_model(design, values, name)
    return StudyAnalysis(
        source=readings.source, reference=reference,
        arms=tuple(_arm_summary(readings, arm) for arm in design.arm_order),
        outcomes=outcomes,
        n={"readings": len(readings), "readers": len(set(readings.reader.tolist())),
           "cases": len(set(readings.case.tolist())), "sessions": len(readings.sessions),
           "arms": len(arms), "excluded": sum(e.count for e in readings.excluded)},
        excluded=readings.excluded, balance=_balance(readings), sessions=readings.sessions,
        ignored_columns=readings.ignored_columns, software=_software())


class Design:
    """Codes and dummy columns shared by every outcome's model: reference arm first, then the
    other arms in order; the first session is the baseline."""

    def __init__(self, readings: Readings, reference: str) -> None:
        self.readings = readings
        self.reference = reference
        self.arm_order = (reference, *(a for a in readings.arms if a != reference))
        self.session_order = readings.sessions

    def matrix(self, rows: npt.NDArray[np.bool_]) -> tuple[FloatArray, list[str], list[str]]:
        """X for the readings in `rows` (intercept, arm dummies, session dummies when they are
        estimable), its column names, and notes on what was dropped."""
        arm, session = self.readings.arm[rows], self.readings.session[rows]
        arms = [a for a in self.arm_order[1:] if (arm == a).any()]
        sessions = [s for s in self.session_order[1:] if (session == s).any()]
        base = [np.ones(int(rows.sum()))] + [(arm == a).astype(float) for a in arms]
        names = ["(Intercept)"] + [f"arm:{a}" for a in arms]
        notes: list[str] = []
        if sessions:
            full = np.column_stack(base + [(session == s).astype(float) for s in sessions])
            if np.linalg.matrix_rank(full) == full.shape[1]:
                return full, names + [f"session:{s}" for s in sessions], notes
            notes.append("session is confounded with arm in these readings, so it is not in "
                         "the model: the arm effect includes any difference between sessions")
        return np.column_stack(base), names, notes

    def factors(self, rows: npt.NDArray[np.bool_]) -> tuple[list[mixed.Factor], list[str]]:
        found, notes = [], []
        for name in ("reader", "case"):
            labels = getattr(self.readings, name)[rows]
            levels, codes = np.unique(labels, return_inverse=True)
            if len(levels) < 2:
                notes.append(f"one {name} only: no {name} random effect")
                continue
            found.append(mixed.Factor(name, codes.astype(np.intp),
                                      tuple(str(v) for v in levels)))
        return found, notes


def _fit_mixed(design: Design, y: FloatArray, rows: npt.NDArray[np.bool_],
               outcome: str, transform: Callable[[float], float],
               scale: str) -> tuple[OutcomeResult, mixed.MixedFit | None]:
    x, names, notes = design.matrix(rows)
    factors, more = design.factors(rows)
    notes += more
    arms_here = [n.removeprefix("arm:") for n in names if n.startswith("arm:")]
    model = ("linear mixed model, REML: "
             + ("log(" + outcome + ")" if scale == "ratio" else outcome)
             + " ~ arm + session + (1|reader) + (1|case); Wald 95 % CI, normal p")
    if not arms_here or design.reference not in set(design.readings.arm[rows].tolist()):
        return OutcomeResult(outcome, model, int(rows.sum()), (), notes=(
            *notes, f"no readings of both {design.reference!r} and another arm with "
                    f"{outcome}: no contrast"),), None
    if not factors or len(y) <= x.shape[1] + 1:
        return OutcomeResult(outcome, model, int(rows.sum()), (), notes=(
            *notes, f"too few readings or readers and cases for a model of {outcome}")), None
    try:
        fit = mixed.fit(y, x, names, factors)
    except (np.linalg.LinAlgError, ValueError, FloatingPointError) as exc:
        logger.warning("%s: the mixed model of %s failed: %s", design.readings.source, outcome,
                       exc)
        return OutcomeResult(outcome, model, int(rows.sum()), (), converged=False, notes=(
            *notes, f"the model could not be fitted ({exc})")), None

    def contrast(name: str, label: str, reference: str) -> Contrast:
        w = fit.wald(name)
        return Contrast(label, reference, scale, transform(w.estimate),
                        (transform(w.lo), transform(w.hi)), w.p, w.estimate, w.se)

    contrasts = tuple(contrast(f"arm:{a}", a, design.reference) for a in arms_here)
    sessions = tuple(contrast(n, n.removeprefix("session:"), design.session_order[0])
                     for n in names if n.startswith("session:"))
    result = OutcomeResult(
        outcome, model, fit.n, contrasts,
        random_effects={**{f.name: fit.sd[f.name] for f in factors},
                        "residual": fit.residual_sd},
        session_effects=sessions, converged=fit.converged,
        notes=tuple(notes) + (() if fit.converged else ("the REML optimiser did not report "
                                                        "convergence",)))
    return result, fit


def _time_model(design: Design, values: FloatArray, outcome: str,
                per_reader: bool = False) -> OutcomeResult:
    rows = np.isfinite(values) & (values > 0)
    skipped = int(np.isfinite(values).sum() - rows.sum())
    result, fit = _fit_mixed(design, np.log(values[rows]), rows, outcome, math.exp, "ratio")
    notes = result.notes + ((f"{skipped} readings with {outcome} = 0 left out (log scale)",)
                            if skipped else ())
    effects = _per_reader(design, np.log(values[rows]), rows, fit) if per_reader and fit else ()
    return OutcomeResult(result.outcome, result.model, result.n, result.contrasts,
                         result.random_effects, result.session_effects, effects,
                         result.converged, notes)


def _linear_model(design: Design, values: FloatArray, outcome: str) -> OutcomeResult:
    rows = np.isfinite(values)
    return _fit_mixed(design, values[rows], rows, outcome, float, "difference")[0]


def _binary_model(design: Design, values: FloatArray, outcome: str) -> OutcomeResult:
    """Marginal logistic model with two-way (reader, case) clustered standard errors
    (logistic.py: which small-sample convention, and why)."""
    rows = np.isfinite(values)
    present = set(design.readings.arm[rows].tolist())
    # `accepted` has no meaning without a draft: when the reference arm has no values, the
    # first arm (in the report's order) that has them is the reference for this outcome
    reference = next(a for a in design.arm_order if a in present) if present else None
    model = ("marginal logistic model (GLM, independence working correlation): " + outcome
             + " ~ arm + session; SEs clustered on reader and case (CGM 2011, G/(G-1) per "
             "term, as R's sandwich::vcovCL); Wald 95 % CI, normal p")
    notes: list[str] = []
    if reference is not None and reference != design.reference:
        notes.append(f"{design.reference!r} has no {outcome} values: compared with "
                     f"{reference!r}")
    if reference is None or len(present) < 2:
        return OutcomeResult(outcome, model, int(rows.sum()), (), notes=(
            *notes, f"{outcome} is present in fewer than 2 arms: no contrast"))
    sub = Design(design.readings, reference)
    x, names, more = sub.matrix(rows)
    notes += more
    try:
        res = logistic.fit(values[rows], x, design.readings.reader[rows],
                           design.readings.case[rows])
    except (ValueError, np.linalg.LinAlgError) as exc:  # perfect separation and the like
        return OutcomeResult(outcome, model, int(rows.sum()), (), converged=False,
                             notes=(*notes, f"the model could not be fitted ({exc})"))
    contrasts = []
    for i, name in enumerate(names):
        if name.startswith("arm:"):
            b, se = float(res.params[i]), float(res.se[i])
            if not math.isfinite(se):
                notes.append(f"the two-way clustered variance of {name.removeprefix('arm:')!r} "
                             "is not positive (V_reader + V_case - V_both can be, with few "
                             "readers or cases): no interval or p")
            contrasts.append(Contrast(name.removeprefix("arm:"), reference, "odds_ratio",
                                      math.exp(b), (math.exp(b - mixed.Z95 * se),
                                                    math.exp(b + mixed.Z95 * se)),
                                      math.erfc(abs(b / se) / math.sqrt(2)) if se else math.nan,
                                      b, se))
    return OutcomeResult(outcome, model, int(rows.sum()), tuple(contrasts),
                         converged=res.converged, notes=tuple(notes))


def _per_reader(design: Design, y: FloatArray, rows: npt.NDArray[np.bool_],
                fit: mixed.MixedFit) -> tuple[ReaderEffect, ...]:
    """Each reader's ratio per arm: least squares of (log time - the case's conditional mode)
    on arm and session within the reader, t-based 95 % interval."""
    from scipy.special import stdtrit  # Student's t quantile (scipy.stats imports ~1 s more)

    readings = design.readings
    cases = readings.case[rows]
    mode = dict(zip(np.unique(cases).tolist(), fit.modes.get("case", np.zeros(0)).tolist(),
                    strict=False))
    adjusted = y - np.array([mode.get(c, 0.0) for c in cases.tolist()])
    reader, arm = readings.reader[rows], readings.arm[rows]
    effects = []
    for who in sorted(set(reader.tolist())):
        mine = reader == who
        sub = np.zeros(len(rows), dtype=bool)
        sub[np.flatnonzero(rows)[mine]] = True
        x, names, _ = design.matrix(sub)
        yy = adjusted[mine]
        dof = len(yy) - x.shape[1]
        if dof < 1 or np.linalg.matrix_rank(x) < x.shape[1]:
            continue
        beta, *_ = np.linalg.lstsq(x, yy, rcond=None)
        resid = yy - x @ beta
        cov = float(resid @ resid) / dof * np.linalg.inv(x.T @ x)
        q = float(stdtrit(dof, 0.975))
        for i, name in enumerate(names):
            if name.startswith("arm:") and (arm[mine] == design.reference).any():
                se = math.sqrt(cov[i, i])
                effects.append(ReaderEffect(who, name.removeprefix("arm:"), int(mine.sum()),
                                            math.exp(beta[i]), (math.exp(beta[i] - q * se),
                                                                math.exp(beta[i] + q * se))))
    return tuple(effects)


def _summary(values: FloatArray) -> Summary | None:
    values = values[np.isfinite(values)]
    if not len(values):
        return None
    q1, median, q3 = np.percentile(values, [25, 50, 75])
    return Summary(len(values), float(median), float(q1), float(q3), float(values.mean()))


def _arm_summary(readings: Readings, arm: str) -> ArmSummary:
    rows = readings.arm == arm
    columns: Mapping[str, FloatArray] = {
        "seconds": readings.seconds,
        **({FIRST_TO_LAST: readings.first_to_last} if readings.first_to_last is not None
           else {}),
        **readings.outcomes}
    outcomes = {}
    for name, values in columns.items():
        found = _summary(values[rows])
        if found is not None:
            outcomes[name] = found
    return ArmSummary(arm, int(rows.sum()), len(set(readings.reader[rows].tolist())),
                      len(set(readings.case[rows].tolist())), outcomes)


def _balance(readings: Readings) -> tuple[BalanceCell, ...]:
    from collections import Counter

    counts = Counter(zip(readings.reader.tolist(), readings.arm.tolist(),
                         readings.session.tolist(), strict=True))
    order = {s: i for i, s in enumerate(readings.sessions)}
    return tuple(BalanceCell(r, a, s, n) for (r, a, s), n in
                 sorted(counts.items(), key=lambda kv: (kv[0][0], kv[0][1], order[kv[0][2]])))


def _software() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for package in ("numpy", "scipy", "statsmodels"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            continue
    return found
