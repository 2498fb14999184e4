"""The review page's aids without a browser (issue #22): counts over both sections, marks for the
text they were computed for, hostile report text escaped, reference flags only when asked."""

from __future__ import annotations

import json

from rrg_review.app.review.aids import ReviewAids
from rrg_review.studies.records import ReportSections

DRAFT = {"findings": "Small right pleural effusion. No pneumothorax.",
         "impression": "Small right effusion."}


def test_an_observation_changed_in_both_sections_counts_once():
    aids = ReviewAids()
    final = {"findings": "No pleural effusion. No pneumothorax.",
             "impression": "No acute disease."}
    suggestion = aids.suggest(DRAFT, final)
    assert [s for s, _ in suggestion.errors] == ["findings", "impression"]
    assert suggestion.counts()["false_finding"] == 1
    assert not aids.suggest(DRAFT, DRAFT).any
    assert not aids.suggest({"findings": "", "impression": ""}, final).any  # no draft


def test_marks_and_notes_are_for_the_text_on_screen_and_escaped():
    aids = ReviewAids()
    texts = {"findings": "No pleural effusion. <script>alert(1)</script> Large left effusion.",
             "impression": DRAFT["impression"]}
    blind = aids.view(DRAFT, texts, has_prior=False, reference=None)
    seen = aids.view(DRAFT, texts, has_prior=False,
                     reference=ReportSections("Normal chest.", "No acute disease."))
    assert not {f.kind for f in blind.flags} & {"reference_extra", "reference_missing"}
    assert {"reference_extra", "contradiction"} <= {f.kind for f in seen.flags}
    assert "<script>" not in seen.flags_html + seen.suggestion_html
    assert "&lt;script&gt;" in seen.flags_html
    data = json.loads(seen.marks_json)
    assert data["texts"] == texts
    for section, marks in data["marks"].items():
        for start, end, kind, reason in marks:
            assert texts[section][start:end].strip() and kind in ("flag", "suggested") and reason
    assert "wrong_location" in data["rows"]  # right -> left effusion
