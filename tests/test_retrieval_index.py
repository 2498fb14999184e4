"""Retrieval drafting keeps an incremental index (no rescan of the database per click) and stores
image features append-only; its rules stay: never the same study, never the same patient."""

from __future__ import annotations

from datetime import date

import numpy as np
import pytest

from rrg_review.app.drafting.service import DraftingService
from rrg_review.app.ingest.service import import_records
from rrg_review.model.backends.retrieval import FeatureCache, RetrievalDrafter, ThumbnailFeatures
from rrg_review.model.presets import load_presets
from rrg_review.studies.records import ImageSource, ReportSections, StudyRecord
from tests.layouts import png_bytes


def record(key: str, patient: str, pixels: np.ndarray, text: str | None) -> StudyRecord:
    return StudyRecord(
        source="test", study_key=key, patient_key=patient, origin=key,
        study_date=date(2025, 1, 1),
        images=(ImageSource(name=f"{key}.png", data=png_bytes(pixels), view_position="PA"),),
        reference=ReportSections(f"{text} findings", f"{text} impression") if text else None)


def add(db, settings, *records: StudyRecord) -> None:
    report = import_records(db, list(records), blobs=settings.blobs, fmt="test")
    assert report.added == len(records)


class Recording:
    """The service's real candidates query, with the `after` ids it was asked for noted."""

    def __init__(self, service: DraftingService) -> None:
        self.service = service
        self.asked: list[int] = []
        self.returned: list[int] = []

    def __call__(self, after: int):
        self.asked.append(after)
        for c in self.service.candidates(after):
            self.returned.append(c.study_id)
            yield c


@pytest.fixture
def pictures(rg1_small):
    gradient = np.tile(np.linspace(0, 255, 230, dtype=np.uint8), (245, 1))
    return {"rg1": rg1_small, "flipped": rg1_small[:, ::-1].copy(), "gradient": gradient,
            "inverted": 255 - rg1_small}


def test_the_index_only_reads_studies_stored_since_the_last_draft(db, settings, tmp_path,
                                                                   pictures):
    add(db, settings, record("Q", "A", pictures["rg1"], None),
        record("SAME", "A", pictures["rg1"], "same patient"),
        record("FAR", "B", pictures["gradient"], "gradient"))
    service = DraftingService(db, settings)
    candidates = Recording(service)
    drafter = RetrievalDrafter(load_presets()["retrieval"], candidates, ThumbnailFeatures(),
                               tmp_path)
    query = service.inputs([1])
    assert drafter.draft(query)[0].text == "gradient findings"  # never the same patient
    assert candidates.asked == [0] and candidates.returned == [2, 3]
    assert drafter.draft(query)[0].text == "gradient findings"
    assert candidates.asked == [0, 3] and candidates.returned == [2, 3]  # nothing re-read
    add(db, settings, record("NEAR", "C", pictures["flipped"], "mirror"))
    assert drafter.draft(query)[0].text == "mirror findings"  # the new study is found
    assert candidates.asked == [0, 3, 3] and candidates.returned == [2, 3, 4]
    # the study itself is never its own draft, even though it now has a reference
    own = service.inputs([4])
    hit = drafter.draft(own)[0]
    assert hit.provenance.generation["neighbour_study_id"] in (2, 3)
    assert hit.text != "mirror findings"


def test_features_are_appended_never_rewritten(db, settings, tmp_path, pictures):
    add(db, settings, record("Q", "A", pictures["rg1"], None),
        record("B", "B", pictures["gradient"], "gradient"))
    service = DraftingService(db, settings)
    preset = load_presets()["retrieval"]
    RetrievalDrafter(preset, service.candidates, ThumbnailFeatures(), tmp_path).draft(
        service.inputs([1]))
    path = tmp_path / "thumbnail-32.features"
    before = path.read_bytes()
    record_size = FeatureCache.KEY_BYTES + 4 + 4 * 32 * 32
    assert len(before) == 2 * record_size  # the query's image and the candidate's
    add(db, settings, record("C", "C", pictures["flipped"], "mirror"))
    RetrievalDrafter(preset, service.candidates, ThumbnailFeatures(), tmp_path).draft(
        service.inputs([1]))
    after = path.read_bytes()
    assert after[:len(before)] == before and len(after) == 3 * record_size
    cache = FeatureCache(path)
    assert len(cache) == 3


def test_a_torn_record_is_dropped_and_the_file_stays_appendable(tmp_path):
    path = tmp_path / "f.features"
    cache = FeatureCache(path)
    cache.put("a" * 64, np.ones(8, np.float32))
    cache.put("b" * 64, np.full(8, 2, np.float32))
    cache.save()
    whole = path.read_bytes()
    path.write_bytes(whole[:-10])  # a process killed mid-append
    torn = FeatureCache(path)
    assert len(torn) == 1 and torn.get("b" * 64) is None
    np.testing.assert_array_equal(torn.get("a" * 64), np.ones(8, np.float32))
    torn.put("b" * 64, np.full(8, 3, np.float32))
    torn.save()
    again = FeatureCache(path)
    np.testing.assert_array_equal(again.get("b" * 64), np.full(8, 3, np.float32))
    long_key = "k" * 200  # longer than a record's key: stored under its hash, still found
    again.put(long_key, np.zeros(8, np.float32))
    again.save()
    assert FeatureCache(path).get(long_key) is not None


def test_an_old_npz_cache_is_carried_over(tmp_path):
    np.savez(tmp_path / "thumbnail-32.npz", **{"c" * 64: np.arange(4, dtype=np.float32)})
    cache = FeatureCache(tmp_path / "thumbnail-32.features")
    cache.save()
    reopened = FeatureCache(tmp_path / "thumbnail-32.features")
    np.testing.assert_array_equal(reopened.get("c" * 64), np.arange(4, dtype=np.float32))
