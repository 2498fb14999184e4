"""Simulated reader studies with known effects: how the analysis is checked (against lme4, and
for the coverage of its intervals) and benchmarked, and how a study team can try a design's
power before running it. The data follow the analysis model exactly:

log(seconds) = log(base) + effect[arm] + session_effect * (session - 1) + reader + case + noise,
reader ~ N(0, sd_reader), case ~ N(0, sd_case), noise ~ N(0, sd_residual).

Crossover: each reader reads each case once per session, the arm cycling with reader, case and
session (so with two arms and two sessions every reader reads every case in both arms, and
each session has both arms in equal numbers: balanced within +-1).

`accepted` (a 0/1 per reading in the arms given a probability) is drawn as u < p[arm] with u
uniform, so the share accepted in an arm is p[arm] whatever else holds. With
`accepted_reader_share` / `accepted_case_share` above 0, u is Phi(z) of a latent normal
z = sqrt(a) * reader + sqrt(b) * case + sqrt(1 - a - b) * noise (a Gaussian copula): readings of
one reader, and of one case, are then correlated, while each reading's probability stays
p[arm]. The marginal model logit P(accepted) = logit(p[reference]) + log odds ratio[arm] (no
session effect) is then exactly right, and its log odds ratio logit(p[arm]) -
logit(p[reference]) is the known answer that the two-way clustered logistic model is checked
against (a conditional, random-effects logistic model would simulate a different, larger
effect)."""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from rrg_review.reader_study.readings import Readings, from_columns


@dataclass(frozen=True)
class Simulation:
    """A study's size, true effects (log scale, per arm; the first arm is the reference with
    effect 0) and variance components."""

    readers: int = 20
    cases: int = 500
    sessions: int = 2
    arms: tuple[str, ...] = ("unassisted", "draft:model-a")
    log_effects: Mapping[str, float] = field(
        default_factory=lambda: {"draft:model-a": float(np.log(0.85))})
    session_effect: float = 0.05
    base_seconds: float = 60.0
    sd_reader: float = 0.3
    sd_case: float = 0.4
    sd_residual: float = 0.5
    accepted: Mapping[str, float] = field(default_factory=dict)  # arm -> probability
    accepted_reader_share: float = 0.0  # of the latent variance behind `accepted`
    accepted_case_share: float = 0.0
    seed: int = 0


def columns(sim: Simulation) -> dict[str, list[str]]:
    """The simulated readings table, column by column as text (as a CSV would hold it)."""
    rng = np.random.default_rng(sim.seed)
    reader_effect = rng.normal(0.0, sim.sd_reader, sim.readers)
    case_effect = rng.normal(0.0, sim.sd_case, sim.cases)
    r, s, c = (a.ravel() for a in np.meshgrid(np.arange(sim.readers), np.arange(sim.sessions),
                                             np.arange(sim.cases), indexing="ij"))
    arm_index = (r + c + s) % len(sim.arms)
    effect = np.array([sim.log_effects.get(a, 0.0) for a in sim.arms])[arm_index]
    log_seconds = (np.log(sim.base_seconds) + effect + sim.session_effect * s
                   + reader_effect[r] + case_effect[c]
                   + rng.normal(0.0, sim.sd_residual, len(r)))
    seconds = np.exp(log_seconds)
    first = seconds * rng.uniform(0.05, 0.3, len(r))
    last = seconds * rng.uniform(0.7, 0.98, len(r))
    table = {
        "reader": [f"R{i:03d}" for i in r], "case": [f"C{i:05d}" for i in c],
        "arm": [sim.arms[i] for i in arm_index], "session": [str(i + 1) for i in s],
        "seconds": [f"{v:.6f}" for v in seconds],
        "first_keystroke_seconds": [f"{v:.3f}" for v in first],
        "last_keystroke_seconds": [f"{v:.3f}" for v in last],
    }
    if sim.accepted:
        draw = _accepted_draws(sim, rng, r, c)
        table["accepted"] = [
            "" if sim.arms[a] not in sim.accepted else
            ("1" if u < sim.accepted[sim.arms[a]] else "0")
            for a, u in zip(arm_index, draw, strict=True)]
    return table


def _accepted_draws(sim: Simulation, rng: np.random.Generator, r: npt.NDArray[np.intp],
                    c: npt.NDArray[np.intp]) -> npt.NDArray[np.float64]:
    """Uniform draws, correlated within reader and within case by the Gaussian copula above."""
    a, b = sim.accepted_reader_share, sim.accepted_case_share
    if not (a >= 0 and b >= 0 and a + b <= 1):
        raise ValueError(f"accepted shares {a} and {b} must be >= 0 and sum to at most 1")
    if a == 0 and b == 0:
        return rng.random(len(r))
    from scipy.special import ndtr  # the normal CDF (scipy.stats imports ~1 s more)

    z = (math.sqrt(a) * rng.normal(size=sim.readers)[r]
         + math.sqrt(b) * rng.normal(size=sim.cases)[c]
         + math.sqrt(1 - a - b) * rng.normal(size=len(r)))
    return np.asarray(ndtr(z), dtype=np.float64)


def readings(sim: Simulation) -> Readings:
    return from_columns(columns(sim), source=f"simulation(seed={sim.seed})")


def write_csv(sim: Simulation, path: Path) -> Path:
    table = columns(sim)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(table)
        writer.writerows(zip(*table.values(), strict=True))
    return path
