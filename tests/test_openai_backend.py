"""The `openai` backend against a REAL OpenAI-compatible server: `transformers serve` (from the
pinned transformers) started on loopback with a tiny random LLaVA of the real architecture.

`transformers serve` answers chat completions as a stream only, which is how the backend asks
(vLLM streams the same way). Nothing here mocks a response.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from bench.processes import stop_process
from rrg_review.model.backends.chat import ChatDrafter
from rrg_review.model.backends.openai_server import OpenAIServerDrafter
from rrg_review.model.device import select
from rrg_review.model.hub import ModelUnavailable
from rrg_review.model.inputs import InputImage, PriorStudy, StudyInput
from rrg_review.model.presets import ModelRef, Preset
from tests.tiny_models import tiny_llava

CPU = select("cpu")
pytestmark = pytest.mark.slow  # starts a model server (about a minute on a busy 2-core machine)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    path = tiny_llava(tmp_path_factory.mktemp("served-llava"))
    # a real LLaVA tokenizer returns no token_type_ids; the tiny one must not either, since
    # transformers serve passes every tokenizer output to generate()
    config = path / "tokenizer_config.json"
    data = json.loads(config.read_text())
    data["model_input_names"] = ["input_ids", "attention_mask"]
    config.write_text(json.dumps(data))
    return path


@pytest.fixture(scope="module")
def server(tiny_model, tmp_path_factory):
    """`transformers serve` on a loopback port; its base URL."""
    from transformers.commands.serving import serve_dependencies_available

    if not serve_dependencies_available:
        pytest.skip("transformers serve needs fastapi, uvicorn, pydantic and openai")
    cli = shutil.which("transformers", path=str(Path(sys.executable).parent))
    if cli is None:
        pytest.skip("the transformers command is not installed next to this python")
    port = _free_port()
    folder = tmp_path_factory.mktemp("serve")
    log = folder / "serve.log"
    # `transformers serve` writes each image of a request to a temporary file it never
    # deletes: in the test's own folder, not /tmp (20 PNGs per run were left there)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TMPDIR": str(folder)}
    with open(log, "wb") as out:
        proc = subprocess.Popen([cli, "serve", "--host", "127.0.0.1", "--port", str(port),
                                 "--device", "cpu", "--dtype", "float32"],
                                stdout=out, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        import httpx

        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "server did not start: " + log.read_text()[-3000:]
            time.sleep(0.5)
        # `transformers serve` loads a model on its first request; concurrent first requests
        # race inside that load ("Cannot copy out of meta tensor", a 500 seen in a loaded full
        # run), so one request loads it before the tests send theirs in parallel
        from openai import OpenAI

        with OpenAI(base_url=base + "/v1", api_key="unused", timeout=300) as client:
            for _ in client.chat.completions.create(
                    model=str(tiny_model), max_tokens=1, stream=True,
                    messages=[{"role": "user", "content": "warm up"}]):
                pass
        yield base + "/v1"
    finally:
        stop_process(proc, grace_s=20)


def served_preset(model: Path, base_url: str, mode: str = "report", **options) -> Preset:
    return Preset("served", "openai", models={"report": ModelRef(str(model))},
                  prompts="radiology-report-prior",
                  generation={"max_new_tokens": 10, "do_sample": False},
                  options={"base_url": base_url, "images": ["frontal", "lateral"],
                           "prompt_mode": mode, "concurrency": 2, **options})


def studies(rg1_small: np.ndarray) -> list[StudyInput]:
    base = (rg1_small >> 8).astype(np.uint8) if rg1_small.dtype != np.uint8 else rg1_small
    gradient = np.tile(np.linspace(0, 255, 200, dtype=np.uint8), (180, 1))
    images = [base, 255 - base, gradient]
    return [StudyInput(i + 1, (InputImage(px, "PA", "frontal", f"c{i}"),
                               InputImage(px.T.copy(), "LATERAL", "lateral", f"l{i}")),
                       patient_key=f"p{i}", indication="cough " * (i + 1),
                       prior=PriorStudy((), "Clear lungs.", "No acute process.") if i else None)
            for i, px in enumerate(images)]


def test_drafts_through_a_real_server_match_the_same_model_in_process(
        server, tiny_model, rg1_small):
    batch = studies(rg1_small)
    drafter = OpenAIServerDrafter(served_preset(tiny_model, server, mode="sections"))
    try:
        served = drafter.draft(batch)
    finally:
        drafter.close()
    assert [(r.study_id, r.section) for r in served] == [
        (s.study_id, sec) for s in batch for sec in ("findings", "impression")]
    assert all(r.ok and r.text for r in served), [r.error for r in served]
    # the same weights, prompt and pixels in-process give the same greedy text
    local = ChatDrafter(Preset("local", "chat", models={"report": ModelRef(str(tiny_model))},
                               prompts="radiology-report-prior",
                               generation={"max_new_tokens": 10, "do_sample": False},
                               options={"images": ["frontal", "lateral"],
                                        "prompt_mode": "sections"}), CPU, batch_size=1)
    assert [r.text for r in served] == [r.text for r in local.draft(batch)]
    prov = served[0].provenance
    assert prov.model_id == str(tiny_model) and prov.device == "server"
    assert prov.generation["server"] == server
    assert prov.generation["served_model"] == f"{tiny_model}@main"  # as the server reports it


def test_the_prompt_carries_images_as_data_urls_indication_and_prior(
        server, tiny_model, rg1_small):
    drafter = OpenAIServerDrafter(served_preset(tiny_model, server))
    study = studies(rg1_small)[1]
    messages = drafter.server_messages(study, "report")
    assert messages[0]["role"] == "system" and isinstance(messages[0]["content"], str)
    parts = messages[1]["content"]
    assert [p["type"] for p in parts] == ["image_url", "image_url", "text"]
    assert parts[0]["image_url"]["url"].startswith("data:image/png;base64,")
    assert "Indication: cough cough" in parts[2]["text"]
    assert "Prior report: FINDINGS: Clear lungs. IMPRESSION: No acute process." in parts[2]["text"]
    settings = drafter.request_settings()
    assert settings["max_tokens"] == 10 and settings["temperature"] == 0.0


def test_a_whole_report_preset_asks_the_server_once_per_study(server, tiny_model, rg1_small):
    drafter = OpenAIServerDrafter(served_preset(tiny_model, server, mode="report"))
    batch = studies(rg1_small)
    results = drafter.draft(batch)
    findings = [r for r in results if r.section == "findings"]
    assert all(r.ok and r.text for r in findings)
    # a random model writes no headers: the impression says why, the text stays visible
    assert all(r.error.startswith("the model's output has no 'IMPRESSION:'")
               for r in results if r.section == "impression")
    steps = list(drafter.stream_sections(batch[0]))
    assert steps[-1]["findings"] == findings[0].text  # the streamed text is the same report
    drafter.close()


def test_an_unreachable_server_stops_the_run_with_one_sentence(tiny_model, rg1_small,
                                                                monkeypatch, caplog):
    """Nothing listening at the preset's address: every study would fail the same way, each
    after its own retries (a trial: 15 s and four tracebacks for two studies, an error stored
    for each). The run stops at once (ModelUnavailable, which the command and the page's
    pre-drafter say in one sentence), after the client's retries, with no traceback logged."""
    monkeypatch.setenv("MY_SERVER_KEY", "sk-test-123")
    url = f"http://127.0.0.1:{_free_port()}/v1"  # nothing listens there
    drafter = OpenAIServerDrafter(served_preset(tiny_model, url, max_retries=1,
                                                api_key_env="MY_SERVER_KEY"))
    assert drafter.client().api_key == "sk-test-123"  # the key comes from the variable
    with pytest.raises(ModelUnavailable, match=rf"the model server {url} \(preset .*\) cannot "
                                               r"be reached \(Connection error"):
        drafter.draft(studies(rg1_small)[:2])
    assert not any(r.exc_info for r in caplog.records)
    with pytest.raises(ValueError, match=r"needs options.base_url"):
        OpenAIServerDrafter(Preset("x", "openai", models={"report": ModelRef("m")}))
