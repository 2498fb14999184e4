"""`services.scoring_report`: what `rrg-review score` reports, as frozen typed results, with
real metrics (BLEU-4, ROUGE-L) and a real score cache file."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from rrg_review.app.evaluation.scoring_report import requested_keys, score_pairs
from rrg_review.metrics.bleu import Bleu4
from rrg_review.metrics.cache import FileCache
from rrg_review.metrics.pairs import Pairs
from rrg_review.metrics.rouge import RougeL

REFS = ["no acute disease", "small left effusion", "heart size is normal", ""]
HYPS = ["no acute disease seen", "left effusion", "normal heart", "clear lungs"]
OTHER = ["no disease", "effusion on the left", "heart normal", "lungs clear"]


def pairs() -> Pairs:
    return Pairs(ids=["a", "b", "c", "d"], hyps=HYPS, refs=REFS, sources=["x", "x", "y", "y"],
                 skipped=[], empty_references=["d"])


def test_requested_keys_follow_the_order_asked_for():
    assert requested_keys(["rougeL", "bleu4"], [RougeL(), Bleu4()]) == ["rougeL", "bleu4"]
    assert requested_keys(["bleu4", "bleu4"], [Bleu4()]) == ["bleu4"]


def test_score_pairs_reports_values_tests_and_parity(tmp_path):
    expected = {"a": {"rougeL": 0.0}, "b": {"rougeL": 0.8}}
    summary = score_pairs(pairs(), ["bleu4", "rougeL"], [Bleu4(), RougeL()],
                          FileCache(tmp_path / "scores.sqlite"), section="findings",
                          empty_policy="score", n_resamples=50, compare_hyps=OTHER,
                          expected=expected, expect_file=tmp_path / "e.json",
                          expect_tolerance=1e-5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        summary.n = 3  # type: ignore[misc]
    assert summary.n == 4 and list(summary.metrics) == ["bleu4", "rougeL"]
    assert set(summary.by_source) == {"x", "y"} and summary.by_source["x"]["n"] == 2
    assert [row["id"] for row in summary.per_sample] == ["a", "b", "c", "d"]
    assert summary.empty_ids == ("d",)
    assert summary.paired is not None and set(summary.paired.tests) == {"bleu4", "rougeL"}
    test = summary.paired.tests["rougeL"]
    assert test.n == 4 and math.isclose(test.difference, test.predictions - test.compare)
    assert summary.expect is not None and summary.expect.failed  # "a" is not 0 for ROUGE-L
    parity = {p.key: p for p in summary.expect.parity}
    assert parity["rougeL"].compared == 2 and parity["rougeL"].worst_id == "a"
    out = summary.to_json()
    assert list(out) == ["n", "section", "metrics", "metric_info", "ci", "per_sample",
                         "unavailable", "by_source", "empty_references", "paired", "expect"]
    assert out["empty_references"]["scored"] == ["d"]
    assert out["paired"]["rougeL"]["n"] == 4 and out["expect"]["file"].endswith("e.json")
    json.dumps(out)  # plain data


def test_a_metric_failing_on_the_compare_side_is_listed_unavailable(tmp_path):
    rouge = RougeL()
    summary_cache = FileCache(tmp_path / "scores.sqlite")
    names = ["bleu4", "rougeL"]
    first = score_pairs(pairs(), names, [Bleu4(), rouge], summary_cache, section="findings",
                        empty_policy="score", n_resamples=0)
    assert first.paired is None and first.expect is None

    def crash(hyps, refs):
        raise RuntimeError("CUDA out of memory")

    rouge.compute = crash  # type: ignore[method-assign]  # cached main side, dying compare side
    summary = score_pairs(pairs(), names, [Bleu4(), rouge], summary_cache, section="findings",
                          empty_policy="score", n_resamples=0, compare_hyps=OTHER)
    assert summary.paired is not None and set(summary.paired.tests) == {"bleu4"}
    assert "CUDA out of memory" in summary.unavailable["rougeL (paired test)"]
