"""Findings from report text (issue #22): the sentence split on CXR text, the extraction on real
Open-i reports (expectations checked by hand against the report, file named), and hostile text.
"""

from __future__ import annotations

import time

import pytest

from rrg_review.metrics.findings.extract import FindingExtractor, normalise
from rrg_review.metrics.findings.sentences import split_sentences


@pytest.fixture(scope="module")
def extractor() -> FindingExtractor:
    return FindingExtractor()


@pytest.mark.parametrize(("text", "expected"), [
    ("1. Emphysema. 2. No acute cardiopulmonary abnormality.",
     ["Emphysema.", "No acute cardiopulmonary abnormality."]),
    ("Seen by Dr. XXXX today. Nodule measures approx. 2.5 x 2 cm. No effusion..",
     ["Seen by Dr. XXXX today.", "Nodule measures approx. 2.5 x 2 cm.", "No effusion.."]),
    ("Heart normal\nLungs clear\n\n- no effusion", ["Heart normal", "Lungs clear",
                                                    "no effusion"]),
    ("Normal chest No evidence of tuberculosis", ["Normal chest",
                                                  "No evidence of tuberculosis"]),
    ("A 5 mm nodule. It is 2 cm. Stable.", ["A 5 mm nodule.", "It is 2 cm.", "Stable."]),
    ("No effusion; small right pneumothorax", ["No effusion;", "small right pneumothorax"]),
    ("Normal chest x-XXXX.", ["Normal chest x-XXXX."]),
    ("XXXX XXXX. XXXX", ["XXXX XXXX.", "XXXX"]),
    ("No. 2 rib fracture.", ["No. 2 rib fracture."]),
    ("", []), ("   ...  ", []), ("XXXX", ["XXXX"]),
])
def test_sentence_split_survives_cxr_text(text, expected):
    sentences = split_sentences(text)
    assert [s.text for s in sentences] == expected
    assert all(text[s.start:s.end] == s.text for s in sentences)


def test_the_split_keeps_every_word_in_one_span():
    text = "1. Small right effusion.  2. Dr. XXXX saw a 2.5 cm nodule\nStable x 2"
    spans = split_sentences(text)
    covered = " ".join(text[s.start:s.end] for s in spans)
    assert sorted(covered.split()) == sorted(w for w in text.split() if w not in ("1.", "2."))


@pytest.mark.parametrize(("word", "norm"), [("Effusions", "effusion"),
                                            ("opacities", "opacity"), ("masses", "mass"),
                                            ("pneumothoraces", "pneumothorax"),
                                            ("atelectasis", "atelectasis"), ("has", "has")])
def test_normalise(word, norm):
    assert normalise(word) == norm


def _facts(extractor, text):
    return [(f.observation, f.presence, f.laterality, tuple(sorted(f.zones)), f.severity,
             f.size_mm) for f in extractor.extract(text).findings]


@pytest.mark.parametrize(("text", "expected"), [
    ("No pleural effusion or pneumothorax.",
     [("effusion", "negated", None, (), None, None),
      ("pneumothorax", "negated", None, (), None, None)]),
    ("Small right pleural effusion.", [("effusion", "positive", "right", (), "mild", None)]),
    ("Pneumothorax is not seen.", [("pneumothorax", "negated", None, (), None, None)]),
    ("Pneumonia cannot be excluded.", [("pneumonia", "uncertain", None, (), None, None)]),
    ("Atelectasis versus pneumonia in the left base.",
     [("atelectasis", "uncertain", None, (), None, None),
      ("pneumonia", "uncertain", "left", ("lower",), None, None)]),
    ("The cardiac silhouette is not enlarged.",
     [("cardiomegaly", "negated", None, (), None, None)]),
    ("The heart is moderately enlarged.", [("cardiomegaly", "positive", None, (), "moderate",
                                            None)]),
    ("A 2.5 x 1.8 cm mass in the left upper lobe.",
     [("nodule", "positive", "left", ("upper",), None, 25.0)]),
    ("Calcified granuloma in the right apex, no effusion.",
     [("granuloma", "positive", "right", ("upper",), None, None),
      ("effusion", "negated", None, (), None, None)]),
    ("Bibasilar atelectasis.", [("atelectasis", "positive", "bilateral", ("lower",), None,
                                 None)]),
    ("Small rigth efusion.", [("effusion", "positive", "right", (), "mild", None)]),
    ("There is no pleural line to suggest pneumothorax.",
     [("pneumothorax", "negated", None, (), None, None)]),
    # one device named by two words of its kind is one finding (a review aid suggested two
    # missing findings for "port catheter": a new-user trial); two devices stay two
    ("Right port catheter tip in SVC.", [("lines_tubes", "positive", "right", ("svc",), None,
                                          None)]),
    ("ET tube and NG tube in place.", [("lines_tubes", "positive", None, (), None, None),
                                       ("lines_tubes", "positive", None, (), None, None)]),
])
def test_findings_of_written_sentences(extractor, text, expected):
    assert _facts(extractor, text) == expected


