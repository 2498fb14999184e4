"""Screens and batches read the database in a fixed number of statements, whatever the number of
studies: counted with SQLAlchemy's `before_cursor_execute` event on a real SQLite file."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage
from sqlalchemy import event

from bench.synthetic import SyntheticImage, add_studies
from rrg_review.app.accounts.service import AccountService
from rrg_review.app.drafting.service import DraftingService, RuntimeConfig
from rrg_review.app.evaluation.results import ExportFilters
from rrg_review.app.evaluation.rows import collect_rows
from rrg_review.app.review.service import ReviewService
from rrg_review.app.worklist.service import WorklistService
from rrg_review.db.models import Draft
from rrg_review.db.store import priors
from rrg_review.model.presets import Preset
from tests.conftest import TEST_PASSWORD_COST


@contextmanager
def counted(db) -> Iterator[list[str]]:
    """Every SQL statement the engine sends while the block runs."""
    statements: list[str] = []

    def note(conn, cursor, statement, parameters, context, executemany) -> None:
        statements.append(statement)

    event.listen(db.engine, "before_cursor_execute", note)
    try:
        yield statements
    finally:
        event.remove(db.engine, "before_cursor_execute", note)


def statements_for(db, run: Callable[[], object]) -> int:
    with counted(db) as statements:
        run()
    return len(statements)


@pytest.fixture
def studies(db, tmp_path: Path, monkeypatch) -> list[int]:
    """40 studies of 20 patients (two each, so half have a prior), each with a small PNG."""
    monkeypatch.setattr(db, "configured_key", "ef" * 32)  # as settings pass it
    png = tmp_path / "film.png"
    PILImage.fromarray((np.arange(64 * 64) % 251).astype(np.uint8).reshape(64, 64)).save(png)
    return add_studies(db, 40, image=SyntheticImage(str(png), 64, 64, bits_stored=8,
                                                    fmt="png"))


def _reviewed(db, ids: list[int]) -> None:
    """Two models' drafts of these studies; reader a rates all of them and edits half."""
    with db.write() as s:
        for sid in ids:
            for preset in ("m1", "m2"):
                for section in ("findings", "impression"):
                    s.add(Draft(study_id=sid, section=section, preset=preset,
                                text=f"{preset} {section} of {sid}.", model_id=preset,
                                created_at=datetime.now(UTC)))
    review = ReviewService(db)
    accounts = AccountService(db, password_cost=TEST_PASSWORD_COST)
    found = accounts.account("a")
    reader = found.id if found else accounts.add("a", "pw-a-123456")
    WorklistService(review.db).assign(reader)
    for i, sid in enumerate(ids):
        review.rate(reader, sid, likert=1 + i % 5, acceptable=False, preset="m1")
        if i % 2:
            review.save(reader, sid, "findings", f"edited {sid}", None)


def test_export_rows_take_the_same_statements_for_4_or_40_studies(db, studies):
    _reviewed(db, studies[:4])
    collect_rows(db, ExportFilters())  # the first use opens the connection (pragmas)
    few = statements_for(db, lambda: collect_rows(db, ExportFilters()))
    _reviewed(db, studies[4:])
    rows = collect_rows(db, ExportFilters())
    assert len(rows) == 40 * 2 * 2
    assert sum(r.final is not None and r.final.startswith("edited") for r in rows) == 20
    many = statements_for(db, lambda: collect_rows(db, ExportFilters()))
    assert many == few <= 10


def test_drafting_inputs_read_a_batch_in_a_fixed_number_of_statements(db, settings, studies):
    drafting = DraftingService(db, settings, RuntimeConfig())
    reads_prior = Preset("p", "worker", options={"images": ["frontal", "prior"]})
    for preset in (None, reads_prior):
        small = statements_for(db, lambda p=preset: drafting.inputs(studies[:2], p))
        large = statements_for(db, lambda p=preset: drafting.inputs(studies[:40], p))
        assert large == small <= 10, (preset, small, large)
    batch = drafting.inputs(studies[:8], reads_prior)
    # every second study is its patient's later one: it has the earlier as its prior
    with_prior = [x for x in batch if x.prior is not None]
    assert len(with_prior) == 4
    assert all(len(x.prior.images) == 1 and x.prior.findings for x in with_prior)
    assert all(x.prior is None for x in drafting.inputs(studies[:8], None)[::2])
    with pytest.raises(LookupError, match="study 999999 does not exist"):
        drafting.inputs([studies[0], 999999])


def test_priors_never_load_images(db, studies):
    with db.read() as s:
        from rrg_review.db.models import Study

        later = s.get(Study, studies[1])
        with counted(db) as statements:
            found = priors(s, later)
        assert [p.id for p in found] == [studies[0]]
        assert not any("FROM image" in st for st in statements)
        assert found[0].reference is not None and len(statements) <= 3
