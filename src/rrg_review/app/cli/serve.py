"""`rrg-review serve`: the workstation in the browser (what `make run` does).

app/serve.py parses its own options (`rrg-review serve --help`): `main()` hands it everything
after `serve` before the command line parser runs; the entry here lists it in --help."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("serve", help="start the workstation in the browser (what `make "
                              "run` does; `rrg-review serve --help` for its options)")
    p.set_defaults(func=run)


def run_argv(argv: list[str]) -> int:
    from rrg_review.app.serve import main as serve

    return serve(argv)


def run(args: argparse.Namespace) -> int:  # (reached only through main's hand-over)
    return run_argv([])
