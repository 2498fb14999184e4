"""Agreement between the ReXVal counts suggested from readers' edits and the counts the readers
confirmed (issue #22: "measure the aid, not only build it"). A suggestion is stored with the
rating it was shown for (`rating.suggested`); the reader's own counts are the truth here, so a
low agreement in a category says the suggestion there is not worth pre-filling."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from rrg_review.app.evaluation.results import ReviewRow, SuggestionAgreement
from rrg_review.core.vocabulary import REXVAL_CATEGORIES
from rrg_review.metrics.agreement import cohen_kappa

log = logging.getLogger(__name__)


def suggestion_agreements(ratings: Sequence[ReviewRow]) -> tuple[SuggestionAgreement, ...]:
    """Per ReXVal category: n, the summed suggested and confirmed counts, the share of exact
    agreement, and Cohen's kappa on whether the category has an error at all.

    Args:
        ratings: one row per rating (`steps.rated_once`); those without a stored suggestion
            (rated before migration 0013) are left out.

    Returns:
        One record per category in the vocabulary's order; empty without any suggestion.
    """
    rated = [r for r in ratings if r.suggested is not None]
    if not rated:
        return ()
    out = []
    for category in REXVAL_CATEGORIES:
        proposed = [int((r.suggested or {}).get(category, 0)) for r in rated]
        confirmed = [sum((r.errors.get(category) or {}).values()) for r in rated]
        a, b = [int(x > 0) for x in proposed], [int(x > 0) for x in confirmed]
        if len(rated) >= 2 and len(set(a)) == 2 and len(set(b)) == 2:
            kappa = cohen_kappa(a, b, [0, 1], weights=None)
            value, p = kappa.value, kappa.p_value
        elif len(rated) >= 2 and len(set(a)) + len(set(b)) == 3:
            # one side constant: chance agreement equals the observed one, kappa is 0 (and
            # statsmodels' test divides 0 by 0: no p-value)
            value, p = 0.0, None
        else:  # both sides constant, or n < 2: undefined
            value, p = float("nan"), None
        exact = sum(x == y for x, y in zip(proposed, confirmed, strict=True)) / len(rated)
        out.append(SuggestionAgreement(category, len(rated), sum(proposed), sum(confirmed),
                                       exact, value, p))
    return tuple(out)
