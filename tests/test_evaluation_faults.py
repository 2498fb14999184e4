"""The evaluation's steps when a metric crashes: the failure is reported for that metric while
the other metrics' results are still computed (real SQLite score cache, real metrics)."""

from __future__ import annotations

from collections.abc import Sequence

from app.services.evaluation_results import ReviewRow
from app.services.evaluation_steps import paired_comparisons
from db.engine import Database
from db.metric_cache import DatabaseScoreCache
from metrics.base import Payload
from metrics.bleu import Bleu4
from metrics.rouge import RougeL


class _CrashingRouge(RougeL):
    """ROUGE-L whose computation dies as a model on a full GPU would; counts its attempts."""

    def __init__(self) -> None:
        super().__init__()
        self.attempts = 0

    def compute(self, hyps: Sequence[str], refs: Sequence[str]) -> list[Payload]:
        self.attempts += 1
        raise RuntimeError("CUDA out of memory")


def _row(study: int, preset: str, draft: str, reference: str) -> ReviewRow:
    return ReviewRow(study_id=study, source="demo", study_key=f"s{study}", split=None,
                     section="findings", preset=preset, model_id=preset, model_revision=None,
                     reader=None, draft=draft, final=None, reference=reference)


def test_a_metric_crashing_in_a_paired_test_is_reported_and_the_others_go_on(db: Database):
    refs = ["no acute disease", "small left effusion", "heart size is normal"]
    by_model_section = {
        ("a", "findings"): [_row(i, "a", f"no effusion seen {i}", r)
                            for i, r in enumerate(refs)],
        ("b", "findings"): [_row(i, "b", r, r) for i, r in enumerate(refs)],
    }
    crashing = _CrashingRouge()
    unavailable: dict[str, str] = {}
    out = paired_comparisons(by_model_section, [crashing, Bleu4()], DatabaseScoreCache(db),
                             n_resamples=200, unavailable=unavailable)
    assert {p.result.key for p in out} == {"bleu4"}
    assert all(p.result.n == 3 for p in out)
    assert "CUDA out of memory" in unavailable["rougeL"]
    assert unavailable["rougeL"].startswith("paired comparison")
    assert crashing.attempts == 2  # retried once after freeing the model, then given up
