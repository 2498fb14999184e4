"""Evaluation reports from a database filled through the real import, drafting and review code."""

from __future__ import annotations

import csv
import json
from html.parser import HTMLParser

import numpy as np
import pytest

from rrg_review.app.cli import main as cli
from rrg_review.app.evaluation.export import ExportFilters, evaluate, export
from rrg_review.metrics.agreement import (
    cohen_kappa,
    fleiss_kappa,
    kendall_tau_b,
    krippendorff_alpha,
)
from rrg_review.metrics.bertscore import BertScore
from rrg_review.metrics.bleu import Bleu4
from rrg_review.metrics.edits import word_error_rate
from rrg_review.metrics.rouge import RougeL
from tests.browser import CHROMIUM, launch_browser

SECTIONS_IDS = ("evaluated", "automatic", "review", "edits", "metric-agreement",
                "reader-agreement", "cases")


@pytest.fixture
def session_db(review_session_db, monkeypatch):
    """Demo studies drafted by two models; readers a and b review all four studies (built once
    per session by tests/export_session.py, copied: tests/db_templates.py)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return review_session_db


def metrics_for_tests():
    return [Bleu4(), RougeL(), BertScore(download=False)]


def test_the_evaluation_has_the_right_numbers(session_db):
    db, _ids, (draft_text, rewritten) = session_db
    ev = evaluate(db, metrics=metrics_for_tests(), n_resamples=200)
    # retrieval: studies x sections x 2 readers; tiny was reviewed by nobody: one row each
    assert len(ev.rows) == 4 * 2 * 2 + 4 * 2
    assert {r.reader for r in ev.rows if r.preset == "tiny"} == {None}
    assert {m.preset for m in ev.models} == {"retrieval", "tiny"}
    retrieval = ev.review.models["retrieval"]
    assert retrieval.likert == {"1": 1, "2": 1, "3": 1, "4": 3, "5": 2}
    assert retrieval.accepted_share == pytest.approx(2 / 8)
    assert retrieval.errors["missing_finding"] == {"significant": 3, "insignificant": 1}
    edits = {(e.model, e.section): e for e in ev.edits}
    # reader a added 3 words to one findings draft, reader b rewrote another: the other six
    # finals equal their drafts
    expected = (3 / len(draft_text.split())
                + word_error_rate(rewritten, "<script>alert(1)</script> & normal")) / 8
    assert edits[("retrieval", "findings")].word_error_rate == pytest.approx(expected)
    assert edits[("retrieval", "findings")].unchanged_share == pytest.approx(6 / 8)
    keys = {(a.model, a.section, a.key) for a in ev.automatic}
    assert ("tiny", "impression", "bleu4") in keys and ("retrieval", "findings", "rougeL") in keys
    assert "bertscore" in ev.unavailable
    assert {p.model_a for p in ev.paired} == {"retrieval"}
    assert {a.against for a in ev.metric_agreement} == {"significant errors", "all errors"}
    likert_alpha = next(a for a in ev.reader_agreement if a.statistic ==
                        "krippendorff_alpha_ordinal")
    assert likert_alpha.n == 4
    t = ev.review.time_on_task
    # beats of 30, 60, 90, 120 s are capped at 60 s each: (30 + 60 + 60 + 60) / 4 s per study
    assert t.n_with_draft == 8 and t.with_draft_minutes == pytest.approx(52.5 / 60)
    assert t.n_without_draft == 0
    assert [c.title for c in ev.cases] == ["worst by rougeL", "best by rougeL", "worst rated",
                                           "best rated"]
    assert ev.headline == "rougeL"


def test_filters_narrow_the_rows(session_db):
    db, _ids, _ = session_db
    only = evaluate(db, ExportFilters(model="retrieval", reader="b"), metrics=[Bleu4()],
                    n_resamples=0)
    assert {(r.preset, r.reader) for r in only.rows} == {("retrieval", "b")}
    assert len(only.rows) == 8


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.stack: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in ("meta", "img", "br", "link"):
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"unbalanced </{tag}>")
        else:
            self.stack.pop()


def test_html_report_is_self_contained_valid_and_escaped(session_db, tmp_path):
    db, _ids, _ = session_db
    out = tmp_path / "report.html"
    files = export(db, "html", out, metrics=metrics_for_tests(), n_resamples=200)
    text = out.read_text()
    parser = _Collect()
    parser.feed(text)
    assert parser.errors == [] and parser.stack == []
    ids_found = {attrs.get("id") for _, attrs in parser.tags}
    assert set(SECTIONS_IDS) <= ids_found
    for _tag, attrs in parser.tags:
        for attr in ("src", "href"):
            assert not str(attrs.get(attr, "")).startswith(("http:", "https:", "//"))
    images = [a["src"] for t, a in parser.tags if t == "img"]
    assert len(images) >= 2 and all(src.startswith("data:image/png;base64,") for src in images)
    assert not any(t == "script" for t, _ in parser.tags)
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; normal" in text
    assert "anon-" not in text and "DEMO-P1" not in text  # no patient keys
    assert "bertscore" in text and "fetch-metrics" in text  # unavailable, with the reason
    names = {p.name for p in files}
    assert {"report.retrieval.findings.txt", "report.retrieval.findings.ids.txt"} <= names


def test_csv_json_and_prediction_files(session_db, tmp_path, capsys, settings):
    db, _ids, _ = session_db
    export(db, "csv", tmp_path / "rows.csv", metrics=[Bleu4(), RougeL()], n_resamples=0)
    with (tmp_path / "rows.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 24
    assert {"draft", "final", "reference", "likert", "missing_finding_significant",
            "draft_vs_reference.rougeL", "active_seconds"} <= set(rows[0])
    lines = (tmp_path / "rows.tiny.impression.txt").read_text().splitlines()
    order = (tmp_path / "rows.tiny.impression.ids.txt").read_text().splitlines()
    assert len(lines) == len(order) == 4 and order == sorted(order)
    assert cli(["export", "--format", "json", "--out", str(tmp_path / "r.json"), "--db",
                settings.db_url, "--bootstrap", "0", "--offline"]) == 0
    data = json.loads((tmp_path / "r.json").read_text())
    assert {"models", "automatic", "review", "edits", "metric_agreement",
            "reader_agreement", "cases", "rows"} <= set(data)
    assert cli(["export", "--format", "html", "--out", str(tmp_path / "x.html"), "--since",
                "yesterday", "--db", settings.db_url]) == 2


def test_agreement_statistics_equal_the_libraries():
    from scipy.stats import kendalltau
    from sklearn.metrics import cohen_kappa_score

    x, y = [0.9, 0.7, 0.4, 0.5, 0.1, 0.3], [0, 1, 2, 1, 4, 3]
    tau = kendall_tau_b(x, y)
    ref = kendalltau(x, y)
    assert tau.value == pytest.approx(ref.statistic) and tau.p_value == pytest.approx(ref.pvalue)
    a, b = [1, 2, 3, 4, 5, 3, 2, 4], [1, 3, 3, 4, 4, 3, 1, 5]
    assert cohen_kappa(a, b, [1, 2, 3, 4, 5]).value == pytest.approx(
        cohen_kappa_score(a, b, weights="linear"))
    # Krippendorff (2011) example: nominal alpha 0.743, interval 0.849
    nan = np.nan
    data = np.array([[1, 2, 3, 3, 2, 1, 4, 1, 2, nan, nan, nan],
                     [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, nan, 3],
                     [nan, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, nan],
                     [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, nan]])
    assert krippendorff_alpha(data, "nominal").value == pytest.approx(0.743, abs=1e-3)
    assert krippendorff_alpha(data, "interval").value == pytest.approx(0.849, abs=1e-3)
    # Fleiss (1971) as on Wikipedia: 10 subjects, 14 raters, 5 categories -> 0.210
    counts = [[0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0],
              [2, 2, 8, 1, 1], [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2],
              [6, 5, 2, 1, 0], [0, 2, 2, 3, 7]]
    ratings = np.array([[c + 1 for c, n in enumerate(row) for _ in range(n)] for row in counts])
    assert fleiss_kappa(ratings).value == pytest.approx(0.210, abs=1e-3)


def test_report_screenshot_in_chromium(session_db, tmp_path):
    import os

    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} not installed (make test installs Debian's chromium)")
    from playwright.sync_api import sync_playwright

    db, _ids, _ = session_db
    out = tmp_path / "report.html"
    export(db, "html", out, metrics=metrics_for_tests(), n_resamples=200)
    with sync_playwright() as p:
        browser = launch_browser(p)
        page = browser.new_page(viewport={"width": 1200, "height": 1600})
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        page.goto(out.as_uri())
        page.wait_for_load_state("load")
        assert all(u.startswith(("file:", "data:")) for u in requests)  # nothing fetched
        assert page.locator("#reader-agreement").is_visible()
        # into the test's folder: a test run never writes into the source tree (a clean clone
        # stays clean after `make test`); docs/report.png is a kept picture of this page
        page.screenshot(path=str(tmp_path / "report.png"), full_page=False)
        assert (tmp_path / "report.png").stat().st_size > 10_000
        browser.close()
