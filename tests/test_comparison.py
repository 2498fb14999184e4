"""A retrieval draft for a patient without a prior never cites one: the copied sentences that
compare with an earlier examination are dropped (model/comparison.py), on hand cases and on the
real Open-i report sentences, and the draft's provenance and model note say so. With a prior,
the other patient's examination dates are dropped all the same (a new-user trial saw "compared
with 2024-09-02", another patient's date, beside this patient's prior of 2024-01-10)."""

from __future__ import annotations

import random
import re
from datetime import UTC, datetime

import numpy as np
import pytest

from rrg_review.model.backends.retrieval import Candidate, RetrievalDrafter, ThumbnailFeatures
from rrg_review.model.comparison import (
    compares,
    dated,
    sentences,
    without_comparisons,
    without_dates,
)
from rrg_review.model.inputs import InputImage, PriorStudy, StudyInput
from rrg_review.model.presets import load_presets

COMPARISONS = [
    "Heart size is unchanged from the prior radiograph.",
    "Compared with the previous study, the effusion is smaller.",
    "Comparison: none.",
    "Interval improvement of the left basilar opacity.",
    "The right lower lobe opacity is again seen.",
    "Redemonstration of a calcified granuloma.",
    "No new consolidation.",  # "new": a statement about what changed
    "New small left pleural effusion.",
    "Stable cardiomediastinal silhouette.",
    "The lungs remain clear.",
    "Persistent right apical pleural thickening.",
    "Resolved right middle lobe pneumonia.",
    "No significant change since 2014.",
    "The nodule has increased in size.",
    "Worsening bilateral airspace disease.",
    "Heart size is now normal.",
    "Previously seen nodule is not visible.",
    # found kept by a new-user trial in a draft for a patient with no prior
    "Heart size has increased.",
    "Right upper lobe nodule is enlarging.",
    "Decreased right effusion.",
    "Enlarging right upper lobe nodule.",
    "Increasing bibasilar opacities.",
    "Smaller left pleural effusion.",
    # ... and by new-user trial 17
    "Decreased right basal atelectasis.",
    "Less atelectasis.",
    "Bibasilar opacities, Increased.",
    "Less pulmonary edema.",
    "More confluent consolidation in the left lower lobe.",
    "Decreased size of the right pleural effusion.",
    "Less prominent interstitial markings.",
    "Right effusion, slightly decreased.",
    "Decreased bibasilar opacities.",
    # ... and by new-user trial 18
    "Development of a left effusion.",
    "Regressing consolidation.",
    "Waning edema.",
    "Left effusion is no longer seen.",
    "Heart is bigger.",
    "Right pleural effusion has reaccumulated.",
    "Near complete clearing of the left base.",
    "The ET tube has been removed.",
    "Worse aeration.",
    "Opacities, better.",
    "Similar appearance of the lungs.",
    "Pneumothorax is gone.",
    "Left lung has re-expanded.",
    "Effusion is still present.",
    "The opacity has largely disappeared.",
    "Progressive fibrosis.",
    "Opacity has cleared.",
    "Evolving right lower lobe pneumonia.",
    # ... and by new-user trial 19
    "Right basilar opacity, worse than before.",
    "Left effusion, better than before.",
    # ... and by new-user trial 20
    "The endotracheal tube has been advanced.",
    "The nasogastric tube has been withdrawn.",
    "Lung volumes are lower.",
]
NOT_COMPARISONS = [
    "The heart is normal in size.",
    "No focal consolidation, pleural effusion or pneumothorax.",
    "Degenerative changes of the thoracic spine.",
    "Emphysematous changes in both upper lobes.",
    "Increased interstitial markings at both bases.",
    "Old healed fracture of the right 6th rib.",
    "Postoperative changes of median sternotomy.",
    "Consider CT with high resolution technique.",
    "A follow-up radiograph in 6 weeks is recommended to ensure resolution.",
    "No acute cardiopulmonary abnormality.",
    "Known pulmonary metastases in both lungs.",
    "Renewed clinical concern for pneumonia.",  # "new" only as a whole word
    "The heart is enlarged.",
    "Decreased lung volumes.",
    "Increased opacity in the right lower lobe.",
    "Decreased lung volumes and bibasilar atelectasis.",
    "Low lung volumes, more prominent on the right.",
    "Opacities are more prominent on the right than the left.",
    "Pneumonia is less likely.",
    "No more than trace fluid.",
    "Left lower lobe opacity, more likely atelectasis than pneumonia.",
    "Interstitial thickening bilaterally, more prominent in the bases.",  # real (Open-i)
    "Similar less severe changes of the two subjacent ribs.",
    # real Open-i sentences about this film or a recommendation
    "Bibasilar airspace disease, left worse right.",
    "If clinically indicated, XXXX scan would better define this.",
    "Consider followup chest radiographs to show clearing.",
    "Nodule better seen on the lateral view.",
    "Progressive massive fibrosis in both upper lobes.",
    "The lungs are clear.",
    "The left hemidiaphragm is higher than the right.",
    "Opacity is lower lobe predominant.",
    "Lung volumes are low.",
]


