"""A review session filled through the real import, drafting and review code: the demo studies
drafted by two models (the offline retrieval preset and a tiny seeded encoder-decoder), two
readers who rate every study and edit two drafts. Shared by the export tests."""

from __future__ import annotations

import json
from pathlib import Path

from rrg_review.app.accounts.service import AccountService
from rrg_review.app.drafting.service import DraftingService, RuntimeConfig
from rrg_review.app.review.service import ReviewService
from rrg_review.app.settings import Settings
from rrg_review.app.setup import seed_demo
from rrg_review.app.worklist.service import WorklistService
from rrg_review.db.engine import Database
from tests.conftest import TEST_PASSWORD_COST
from tests.tiny_models import tiny_encoder_decoder


def build_review_session(db: Database, settings: Settings, tmp_path: Path, *,
                         seeded: bool = False) -> tuple[list[int], tuple[str, str]]:
    """Returns the study ids and (the findings draft reader a extended, the one b rewrote).

    `seeded`: the database holds the demo studies already (the `demo_db` fixture)."""
    if not seeded:
        seed_demo(db, settings)
    tiny = tiny_encoder_decoder(tmp_path / "tiny")
    presets = tmp_path / "presets.json"
    presets.write_text(json.dumps({"tiny": {
        "backend": "vision-encoder-decoder", "generation": {"max_length": 12},
        "models": {"findings": str(tiny), "impression": str(tiny)}}}))
    drafting = DraftingService(db, settings, RuntimeConfig(device="cpu",
                                                           presets_file=str(presets)))
    review = ReviewService(db)
    accounts = AccountService(review.db, password_cost=TEST_PASSWORD_COST)
    a, b = accounts.add("a", "pw-a-123456"), accounts.add("b", "pw-b-123456")
    WorklistService(review.db).assign(a)
    WorklistService(review.db).assign(b)
    ids = [w.study_id for w in WorklistService(review.db).items(a)]
    drafting.draft(ids, "retrieval")
    drafting.draft(ids, "tiny")
    likert = {a: [5, 4, 3, 2], b: [5, 4, 4, 1]}
    for reader in (a, b):
        for i, sid in enumerate(ids):
            review.heartbeat(reader, sid, 30.0 * (i + 1))
            errors = {}
            if i == 3:
                errors = {"missing_finding": {"significant": 2 if reader == a else 1,
                                              "insignificant": 0 if reader == a else 1}}
            review.rate(reader, sid, likert=likert[reader][i], acceptable=(i == 0),
                        errors=errors, preset="retrieval")
    draft = drafting.latest(ids[1], "retrieval")["findings"]
    review.save(a, ids[1], "findings", draft.text + " Also small effusion.", None,
                draft_id=draft.id)
    rewritten = drafting.latest(ids[3], "retrieval")["findings"].text
    review.save(b, ids[3], "findings", "<script>alert(1)</script> & normal", None)
    return ids, (draft.text, rewritten)
