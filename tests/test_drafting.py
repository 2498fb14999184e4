"""Drafting backends through the one Drafter interface, on tiny random models of the real
architectures saved locally (no network), plus the services that store drafts."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from rrg_review.model.backends.chat import ChatDrafter, parse_report
from rrg_review.model.backends.encoder_decoder import EncoderDecoderDrafter
from rrg_review.model.backends.worker_client import WorkerDrafter, WorkerError
from rrg_review.model.base import Drafter, length_buckets, run_adaptive
from rrg_review.model.device import select
from rrg_review.model.hub import ModelUnavailable, cached, resolve
from rrg_review.model.inputs import InputImage, StudyInput
from rrg_review.model.presets import ModelRef, Preset, UnknownPreset, get_preset, load_presets
from tests.tiny_models import tiny_encoder_decoder, tiny_llava

CPU = select("cpu")
FINDINGS_ID = "IAMJB/chexpert-mimic-cxr-findings-baseline"
IMPRESSION_ID = "IAMJB/chexpert-mimic-cxr-impression-baseline"


@pytest.fixture(scope="module")
def tiny_ed(tmp_path_factory) -> Path:
    return tiny_encoder_decoder(tmp_path_factory.mktemp("tiny-ed"))


@pytest.fixture(scope="module")
def tiny_chat(tmp_path_factory) -> Path:
    return tiny_llava(tmp_path_factory.mktemp("tiny-llava"))


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache, offline: models must be planted in it."""
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "hf-cache"


