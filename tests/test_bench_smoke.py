"""Every benchmark script runs as README documents it (`python -m bench.X`) and prints its
figures: each one as a process of its own with small sizes, exit 0, its figure lines on stdout.

Two scripts run as `python -m bench.X` in a new interpreter, exactly as README shows; the others
run the same way (what `-m` calls) in forks of a server that has imported torch, transformers
and the app once (tests/app_process.py), instead of importing them again in each new
interpreter (the 14 tests, quiet 2-core machine: 197 CPU-s and 164 s before, 172 and 144 after).

The sizes are the "quick check" each script's docstring names; the figures themselves are not
judged here (the machine running the tests is not the benchmark's), only that they come out.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.app_process import run_module

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

# script: (arguments, lines its output must have)
SCRIPTS = {
    "durability": (["--saves", "10", "--dir", "{tmp}"],
                   ["save with synchronous=NORMAL: p50", "save with synchronous=FULL  : p50",
                    "FULL / NORMAL (p50):"]),
    "ingest": (["--studies", "300", "--images", "6", "--dicom-files", "30", "--repeat", "2",
                "--workers", "2"],
               ["metadata-only import: 300 studies", "unchanged re-import: 300 studies",
                "6 images, 2 processes", "DICOM header scan, 30 files", "(8 studies)",
                "ratio"]),
    "drafting": (["--n", "4", "--batch-size", "2", "--max-length", "8", "--repeat", "1"],
                 ["studies/s", "pipeline / raw batched throughput:",
                  "batched / one-by-one throughput:"]),
    "scoring": (["--synthetic", "--n", "100", "--skip-bertscore"],
                ["100 synthetic report pairs", "bleu4 ", "rougeL ", "bleu2 ",
                 "values equal: True", "worker round trip"]),
    "ui": (["--sizes", "100,200", "--rounds", "3", "--http", "2", "--http-sizes", "100",
            "--durability", "10", "--no-first-open", "--dir", "{tmp}"],
           ["100 studies, server side", "200 studies, server side", "rate ",
            "100 studies, through HTTP", "HTTP rate", "durability save, sync=FULL",
            "targets:", "HTTP save p99"]),
    "scale": (["--studies", "20", "--draft-studies", "4", "--pairs", "64", "--synthetic"],
              ["drafting, tiny encoder-decoder, 4 studies", "ray 1 worker / local throughput:",
               "ray 2 workers / 1 worker:", "BERTScore (local MiniLM, 4 layers), 64 synthetic",
               "values equal: True", "database, 20 studies",
               "open (database part)   PostgreSQL / SQLite (p50):",
               "save an edit           PostgreSQL / SQLite (p50):"]),
    "fairness": (["--studies", "30", "--calls", "5", "--rate", "40", "--tabs", "2",
                  "--settle", "1"],
                 ["alice Next unloaded", "alice Next under flood",
                  "alice Next p95 flood / unloaded:", "alice Save p95 flood / unloaded:",
                  "flood answers:"]),
    "reader_study": (["--readers", "4", "--cases", "30"],
                     ["reader study, 4 readers x 30 cases x 2 sessions: 240 readings",
                      "study analyze --readings, end to end", "in process: load",
                      "mixed model fit alone (reading time):", "lme4 lmer (REML) fit:",
                      "ours / lme4, fit:", "estimate equal to lme4 (1e-3, log scale): True"]),
    "suggest_errors": (["--synthetic", "--n", "200", "--held-out"],
                       ["synthetic edit pairs from 200 reports", "macro-F1 over the six",
                        "edits that change no finding with a suggestion:", "pairs/s; per pair p50",
                        "held-out phrasings"]),
    "writers": (["--small"],
                ["SQLite 1 writer(s):", "SQLite 2 writer(s):", "PostgreSQL 2 writer(s):",
                 "refused  lost  dup"]),
    "study_create": (["--readers", "3", "--cases", "20"],
                     ["3 readers x 20 cases x 2 sessions", "SQLite create: 120 readings",
                      "PostgreSQL create: 120 readings", "balance spread 0"]),
    "first_page": (["--rounds", "1"],
                   ["first page of a fresh server: rows", "second page of the same server:",
                    "static page of the same server", "first page (film + draft) / static page:"]),
    "reading_desk": (["--readers", "3", "--cases", "12", "--steps", "5"],
                     ["open: median", "save: median", "sign: median",
                      "table of 72 readings from the database"]),
}
# the scripts run in a new interpreter (`python -m`), the README's form itself: durability for
# that, ingest because its process pool forks its workers from the script's process, and from
# a fork holding torch and transformers its run took 27 s instead of 15
NEW_INTERPRETER = {"durability", "ingest"}
# what the scripts import beyond the apps, imported once by the server they are forked from
PRELOAD = ["torch", "transformers", "rrg_review.app.drafting.service", "bench.synthetic",
           "bench.ui", "tests.tiny_models"]
# modules of bench/ that are helpers of the scripts, not scripts
NOT_SCRIPTS = {"synthetic", "postgres", "processes"}
# printed instead of the PostgreSQL figures where no PostgreSQL server can be started
NO_POSTGRES = "PostgreSQL: skipped"
# printed instead of the lme4 figures where R or its lme4 package is not installed
NO_LME4 = "lme4: skipped"


def test_every_bench_script_is_checked_here():
    """A new bench script cannot be left out of the smoke test (issue #23: every script runs as
    README documents it, checked in CI)."""
    scripts = {p.stem for p in (ROOT / "bench").glob("*.py")} - {"__init__"} - NOT_SCRIPTS
    assert scripts - set(SCRIPTS) == set()


# run in tests/test_ray_engine.py on the cluster that module starts anyway, which bench.scale
# joins as any command does (a local cluster of its own cost about 6 CPU-s more)
ON_RAY_CLUSTER = {"scale"}


@pytest.mark.parametrize("script", [s for s in SCRIPTS if s not in ON_RAY_CLUSTER])
def test_bench_script_runs_and_prints_its_figures(script, tmp_path):
    check_bench_script(script, tmp_path)


def check_bench_script(script: str, tmp_path: Path, environ: dict[str, str] | None = None
                       ) -> None:
    """Run `python -m bench.SCRIPT` with its quick-check arguments (in `environ`, default
    this process's) and check it exits 0, prints its figure lines and no traceback."""
    arguments, expected = SCRIPTS[script]
    environ = os.environ if environ is None else environ
    env = {**environ, "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (environ.get("PYTHONPATH"), str(ROOT))
                                         if p)}
    argv = [a.replace("{tmp}", str(tmp_path)) for a in arguments]
    if script in NEW_INTERPRETER:
        run = subprocess.run([sys.executable, "-m", f"bench.{script}", *argv], cwd=ROOT,
                             env=env, capture_output=True, text=True, timeout=600)
    else:
        run = run_module(f"bench.{script}", argv, env, ROOT, timeout=600, preload=PRELOAD)
    assert run.returncode == 0, (f"exit {run.returncode}:\n{run.stdout[-2000:]}\n"
                                 f"{run.stderr[-3000:]}")
    if NO_POSTGRES in run.stdout:
        expected = [line for line in expected if "PostgreSQL" not in line
                    and not line.startswith("database,")]
    if NO_LME4 in run.stdout:
        expected = [line for line in expected if "lme4" not in line]
    missing = [line for line in expected if line not in run.stdout]
    assert missing == [], f"missing {missing} in:\n{run.stdout[-3000:]}"
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