def test_change_words_make_a_comparison_statement(extractor):
    report = extractor.extract("Stable calcified granuloma. Heart size and mediastinal "
                               "contours are unchanged compared with the prior study. "
                               "New right effusion.")
    assert [sorted(c.kinds) for c in report.comparisons] == [
        ["unchanged"], ["comparison", "unchanged"], ["new"]]
    assert report.comparisons[0].observations == {"granuloma"}
    assert {"heart", "mediastinal", "contour"} <= report.comparisons[1].words
    assert report.findings[-1].change == {"new"}


# real Open-i reports (ecgen-radiology/<file>), each checked by hand against its text
OPEN_I = {
    "1.xml": [("edema", "negated", None, (), None, None),
              ("consolidation", "negated", None, (), None, None),
              ("effusion", "negated", None, (), None, None),
              ("pneumothorax", "negated", None, (), None, None)],
    # "thin right apical pneumothorax measuring approximately 5 mm", "extensive subcutaneous
    # emphysema in the right chest wall", "fractures of the right anterior 5th through 9th
    # anterior ribs", "Additional fractures cannot entirely be excluded", "mild streaky
    # airspace disease in the right lung base", "small hiatal hernia", "intrathecal catheter"
    "1874.xml": [("pneumothorax", "positive", "right", ("upper",), None, 5.0),
                 ("subcutaneous_emphysema", "positive", "right", (), "severe", None),
                 ("fracture", "positive", "right", ("anterior",), None, None),
                 ("fracture", "uncertain", None, (), None, None),
                 ("consolidation", "positive", "right", ("lower",), "mild", None),
                 ("hernia", "positive", None, (), "mild", None),
                 ("lines_tubes", "positive", None, ("lower", "thoracic"), None, None)],
    # "Cardiac size remains mildly enlarged but stable. There is mild vascular congestion.
    # Small bilateral pleural effusions are present"
    "3187.xml": [("surgical_clips", "positive", None, (), None, None),
                 ("sternotomy", "positive", None, (), None, None),
                 ("cardiomegaly", "positive", None, (), "mild", None),
                 ("congestion", "positive", None, (), "mild", None),
                 ("effusion", "positive", "bilateral", (), "mild", None)],
    # "Left IJ dual-lumen catheter is visualized without pneumothorax."
    "1897.xml": [("lines_tubes", "positive", "left", ("jugular",), None, None),
                 ("pneumothorax", "negated", None, (), None, None)],
    # "Vague patchy opacity in the right midlung which may represent early pneumonia."
    "3074.xml": [("granuloma", "positive", None, (), None, None),
                 ("opacity", "positive", "right", ("middle",), None, None),
                 ("pneumonia", "uncertain", None, (), None, None),
                 ("effusion", "negated", None, (), None, None),
                 ("pneumothorax", "negated", None, (), None, None),
                 ("degenerative", "positive", None, (), None, None)],
    # "Negative for cardiac enlargement. Negative for vascular congestion. There are several
    # small circular opacities in the right upper lung"
    "2467.xml": [("cardiomegaly", "negated", None, (), None, None),
                 ("congestion", "negated", None, (), None, None),
                 ("opacity", "positive", "right", ("upper",), "mild", None)],
    # "...which may represent interstitial edema. ... which could represent a small effusion."
    "877.xml": [("sternotomy", "positive", None, (), None, None),
                ("surgical_clips", "positive", None, (), None, None),
                ("sternotomy", "positive", None, (), None, None),
                ("low_volumes", "positive", None, (), None, None),
                ("interstitial", "positive", None, (), None, None),
                ("edema", "uncertain", None, (), None, None),
                ("effusion", "uncertain", None, (), "mild", None),
                ("pneumothorax", "negated", None, (), None, None)],
}