def plant(cache: Path, repo_id: str, folder: Path, commit: str) -> None:
    """Lay a model folder out exactly as the hub cache does (refs/main -> snapshots/<commit>)."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    shutil.copytree(folder, repo / "snapshots" / commit)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)


def studies(rg1_small: np.ndarray) -> list[StudyInput]:
    """Three studies with clearly different images (real radiograph, inverted, a gradient)."""
    gradient = np.tile(np.linspace(0, 255, 200, dtype=np.uint8), (180, 1))
    images = [rg1_small.astype(np.uint8) if rg1_small.dtype == np.uint8
              else (rg1_small >> 8).astype(np.uint8)]
    images += [255 - images[0], gradient]
    return [StudyInput(i + 1, (InputImage(px, "PA", "frontal", f"c{i}"),
                               InputImage(px.T.copy(), "LATERAL", "lateral", f"l{i}")),
                       patient_key=f"p{i}", indication="cough " * (i + 1))
            for i, px in enumerate(images)]


def ed_preset(path: Path, **generation) -> Preset:
    ref = ModelRef(str(path))
    return Preset("tiny-ed", "vision-encoder-decoder", models={"findings": ref, "impression": ref},
                  generation={"max_length": 24, "num_beams": 1, **generation})


# -- presets, devices, weights -------------------------------------------------------------
def test_builtin_presets_are_data_with_the_rrg24_card_settings():
    presets = load_presets()
    base = presets["rrg24-baseline"]
    assert base.backend == "vision-encoder-decoder"
    assert base.model_for("findings").model_id == FINDINGS_ID
    assert base.model_for("impression").model_id == IMPRESSION_ID
    assert base.generation["max_length"] == 128 and base.generation["num_beams"] == 2
    assert {p.backend for p in presets.values()} == {"retrieval", "vision-encoder-decoder",
                                                     "chat", "worker", "openai"}
    with pytest.raises(UnknownPreset, match=r"known presets: .*retrieval"):
        get_preset(presets, "gpt-9")


def test_user_presets_file_adds_and_is_validated(tmp_path):
    good = tmp_path / "p.json"
    good.write_text(json.dumps({"mine": {"backend": "chat", "models": {"report": "x/y"},
                                         "prompts": {"report": "{views}"}}}))
    assert load_presets(good)["mine"].model_for("impression").model_id == "x/y"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"oops": {"backend": "magic", "models": {"report": "x/y"}}}))
    with pytest.raises(ValueError, match=r"bad.json: preset 'oops' has unknown backend"):
        load_presets(bad)


def test_cpu_placement_and_bad_requests():
    assert (CPU.device, CPU.dtype) == ("cpu", "float32")
    with pytest.raises(ValueError, match="unknown device"):
        select("tpu")
    with pytest.raises(ValueError, match="unknown dtype"):
        select("cpu", "int3")


def test_missing_model_offline_names_the_model_and_the_fetch_command(hub_cache):
    with pytest.raises(ModelUnavailable, match=rf"{FINDINGS_ID} is not available.*"
                       r"rrg-review models --fetch rrg24-baseline"):
        resolve(FINDINGS_ID, preset="rrg24-baseline")
    assert cached(FINDINGS_ID) is None


# -- vision encoder-decoder ---------------------------------------------------------------
def test_rrg24_preset_loads_from_the_hf_cache_by_hub_id(hub_cache, tiny_ed, rg1_small):
    plant(hub_cache, FINDINGS_ID, tiny_ed, "a" * 40)
    plant(hub_cache, IMPRESSION_ID, tiny_ed, "b" * 40)
    preset = load_presets()["rrg24-baseline"]
    drafter = EncoderDecoderDrafter(preset, CPU, batch_size=2)
    assert isinstance(drafter, Drafter)
    results = drafter.draft(studies(rg1_small)[:2])
    assert [(r.study_id, r.section) for r in results] == [
        (1, "findings"), (1, "impression"), (2, "findings"), (2, "impression")]
    assert all(r.ok and r.text for r in results)
    findings, impression = results[0].provenance, results[1].provenance
    assert (findings.model_id, findings.revision) == (FINDINGS_ID, "a" * 40)
    assert (impression.model_id, impression.revision) == (IMPRESSION_ID, "b" * 40)
    from transformers import AutoTokenizer

    cls = AutoTokenizer.from_pretrained(tiny_ed).cls_token_id
    gen = findings.generation
    assert gen["decoder_start_token_id"] == cls and gen["max_length"] == 128
    assert gen["num_beams"] == 2 and gen["eos_token_id"] is not None
    assert (findings.device, findings.dtype) == ("cpu", "float32") and findings.seconds > 0


def test_encoder_decoder_batching_equals_one_by_one(tiny_ed, rg1_small):
    drafter = EncoderDecoderDrafter(ed_preset(tiny_ed), CPU, batch_size=3)
    batch = studies(rg1_small)
    together = [r.text for r in drafter.draft(batch)]
    alone = [r.text for s in batch for r in drafter.draft([s])]
    assert together == alone
    assert len(set(together)) > 1  # the images really reach the model


def test_a_study_without_images_fails_alone(tiny_ed, rg1_small):
    drafter = EncoderDecoderDrafter(ed_preset(tiny_ed), CPU, batch_size=4)
    batch = studies(rg1_small)
    batch.insert(1, StudyInput(99, ()))
    results = drafter.draft(batch, ["findings"])
    assert [r.study_id for r in results] == [1, 99, 2, 3]
    assert "study 99 has no image" in results[1].error and results[1].text is None
    assert all(r.ok for r in results if r.study_id != 99)


def test_streaming_ends_with_the_batch_text(tiny_ed, rg1_small):
    drafter = EncoderDecoderDrafter(ed_preset(tiny_ed), CPU)
    study = studies(rg1_small)[0]
    pieces = list(drafter.stream(study, "findings"))
    assert len(pieces) > 1 and pieces[-1] == drafter.draft([study], ["findings"])[0].text


def test_out_of_memory_halves_the_batch():
    sizes = []

    def run(chunk):
        sizes.append(len(chunk))
        if len(chunk) > 2:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2 GiB")
        return list(chunk)

    assert run_adaptive(list(range(7)), run, 8) == list(range(7))
    assert sizes[:3] == [7, 4, 2]
    assert list(length_buckets(["ccc", "a", "bb"], 2, len)) == [[1, 2], [0]]


# -- chat VLM ------------------------------------------------------------------------------
def chat_preset(path: Path, mode: str = "sections") -> Preset:
    return Preset("tiny-chat", "chat", models={"report": ModelRef(str(path))},
                  prompts="radiology-report", generation={"max_new_tokens": 10},
                  options={"images": ["frontal", "lateral"], "prompt_mode": mode})


def test_chat_vlm_batching_equals_one_by_one(tiny_chat, rg1_small):
    drafter = ChatDrafter(chat_preset(tiny_chat), CPU, batch_size=3)
    batch = studies(rg1_small)
    together = drafter.draft(batch)
    assert all(r.ok and r.text for r in together)
    alone = [r.text for s in batch for r in drafter.draft([s])]
    assert [r.text for r in together] == alone
    prov = together[0].provenance
    assert prov.generation["prompt_mode"] == "sections" and prov.revision.startswith("local-")


def test_chat_prompt_carries_views_and_indication(tiny_chat, rg1_small):
    drafter = ChatDrafter(chat_preset(tiny_chat), CPU)
    study = studies(rg1_small)[1]
    messages = drafter.messages(study, "findings")
    content = messages[-1]["content"]
    assert [c["type"] for c in content] == ["image", "image", "text"]
    assert "Indication: cough cough" in content[-1]["text"]
    assert "a frontal, a lateral view" in content[-1]["text"]
    assert messages[0]["role"] == "system"
    assert list(drafter.stream(study, "impression"))[-1] == drafter.draft(
        [study], ["impression"])[0].text


def test_one_report_is_parsed_into_two_sections(tiny_chat, rg1_small):
    assert parse_report("FINDINGS: Lungs clear.\nIMPRESSION: Normal.") == {
        "findings": "Lungs clear.", "impression": "Normal."}
    drafter = ChatDrafter(chat_preset(tiny_chat, mode="report"), CPU)
    findings, impression = drafter.draft(studies(rg1_small)[:1])
    # a random model writes no headers: its text stays visible, the missing section says why
    assert findings.text and impression.error.startswith("the model's output has no 'IMPRESSION:'")


# -- worker process ------------------------------------------------------------------------
def worker_preset(path: Path) -> Preset:
    return Preset("tiny-worker", "worker", models={"report": ModelRef(str(path))},
                  generation={"max_length": 24, "num_beams": 1},
                  options={"adapter": "vision-encoder-decoder", "python_env": "TINY_PY"})


def test_worker_process_speaks_json_and_matches_in_process(tiny_ed, rg1_small):
    batch = studies(rg1_small)
    drafter = WorkerDrafter(worker_preset(tiny_ed), CPU, python=sys.executable)
    try:
        results = drafter.draft([*batch, StudyInput(99, ())], ["findings"])
        proc = drafter._proc
    finally:
        drafter.close()
    assert proc.poll() == 0  # shut down cleanly on request
    in_process = EncoderDecoderDrafter(ed_preset(tiny_ed), CPU).draft(batch, ["findings"])
    assert [r.text for r in results[:3]] == [r.text for r in in_process]
    assert results[3].error == "ValueError: no image"
    assert results[0].provenance.generation["worker"] == "vision-encoder-decoder"


def test_worker_needs_its_python_and_reports_start_failures(tmp_path, monkeypatch, rg1_small):
    monkeypatch.delenv("TINY_PY", raising=False)
    with pytest.raises(ModelUnavailable, match="set TINY_PY"):
        WorkerDrafter(worker_preset(tmp_path), CPU)
    (tmp_path / "config.json").write_text("{}")  # a folder that is not a model
    drafter = WorkerDrafter(worker_preset(tmp_path), CPU, python=sys.executable)
    with pytest.raises(WorkerError, match="failed to start"):
        drafter.draft(studies(rg1_small)[:1])


def test_early_grayscale_resize_gives_the_processor_identical_pixels(tiny_ed):
    from transformers import AutoImageProcessor

    from rrg_review.model.backends.encoder_decoder import _frontal_pil
    from rrg_review.studies.pixels import decode
    from rrg_review.studies.records import ImageSource
    from tests.conftest import rg1

    processor = AutoImageProcessor.from_pretrained(tiny_ed)
    full = decode(ImageSource(name="RG1", path=rg1())).display
    study = StudyInput(1, (InputImage(full, "PA", "frontal"),))
    plain = processor(images=[study.images[0].pil()], return_tensors="pt").pixel_values
    early = processor(images=[_frontal_pil(study, processor)], return_tensors="pt").pixel_values
    assert plain.shape == early.shape and bool((plain == early).all())