DATED = [
    "Stable bilateral pulmonary metastases compared with 2024-09-02.",
    "Compared to the radiograph of 9/2/2024, no change.",
    "Since 02.09.24 the effusion has resolved.",
    "Unchanged from September 2, 2024.",
    "As on 2 Sep 2024, the line is in place.",
    "Nodule unchanged since Sept 2024.",
    "No significant change since 2014.",
]
UNDATED = [
    "T11/T12 compression deformity.",
    "About 1/2 of the right hemithorax is opacified.",
    "Heart size 12.5 cm.",
    "Comparison XXXX, XXXX.",  # Open-i's de-identified dates name none
    "May represent atelectasis.",
    "Follow-up in 3 months.",
]


@pytest.mark.parametrize(("rule", "sentence", "expected"), [
    *((compares, s, True) for s in COMPARISONS),  # compares with a prior
    *((compares, s, False) for s in NOT_COMPARISONS),  # about this film: kept
    *((dated, s, True) for s in DATED),  # names a date
    *((dated, s, False) for s in UNDATED),
])
def test_each_sentence_is_recognised_as_it_should_be(rule, sentence, expected):
    assert rule(sentence) is expected


def test_a_report_keeps_its_other_sentences_in_order():
    text = ("Heart size is normal. Unchanged right hilar fullness compared to 2.5 cm before. "
            "No pleural effusion.\nStable granuloma. Lungs are clear.")
    kept = without_comparisons(text)
    assert kept.text == "Heart size is normal. No pleural effusion. Lungs are clear."
    assert kept.removed == ("Unchanged right hilar fullness compared to 2.5 cm before.",
                            "Stable granuloma.")
    plain = "Heart size is normal.\nLungs are clear."
    assert without_comparisons(plain).text == plain  # untouched, line break and all
    assert without_comparisons(None).text == "" and not without_comparisons("").removed


def test_real_open_i_sentences(iu_archive):
    """Over the 3,955 real Open-i reports: what is left never names a prior examination, every
    kept sentence is the report's own, and the words that describe this film stay."""
    from rrg_review.studies.importers.base import get_importer

    refs = [r.reference for r in get_importer("iu-xray").read(iu_archive) if r.reference]
    texts = [t for r in refs for t in (r.findings, r.impression) if t]
    assert len(texts) > 5000
    naming = re.compile(r"\b(prior|previous|comparison|compared|interval|unchanged|again|"
                        r"stable|redemonstrat\w*|new|since)\b", re.IGNORECASE)
    changed = 0
    for text in texts:
        kept = without_comparisons(text)
        changed += bool(kept.removed)
        assert not naming.search(kept.text), (text, kept.text)
        own = sentences(text)
        assert all(s in own for s in sentences(kept.text)), text
        assert len(sentences(kept.text)) + len(kept.removed) == len(own)
    assert 0.1 < changed / len(texts) < 0.5, changed  # ~1,500 of ~6,700 sections
    all_sentences = [s for t in texts for s in sentences(t)]
    # real sentences with words that look like change but describe this film: kept (unless
    # another word of theirs compares)
    other = re.compile(naming.pattern + r"|persist|remain|improv|resol|worse|now\b",
                       re.IGNORECASE)
    for pattern in (r"degenerative change", r"emphysematous change", r"^The lungs are clear",
                    r"increased (interstitial|opacity|density|lucency)", r"\bold\b|healed",
                    r"postoperative|post-operative|postsurgical"):
        found = [s for s in all_sentences
                 if re.search(pattern, s, re.IGNORECASE) and not other.search(s)]
        assert len(found) >= 3, pattern
        assert not [s for s in found if compares(s)], pattern
    # real comparison sentences: dropped
    rng = random.Random(3)
    for phrase in ("compared to prior", "unchanged", "interval", "stable", "again noted"):
        found = [s for s in all_sentences if phrase in s.lower()]
        assert found and all(compares(s) for s in rng.sample(found, min(30, len(found)))), phrase


# -- the retrieval drafter -------------------------------------------------------------------
def _image(seed: int) -> InputImage:
    pixels = np.random.default_rng(seed).integers(0, 255, (64, 64), dtype=np.uint8)
    return InputImage(pixels, "PA", "frontal", f"sum-{seed}")


