"""The export's measures of the review aids (issue #22): suggested vs confirmed ReXVal counts
from ratings stored through the review service on SQLite and PostgreSQL (kappa checked against
scikit-learn, another implementation than the statsmodels one the export uses), and each draft
flag kind against the sentences readers edited."""

from __future__ import annotations

import csv
import json
import math

import pytest
from sklearn.metrics import cohen_kappa_score

from rrg_review.app.accounts.service import AccountService
from rrg_review.app.evaluation.aids import flag_outcomes
from rrg_review.app.evaluation.export import ReviewRow, evaluate, export
from rrg_review.app.review.service import ReviewService
from rrg_review.app.worklist.service import WorklistService
from rrg_review.metrics.findings.flags import FLAG_KINDS

pytestmark = pytest.mark.both_databases

# (suggested, the reader's confirmed counts) per study; the last rating predates suggestions
RATINGS = [
    ({"missing_finding": 1}, {"missing_finding": {"significant": 1}}),
    ({"missing_finding": 1, "false_finding": 1}, {"false_finding": {"insignificant": 1}}),
    ({}, {"missing_finding": {"significant": 2}, "wrong_severity": {"insignificant": 1}}),
    (None, {"missing_finding": {"significant": 5}}),
]


def test_suggested_vs_confirmed_per_category_in_every_format(drafted_db, tmp_path):
    review = ReviewService(drafted_db)
    reader = AccountService(drafted_db).local_reader()
    studies = [w.study_id for w in WorklistService(drafted_db).items(reader)][:len(RATINGS)]
    for study, (suggested, errors) in zip(studies, RATINGS, strict=True):
        review.rate(reader, study, likert=3, acceptable=False, errors=errors,
                    preset="retrieval", suggested=suggested)
    ev = evaluate(drafted_db, metrics=[], n_resamples=0)
    table = {a.category: a for a in ev.suggestion_agreement}
    missing = table["missing_finding"]
    assert (missing.n, missing.suggested, missing.confirmed) == (3, 2, 3)  # not the 5
    assert missing.exact == pytest.approx(1 / 3)
    assert missing.kappa == pytest.approx(cohen_kappa_score([1, 1, 0], [1, 0, 1]))
    false = table["false_finding"]
    assert (false.suggested, false.confirmed, false.exact, false.kappa) == (1, 1, 1.0, 1.0)
    severity = table["wrong_severity"]  # never suggested, once confirmed: kappa 0, no p
    assert (severity.kappa, severity.p_value) == (0.0, None)
    assert severity.exact == pytest.approx(2 / 3)
    assert math.isnan(table["wrong_location"].kappa)  # never either: undefined
    data = json.loads(export(drafted_db, "json", tmp_path / "e.json", n_resamples=0,
                             metrics=[])[0].read_text())
    assert [a["category"] for a in data["suggestion_agreement"]] == list(table)
    assert data["suggestion_agreement"][2]["kappa"] is None  # NaN: null in strict JSON
    html = export(drafted_db, "html", tmp_path / "e.html", n_resamples=0,
                  metrics=[])[0].read_text()
    assert 'id="suggestion-agreement"' in html and "missing a finding" in html.lower()
    with export(drafted_db, "csv", tmp_path / "e.csv", n_resamples=0,
                metrics=[])[0].open(newline="") as f:
        suggested = {r["missing_finding_suggested"] for r in csv.DictReader(f)}
    assert suggested >= {"1", "0", ""}
    assert 'id="flag-outcomes"' in html
    assert [f["kind"] for f in data["flag_outcomes"]] == list(FLAG_KINDS)


def _row(study: int, section: str, draft: str, final: str | None, reader: str | None = "a",
         reference: str | None = None) -> ReviewRow:
    return ReviewRow(study, "demo", f"k{study}", None, section, "retrieval", "m", None, reader,
                     draft, final, reference, has_prior=False)


def test_each_flag_kind_against_the_sentences_readers_edited():
    """Precision: flagged sentences the reader edited / flagged; recall: edited sentences that
    were flagged / edited (a sentence is edited when the final lacks it up to case/spacing)."""
    rows = [
        _row(1, "findings", "No pleural effusion. Large left pleural effusion. Heart normal.",
             "large left  PLEURAL effusion. Heart normal."),
        _row(1, "impression", "Stable cardiomegaly.", "Stable cardiomegaly."),
        _row(2, "findings", "Small right pneumothorax. Lungs clear.", "No pneumothorax. "
             "Lungs clear.", reference="No pneumothorax."),
        _row(3, "findings", "No pleural effusion. Large pleural effusion.", None, reader=None),
    ]
    outcomes = {f.kind: f for f in flag_outcomes(rows)}
    assert {(f.n, f.edited) for f in outcomes.values()} == {(3, 2)}
    contradiction = outcomes["contradiction"]
    assert (contradiction.flagged, contradiction.both) == (2, 1)
    assert (contradiction.precision, contradiction.recall) == (0.5, 0.5)
    compared = outcomes["comparison_without_prior"]
    assert (compared.flagged, compared.both, compared.precision) == (1, 0, 0.0)
    extra = outcomes["reference_extra"]
    assert (extra.flagged, extra.both, extra.precision, extra.recall) == (1, 1, 1.0, 0.5)
    assert math.isnan(outcomes["prior_disagrees"].precision)
    assert flag_outcomes([rows[-1]]) == ()
