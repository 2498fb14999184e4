"""The ReXrank metric set: BLEU-2 equals fast-bleu, RadCliQ-v1 equals the reference formula with
the decoded coefficients, RadGraph combined the reference's set F1s, SembScore and the ReXrank
BERTScore run through tiny local models of the real architectures."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from rrg_review.app.cli import main as cli
from rrg_review.metrics.bleu import Bleu2, bleu2_tokens
from rrg_review.metrics.radcliq import COEFS, INPUTS, MEAN, SCALE, RadCliQ, decode_reference_pickle
from rrg_review.metrics.registry import HEADLINE, REXRANK, SETS, build, resolve_names
from rrg_review.metrics.scoring import score
from rrg_review.metrics.stats import bootstrap_ci
from tests.test_metrics import HAND_CASES, iu_pairs, tiny_chexbert, write_jsonl  # noqa: F401

BLEU2_HAND = [
    *HAND_CASES,
    ("", ""), ("a", ""), ("", "a"), ("a", "a"), ("a b", "a"), ("Lungs.", "lungs"),
    ("x y z", "a b c"), ("...", ". . ."), ("Heart.Size.Normal.", "heart . size normal"),
    ("a  b\tc\nd", "a b c d"), ("ÉPANCHEMENT ✓ — ok", "épanchement ✓ ok"),
    ("no no no no", "no"), ("the the", "the the the the the"),
]


def fast_bleu2(pairs):
    """fast-bleu as CXR-Report-Metric calls it (one BLEU object per reference), each distinct
    reference built once and scoring all its hypotheses in one call (a call costs ~20 ms)."""
    from fast_bleu import BLEU

    by_ref: dict[str, list[int]] = {}
    for i, (_, r) in enumerate(pairs):
        by_ref.setdefault(r, []).append(i)
    out = [0.0] * len(pairs)
    for ref, idx in by_ref.items():
        scores = BLEU([bleu2_tokens(ref)], {"bigram": (0.5, 0.5)}).get_score(
            [bleu2_tokens(pairs[i][0]) for i in idx])["bigram"]
        for i, value in zip(idx, scores, strict=True):
            out[i] = value
    return out


def _assert_bleu2_equals_fast_bleu(pairs: list[tuple[str, str]]) -> None:
    expected = fast_bleu2(pairs)
    report = score([h for h, _ in pairs], [r for _, r in pairs], [Bleu2()], n_resamples=0)
    np.testing.assert_allclose(report.per_sample["bleu2"], expected, rtol=0, atol=1e-9)
    assert report.values["bleu2"] == pytest.approx(np.mean(expected), abs=1e-9)


def test_bleu2_equals_fast_bleu_on_hand_cases():
    """Runs without the shared data (the real reports are the next test)."""
    _assert_bleu2_equals_fast_bleu(BLEU2_HAND)
    # fast-bleu smooths: a hypothesis with unigram but no bigram overlap is not 0
    assert fast_bleu2([("lungs heart", "heart lungs")])[0] > 0


def test_bleu2_equals_fast_bleu_on_real_reports(iu_pairs):  # noqa: F811
    # real Open-i texts: 25 references x 16 hypotheses (findings and impressions mixed)
    texts = [t for pair in iu_pairs for t in pair]
    _assert_bleu2_equals_fast_bleu([(h, r) for r in texts[:25] for h in texts[100:116]])


def test_bleu2_tokens_follow_the_reference_preprocessing():
    assert bleu2_tokens("The Lungs.  Clear.") == ["the", "lungs", ".", "clear", "."]
    assert bleu2_tokens("a\tb") == ["a\tb"]  # split on single spaces only, as prep_reports


def reference_predict(x: np.ndarray) -> np.ndarray:
    """CXR-Report-Metric's CompositeMetric.predict, through a scikit-learn StandardScaler set to
    the decoded attributes: scaler.transform, a column of ones, then @ coefs."""
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler()
    scaler.mean_, scaler.scale_ = np.array(MEAN), np.array(SCALE)
    scaler.var_, scaler.n_features_in_ = np.array(SCALE) ** 2, 4
    norm = scaler.transform(x)
    return np.concatenate((norm, np.ones((len(norm), 1))), axis=1) @ np.array(COEFS)


class Given:
    """A component 'metric' that returns given per-pair values (the arithmetic test's input)."""

    def __init__(self, key: str, values: list[float]) -> None:
        from rrg_review.metrics.base import Metric

        class _Given(Metric):
            name = key
            keys = (key,)
            version = "given"

            def compute(self, hyps, refs):
                return [{key: values[int(h)]} for h in hyps]

        self.metric = _Given()


def test_radcliq_v1_equals_the_reference_formula_and_inverts_the_corpus_mean():
    rng = np.random.default_rng(5)
    x = rng.uniform(0, 1, (40, 4))
    x[0] = [1.0, 1.0, 1.0, 1.0]
    x[1] = [0.0, -0.3, 0.1, 0.0]  # rescaled BERTScore can be negative
    metric = RadCliQ([Given(k, list(x[:, i])).metric for i, k in enumerate(INPUTS)])
    ids = [str(i) for i in range(len(x))]
    report = score(ids, ids, [metric], n_resamples=300)
    expected = reference_predict(x)
    np.testing.assert_allclose(report.per_sample["radcliq_v1"], expected, rtol=0, atol=1e-12)
    assert report.values["radcliq_v1"] == pytest.approx(expected.mean(), abs=1e-12)
    assert report.values["inv_radcliq_v1"] == pytest.approx(1 / expected.mean(), abs=1e-12)
    assert "inv_radcliq_v1" not in report.per_sample  # no per-report reciprocal
    assert report.meta["radcliq_v1"]["direction"] == "lower is better"
    assert report.meta["inv_radcliq_v1"]["direction"] == "higher is better"
    # the interval of 1/RadCliQ recomputes the reciprocal of each resample's mean
    from scipy.stats import bootstrap

    res = bootstrap((np.arange(len(x)),), lambda i: 1 / expected[i.astype(int)].mean(),
                    vectorized=False, n_resamples=300, method="percentile",
                    random_state=np.random.default_rng(0))
    lo, hi = report.ci["inv_radcliq_v1"]
    assert (lo, hi) == pytest.approx((res.confidence_interval.low,
                                      res.confidence_interval.high), abs=1e-12)
    assert bootstrap_ci(report.rows["radcliq_v1"].matrix, metric.corpus, metric.keys, 300) \
        == report.ci
    with pytest.raises(ValueError, match="needs radgraph_combined"):
        RadCliQ(list(reversed(metric.components)))


def test_decoding_a_pickle_of_the_reference_layout_reads_its_arrays_without_unpickling():
    """A pickle with the reference's structure (a CompositeMetric with a fitted StandardScaler
    and coefs) decodes to its arrays; the real file is checked when it is on this machine."""
    from sklearn.preprocessing import StandardScaler

    class CompositeMetric:
        pass

    rng = np.random.default_rng(1)
    model = CompositeMetric()
    model.scaler = StandardScaler().fit(rng.uniform(0, 1, (160, 4)))
    model.coefs = rng.normal(size=5)
    CompositeMetric.__module__, CompositeMetric.__qualname__ = __name__, "CompositeMetric"
    globals()["CompositeMetric"] = CompositeMetric
    data = pickle.dumps(model, protocol=4)
    found = decode_reference_pickle(data)
    assert found["mean_"] == tuple(model.scaler.mean_)
    assert found["scale_"] == tuple(model.scaler.scale_)
    assert found["coefs"] == tuple(model.coefs)


def test_the_real_reference_pickle_decodes_to_the_constants_in_code():
    path = os.environ.get("RRG_REVIEW_RADCLIQ_PKL")
    if not path or not Path(path).is_file():
        pytest.skip("set RRG_REVIEW_RADCLIQ_PKL to CXRMetric/radcliq-v1.pkl of "
                    "rajpurkarlab/CXR-Report-Metric to check the constants against it")
    import hashlib

    from rrg_review.metrics.radcliq import REFERENCE_SHA256

    data = Path(path).read_bytes()
    assert hashlib.sha256(data).hexdigest() == REFERENCE_SHA256
    found = decode_reference_pickle(data)
    assert (found["mean_"], found["scale_"], found["coefs"]) == (MEAN, SCALE, COEFS)


def _entity(tokens: str, label: str, *relations: tuple[str, str]) -> dict:
    return {"tokens": tokens, "label": label, "relations": [list(r) for r in relations]}


def test_radgraph_combined_on_hand_built_graphs():
    """Entities match as (tokens, label) sets, relations as (source, target, type) sets of
    those; per report the mean of the two F1s (reference first, hypothesis second)."""
    from rrg_review.metrics.radgraph import combined_f1, entity_relation_sets, set_f1

    ref = {"entities": {"1": _entity("effusion", "OBS-DP", ("located_at", "2")),
                        "2": _entity("pleural", "ANAT-DP"),
                        "3": _entity("edema", "OBS-DP")}}
    hyp = {"entities": {"1": _entity("effusion", "OBS-DP", ("located_at", "3")),
                        "2": _entity("pleural", "ANAT-DP"),
                        "3": _entity("cardiomegaly", "OBS-DP"),
                        "4": _entity("pleural", "ANAT-DP")}}  # a repeat: sets count it once
    ents, rels = entity_relation_sets(hyp)
    assert len(ents) == 3 and rels == {(("effusion", "OBS-DP"), ("cardiomegaly", "OBS-DP"),
                                        "located_at")}
    # entities: 2 of 3 on both sides -> 2/3; relations: none shared -> 0
    assert combined_f1(ref, hyp) == pytest.approx((2 / 3 + 0) / 2)
    assert combined_f1(ref, ref) == 1.0
    assert combined_f1(ref, {"entities": {}}) == 0.0
    assert combined_f1({"entities": {}}, {"entities": {}}) == 0.0  # the reference's 0, not 1
    assert set_f1({1, 2}, {2, 3, 4}) == pytest.approx(2 * (1 / 3) * (1 / 2) / (1 / 3 + 1 / 2))


def test_radgraph_combined_runs_the_original_radgraph_model_of_the_package(tmp_path):
    from radgraph import RadGraph

    from rrg_review.metrics.radgraph import RadGraphCombined, combined_f1
    from tests.tiny_radgraph import tiny_radgraph

    tiny_radgraph(tmp_path, model_type="radgraph")
    hyps = ["mild cardiomegaly . no pleural effusion", "", "small left pleural effusion"]
    refs = ["mild cardiomegaly . no pleural effusion", "lungs clear", "no pneumothorax"]
    metric = RadGraphCombined(model_cache_dir=str(tmp_path), device="cpu")
    assert metric.model_type == "radgraph"
    report = score(hyps, refs, [metric], n_resamples=0)
    notes = RadGraph(model_type="radgraph", model_cache_dir=str(tmp_path), cuda=-1)(
        [t for t in hyps + refs if t])
    texts = [t for t in hyps + refs if t]
    by_text = {t: notes[str(i)] for i, t in enumerate(texts)}
    empty = {"entities": {}}
    expected = [combined_f1(by_text.get(r, empty), by_text.get(h, empty))
                for h, r in zip(hyps, refs, strict=True)]
    np.testing.assert_allclose(report.per_sample["radgraph_combined"], expected, atol=1e-12)
    assert report.per_sample["radgraph_combined"][1] == 0.0


def test_semb_score_is_the_cosine_of_chexbert_cls_vectors(tiny_chexbert):  # noqa: F811
    import torch
    from transformers import BertConfig, BertTokenizer

    from rrg_review.metrics.chexbert import SembScore, build_labeler, load_state

    weights, backbone = tiny_chexbert
    hyps = ["mild cardiomegaly .", "", "the lungs are clear . " * 200, "pulmonary  edema"]
    refs = ["cardiomegaly", "no effusion", "lungs clear", "pulmonary edema"]
    metric = SembScore(str(weights), str(backbone), device="cpu", batch_size=3)
    report = score(hyps, refs, [metric], n_resamples=0)
    # the reference path: encode.py's bert_encoder(logits=False) one report at a time
    model = build_labeler(BertConfig.from_pretrained(backbone))
    load_state(model, weights, "cpu")
    model.eval()
    tok = BertTokenizer.from_pretrained(backbone)

    def cls(text: str) -> np.ndarray:
        pieces = tok.tokenize(" ".join(text.split()))
        ids = tok.encode_plus(pieces)["input_ids"] if pieces else [tok.cls_token_id,
                                                                   tok.sep_token_id]
        ids = [*ids[:511], tok.sep_token_id] if len(ids) > 512 else ids
        with torch.no_grad():
            out = model.bert(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids)))[0]
        return out[0, 0].numpy()

    expected = []
    for h, r in zip(hyps, refs, strict=True):
        label, pred = cls(r), cls(h)
        expected.append((label * pred).sum() / (np.linalg.norm(label) * np.linalg.norm(pred)))
    np.testing.assert_allclose(report.per_sample["semb_score"], expected, atol=1e-5)
    assert report.values["semb_score"] == pytest.approx(np.mean(expected), abs=1e-5)


