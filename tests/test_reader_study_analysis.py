"""`rrg-review study analyze --readings`: a readings table in, the JSON contract and the HTML
report out; hostile tables get one sentence naming the file (and line, column) and exit 2;
the model agrees with statsmodels' MixedLM and its intervals cover the known effect at about
the nominal rate over repeated simulated studies (lme4 itself: test_reader_study_lme4.py)."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rrg_review.app.cli import main
from rrg_review.reader_study.analysis import analyze
from rrg_review.reader_study.readings import from_columns, load
from rrg_review.reader_study.simulate import Simulation, columns, readings, write_csv

ROOT = Path(__file__).resolve().parents[1]
SMALL = Simulation(readers=6, cases=30, sessions=2, seed=3,
                   accepted={"draft:model-a": 0.6})


def _write(path: Path, table: dict[str, list[str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(table)
        writer.writerows(zip(*table.values(), strict=True))
    return path


def test_cli_writes_the_json_contract_and_a_self_contained_html(tmp_path):
    table = write_csv(Simulation(readers=8, cases=60, sessions=2, seed=1,
                                 accepted={"draft:model-a": 0.6, "unassisted": 0.3}),
                      tmp_path / "readings.csv")
    out, page = tmp_path / "result.json", tmp_path / "report.html"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p)}
    run = subprocess.run([sys.executable, "-m", "rrg_review.app.cli", "study", "analyze",
                          "--readings", str(table), "--out", str(out), "--html", str(page)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "seconds: draft:model-a vs unassisted: ratio" in run.stdout
    result = json.loads(out.read_text())
    seconds = result["outcomes"]["seconds"]
    [contrast] = seconds["contrasts"]
    assert set(contrast) >= {"arm", "reference", "ratio", "ci95", "p"}
    assert (contrast["arm"], contrast["reference"]) == ("draft:model-a", "unassisted")
    lo, hi = contrast["ci95"]
    assert lo < contrast["ratio"] < hi and lo < 0.85 < hi  # the known effect
    assert set(seconds["random_effects"]) == {"reader", "case", "residual"}
    assert seconds["n"] == result["n"]["readings"] == 8 * 60 * 2
    assert {r["reader"] for r in seconds["per_reader"]} == {f"R{i:03d}" for i in range(8)}
    [odds] = result["outcomes"]["accepted"]["contrasts"]
    # accepted 0.6 vs 0.3: the odds ratio is (0.6 / 0.4) / (0.3 / 0.7) = 3.5
    assert odds["ci95"][0] < 3.5 < odds["ci95"][1] and odds["ci95"][0] > 1
    ftl = result["outcomes"]["first_to_last_seconds"]["contrasts"][0]
    assert ftl["ratio"] < 1
    assert [a["arm"] for a in result["arms"]] == ["unassisted", "draft:model-a"]
    assert {a["seconds"]["n"] for a in result["arms"]} == {480}
    html = page.read_text()
    assert "<svg" in html and "R007" in html and "draft:model-a" in html
    assert "<script" not in html and "http" not in html  # no network, nothing to run


@pytest.mark.parametrize(("change", "expected"), [
    (lambda t: t.pop("seconds"), "missing required column(s) seconds"),
    (lambda t: t["seconds"].__setitem__(4, "12,5"), "line 6: column seconds is '12,5', not a"),
    (lambda t: t["seconds"].__setitem__(0, "-3"), "line 2: column seconds is -3, a negative time"),
    (lambda t: t["seconds"].__setitem__(2, "inf"), "line 4: column seconds is 'inf', not a "
                                                   "finite"),
    (lambda t: t["reader"].__setitem__(7, ""), "line 9: column reader is empty"),
    (lambda t: t["accepted"].__setitem__(3, "maybe"), "line 5: column accepted is 'maybe'"),
    (lambda t: t["last_keystroke_seconds"].__setitem__(1, "0.001"),
     "line 3: last_keystroke_seconds (0.001) is before first_keystroke_seconds"),
    (lambda t: t.pop("first_keystroke_seconds"),
     "column last_keystroke_seconds needs column first_keystroke_seconds"),
    (lambda t: t["case"].__setitem__(1, t["case"][0]),
     "line 3: reader 'R000' reads case 'C00000' in session '1' again (first at line 2)"),
    (lambda t: t["arm"].__setitem__(slice(None), ["x"] * len(t["arm"])),
     "the readings have 1 arm (x); comparing arms needs at least 2"),
    (lambda t: [t.__setitem__(k, v[:0]) for k, v in list(t.items())], "has no readings"),
    # values a trial's table carried through to the results (a "nan" session became the
    # baseline of 4 sessions; 1e308 s made a time ratio of 262, CI 0 to 1.4e8)
    (lambda t: t["session"].__setitem__(5, "nan"),
     "line 7: column session is 'nan', an empty cell as a spreadsheet or pandas writes it"),
    (lambda t: t["session"].__setitem__(5, "#N/A"), "line 7: column session is '#N/A'"),
    (lambda t: t["reader"].__setitem__(5, "NaN"), "line 7: column reader is 'NaN'"),
    (lambda t: t["seconds"].__setitem__(3, "1e308"),
     "line 5: column seconds is 1e308, outside 0 to 86400 seconds (at most 24 h"),
    (lambda t: t.__setitem__("likert", ["3"] * 4 + ["99"] + ["3"] * (len(t["reader"]) - 5)),
     "line 6: column likert is 99, outside 1 to 5 (the rating is a Likert score 1-5)"),
    (lambda t: t.__setitem__("likert", ["3"] * 4 + ["0"] + ["3"] * (len(t["reader"]) - 5)),
     "line 6: column likert is 0, outside 1 to 5"),
    (lambda t: t.__setitem__("errors_total", ["1.5"] + ["1"] * (len(t["reader"]) - 1)),
     "line 2: column errors_total is 1.5, not a whole number"),
])
def test_a_broken_table_gets_one_sentence_and_exit_2(tmp_path, capsys, change, expected):
    table = columns(SMALL)
    change(table)
    path = _write(tmp_path / "study readings.csv", table)
    assert main(["study", "analyze", "--readings", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: ") and expected in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_unknown_reference_arm_and_unreadable_files(tmp_path, capsys):
    path = write_csv(SMALL, tmp_path / "r.csv")
    assert main(["study", "analyze", "--readings", str(path), "--reference", "draft:b"]) == 2
    assert "no arm 'draft:b' to compare against (arms: draft:model-a, unassisted)" in (
        capsys.readouterr().err)
    assert main(["study", "analyze", "--readings", str(tmp_path / "none.csv")]) == 2
    assert "none.csv: no such readings file" in capsys.readouterr().err
    assert main(["study", "analyze", "--readings", str(tmp_path)]) == 2
    assert "a folder, not a readings file" in capsys.readouterr().err
    (tmp_path / "empty.csv").write_bytes(b"")
    assert main(["study", "analyze", "--readings", str(tmp_path / "empty.csv")]) == 2
    assert "empty.csv: not a readable CSV table" in capsys.readouterr().err
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    assert main(["study", "analyze", "--readings", str(tmp_path / "bad.parquet")]) == 2
    assert "bad.parquet: not a readable Parquet table" in capsys.readouterr().err
    assert main(["study", "analyze", "--readings", str(path), "--out",
                 str(tmp_path / "no" / "r.json")]) == 2
    assert "the folder" in capsys.readouterr().err


def test_exclusions_are_counted_with_their_reasons(tmp_path):
    table = columns(SMALL)
    n = len(table["reader"])
    table["signed"] = ["1", "2026-11-24T10:15:00+00:00", "yes"] * (n // 3)
    table["signed"][0] = table["signed"][5] = "0"
    table["seconds"][1] = ""
    table["seconds"][2] = "0"
    table["seconds"][5] = ""  # unsigned too: counted once, under its first reason
    table["seconds"][7] = "1e-300"  # a trial's table: no reading, not a time on a log scale
    table["seconds"][8] = "0.05"
    table["notes"] = ["free text"] * n
    result = analyze(load(_write(tmp_path / "r.csv", table)))
    assert [(e.reason, e.count, e.rows) for e in result.excluded] == [
        ("unsigned reading", 2, (2, 7)),
        ("no reading time (seconds empty or 0)", 2, (3, 4)),
        ("reading time under 0.1 s", 2, (9, 10))]
    assert result.n["readings"] == n - 6 and result.n["excluded"] == 6
    assert result.ignored_columns == ("notes",)


def test_parquet_gives_the_csv_result(tmp_path):
    import pandas as pd

    path = write_csv(SMALL, tmp_path / "r.csv")
    frame = pd.read_csv(path)
    frame.to_parquet(tmp_path / "r.parquet")
    a = analyze(load(path)).to_json()
    b = analyze(load(tmp_path / "r.parquet")).to_json()
    for result in (a, b):
        result.pop("source")
    assert a == b


def test_session_confounded_with_arm_is_dropped_and_said(tmp_path):
    # Hong et al.'s design: session 1 without AI, session 2 with it
    table = columns(Simulation(readers=6, cases=30, sessions=2, seed=4))
    table["arm"] = ["unassisted" if s == "1" else "draft:model-a" for s in table["session"]]
    result = analyze(from_columns(table, "confounded"))
    seconds = result.outcomes["seconds"]
    assert len(seconds.contrasts) == 1 and not seconds.session_effects
    assert any("confounded" in note for note in seconds.notes)


def test_the_model_agrees_with_statsmodels_mixedlm():
    import pandas as pd
    import statsmodels.formula.api as smf

    sim = Simulation(readers=6, cases=25, sessions=2, seed=8)
    result = analyze(readings(sim)).outcomes["seconds"]
    frame = pd.DataFrame(columns(sim)).astype({"seconds": float})
    frame["log_seconds"] = np.log(frame["seconds"])
    frame["everyone"] = 1
    model = smf.mixedlm("log_seconds ~ C(arm, Treatment('unassisted')) + C(session)", frame,
                        groups="everyone", re_formula="0",
                        vc_formula={"reader": "0 + C(reader)", "case": "0 + C(case)"})
    fit = model.fit(reml=True)
    term = "C(arm, Treatment('unassisted'))[T.draft:model-a]"
    [contrast] = result.contrasts
    assert contrast.model_estimate == pytest.approx(fit.params[term], abs=1e-4)
    assert contrast.se == pytest.approx(fit.bse[term], abs=1e-4)
    assert result.random_effects["residual"] == pytest.approx(math.sqrt(fit.scale), abs=1e-3)


def test_the_interval_covers_the_known_effect_at_about_the_nominal_rate():
    """200 simulated crossover studies (6 readers x 20 cases x 2 sessions): the 95 % interval
    holds the true ratio 0.85 in 95 % of them, give or take sampling (binomial SD 1.5 %)."""
    from rrg_review.reader_study import mixed

    covered, estimates = 0, []
    for seed in range(200):
        sim = Simulation(readers=6, cases=20, sessions=2, seed=1000 + seed)
        table = columns(sim)
        y = np.log(np.array(table["seconds"], dtype=float))
        arm = np.array(table["arm"]) != "unassisted"
        session = np.array(table["session"]) == "2"
        x = np.column_stack([np.ones(len(y)), arm, session]).astype(float)
        factors = [mixed.Factor(name, np.unique(table[name], return_inverse=True)[1],
                                tuple(np.unique(table[name]).tolist()))
                   for name in ("reader", "case")]
        wald = mixed.fit(y, x, ["(Intercept)", "arm", "session"], factors).wald("arm")
        covered += wald.lo <= math.log(0.85) <= wald.hi
        estimates.append(wald.estimate)
    assert 0.91 <= covered / 200 <= 0.99, covered
    assert abs(np.mean(estimates) - math.log(0.85)) < 0.01  # unbiased


def test_a_spreadsheet_csv_with_a_byte_order_mark_loads(tmp_path):
    path = write_csv(SMALL, tmp_path / "r.csv")
    (tmp_path / "bom.csv").write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert len(load(tmp_path / "bom.csv")) == len(load(path)) == 6 * 30 * 2


def test_every_numeric_outcome_gets_its_model_and_a_tiny_table_no_traceback():
    table = columns(SMALL)
    n = len(table["reader"])
    rng = np.random.default_rng(0)
    drafted = np.array(table["arm"]) == "draft:model-a"
    table["likert"] = [str(int(v)) for v in rng.integers(1, 4, n) + drafted]  # +1 with a draft
    table["metric_bleu4"] = [f"{v:.4f}" for v in rng.normal(-0.1, 0.05, n)]  # may be negative
    result = analyze(from_columns(table, "outcomes"))
    [likert] = result.outcomes["likert"].contrasts
    assert likert.scale == "difference" and likert.ci95[0] < 1.0 < likert.ci95[1]
    assert "difference" in likert.to_json() and "log_difference" not in likert.to_json()
    assert result.outcomes["metric_bleu4"].contrasts[0].scale == "difference"
    assert {a.arm: round(a.outcomes["likert"].mean) for a in result.arms} == {
        "unassisted": 2, "draft:model-a": 3}
    tiny = {k: v[:3] for k, v in columns(SMALL).items()}
    small = analyze(from_columns(tiny, "tiny"))
    assert small.outcomes["seconds"].contrasts == ()
    assert "too few readings" in small.outcomes["seconds"].notes[-1]
    json.dumps(small.to_json(), allow_nan=False)


def test_the_html_escapes_what_the_table_says():
    from rrg_review.reader_study.report import render

    table = columns(SMALL)
    table["arm"] = ["<script>alert(1)</script>" if a != "unassisted" else a
                    for a in table["arm"]]
    table["reader"] = [f'{r}"><img src=x>' for r in table["reader"]]
    page = render(analyze(from_columns(table, "<b>file</b>.csv")))
    assert "<script" not in page and "<img" not in page and "<b>file" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
