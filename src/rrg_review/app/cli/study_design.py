"""`rrg-review study` actions of study_design (issue #20; being built)."""

from __future__ import annotations

from typing import Any


def add_actions(actions: Any) -> None:
    """Add this module's actions to the `study` command's sub-parsers."""
