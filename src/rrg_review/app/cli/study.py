"""`rrg-review study ACTION`: controlled reader studies (design, status, analysis).

The actions live in their own modules (`study_design`: create, list, show, status;
`study_analyze`: analyze), each adding its sub-parsers to the one `study` command."""

from __future__ import annotations

from typing import Any

from rrg_review.app.cli import study_analyze, study_design


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("study", help="reader studies: create, list, show, status, analyze")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    study_design.add_actions(actions)
    study_analyze.add_actions(actions)
