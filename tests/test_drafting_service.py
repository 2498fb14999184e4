"""Drafts stored with provenance, the offline retrieval default, background pre-drafting and the
`draft`/`models` commands, on a real SQLite database filled through the import service."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import func, select

from rrg_review.app.cli import main as cli
from rrg_review.app.drafting.service import DraftingService, PreDrafter, RuntimeConfig
from rrg_review.app.ingest.service import import_records
from rrg_review.db.models import Draft, Image, Reader, Study, WorklistItem
from rrg_review.model.backends.retrieval import FeatureCache, RetrievalDrafter, ThumbnailFeatures
from rrg_review.model.presets import load_presets
from rrg_review.studies.records import ImageSource, ReportSections, StudyRecord
from tests.layouts import png_bytes
from tests.tiny_models import tiny_encoder_decoder


def _images(rg1_small: np.ndarray) -> dict[str, np.ndarray]:
    gradient = np.tile(np.linspace(0, 255, 230, dtype=np.uint8), (245, 1))
    return {"rg1": rg1_small, "inverted": 255 - rg1_small, "gradient": gradient,
            "flipped": rg1_small[:, ::-1].copy()}


def record(key: str, patient: str, pixels: np.ndarray, findings: str | None,
           impression: str | None, day: int = 1) -> StudyRecord:
    return StudyRecord(
        source="test", study_key=key, patient_key=patient, origin=key,
        study_date=date(2025, 1, day), indication="Cough.",
        images=(ImageSource(name=f"{key}.png", data=png_bytes(pixels), view_position="PA"),),
        reference=ReportSections(findings, impression) if findings or impression else None)


@pytest.fixture
def filled(db, settings, rg1_small):
    """S1 (patient A) is to be drafted. Its twin image belongs to S2, the same patient's prior,
    which retrieval must skip; S3 (patient B, the mirrored radiograph) is the right answer."""
    img = _images(rg1_small)
    records = [
        record("S1", "A", img["rg1"], "current findings", "current impression", day=9),
        record("S2", "A", img["rg1"], "same patient findings", "same patient impression"),
        record("S3", "B", img["flipped"], "mirror findings", "mirror impression"),
        record("S4", "C", img["gradient"], "gradient findings", "gradient impression"),
        record("S5", "D", img["inverted"], None, None),
    ]
    report = import_records(db, records, blobs=settings.blobs, fmt="test")
    assert report.added == 5
    with db.read() as session:
        ids = {s: i for s, i in session.execute(
            select(Image.study_id, Image.study_id)).all()}
    return db, sorted(ids)


def test_retrieval_copies_the_nearest_other_patient_never_the_same_one(filled, settings):
    db, ids = filled
    service = DraftingService(db, settings)
    run = service.draft(ids, "retrieval")
    assert (run.drafted, run.failed) == (10, 0)
    s1 = service.latest(ids[0], "retrieval")
    assert s1["findings"].text == "mirror findings"
    assert s1["impression"].text == "mirror impression"
    assert s1["findings"].generation["neighbour_study_id"] == ids[2]
    assert s1["findings"].model_id == "retrieval/thumbnail-32"
    # S5 has no reference but can be drafted from the others
    assert service.latest(ids[4], "retrieval")["findings"].text
    assert (settings.data_dir / "features" / "thumbnail-32.features").is_file()


def test_retrieval_features_are_computed_once_and_cached(filled, settings, tmp_path):
    db, ids = filled
    service = DraftingService(db, settings)
    calls = []

    class Counting(ThumbnailFeatures):
        def __call__(self, images):
            calls.append(len(images))
            return super().__call__(images)

    preset = load_presets()["retrieval"]
    first = RetrievalDrafter(preset, service.candidates, Counting(), tmp_path)
    inputs = service.inputs(ids[:1])
    first.draft(inputs)
    # S1..S4 have references; S1 and S2 share one image file (one checksum), and the query
    # image is S1's: three distinct images, each computed once
    assert sum(calls) == 3
    calls.clear()
    again = RetrievalDrafter(preset, service.candidates, Counting(), tmp_path)
    assert again.draft(inputs)[0].text == "mirror findings"
    assert calls == [] and len(FeatureCache(tmp_path / "thumbnail-32.features")) == 3


def test_retrieval_with_a_local_vision_encoder(filled, settings, tmp_path):
    from transformers import ViTConfig, ViTModel

    encoder = tmp_path / "tiny-vit"
    ViTModel(ViTConfig(image_size=32, patch_size=8, hidden_size=16, num_hidden_layers=1,
                       num_attention_heads=2, intermediate_size=32)).save_pretrained(encoder)
    from transformers import ViTImageProcessor

    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(encoder)
    presets = tmp_path / "presets.json"
    presets.write_text(json.dumps(
        {"retrieval-vit": {"backend": "retrieval", "options": {"encoder": str(encoder)}}}))
    db, ids = filled
    service = DraftingService(db, settings, RuntimeConfig(presets_file=str(presets)))
    service.draft(ids[:1], "retrieval-vit")
    got = service.latest(ids[0], "retrieval-vit")["findings"]
    assert got.text in ("mirror findings", "gradient findings")  # never patient A's own
    assert got.model_id == f"retrieval/encoder:{encoder}" and got.revision.startswith("local-")


def test_drafts_stored_with_provenance_and_errors_kept(filled, settings, tmp_path):
    db, ids = filled
    with db.write() as session:  # one study's image file disappears
        image = session.scalar(select(Image).where(Image.study_id == ids[3]))
        settings.blobs.path(image.uri).unlink()
        reader = Reader(name="r1")
        session.add(reader)
        session.flush()
        session.add_all([WorklistItem(reader_id=reader.id, study_id=s, position=i)
                         for i, s in enumerate(ids)])
    tiny = tiny_encoder_decoder(tmp_path / "tiny")
    presets = tmp_path / "presets.json"
    presets.write_text(json.dumps({"tiny": {
        "backend": "vision-encoder-decoder", "generation": {"max_length": 16},
        "models": {"findings": str(tiny), "impression": str(tiny)}}}))
    service = DraftingService(db, settings, RuntimeConfig(device="cpu",
                                                          presets_file=str(presets)))
    seen = []
    run = service.draft(ids, "tiny", batch_size=2, progress=lambda d, t: seen.append((d, t)))
    assert (run.drafted, run.failed) == (8, 2)
    assert run.errors[0][0] == ids[3] and "cannot read file" in run.errors[0][2]
    assert seen[0] == (0, 5) and seen[-1] == (5, 5)
    with db.read() as session:
        rows = session.scalars(select(Draft).where(Draft.error.is_(None))).all()
        statuses = dict(session.execute(select(WorklistItem.study_id, WorklistItem.status)).all())
    assert {(r.model_id, r.device, r.dtype) for r in rows} == {(str(tiny), "cpu", "float32")}
    assert all(r.model_revision.startswith("local-") and r.seconds > 0 for r in rows)
    assert rows[0].generation["max_length"] == 16
    assert statuses[ids[0]] == "drafted" and statuses[ids[3]] == "new"
    # studies already drafted are skipped; the failed one is tried again
    assert service.pending(ids, "tiny") == [ids[3]]


def test_streaming_a_section_stores_it(filled, settings):
    db, ids = filled
    service = DraftingService(db, settings)
    texts = list(service.stream(ids[0], "impression", "retrieval"))
    assert texts == ["mirror impression"]
    assert service.latest(ids[0])["impression"].text == "mirror impression"


def test_predrafter_fills_the_queue_and_stops_cleanly(filled, settings):
    db, ids = filled
    service = DraftingService(db, settings)
    worker = PreDrafter(service, "retrieval", batch_size=2)
    worker.schedule(ids[1:4])
    assert worker.wait_idle(60)
    assert service.pending(ids, "retrieval") == [ids[0], ids[4]]
    worker.stop()
    assert not worker.alive


def test_predrafter_survives_an_unavailable_model(filled, settings, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(settings.data_dir / "empty-cache"))
    db, ids = filled
    service = DraftingService(db, settings, RuntimeConfig(device="cpu"))
    worker = PreDrafter(service, "rrg24-baseline")
    worker.schedule(ids)
    assert worker.wait_idle(60)
    assert "IAMJB/chexpert-mimic-cxr-findings-baseline is not available" in worker.unavailable
    assert worker.alive
    worker.stop()


def test_draft_and_models_commands(filled, settings, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _db, _ids = filled
    args = ["--db", settings.db_url, "--data-dir", str(settings.data_dir)]
    assert cli(["draft", "--model", "retrieval", "--limit", "3", *args]) == 0
    assert "retrieval: 6 sections drafted, 0 failed" in capsys.readouterr().out
    assert cli(["draft", "--model", "retrieval", "--section", "impression", *args]) == 0
    assert "3 of 5 studies already drafted" in capsys.readouterr().out
    assert cli(["draft", "--model", "nope", *args]) == 2
    assert "unknown model preset 'nope'" in capsys.readouterr().err
    assert cli(["models"]) == 0
    out = capsys.readouterr().out
    assert "retrieval" in out and "needs no download" in out and "rrg24-baseline" in out
    assert Path(settings.data_dir / "features" / "thumbnail-32.features").is_file()


def test_the_model_stays_warm_until_unloaded(filled, settings):
    db, _ids = filled
    service = DraftingService(db, settings)
    first = service.drafter("retrieval")
    assert service.drafter("retrieval") is first  # loaded once, kept warm
    service.unload()
    assert service.drafter("retrieval") is not first  # loaded again when next needed


def _wait_for(condition, seconds: float = 60.0) -> None:
    import time

    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_a_readers_draft_click_goes_ahead_of_predrafting(filled, settings):
    """Pre-drafting holds the model one study at a time and lets a waiting reader go next."""
    import threading

    db, ids = filled
    service = DraftingService(db, settings)
    drafter = service.drafter("retrieval")
    order: list[list[int]] = []
    release, first_started = threading.Event(), threading.Event()
    real_draft = drafter.draft

    def recorded(batch, sections=("findings", "impression")):
        order.append([s.study_id for s in batch])
        if len(order) == 1:  # hold pre-drafting on its first study until the reader waits
            first_started.set()
            assert release.wait(60)
        return real_draft(batch, sections)

    drafter.draft = recorded
    pre = PreDrafter(service, "retrieval", batch_size=4)
    pre.schedule(ids[1:5])
    assert first_started.wait(60)
    clicked: list = []
    reader = threading.Thread(
        target=lambda: clicked.extend(service.stream_study(ids[0], "retrieval")), daemon=True)
    reader.start()
    _wait_for(lambda: service._gate.readers_waiting == 1)
    release.set()
    reader.join(60)
    assert pre.wait_idle(60)
    pre.stop()
    assert order[0] == [ids[1]] and order[1] == [ids[0]]  # the click went next ...
    # ... and pre-drafting then went on
    assert sorted(i for part in order[2:] for i in part) == ids[2:5]
    assert clicked[-1].done and clicked[-1].texts["impression"] == "mirror impression"
    assert service.pending(ids, "retrieval") == []


def test_a_whole_report_chat_preset_generates_once_per_draft_click(filled, settings, tmp_path):
    from tests.tiny_models import tiny_llava

    tiny = tiny_llava(tmp_path / "tiny-llava")
    presets = tmp_path / "presets.json"
    presets.write_text(json.dumps({"tiny-chat": {
        "backend": "chat", "models": {"report": str(tiny)}, "prompts": "radiology-report",
        "generation": {"max_new_tokens": 12}, "options": {"prompt_mode": "report"}}}))
    db, ids = filled
    service = DraftingService(db, settings, RuntimeConfig(device="cpu",
                                                          presets_file=str(presets)))
    loaded = service.drafter("tiny-chat")._load()
    calls = []
    real_generate = loaded.model.generate

    def counted(*args, **kwargs):
        calls.append(1)
        return real_generate(*args, **kwargs)

    loaded.model.generate = counted
    steps = list(service.stream_study(ids[0], "tiny-chat"))
    assert len(calls) == 1  # findings and impression come from the same generated report
    final = steps[-1]
    assert final.done and final.texts["findings"]
    # a random model writes no 'IMPRESSION:' header: stored as that section's error, once
    assert final.errors["impression"].startswith("the model's output has no 'IMPRESSION:'")
    stored = service.latest(ids[0], "tiny-chat")
    assert stored["findings"].text == final.texts["findings"]
    assert stored["findings"].generation["prompt_mode"] == "report"
    assert stored["impression"].error == final.errors["impression"]
    # and the batch path parses the same single report into the same sections
    run = service.draft([ids[0]], "tiny-chat", redo=True)
    assert len(calls) == 2 and run.drafted == 1 and run.failed == 1
    assert service.latest(ids[0], "tiny-chat")["findings"].text == final.texts["findings"]


def test_predrafter_puts_the_study_about_to_open_first_and_says_when_it_is_done(filled,
                                                                               settings):
    db, ids = filled
    service = DraftingService(db, settings)
    worker = PreDrafter(service, "retrieval")
    order: list[int] = []
    real = service.draft

    def recorded(study_ids, *args, **kwargs):
        order.extend(study_ids)
        return real(study_ids, *args, **kwargs)

    service.draft = recorded  # type: ignore[method-assign]
    with worker._cond:  # queue everything before the thread can take any of it
        worker.schedule(ids[1:4])
        worker.schedule([ids[4], ids[2]], first=True)
    assert worker.wait_for(ids[2], 60)
    assert service.pending([ids[2]], "retrieval") == []  # drafted, not just taken off
    assert worker.wait_idle(60)
    worker.stop()
    assert order == [ids[4], ids[2], ids[1], ids[3]]


def test_report_only_studies_are_left_out_of_drafting(filled, settings):
    """A study imported without images (a reference) has nothing to draft from: it is left
    out and counted, with no error draft stored (the pre-drafter stored one per report-only
    study of Open-i, and the page showed it as "ValueError: ... no image to compare")."""
    db, ids = filled
    report_only = StudyRecord(source="test", study_key="R1", patient_key="E", origin="R1",
                              study_date=date(2025, 1, 2), indication="Cough.", images=(),
                              reference=ReportSections("ref findings", "ref impression"))
    assert import_records(db, [report_only], blobs=settings.blobs, fmt="test").added == 1
    with db.read() as session:
        ro = session.scalar(select(Study.id).where(Study.study_key == "R1"))
    service = DraftingService(db, settings)
    run = service.draft([ro, ids[0]], "retrieval")
    assert (run.studies, run.no_images, run.skipped, run.drafted, run.failed) == (2, 1, 0, 2, 0)
    with db.read() as session:
        assert session.scalar(select(func.count()).select_from(Draft)
                              .where(Draft.study_id == ro)) == 0
    todo, planned = service.plan([ro, ids[0]], "retrieval")
    assert todo == [] and (planned.no_images, planned.skipped) == (1, 1)
