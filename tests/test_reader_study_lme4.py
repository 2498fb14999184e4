"""The reader-study mixed model against R's lme4, the implementation the field trusts: on
simulated studies with known effects (balanced two-arm crossover, an unbalanced three-arm
three-session study with readings missing, one whose reader variance is zero, where lme4
reports a singular fit, and a one-session parallel design), the fixed effects, standard errors
and Wald 95 % intervals of
`lmer(log(seconds) ~ arm + session + (1|reader) + (1|case), REML = TRUE)` and
`confint(method = "Wald")` equal ours to 1e-3 on the log scale, through a real Rscript process.

Skipped with the reason when Rscript or lme4 is absent (`make lme4` installs Debian's
r-base-core and r-cran-lme4; `make test` does so when they are missing)."""

from __future__ import annotations

import math
import shutil
import subprocess

import numpy as np
import pytest

from rrg_review.reader_study.analysis import analyze
from rrg_review.reader_study.readings import from_columns
from rrg_review.reader_study.simulate import Simulation, columns

TOLERANCE = 1e-3
R_SCRIPT = r"""
suppressMessages(library(lme4))
for (path in commandArgs(trailingOnly = TRUE)) {
  d <- read.csv(path, colClasses = c(reader = "character", case = "character",
                                     arm = "character", session = "character"))
  d$arm <- relevel(factor(d$arm), ref = "unassisted")
  d$session <- factor(d$session, levels = sort(unique(as.numeric(d$session))))
  f <- if (nlevels(d$session) > 1) log(seconds) ~ arm + session + (1 | reader) + (1 | case) else
    log(seconds) ~ arm + (1 | reader) + (1 | case)
  m <- lmer(f, data = d, REML = TRUE)
  ci <- confint(m, method = "Wald", parm = "beta_")
  se <- sqrt(diag(vcov(m)))
  for (term in names(fixef(m))) {
    cat(sprintf("beta\t%s\t%s\t%.12g\t%.12g\t%.12g\t%.12g\n", basename(path), term,
                fixef(m)[[term]], se[[term]], ci[term, 1], ci[term, 2]))
  }
  vc <- as.data.frame(VarCorr(m))
  for (i in seq_len(nrow(vc))) {
    cat(sprintf("sd\t%s\t%s\t%.12g\n", basename(path), vc$grp[i], vc$sdcor[i]))
  }
}
"""


def _lme4_missing() -> str | None:
    rscript = shutil.which("Rscript")
    if rscript is None:
        return "Rscript not found: `make lme4` installs Debian's r-base-core and r-cran-lme4"
    probe = subprocess.run([rscript, "-e", "suppressMessages(library(lme4))"],
                           capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        return "R's lme4 is not installed: `make lme4` installs Debian's r-cran-lme4"
    return None


MISSING = _lme4_missing()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")

STUDIES = {
    "balanced.csv": Simulation(readers=10, cases=60, sessions=2, seed=11),
    "three_arms.csv": Simulation(readers=7, cases=45, sessions=3, seed=12,
                                 arms=("unassisted", "draft:a", "draft:b"),
                                 log_effects={"draft:a": math.log(0.8), "draft:b": 0.1},
                                 sd_reader=0.2, sd_case=0.5, sd_residual=0.4),
    "singular.csv": Simulation(readers=6, cases=40, sessions=2, seed=13, sd_reader=0.0),
    # parallel: one session, each reader reads each case once, arms alternating over readers
    # and cases (no session term)
    "parallel.csv": Simulation(readers=12, cases=80, sessions=1, seed=14, sd_case=0.6),
}


def _write(path, table):
    import csv

    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(table)
        writer.writerows(zip(*table.values(), strict=True))


def _tables():
    tables = {}
    for name, sim in STUDIES.items():
        table = columns(sim)
        if name == "three_arms.csv":  # unbalanced: a tenth of the readings never happened
            keep = np.random.default_rng(5).random(len(table["reader"])) > 0.1
            table = {k: [v for v, ok in zip(values, keep, strict=True) if ok]
                     for k, values in table.items()}
        tables[name] = table
    return tables


def _lme4(paths):
    run = subprocess.run(["Rscript", "-e", R_SCRIPT, *map(str, paths)], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    beta, sd = {}, {}
    for line in run.stdout.splitlines():
        kind, file, term, *values = line.split("\t")
        if kind == "beta":
            beta[file, term] = tuple(map(float, values))
        elif kind == "sd":
            sd[file, term] = float(values[0])
    return beta, sd


def test_fixed_effects_and_wald_intervals_equal_lme4(tmp_path):
    tables = _tables()
    for name, table in tables.items():
        _write(tmp_path / name, table)
    beta, sd = _lme4([tmp_path / name for name in tables])
    assert beta, "lme4 printed no estimates"
    worst = 0.0
    for name, table in tables.items():
        result = analyze(from_columns(table, source=name))
        seconds = result.outcomes["seconds"]
        terms = [(c, f"arm{c.arm}") for c in seconds.contrasts] + [
            (c, f"session{c.arm}") for c in seconds.session_effects]
        assert len(terms) == sum(1 for f, t in beta if f == name and t != "(Intercept)")
        for contrast, term in terms:
            estimate, se, lo, hi = beta[name, term]
            ours = (contrast.model_estimate, contrast.se, math.log(contrast.ci95[0]),
                    math.log(contrast.ci95[1]))
            assert np.allclose(ours, (estimate, se, lo, hi), rtol=0, atol=TOLERANCE), (
                name, term, ours, (estimate, se, lo, hi))
            worst = max(worst, *np.abs(np.subtract(ours, (estimate, se, lo, hi))))
        for group in ("reader", "case"):
            assert abs(seconds.random_effects[group] - sd[name, group]) < TOLERANCE, (
                name, group, seconds.random_effects, sd)
        assert abs(seconds.random_effects["residual"] - sd[name, "Residual"]) < TOLERANCE
    # the singular study: lme4 puts the reader SD on the boundary, and so do we
    assert sd["singular.csv", "reader"] < 0.05
    print(f"largest difference from lme4 (log scale): {worst:.2e}")
