"""The evaluation's steps when a metric crashes: the failure is reported for that metric while
the other metrics' results are still computed (real SQLite score cache, real metrics)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from rrg_review.app.evaluation.results import ReviewRow
from rrg_review.app.evaluation.steps import paired_comparisons
from rrg_review.db.engine import Database
from rrg_review.db.metric_cache import DatabaseScoreCache
from rrg_review.metrics.base import Payload
from rrg_review.metrics.bleu import Bleu4
from rrg_review.metrics.rouge import RougeL


class _CrashingRouge(RougeL):
    """ROUGE-L whose computation dies as a model on a full GPU would; counts its attempts."""

    def __init__(self) -> None:
        super().__init__()
        self.attempts = 0

    def compute(self, hyps: Sequence[str], refs: Sequence[str]) -> list[Payload]:
        self.attempts += 1
        raise RuntimeError("CUDA out of memory")


def _row(study: int, preset: str, draft: str, reference: str) -> ReviewRow:
    return ReviewRow(study_id=study, source="demo", study_key=f"s{study}", split=None,
                     section="findings", preset=preset, model_id=preset, model_revision=None,
                     reader=None, draft=draft, final=None, reference=reference)


def test_a_metric_crashing_in_a_paired_test_is_reported_and_the_others_go_on(db: Database):
    refs = ["no acute disease", "small left effusion", "heart size is normal"]
    by_model_section = {
        ("a", "findings"): [_row(i, "a", f"no effusion seen {i}", r)
                            for i, r in enumerate(refs)],
        ("b", "findings"): [_row(i, "b", r, r) for i, r in enumerate(refs)],
    }
    crashing = _CrashingRouge()
    unavailable: dict[str, str] = {}
    out = paired_comparisons(by_model_section, [crashing, Bleu4()], DatabaseScoreCache(db),
                             n_resamples=200, unavailable=unavailable)
    assert {p.result.key for p in out} == {"bleu4"}
    assert all(p.result.n == 3 for p in out)
    assert "CUDA out of memory" in unavailable["rougeL"]
    assert unavailable["rougeL"].startswith("paired comparison")
    assert crashing.attempts == 2  # retried once after freeing the model, then given up


def test_not_computable_values_are_written_as_null_empty_and_a_dash(db: Database):
    """NaN (a metric on no pairs, a statistic without variance) in every export format: JSON
    stays strictly valid with null, CSV has an empty cell, HTML shows a dash; none crashes."""
    import csv
    import io
    import json
    from dataclasses import replace

    from rrg_review.app.evaluation.report_html import render
    from rrg_review.app.evaluation.results import AutomaticResult, MetricAgreement
    from rrg_review.app.evaluation.steps import evaluate
    from rrg_review.app.evaluation.writers import csv_text, json_text

    nan = float("nan")
    ev = evaluate(db, metrics=[Bleu4()], n_resamples=0)  # an empty real database
    row = replace(_row(1, "a", "lungs clear", "lungs are clear"),
                  metrics={"draft_vs_reference": {"chexbert_all_micro_f1": nan, "bleu4": 0.5}})
    ev = replace(ev, rows=(row,),
                 automatic=(AutomaticResult("a", "findings", "all", "chexbert_all_micro_f1",
                                            nan, (nan, nan), 0),
                            AutomaticResult("a", "findings", "all", "inv_radcliq_v1",
                                            float("inf"), (None, None), 1)),
                 metric_agreement=(MetricAgreement("bleu4", "all errors", "kendall_tau_b",
                                                   nan, nan, 2),))

    def refuse(token):
        raise ValueError(f"not JSON: {token}")

    data = json.loads(json_text(ev), parse_constant=refuse)
    assert [(a["value"], a["ci"]) for a in data["automatic"]] == [(None, [None, None]),
                                                                    (None, [None, None])]
    assert data["rows"][0]["draft_vs_reference.chexbert_all_micro_f1"] is None
    assert data["rows"][0]["draft_vs_reference.bleu4"] == 0.5
    assert (data["metric_agreement"][0]["value"], data["metric_agreement"][0]["p_value"]) == (
        None, None)
    cells = next(csv.DictReader(io.StringIO(csv_text(ev))))
    assert cells["draft_vs_reference.chexbert_all_micro_f1"] == ""
    assert float(cells["draft_vs_reference.bleu4"]) == 0.5
    page = render(ev)
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", page)
    assert not [c for c in cells if "nan" in c.lower()], cells
    assert "—" in cells and "— – —" in cells  # the value and its interval


def test_the_cli_paired_test_reports_a_metric_crashing_on_the_compare_side(db: Database):
    """`rrg-review score --compare`: the --compare predictions are scored after the main ones; a
    metric crashing there is reported with its reason and the other metrics' tests still run."""
    from argparse import Namespace

    from rrg_review.app.cli import _paired
    from rrg_review.metrics.scoring import score

    refs = ["no acute disease", "small left effusion", "heart size is normal"]
    hyps = ["no acute disease seen", "left effusion", "normal heart"]
    rouge = RougeL()
    report = score(hyps, refs, [rouge, Bleu4()], DatabaseScoreCache(db), n_resamples=0)
    attempts: list[int] = []

    def crash(hyps: Sequence[str], refs: Sequence[str]) -> list[Payload]:
        attempts.append(1)
        raise RuntimeError("CUDA out of memory")

    rouge.compute = crash  # type: ignore[method-assign]  # the compare side's run dies
    paired, failed = _paired(report, ["no disease", "effusion", "heart normal"], refs,
                             Namespace(bootstrap=0), DatabaseScoreCache(db))
    assert set(paired) == {"bleu4"} and paired["bleu4"]["n"] == 3
    assert "CUDA out of memory" in failed["rougeL"]
    assert len(attempts) == 2  # retried once, then reported
