"""Flags on a draft before the reader edits it (issue #22, text half): each kind raised by text
that has it, and the look-alikes that must not raise it."""

from __future__ import annotations

import pytest

from rrg_review.metrics.findings.extract import FindingExtractor
from rrg_review.metrics.findings.flags import flag_draft, reference_flags


@pytest.fixture(scope="module")
def extractor() -> FindingExtractor:
    return FindingExtractor()


def _flagged(flags, findings, impression=""):
    return sorted((f.kind, f.section, (findings if f.section == "findings" else impression)
                   [f.span[0]:f.span[1]]) for f in flags)


def test_a_finding_both_reported_and_denied(extractor):
    text = "No pleural effusion. The heart is normal. Small right pleural effusion."
    assert _flagged(flag_draft(text, extractor=extractor), text) == [
        ("contradiction", "findings", "No pleural effusion."),
        ("contradiction", "findings", "Small right pleural effusion.")]


@pytest.mark.parametrize("text", [
    "No large pleural effusion. Small right pleural effusion.",
    "No focal consolidation. Streaky left basilar consolidation.",
    "No new opacity. Right upper lobe opacity, unchanged.",
    "No right pleural effusion. Small left pleural effusion.",
    "The central line has been removed. A right PICC line is in place.",
    "No effusion or pneumothorax.",
])
def test_denials_of_a_grade_kind_side_or_change_are_no_contradiction(extractor, text):
    assert flag_draft(text, extractor=extractor) == ()


def test_findings_and_impression_that_disagree(extractor):
    findings = "Small right pleural effusion. No pneumothorax. Mild cardiomegaly."
    impression = "Small left pleural effusion. Right pneumothorax. Severe cardiomegaly."
    flags = flag_draft(findings, impression, extractor=extractor)
    assert {f.kind for f in flags} == {"sections_disagree"}
    reasons = sorted(f.reason for f in flags if f.section == "impression")
    assert reasons == ["cardiomegaly: severe in the impression, mild in the findings",
                       "effusion: left in the impression, right in the findings",
                       "pneumothorax: reported in the impression, denied in the findings"]


@pytest.mark.parametrize(("findings", "impression"), [
    ("Small right pleural effusion. Mild cardiomegaly.", "Mild cardiomegaly."),
    ("Small right pleural effusion.", "Small pleural effusion."),
    ("Trace right pleural effusion.", "Small right pleural effusion."),
    ("No large pleural effusion. Minimal atelectasis.", "Small effusion."),
])
def test_an_impression_that_summarises_is_no_disagreement(extractor, findings, impression):
    assert flag_draft(findings, impression, extractor=extractor) == ()


def test_a_comparison_without_a_prior(extractor):
    text = "Stable cardiomegaly. New small right pleural effusion. No pneumothorax."
    assert _flagged(flag_draft(text, has_prior=False, extractor=extractor), text) == [
        ("comparison_without_prior", "findings", "New small right pleural effusion."),
        ("comparison_without_prior", "findings", "Stable cardiomegaly.")]
    assert flag_draft(text, has_prior=True, extractor=extractor) == ()
    assert flag_draft(text, extractor=extractor) == ()  # unknown: nothing claimed


def test_a_comparison_the_prior_contradicts(extractor):
    text = "New small right pleural effusion. The pneumothorax has resolved. Stable nodule."
    flags = flag_draft(text, has_prior=True, prior="Small right pleural effusion. No "
                       "pneumothorax. Right upper lobe nodule.", extractor=extractor)
    assert [(f.kind, f.reason) for f in flags] == [
        ("prior_disagrees", "effusion: called new, the prior already reports it"),
        ("prior_disagrees", "pneumothorax: called resolved, the prior never reported it")]


def test_reference_flags_name_both_sides(extractor):
    draft = "Small right pleural effusion. Mild cardiomegaly."
    reference = "Mild cardiomegaly. Left lower lobe atelectasis."
    flags = reference_flags(draft, reference, extractor)
    assert [(f.kind, f.section, (draft if f.section == "draft" else reference)
             [f.span[0]:f.span[1]]) for f in flags] == [
        ("reference_extra", "draft", "Small right pleural effusion."),
        ("reference_missing", "reference", "Left lower lobe atelectasis.")]


@pytest.mark.parametrize(("draft", "reference"), [
    ("Several well-circumscribed nodular opacities are seen bilaterally.",
     "Numerous well-defined rounded opacities are present in both lungs."),
    ("There are multiple round opacities of varying size in both lungs.",
     "Multiple rounded soft-tissue nodules and masses persist throughout both lungs.")])
def test_a_nodule_in_other_words_is_no_reference_flag(extractor, draft, reference):
    """A nodule is a rounded opacity (the Fleischner glossary's words): the demo's drafts and
    references, worded so, were each flagged as missing from the other (a new-user trial)."""
    assert reference_flags(draft, reference, extractor) == ()


@pytest.mark.parametrize("text", ["", "XXXX", "....", "x " * 5000])
def test_hostile_drafts_raise_no_flag(extractor, text):
    assert flag_draft(text, text, has_prior=False, prior=text, extractor=extractor) == ()