@pytest.fixture(scope="module")
def tiny_roberta_dir(tmp_path_factory):
    from tests.tiny_metric_models import baseline_tsv, tiny_roberta

    root = tmp_path_factory.mktemp("roberta")
    return tiny_roberta(root / "model"), baseline_tsv(root / "baseline.tsv", 6)


def test_rexrank_bertscore_equals_the_reference_call_on_a_tiny_roberta(tiny_roberta_dir,
                                                                        monkeypatch):
    """bert-score with distilroberta's configuration (layer 5, baseline rescaling, IDF off, runs
    of spaces collapsed), on a tiny RoBERTa with the real tokenizer class."""
    import re

    from bert_score import BERTScorer

    from rrg_review.metrics.bertscore import rexrank_bertscore

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, baseline = tiny_roberta_dir
    hyps = ["The  lungs are   clear.", "Épanchement ✓", "", "heart size normal"]
    refs = ["lungs   clear", "no effusion", "no pneumothorax", "heart  size  normal"]
    metric = rexrank_bertscore("cpu", model=str(model), baseline_path=str(baseline))
    key = f"bertscore_rexrank[{model}]"
    assert metric.keys == (key,)  # never the official key on another model
    report = score(hyps, refs, [metric], n_resamples=0)
    scorer = BERTScorer(model_type=str(model), num_layers=5, lang="en",
                        rescale_with_baseline=True, baseline_path=str(baseline), idf=False,
                        idf_sents=refs, batch_size=256,
                        # bert-score computes the (unused) IDF of idf_sents in a forked
                        # multiprocessing.Pool; forking this torch-threaded process deadlocked
                        # a full `make test` run: compute it serially
                        nthreads=0)
    _, _, f1 = scorer.score([re.sub(r" +", " ", t) for t in hyps],
                            [re.sub(r" +", " ", t) for t in refs])
    np.testing.assert_allclose(report.per_sample[key], f1.numpy(), atol=1e-6)
    assert build(["bertscore_rexrank"])[0].keys == ("bertscore_rexrank",)
    assert build(["bertscore_rexrank"])[0].model == "distilroberta-base"


