"""`rrg-review models`: the model presets and whether each is available here; `--fetch` and
`--fetch-metrics` download weights (the only commands that do so on purpose)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("models", help="list model presets and whether each is available "
                              "here")
    p.add_argument("--fetch", metavar="PRESET",
                   help="download the preset's weights into the Hugging Face cache")
    p.add_argument("--fetch-metrics", action="store_true",
                   help="download the metric models (distilbert, distilroberta, "
                        "bert-base-uncased, CheXbert, radgraph-xl, radgraph, RaTEScore's two) "
                        "and list each file, size and sha256")
    p.add_argument("--presets", metavar="FILE", help="extra model presets (JSON)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rrg_review.app.settings import Settings, offline_by_choice
    from rrg_review.model.hub import ModelUnavailable
    from rrg_review.model.presets import UnknownPreset, load_presets

    settings = Settings.from_args(presets=args.presets)
    # asked first, so a machine without network is told at once instead of after the hub's
    # retries (HF_HUB_OFFLINE set: the hub library refuses at once, naming the model)
    if (args.fetch_metrics or args.fetch) and settings.no_network \
            and not offline_by_choice(settings.environ):
        print(f"error: nothing can be fetched: {settings.no_network}", file=sys.stderr)
        return 2
    if args.fetch_metrics:
        return _fetch_metrics()
    try:
        presets = load_presets(settings.presets_file)
        if args.fetch:
            _fetch_preset(presets, args.fetch)
            return 0
    except (UnknownPreset, ValueError, ModelUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _print_presets(presets)
    return 0


def _fetch_metrics() -> int:
    from rrg_review.metrics.fetch import fetch_metric_models
    from rrg_review.model.hub import ModelUnavailable

    try:
        for line in fetch_metric_models():
            print(line, flush=True)
    except ModelUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _fetch_preset(presets: dict[str, Any], name: str) -> None:
    from rrg_review.model.hub import fetch
    from rrg_review.model.presets import get_preset

    preset = get_preset(presets, name)
    ids = list(preset.model_ids) + (
        [preset.options["encoder"]] if preset.options.get("encoder") else [])
    for model_id in ids:
        print(f"fetching {model_id} ...", flush=True)
        found = fetch(model_id, None, preset.name)
        print(f"  {found.path} (revision {found.revision})")
    if not ids:
        print(f"{preset.name} needs no download")


def _print_presets(presets: dict[str, Any]) -> None:
    from rrg_review.model.registry import availability

    width = max(len(n) for n in presets)
    for name, preset in sorted(presets.items()):
        ok, why = availability(preset)
        print(f"{name:<{width}}  {preset.backend:<22}  {'available' if ok else 'missing':<9}  "
              f"{why}")
        print(f"{'':<{width}}  {preset.description}")
