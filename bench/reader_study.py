"""Reader-study analysis benchmark: `rrg-review study analyze --readings` on a simulated
crossover study (default 20 readers x 500 cases x 2 sessions = 20,000 readings, with accepted
flags and keystroke times, so every model runs), end to end as a user runs it, and the mixed
model's fit alone; where R's lme4 is installed, the same fit by `lmer` (REML) timed in the same
run, printed as a ratio, and its estimates compared with ours.

Target: the end-to-end analysis of 20,000 readings in < 60 s on 2 cores.
Run: `.venv/bin/python -m bench.reader_study [--readers 20 --cases 500 --sessions 2]`
(a quick check: `--readers 4 --cases 30`).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
R_FIT = r"""
suppressMessages(library(lme4))
t0 <- proc.time()[["elapsed"]]
d <- read.csv(commandArgs(trailingOnly = TRUE)[1],
              colClasses = c(reader = "character", case = "character", arm = "character",
                             session = "character"))
d$arm <- relevel(factor(d$arm), ref = "unassisted")
d$session <- factor(d$session)
t1 <- proc.time()[["elapsed"]]
m <- lmer(log(seconds) ~ arm + session + (1 | reader) + (1 | case), data = d, REML = TRUE)
t2 <- proc.time()[["elapsed"]]
cat(sprintf("read %.4f\nfit %.4f\nestimate %.12g\nse %.12g\n", t1 - t0, t2 - t1,
            fixef(m)[[2]], sqrt(diag(vcov(m)))[[2]]))
"""


def lme4(path: Path) -> dict[str, float] | None:
    """lme4's read and fit times and its arm estimate, or None where R or lme4 is missing."""
    rscript = shutil.which("Rscript")
    if rscript is None:
        return None
    run = subprocess.run([rscript, "-e", R_FIT, str(path)], capture_output=True, text=True,
                         timeout=600)
    if run.returncode != 0:
        return None
    return {k: float(v) for k, v in (line.split() for line in run.stdout.splitlines())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readers", type=int, default=20)
    parser.add_argument("--cases", type=int, default=500)
    parser.add_argument("--sessions", type=int, default=2)
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()

    from rrg_review.reader_study import mixed
    from rrg_review.reader_study.analysis import Design, analyze
    from rrg_review.reader_study.readings import load
    from rrg_review.reader_study.simulate import Simulation, write_csv

    sim = Simulation(readers=args.readers, cases=args.cases, sessions=args.sessions,
                     seed=args.seed, accepted={"draft:model-a": 0.6})
    n = args.readers * args.cases * args.sessions
    print(f"reader study, {args.readers} readers x {args.cases} cases x {args.sessions} "
          f"sessions: {n} readings (true ratio 0.85)")
    with tempfile.TemporaryDirectory() as tmp:
        table = write_csv(sim, Path(tmp) / "readings.csv")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p)}
        t0 = time.perf_counter()
        run = subprocess.run([sys.executable, "-m", "rrg_review.app.cli", "study", "analyze",
                              "--readings", str(table), "--out", str(Path(tmp) / "r.json"),
                              "--html", str(Path(tmp) / "r.html")],
                             capture_output=True, text=True, env=env)
        end_to_end = time.perf_counter() - t0
        if run.returncode != 0:
            print(run.stderr, file=sys.stderr)
            return 1
        print(f"study analyze --readings, end to end (process, CSV, all models, JSON+HTML): "
              f"{end_to_end:.2f} s (target < 60 s: {'met' if end_to_end < 60 else 'MISSED'})")

        t0 = time.perf_counter()
        readings = load(table)
        t_load = time.perf_counter() - t0
        t0 = time.perf_counter()
        result = analyze(readings)
        t_analyze = time.perf_counter() - t0
        print(f"in process: load {t_load:.2f} s, analyze (all outcomes) {t_analyze:.2f} s")

        design = Design(readings, "unassisted")
        rows = readings.seconds > 0
        x, names, _ = design.matrix(rows)
        factors, _ = design.factors(rows)
        t0 = time.perf_counter()
        fit = mixed.fit(np.log(readings.seconds[rows]), x, names, factors)
        t_fit = time.perf_counter() - t0
        ours = fit.wald("arm:draft:model-a")
        print(f"mixed model fit alone (reading time): {t_fit:.3f} s; ratio "
              f"{math.exp(ours.estimate):.4f} [{math.exp(ours.lo):.4f}, {math.exp(ours.hi):.4f}]")
        contrast = result.outcomes["seconds"].contrasts[0]
        assert abs(contrast.model_estimate - ours.estimate) < 1e-12

        r = lme4(table)
        if r is None:
            print("lme4: skipped (Rscript or R's lme4 not found; `make lme4` installs them)")
            return 0
        print(f"lme4 lmer (REML) fit: {r['fit']:.3f} s (read.csv {r['read']:.2f} s)")
        print(f"ours / lme4, fit: {t_fit / r['fit']:.2f}x; end to end / lme4 read+fit: "
              f"{end_to_end / (r['fit'] + r['read']):.2f}x")
        same = (abs(ours.estimate - r["estimate"]) < 1e-3 and abs(ours.se - r["se"]) < 1e-3)
        print(f"estimate equal to lme4 (1e-3, log scale): {same} "
              f"(|diff| {abs(ours.estimate - r['estimate']):.2e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
