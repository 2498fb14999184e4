"""The export's agreement between suggested and confirmed ReXVal counts (issue #22), from ratings
stored through the review service on SQLite and PostgreSQL, checked against scikit-learn's
kappa (another implementation than the statsmodels one the export uses)."""

from __future__ import annotations

import csv
import json
import math

import pytest
from sklearn.metrics import cohen_kappa_score

from rrg_review.app.accounts.service import AccountService
from rrg_review.app.evaluation.export import evaluate, export
from rrg_review.app.review.service import ReviewService
from rrg_review.app.worklist.service import WorklistService

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