def test_radcliq_from_tiny_component_models_equals_the_formula(tiny_roberta_dir, tiny_chexbert,  # noqa: F811
                                                               tmp_path, monkeypatch):
    from rrg_review.metrics.bertscore import rexrank_bertscore
    from rrg_review.metrics.chexbert import SembScore
    from rrg_review.metrics.radgraph import RadGraphCombined
    from tests.tiny_radgraph import tiny_radgraph

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, baseline = tiny_roberta_dir
    weights, backbone = tiny_chexbert
    tiny_radgraph(tmp_path, model_type="radgraph")
    parts = [RadGraphCombined(str(tmp_path), "cpu"),
             rexrank_bertscore("cpu", model=str(model), baseline_path=str(baseline)),
             SembScore(str(weights), str(backbone), "cpu"), Bleu2()]
    hyps = ["mild cardiomegaly .", "no pleural effusion", "lungs clear", ""]
    refs = ["mild cardiomegaly", "small left pleural effusion", "the lungs are clear .", "x"]
    from rrg_review.metrics.cache import FileCache

    report = score(hyps, refs, [*parts, RadCliQ(parts)], FileCache(tmp_path / "c.sqlite"),
                   n_resamples=0)
    x = np.column_stack([report.per_sample[p.keys[0]] for p in parts])
    np.testing.assert_allclose(report.per_sample["radcliq_v1"], reference_predict(x),
                               atol=1e-12)
    assert report.values["inv_radcliq_v1"] == pytest.approx(1 / reference_predict(x).mean())