@pytest.fixture(scope="module")
def open_i_findings():
    """{file name: findings} of the real Open-i reports (skipped where ../shared is absent)."""
    from tests.conftest import IU_ARCHIVE as archive

    if not archive.is_file():
        pytest.skip(f"shared IU X-ray archive not found at {archive} (../shared is absent)")
    from rrg_review.studies.importers.base import get_importer
    from rrg_review.studies.records import StudyRecord

    out = {}
    for record in get_importer("iu-xray").read(archive):
        if isinstance(record, StudyRecord) and record.reference is not None:
            out[record.origin.rsplit("/", 1)[-1]] = record.reference.findings or ""
    return out


@pytest.mark.parametrize("name", list(OPEN_I))
def test_findings_of_real_open_i_reports(extractor, open_i_findings, name):
    assert _facts(extractor, open_i_findings[name]) == OPEN_I[name]


def test_every_open_i_report_extracts_quickly(extractor, open_i_findings):
    texts = [t for t in open_i_findings.values() if t]
    t0 = time.perf_counter()
    reports = [extractor.extract(t) for t in texts]
    per_report_ms = (time.perf_counter() - t0) * 1000 / len(texts)
    print(f"{len(texts)} Open-i findings sections: {per_report_ms:.2f} ms per report")
    assert sum(len(r.findings) for r in reports) > 3 * len(texts)
    assert per_report_ms < 20


@pytest.mark.parametrize("text", [
    "", "XXXX", "XXXX XXXX XXXX. XXXX.", "....;;;,,,", "\n\n\n", "1. 2. 3.",
    "ÉPANCHEMENT pleural droit 🫁 — 左胸水 \u202e right effusion",
    "no periods at all just words effusion right small pneumothorax left large",
    "x " * 2000, "1" * 5000 + " cm",
])
def test_hostile_text_gives_typed_results(extractor, text):
    report = extractor.extract(text)
    for f in report.findings:
        assert 0 <= f.start < f.end <= len(text)
        assert f.sentence_start <= f.start and f.end <= f.sentence_end


def test_fifty_kilobytes_without_a_period_in_well_under_a_second(extractor):
    text = ("small right pleural effusion and no pneumothorax XXXX stable granuloma "
            * 800)[:50_000]
    t0 = time.perf_counter()
    report = extractor.extract(text)
    assert time.perf_counter() - t0 < 2.0
    assert {f.observation for f in report.findings} >= {"effusion", "pneumothorax",
                                                        "granuloma"}


@pytest.mark.parametrize(("text", "expected"), [
    ("The right hemidiaphragm remains elevated.",
     [("elevated_diaphragm", "positive", "right", (), None, None)]),
    ("The mediastinum is not widened.",
     [("mediastinal_widening", "negated", None, (), None, None)]),
    ("Calcified granuloma, left lung base.",
     [("granuloma", "positive", "left", ("lower",), None, None)]),
])
def test_findings_named_apart_and_places_after_a_comma(extractor, text, expected):
    assert _facts(extractor, text) == expected


def test_three_thousand_sentences_take_ten_times_three_hundred_not_a_hundred(extractor):
    """The split looks back a bounded distance from each period (it was quadratic: 12 s for
    3,000 sentences). Checked as a ratio within one run, best of three each, so a loaded
    machine slows both sides alike: linear work gives ~10x for 10x the text, quadratic
    ~100x. (A fixed limit in seconds failed on a loaded machine at 2.7 s.)"""
    def best_of_three(pairs: int) -> float:
        text = "Small right effusion. 2. No pneumothorax. " * pairs
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            report = extractor.extract(text)
            times.append(time.perf_counter() - t0)
        assert len(report.sentences) == 2 * pairs
        return min(times)

    ratio = best_of_three(1500) / best_of_three(150)
    assert ratio < 35, f"3,000 sentences took {ratio:.0f}x the time of 300"
