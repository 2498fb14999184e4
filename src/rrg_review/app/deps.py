"""What the page's panels are given: the services, built once (by `serve`, or by `Services.plain`
for tests and benches), and passed down; no panel builds a service of its own.

Like the current-user dependency of fastapi's full-stack template (`api/deps.py`), this is also
where a handler's reader is resolved and checked (`reader_of`, added by the page's panels)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rrg_review.app.accounts.service import AccountService
from rrg_review.app.review.service import ReviewService
from rrg_review.app.worklist.service import WorklistService

if TYPE_CHECKING:
    from rrg_review.app.drafting.service import DraftingService, PreDrafter
    from rrg_review.app.evaluation.export import ExportService
    from rrg_review.app.evaluation.study_metrics import StudyMetrics
    from rrg_review.app.viewer.service import StudyViewer


@dataclass(frozen=True)
class Services:
    """One of each service the page calls, on one database.

    viewer: the study images; review: revisions, ratings, timing; worklists: each reader's
    list; accounts: who a login is, who is an admin; exports: the evaluation report (None: the
    page has no export, e.g. a bench); drafting/predrafter/preset: the model drafts (None: no
    drafting set up); metrics: the metrics panel; login: whether readers sign in (else the one
    local reader)."""

    viewer: StudyViewer
    review: ReviewService
    worklists: WorklistService
    accounts: AccountService
    exports: ExportService | None = None
    drafting: DraftingService | None = None
    predrafter: PreDrafter | None = None
    preset: str = "retrieval"
    metrics: StudyMetrics | None = None
    login: bool = False

    @classmethod
    def plain(cls, viewer: StudyViewer, drafting: DraftingService | None = None,
              predrafter: PreDrafter | None = None, preset: str = "retrieval",
              metrics: StudyMetrics | None = None, login: bool = False) -> Services:
        """Services with default settings on the viewer's database (tests and benches; `serve`
        builds its own from the command line's settings)."""
        from rrg_review.app.evaluation.export import ExportService

        accounts = AccountService(viewer.db)
        return cls(viewer, ReviewService(viewer.db, accounts.audit), WorklistService(viewer.db),
                   accounts, ExportService(viewer.db, accounts.audit), drafting, predrafter,
                   preset, metrics, login)
