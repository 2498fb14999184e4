"""RRG24 fidelity: the cache keys on the content of the weights, inputs are read as the reference
scorer reads them, empty references are scored as it scores them, BERTScore options always yield
a number or a reason, `--expect` proves parity; public reference examples, gated on the weights."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rrg_review.app.cli import main as cli
from rrg_review.metrics.pairs import read_pairs
from rrg_review.metrics.scoring import score
from tests.test_metrics import tiny_chexbert, write_jsonl  # noqa: F401


def _score_json(tmp_path: Path, *extra: str) -> tuple[int, dict]:
    out = tmp_path / "out.json"
    if out.exists():
        out.unlink()
    code = cli(["score", "--predictions", str(tmp_path / "p.txt"), "--references",
                str(tmp_path / "r.txt"), "--cache", str(tmp_path / "cache.sqlite"),
                "--bootstrap", "0", "--out", str(out), *extra])
    return code, (json.loads(out.read_text()) if out.exists() else {})


@pytest.fixture
def text_pairs(tmp_path):
    (tmp_path / "p.txt").write_text("the lungs are clear .\nmild  cardiomegaly\nno effusion\n")
    (tmp_path / "r.txt").write_text("lungs clear\nheart is enlarged\nsmall left effusion\n")
    return tmp_path


def test_bertscore_cache_follows_the_weights_and_the_baseline_file(text_pairs, monkeypatch):
    """The same model path and cache: other weights or another baseline file must give other
    values (the audit's 0.177-instead-of-0.542), and raw vs rescaled never share a key."""
    from tests.tiny_metric_models import baseline_tsv, tiny_roberta

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, baseline = text_pairs / "model", text_pairs / "baseline.tsv"
    tiny_roberta(model, seed=0)
    baseline_tsv(baseline, 6, seed=0)
    opts = ["--metrics", "bertscore", "--bertscore-model", str(model)]
    key = f"bertscore[{model}]"
    code, first = _score_json(text_pairs, *opts, "--bertscore-baseline", str(baseline))
    assert code == 0 and key in first["metrics"]
    assert first["metric_info"][key]["version"].endswith("rescaled-noidf")
    baseline_tsv(baseline, 6, seed=1)  # same file name, other contents
    _, second = _score_json(text_pairs, *opts, "--bertscore-baseline", str(baseline))
    assert second["metrics"][key] != pytest.approx(first["metrics"][key], abs=1e-6)
    tiny_roberta(model, seed=1)  # same folder, other weights
    _, third = _score_json(text_pairs, *opts, "--bertscore-baseline", str(baseline))
    assert third["metrics"][key] != pytest.approx(second["metrics"][key], abs=1e-6)
    code, raw = _score_json(text_pairs, *opts, "--no-rescale")
    assert code == 0 and set(raw["metrics"]) == {f"bertscore_raw[{model}]"}
    # a local model with rescaling but no baseline: a reason, and a non-zero exit
    code, missing = _score_json(text_pairs, *opts)
    assert code == 3 and "--bertscore-baseline" in missing["unavailable"][key]
    code, hub = _score_json(text_pairs, "--metrics", "bertscore", "--bertscore-model",
                            "someone/model-without-baseline")
    assert code == 3
    assert "pass --bertscore-baseline FILE or --no-rescale" in hub["unavailable"][
        "bertscore[someone/model-without-baseline]"]


def test_chexbert_cache_follows_the_weights_file_in_the_database(tiny_chexbert, tmp_path, db):  # noqa: F811
    import shutil

    import torch

    from rrg_review.db.metric_cache import DatabaseScoreCache
    from rrg_review.metrics.chexbert import CheXbertF1, SembScore

    weights, backbone = tiny_chexbert
    mine = tmp_path / "chexbert.pth"
    shutil.copy(weights, mine)
    hyps, refs = ["mild cardiomegaly .", "pulmonary edema"], ["cardiomegaly", "no edema"]
    cache = DatabaseScoreCache(db)
    first = score(hyps, refs, [SembScore(str(mine), str(backbone), "cpu")], cache,
                  n_resamples=0)
    ids = {CheXbertF1(str(mine), str(backbone), "cpu").cache_id()}
    state = torch.load(mine, weights_only=True)
    state["model_state_dict"] = {k: v + 0.5 if v.is_floating_point() else v
                                 for k, v in state["model_state_dict"].items()}
    torch.save(state, mine)
    second = score(hyps, refs, [SembScore(str(mine), str(backbone), "cpu")], cache,
                   n_resamples=0)
    ids.add(CheXbertF1(str(mine), str(backbone), "cpu").cache_id())
    assert len(ids) == 2
    assert not np.allclose(first.per_sample["semb_score"], second.per_sample["semb_score"])


def test_radgraph_cache_id_follows_the_model_folder(tmp_path):
    from rrg_review.metrics.radgraph import RadGraphCombined, RadGraphF1
    from tests.tiny_radgraph import tiny_radgraph

    tiny_radgraph(tmp_path, seed=0)
    before = RadGraphF1(model_cache_dir=str(tmp_path)).cache_id()
    tiny_radgraph(tmp_path, seed=1)
    after = RadGraphF1(model_cache_dir=str(tmp_path)).cache_id()
    assert before != after and before.startswith("radgraph-xl@")
    tiny_radgraph(tmp_path, model_type="radgraph")
    assert RadGraphCombined(str(tmp_path)).cache_id().startswith("radgraph@")


def test_plain_text_is_split_as_readlines_and_strip(tmp_path):
    """str.splitlines() would also break at \\x0b \\x0c \\x1c-\\x1e \\x85 \\u2028 \\u2029."""
    odd = "heart\x0bsize\x0cnormal\x1cx\x1dy\x1ez\x85a\u2028b\u2029c"
    (tmp_path / "p.txt").write_text(f"  {odd}  \r\nsecond\rthird\n", encoding="utf-8")
    (tmp_path / "r.txt").write_text("one\ntwo\nthree\n", encoding="utf-8")
    pairs = read_pairs(tmp_path / "p.txt", tmp_path / "r.txt")
    with open(tmp_path / "p.txt", encoding="utf-8") as fh:
        expected = [line.strip() for line in fh.readlines()]
    assert pairs.hyps == expected == [odd.strip(), "second", "third"]


def test_empty_references_are_scored_by_default_and_skipped_on_request(tmp_path, capsys):
    (tmp_path / "p.txt").write_text("lungs clear\nsmall effusion\n")
    (tmp_path / "r.txt").write_text("lungs are clear\n   \n")
    code, scored = _score_json(tmp_path, "--metrics", "bleu2,rougeL")
    assert code == 0 and scored["n"] == 2
    assert scored["empty_references"]["scored"] == ["2"]
    assert scored["empty_references"]["policy"].startswith("score")
    assert [row["rougeL"] for row in scored["per_sample"]][1] == 0.0
    assert "1 with an empty reference scored as empty" in capsys.readouterr().out
    code, skipped = _score_json(tmp_path, "--metrics", "bleu2", "--empty-references", "skip")
    assert code == 0 and skipped["n"] == 1
    assert skipped["empty_references"] == {"policy": "skip", "skipped": ["2"]}


def test_expect_reports_the_largest_difference_and_fails_past_the_tolerance(text_pairs, capsys):
    code, first = _score_json(text_pairs, "--metrics", "bleu2,bleu4")
    assert code == 0
    expected = text_pairs / "expected.json"
    expected.write_text(json.dumps(first))  # the tool's own output is a valid expectation
    code, same = _score_json(text_pairs, "--metrics", "bleu2,bleu4", "--expect", str(expected))
    assert code == 0 and same["expect"]["keys"]["bleu2"]["max_abs_diff"] == 0.0
    assert same["expect"]["keys"]["bleu2"]["compared"] == 3
    rows = {r["id"]: {"bleu2": r["bleu2"]} for r in first["per_sample"]}
    rows["2"]["bleu2"] += 0.01
    rows["9"] = {"bleu2": 0.5}  # an id this run does not have
    expected.write_text(json.dumps(rows))
    capsys.readouterr()
    code, off = _score_json(text_pairs, "--metrics", "bleu2", "--expect", str(expected))
    assert code == 1
    parity = off["expect"]["keys"]["bleu2"]
    assert parity["max_abs_diff"] == pytest.approx(0.01) and parity["worst_id"] == "2"
    assert parity["missing"] == 1
    assert "over tolerance" in capsys.readouterr().out
    expected.write_text("{not json")
    assert _score_json(text_pairs, "--expect", str(expected))[0] == 2
    assert "expected.json: not JSON" in capsys.readouterr().err


# --- public reference examples, run only where the real weights are on this machine ---------

F1CHEXBERT_HYPS = [
    "No pleural effusion. Normal heart size.",
    "Normal heart size.",
    "Increased mild pulmonary edema and left basal atelectasis.",
    "Bilateral lower lobe bronchiectasis with improved right lower medial lung peribronchial "
    "consolidation.",
    "Elevated left hemidiaphragm and blunting of the left costophrenic angle although no "
    "definite evidence of pleural effusion seen on the lateral view.",
]
F1CHEXBERT_REFS = [
    "No pleural effusions.",
    "Enlarged heart.",
    "No evidence of pneumonia. Stable cardiomegaly.",
    "Bilateral lower lobe bronchiectasis with improved right lower medial lung peribronchial "
    "consolidation.",
    "No acute cardiopulmonary process. No significant interval change. Please note that "
    "peribronchovascular ground-glass opacities at the left greater than right lung bases seen "
    "on the prior chest CT of ___ were not appreciated on prior chest radiography on the same "
    "date and may still be present. Additionally, several pulmonary nodules measuring up to 3 mm "
    "are not not well appreciated on the current study-CT is more sensitive.",
]


def test_chexbert_reproduces_f1chexbert_own_test_values(monkeypatch):
    """f1chexbert's `test_f1chexbert` (as carried in RadEval's tests): micro/macro F1 over the
    14 and the 5 labels of its five pairs."""
    from rrg_review.metrics.chexbert import CheXbertF1

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    metric = CheXbertF1(download=False)
    ok, why = metric.available()
    if not ok:
        pytest.skip(f"CheXbert weights not on this machine: {why}")
    report = score(F1CHEXBERT_HYPS, F1CHEXBERT_REFS, [metric], n_resamples=0)
    assert report.values == pytest.approx({
        "chexbert_all_micro_f1": 0.36363636363636365, "chexbert_all_macro_f1": 0.11904761904761904,
        "chexbert_5_micro_f1": 0.3333333333333333, "chexbert_5_macro_f1": 0.2}, abs=1e-12)


def test_radgraph_reproduces_the_package_readme_example(monkeypatch):
    """radgraph 0.1.18's README example: (RG_E, RG_ER, RG_bar_ER) = (0.75, 0.6667, 0.6538)."""
    from rrg_review.metrics.radgraph import RadGraphF1

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    metric = RadGraphF1(download=False)
    ok, why = metric.available()
    if not ok:
        pytest.skip(f"radgraph-xl weights not on this machine: {why}")
    refs = ["no acute cardiopulmonary abnormality",
            "endotracheal tube is present and bibasilar opacities likely represent mild "
            "atelectasis"]
    hyps = ["no acute cardiopulmonary abnormality",
            "et tube terminates 2 cm above the carina and bibasilar opacities"]
    report = score(hyps, refs, [metric], n_resamples=0)
    assert (report.values["radgraph_simple"], report.values["radgraph_partial"],
            report.values["radgraph_complete"]) == pytest.approx(
        (0.75, 0.6666666666666666, 0.6538461538461539), abs=1e-12)
