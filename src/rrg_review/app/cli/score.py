"""`rrg-review score`: predictions scored against references (RRG24 and ReXrank metric sets),
with 95 % bootstrap intervals, a paired test against a second system (`--compare`) and the
parity against expected values (`--expect`).

The computation is `services.scoring_report.score_pairs`; this module reads the options and
prints its `ScoreSummary`. Exit 0; 1: a key over the --expect tolerance; 2: bad input; 3:
every requested metric unavailable."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from rrg_review.app.cli.options import (
    add_chexbert,
    add_ray,
    metric_cache,
    metric_names,
    tqdm_progress,
)


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("score", help="score predictions against references (RRG24 and "
                              "ReXrank metric sets)")
    add_chexbert(p)
    p.add_argument("--predictions", required=True, type=Path, metavar="P",
                   help="JSONL ({id, findings, impression}) or text, one section per line")
    p.add_argument("--references", required=True, type=Path, metavar="R",
                   help="same format as the predictions")
    p.add_argument("--section", default="findings", choices=("findings", "impression"))
    p.add_argument("--metrics", metavar="LIST",
                   help="comma-separated sets (rrg24, rexrank), metrics or keys (default: "
                        "rrg24 = bleu4,rougeL,bertscore,radgraph,chexbert)")
    p.add_argument("--empty-references", choices=("score", "skip"), default="score",
                   help="a reference without text: scored as empty, as the reference scorer "
                        "does (default), or left out and listed")
    p.add_argument("--expect", type=Path, metavar="FILE",
                   help="JSON of expected per-pair values (e.g. from the reference code with the "
                        "real weights): report the max difference per key")
    p.add_argument("--expect-tolerance", type=float, default=1e-5, metavar="X",
                   help="exit 1 when a key differs from --expect by more (default 1e-5)")
    p.add_argument("--out", type=Path, help="write the JSON result here")
    p.add_argument("--compare", type=Path, metavar="P2",
                   help="a second system's predictions: adds a paired randomization test")
    p.add_argument("--bootstrap", type=int, default=1000, metavar="N",
                   help="bootstrap resamples for the 95%% CIs (0: none)")
    p.add_argument("--bertscore-model", metavar="MODEL",
                   help="another BERTScore model, hub id or local folder (reported as "
                        "bertscore[MODEL], or bertscore_raw[MODEL] with --no-rescale)")
    p.add_argument("--bertscore-baseline", metavar="TSV",
                   help="rescaling baseline file for --bertscore-model (bert-score's format)")
    p.add_argument("--no-rescale", action="store_true",
                   help="raw BERTScore F1, no baseline rescaling (reported as bertscore_raw…)")
    p.add_argument("--cache", type=Path, metavar="FILE",
                   help="cache file when no --db is given (default ~/.cache/rrg-review/)")
    p.add_argument("--db", metavar="PATH_OR_URL", help="cache scores in this database")
    p.add_argument("--engine", choices=("local", "ray"), default="local",
                   help="ray: compute the pairs on Ray Data actors (pip install "
                        "'rrg-review[scale]'), then aggregate here")
    add_ray(p)
    p.add_argument("--batch-size", type=int, default=256, metavar="N",
                   help="pairs per Ray batch")
    p.add_argument("--device", default="auto")
    p.add_argument("--offline", action="store_true", help="never download metric weights")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rrg_review.app.settings import Settings
    from rrg_review.metrics.expect import read_expected
    from rrg_review.metrics.pairs import PairsError, read_pairs
    from rrg_review.metrics.registry import build

    try:
        pairs = read_pairs(args.predictions, args.references, args.section,
                           args.empty_references)
        names = metric_names(args.metrics)
        config = Settings.from_args(args.db, chexbert_weights=args.chexbert_weights).metric_config(
            device=None if args.device == "auto" else args.device, download=not args.offline,
            bertscore_model=args.bertscore_model, bertscore_baseline=args.bertscore_baseline,
            bertscore_rescale=not args.no_rescale)
        metrics = build(names, config)
        expected = read_expected(args.expect) if args.expect else None
    except (PairsError, ValueError) as exc:  # ExpectError is a ValueError
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not pairs.ids:
        print("error: no pair to score in this section", file=sys.stderr)
        return 2
    try:
        return _score(args, names, metrics, config, pairs, expected)
    finally:
        for metric in metrics:  # models freed, metric workers shut down
            metric.close()


def _score(args: argparse.Namespace, names: list[str] | None, metrics: list[Any], config: Any,
           pairs: Any, expected: Any) -> int:
    from rrg_review.app.evaluation.scoring_report import score_pairs
    from rrg_review.metrics.pairs import PairsError, read_pairs

    try:
        other = (read_pairs(args.compare, args.references, args.section, args.empty_references)
                 if args.compare else None)
    except PairsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    cache = metric_cache(args)
    if args.engine == "ray" and not _fill_cache_on_ray(args, metrics, config, pairs, cache):
        return 2
    summary = score_pairs(
        pairs, names, metrics, cache, section=args.section,
        empty_policy=args.empty_references, n_resamples=args.bootstrap,
        progress=tqdm_progress("score", "pair"),
        compare_hyps=other.hyps if other is not None else None,
        expected=expected, expect_file=args.expect, expect_tolerance=args.expect_tolerance)
    if summary.paired is not None:
        for name, why in summary.paired.failures.items():
            print(f"warning: no paired test for {name}: {why}", file=sys.stderr)
    if args.out:
        _write_json(summary, args.out)
    _print_summary(summary, args)
    if not summary.metrics:
        print("error: every requested metric is unavailable", file=sys.stderr)
        return 3
    return 1 if summary.expect is not None and summary.expect.failed else 0


def _fill_cache_on_ray(args: argparse.Namespace, metrics: list[Any], config: Any, pairs: Any,
                       cache: Any) -> bool:
    """Ray computes what the cache lacks; scoring then aggregates. False: Ray unavailable."""
    from rrg_review.app.drafting.ray_engine import (
        RayConfig,
        RayUnavailable,
        fill_score_cache_on_ray,
    )

    ray_progress = tqdm_progress("score on ray", "pair")
    try:
        cluster = RayConfig(address=args.address, workers=args.workers,
                            gpus_per_worker=args.gpus_per_worker, batch_size=args.batch_size)
        computed = fill_score_cache_on_ray(metrics, config, pairs.hyps, pairs.refs, cache,
                                           cluster, progress=ray_progress)
        print(f"ray: {computed} pair values computed (the rest were cached)")
    except RayUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return False
    finally:
        ray_progress(-1, None)
    return True


def _write_json(summary: Any, out: Path) -> None:
    import json

    from rrg_review.app.evaluation.writers import json_ready
    from rrg_review.core.files import atomic_write

    text = json.dumps(json_ready(summary.to_json()), indent=2, allow_nan=False)  # NaN: null
    atomic_write(Path(out), text + "\n")


def _print_summary(summary: Any, args: argparse.Namespace) -> None:
    from rrg_review.metrics.base import by_reason

    empty = summary.empty_ids
    skip = summary.empty_policy == "skip"
    print(f"{summary.n} pairs ({summary.section})" + (
        (f", {len(empty)} with an empty reference skipped" if skip
         else f", {len(empty)} with an empty reference scored as empty") if empty else ""))
    width = max([len(k) for k in summary.metrics] + [10])
    tests = summary.paired.tests if summary.paired is not None else {}
    for key, value in summary.metrics.items():
        lo, hi = summary.ci.get(key, (math.nan, math.nan))
        info = summary.metric_info.get(key, {})
        paired = tests.get(key)
        versus = (f"   vs --compare {paired.compare:.4f} (diff {paired.difference:+.4f}, "
                  f"p={paired.p_value:.3g})" if paired else "")
        print(f"  {key:<{width}}  {value:.4f}  [{lo:.4f}, {hi:.4f}]  "
              f"({info.get('direction', '')}; {info.get('version', '')}){versus}")
    for reason, keys in by_reason(dict(summary.unavailable)).items():
        print(f"  unavailable: {', '.join(keys)}: {reason}")
    if summary.expect is not None:
        _print_expect(summary.expect)
    if args.out:
        print(f"written to {args.out}")


def _print_expect(expect: Any) -> None:
    if not expect.parity:
        print(f"  expect: {expect.file} has no key this run reports")
    for p in expect.parity:
        print(f"  expect {p.key}: max |diff| {p.max_abs_diff:.3g} over {p.compared} pairs"
              + (f" (worst id {p.worst_id})" if p.worst_id is not None else "")
              + (f", {p.missing} expected ids not scored" if p.missing else "")
              + ("  ok" if expect.passed(p) else f"  over tolerance {expect.tolerance:g}"))
