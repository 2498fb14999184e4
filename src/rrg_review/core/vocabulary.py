"""The domain vocabulary, in one place: report sections, the ReXVal error categories (Yu et al.
2023) with the labels readers see, and the two kinds of error count. The database schema, the
model inputs, the review services, the UI and the exports all read these names."""

from __future__ import annotations

SECTIONS = ("findings", "impression")

REXVAL_CATEGORIES = (
    "false_finding",  # (1) false report of a finding
    "missing_finding",  # (2) missing a finding
    "wrong_location",  # (3) wrong anatomic location/position
    "wrong_severity",  # (4) wrong severity
    "false_comparison",  # (5) mentions a comparison not in the reference/prior
    "omitted_comparison",  # (6) omits a comparison describing change
)

# the category's number and wording as in ReXVal's rating instructions
REXVAL_LABELS = {
    "false_finding": "false report of a finding",
    "missing_finding": "missing a finding",
    "wrong_location": "wrong location/position",
    "wrong_severity": "wrong severity",
    "false_comparison": "comparison not in reference/prior",
    "omitted_comparison": "omits a comparison of change",
}

ERROR_KINDS = ("significant", "insignificant")  # clinically significant or not


def rexval_label(category: str) -> str:
    """'(n) label', the category's number in ReXVal's order and its wording."""
    return f"({REXVAL_CATEGORIES.index(category) + 1}) {REXVAL_LABELS[category]}"