def test_sets_resolve_and_name_their_headline():
    assert resolve_names(["rexrank"]) == list(REXRANK)
    assert resolve_names(["rrg24", "bleu2"])[-1] == "bleu2"
    assert resolve_names(["inv_radcliq_v1"]) == ["radcliq_v1"]
    assert HEADLINE["rexrank"] == ("inv_radcliq_v1",)
    assert set(SETS) == {"rrg24", "rexrank"}
    metrics = build(["rexrank"])
    radcliq = metrics[0]
    # the composite shares the component instances built for the set (models load once)
    assert all(any(c is m for m in metrics) for c in radcliq.components)


def test_score_rexrank_reports_every_metric_or_why_not(tmp_path, capsys, monkeypatch):
    import huggingface_hub.constants as constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("RRG_REVIEW_METRIC_WORKERS", str(tmp_path / "workers"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    refs = write_jsonl(tmp_path / "r.jsonl", [
        {"id": str(i), "findings": f"finding {i} in the left lung."} for i in range(4)])
    preds = write_jsonl(tmp_path / "p.jsonl", [
        {"id": str(i), "findings": f"finding {i} in the right lung."} for i in range(4)])
    out = tmp_path / "s.json"
    args = ["score", "--predictions", str(preds), "--references", str(refs), "--out", str(out),
            "--cache", str(tmp_path / "c.sqlite"), "--bootstrap", "50",
            "--metrics", "rexrank"]
    assert cli(args) == 0
    result = json.loads(out.read_text())
    keys = ("radcliq_v1", "inv_radcliq_v1", "bleu2", "bertscore_rexrank", "semb_score",
            "radgraph_combined", "ratescore", "green")
    for key in keys:
        assert (key in result["metrics"]) != (key in result["unavailable"]), key
        assert result["metric_info"][key]["direction"].endswith("is better")
        assert result["metric_info"][key]["version"]
    assert set(result["metrics"]) == {"bleu2"}
    assert "needs radgraph_combined" in result["unavailable"]["inv_radcliq_v1"]
    assert "setup-worker ratescore" in result["unavailable"]["ratescore"]
    printed = capsys.readouterr().out
    assert "bleu2" in printed and "higher is better" in printed
    # nothing requested can run: a non-zero exit, not an empty success
    assert cli([*args[:-1], "radcliq_v1"]) == 3
    assert "every requested metric is unavailable" in capsys.readouterr().err


def test_the_html_report_marks_each_sets_headline_and_direction():
    from rrg_review.app.evaluation.report_html import render
    from rrg_review.app.evaluation.results import (
        AutomaticResult,
        Evaluation,
        ReviewSummary,
        TimeOnTask,
    )

    automatic = tuple(AutomaticResult("m", "findings", "all", k, v, (None, None), 3)
                      for k, v in (("inv_radcliq_v1", 0.8), ("radcliq_v1", 1.25),
                                   ("bleu2", 0.3), ("radgraph_partial", 0.2),
                                   ("radgraph_simple", 0.25)))
    ev = Evaluation("now", {}, (), (), {}, (), automatic, (), {},
                    ReviewSummary({}, TimeOnTask(None, 0, None, 0)), (), (), (), (), None)
    page = render(ev)
    assert "inv_radcliq_v1 (higher is better; rexrank headline)" in page
    assert "radcliq_v1 (lower is better)" in page
    assert "radgraph_partial (higher is better; rrg24 headline)" in page
    assert "radgraph_simple (higher is better)" in page


def test_export_takes_a_metric_set_and_refuses_unknown_names(settings, db, tmp_path, capsys):
    assert cli(["export", "--format", "json", "--out", str(tmp_path / "e.json"), "--metrics",
                "nonsense", "--db", settings.db_url]) == 2
    assert "unknown metric 'nonsense'" in capsys.readouterr().err
    assert cli(["export", "--format", "json", "--out", str(tmp_path / "e.json"), "--metrics",
                "rexrank", "--offline", "--bootstrap", "0", "--db", settings.db_url]) == 0
    assert json.loads((tmp_path / "e.json").read_text())["automatic"] == []  # nothing drafted


def test_metrics_list_names_direction_version_and_headline(capsys):
    assert cli(["metrics", "list", "rexrank"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert set(lines) == {"radcliq_v1", "inv_radcliq_v1", "bleu2", "bertscore_rexrank",
                          "semb_score", "radgraph_combined", "ratescore", "green"}
    assert "lower  is better" in lines["radcliq_v1"]
    assert "rexrank (headline)" in lines["inv_radcliq_v1"]
    assert "fast-bleu-0.0.90" in lines["bleu2"]
    assert cli(["metrics", "list", "meteor"]) == 2


def test_fetch_listing_gives_each_files_size_and_sha256(tmp_path):
    import hashlib

    from rrg_review.metrics.fetch import _describe
    from rrg_review.metrics.fingerprint import FileHasher

    data = b"weights" * 1000
    (tmp_path / "model.safetensors").write_bytes(data)
    lines = list(_describe("tiny", [tmp_path / "model.safetensors"], FileHasher()))
    assert lines[0] == "tiny:"
    assert "7,000 bytes" in lines[1] and hashlib.sha256(data).hexdigest() in lines[1]