def _drafter(*reports: tuple[str, str]) -> RetrievalDrafter:
    """Candidates 1, 2, ... of other patients, each one's image a little less like image 0."""
    base = _image(0).pixels.astype(np.int16)
    candidates = []
    for i, (findings, impression) in enumerate(reports, start=1):
        noise = np.random.default_rng(100 + i).integers(-8 * i, 8 * i + 1, base.shape)
        image = InputImage(np.clip(base + noise, 0, 255).astype(np.uint8), "PA", "frontal",
                           f"candidate-{i}")
        candidates.append(Candidate(i, f"other-{i}", (image.checksum,),
                                    lambda image=image: (image,), findings, impression))
    return RetrievalDrafter(load_presets()["retrieval"],
                            lambda after: [c for c in candidates if c.study_id > after],
                            ThumbnailFeatures())


def _study(prior: PriorStudy | None) -> StudyInput:
    return StudyInput(99, (InputImage(_image(0).pixels, "PA", "frontal", "query"),), "me",
                      prior=prior)


NEAREST = ("Heart size is unchanged. No pleural effusion. Interval resolution of the left "
           "basilar opacity.", "No acute disease. Stable chest compared with 2019.")


def test_no_prior_no_comparison_in_the_draft_and_the_provenance_says_so():
    drafter = _drafter(NEAREST, ("Heart normal.", "Normal chest."))
    drafts = {d.section: d for d in drafter.draft([_study(None)])}
    assert drafts["findings"].text == "No pleural effusion."
    assert drafts["impression"].text == "No acute disease."
    generation = drafts["findings"].provenance.generation
    assert generation["neighbour_study_id"] == 1
    assert generation["comparisons_removed"] == {"findings": 2, "impression": 1}


def test_with_a_prior_comparisons_stay_but_the_other_patients_dates_go():
    drafter = _drafter(NEAREST, ("Heart normal.", "Normal chest."))
    drafts = {d.section: d for d in drafter.draft([_study(PriorStudy(findings="Old."))])}
    assert drafts["findings"].text == NEAREST[0]  # checked against the prior beside it
    assert drafts["impression"].text == "No acute disease."
    generation = drafts["findings"].provenance.generation
    assert "comparisons_removed" not in generation
    assert generation["dates_removed"] == {"impression": 1}
    undated = _drafter(("Heart normal. Unchanged chest.", "Stable."))
    drafts = {d.section: d for d in undated.draft([_study(PriorStudy(findings="Old."))])}
    assert (drafts["findings"].text, drafts["impression"].text) == (
        "Heart normal. Unchanged chest.", "Stable.")
    assert "dates_removed" not in drafts["findings"].provenance.generation
    assert without_dates("Lungs clear.\nNo effusion.").text == "Lungs clear.\nNo effusion."


def test_a_neighbour_that_is_all_comparison_is_passed_over():
    drafter = _drafter(("Unchanged chest.", "Stable."), ("Heart normal.", "Normal chest."))
    drafts = {d.section: d for d in drafter.draft([_study(None)])}
    assert drafts["impression"].text == "Normal chest." and drafts["impression"].error is None
    assert drafts["findings"].provenance.generation["neighbour_study_id"] == 2


def test_when_every_neighbour_compares_the_section_says_why_instead_of_citing_a_prior():
    drafter = _drafter(("Heart normal. Unchanged chest.", "Stable."))
    drafts = {d.section: d for d in drafter.draft([_study(None)])}
    assert drafts["findings"].text == "Heart normal."
    assert drafts["impression"].text is None
    assert "compares with a prior study" in drafts["impression"].error


def test_the_model_note_says_comparison_sentences_were_removed():
    from rrg_review.app.drafting.service import StoredDraft
    from rrg_review.app.review.desk import draft_label

    class Service:
        @staticmethod
        def preset(name):
            return load_presets()["retrieval"]

    draft = StoredDraft(1, 99, "findings", "retrieval", "No pleural effusion.", None,
                        "retrieval/thumbnail-32", None,
                        {"neighbour_study_id": 1, "similarity": 0.9,
                         "comparisons_removed": {"findings": 2, "impression": 1}},
                        "cpu", "float32", 0.01, datetime.now(UTC))
    note = draft_label("retrieval", {"findings": draft}, Service())  # type: ignore[arg-type]
    assert "3 sentences comparing with a prior study were removed" in note
    assert "this patient has no prior" in note
    dated_draft = StoredDraft(1, 99, "impression", "retrieval", "No acute disease.", None,
                              "retrieval/thumbnail-32", None,
                              {"neighbour_study_id": 1, "similarity": 0.9,
                               "dates_removed": {"impression": 1}},
                              "cpu", "float32", 0.01, datetime.now(UTC))
    note = draft_label("retrieval", {"impression": dated_draft}, Service())  # type: ignore[arg-type]
    assert "1 sentence naming the other patient's examination dates was removed" in note
    assert "no prior" not in note
