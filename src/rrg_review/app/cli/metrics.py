"""`rrg-review metrics list [NAME]` (every key, its direction, version and sets) and
`rrg-review metrics setup-worker NAME` (a metric's own virtualenv, checked end to end)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("metrics", help="list metric keys, or set up a metric worker "
                              "environment")
    p.add_argument("action", choices=("list", "setup-worker"))
    p.add_argument("name", nargs="?", help="a set, metric or key (list); ratescore, green or "
                                           "selftest (setup-worker)")
    p.add_argument("--dir", type=Path, metavar="DIR",
                   help="where the worker's virtualenv goes (default "
                        "~/.cache/rrg-review/metric-workers/NAME or $RRG_REVIEW_METRIC_WORKERS)")
    p.add_argument("--python", metavar="PY", help="the Python that creates the virtualenv")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rrg_review.app.settings import Settings

    settings = Settings.from_args()
    if args.action == "setup-worker":
        return _setup_worker(args, settings)
    return _list(args.name, settings)


def _list(name: str | None, settings: Any) -> int:
    from rrg_review.metrics.registry import HEADLINE, SETS, build, resolve_names

    try:
        names = resolve_names([name] if name else list(SETS))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for metric in build(names, settings.metric_config(download=False)):
        sets = [s for s, members in SETS.items() if metric.name in members]
        for key in metric.keys:
            star = " (headline)" if any(key in HEADLINE[s] for s in sets) else ""
            print(f"{key:<22} {metric.direction(key):<6} is better  {metric.version:<46} "
                  f"{','.join(sets)}{star}")
    return 0


def _setup_worker(args: argparse.Namespace, settings: Any) -> int:
    from rrg_review.metrics.worker_client import SPECS, selfcheck, setup_worker, workers_root

    if args.name not in SPECS:
        print(f"error: unknown worker metric {args.name!r} ({', '.join(SPECS)})",
              file=sys.stderr)
        return 2
    print(f"setting up the {args.name} worker environment ...", flush=True)
    try:
        folder = setup_worker(args.name, args.dir or
                              workers_root(settings.metric_workers_dir) / args.name,
                              args.python)
    except (RuntimeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"  {folder}")
    check = selfcheck(args.name, folder)
    if not check.get("ok"):
        print(f"error: the {args.name} worker's self-check failed: {check.get('error')}",
              file=sys.stderr)
        return 2
    details = {k: v for k, v in check.items() if k != "ok"}
    print("  self-check ok" + (f": {json.dumps(details)}" if details else ""))
    if args.name == "selftest":
        _round_trip(folder)
    return 0


def _round_trip(folder: Path) -> None:
    from rrg_review.metrics.worker_client import SPECS, WorkerMetric

    worker = WorkerMetric(SPECS["selftest"], folder)
    try:
        value = worker.compute(["lungs clear"], ["lungs are clear"])[0]["selftest"]
    finally:
        worker.close()
    print(f"  round trip ok (selftest {value:.4f})")
