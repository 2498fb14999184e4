"""Drafting through a worker process (model/worker.py) in another Python environment.

The app's own environment never changes: models needing `trust_remote_code` or another
`transformers` run under the interpreter named by `--worker-python` or the preset's environment
variable (e.g. RRG_REVIEW_MAIRA_PYTHON=/opt/maira/.venv/bin/python).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from model.base import check_sections
from model.device import Placement
from model.hub import ModelUnavailable, resolve
from model.inputs import SECTIONS, DraftResult, InputImage, Provenance, StudyInput
from model.presets import Preset


class WorkerError(RuntimeError):
    pass


class WorkerDrafter:
    streams = False

    def __init__(self, preset: Preset, placement: Placement, python: str | None = None,
                 download: bool = True, startup_timeout: float = 600.0) -> None:
        self.preset = preset.name
        self._preset = preset
        self.placement = placement
        env_name = preset.options.get("python_env")
        self.python = python or (os.environ.get(env_name) if env_name else None)
        if not self.python:
            raise ModelUnavailable(
                preset.model_for("findings").model_id,
                f"preset {preset.name} runs in its own Python environment; set "
                f"{env_name or 'the preset python_env variable'} (or --worker-python) to that "
                "environment's python", preset.name)
        self.adapter = preset.options.get("adapter", "vision-encoder-decoder")
        self.download = download
        self.startup_timeout = startup_timeout
        self._proc: subprocess.Popen[str] | None = None
        self._hello: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._next_id = 0
        self._tmp = tempfile.TemporaryDirectory(prefix="rrg-worker-")

    def _start(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        ref = self._preset.model_for("findings")
        model = str(resolve(ref.model_id, ref.revision, self.preset, self.download).path)
        script = str(resources.files("model").joinpath("worker.py"))
        cmd = [self.python, script, "--adapter", self.adapter, "--model", model,
               "--device", self.placement.device, "--dtype", self.placement.dtype,
               "--generation", json.dumps(self._preset.generation)]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        try:
            self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True, env=env)
        except OSError as exc:
            raise WorkerError(f"cannot start worker {self.python}: {exc}") from exc
        hello = self._receive()
        if not hello.get("ready"):
            self.close()
            raise WorkerError(f"worker for {ref.model_id} failed to start: "
                              f"{hello.get('error', 'no reason given')}")
        self._hello = hello
        self._model_id = ref.model_id

    def _receive(self) -> dict[str, Any]:
        assert self._proc is not None and self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            err = self._proc.stderr.read()[-2000:] if self._proc.stderr else ""
            self._proc.wait()
            raise WorkerError(f"worker exited (code {self._proc.returncode}): {err.strip()}")
        return json.loads(line)

    def _image_paths(self, images: Sequence[InputImage], tag: str) -> list[dict[str, str]]:
        from PIL import Image

        out = []
        for i, image in enumerate(images):
            path = Path(self._tmp.name) / f"{tag}-{i}.png"
            Image.fromarray(image.pixels).save(path)
            out.append({"path": str(path), "view": image.view_group or "unknown"})
        return out

    def _request(self, study: StudyInput, sections: Sequence[str]) -> dict[str, Any]:
        self._next_id += 1
        tag = f"{self._next_id}"
        prior = None
        if study.prior is not None:
            prior = {"images": self._image_paths(study.prior.images, tag + "-prior"),
                     "report": study.prior.report}
        return {"id": self._next_id, "images": self._image_paths(study.images, tag),
                "indication": study.indication, "comparison": study.comparison,
                "prior": prior, "sections": list(sections)}

    def provenance(self, section: str | None = None, seconds: float | None = None) -> Provenance:
        return Provenance(self.preset, self._model_id, self._hello.get("revision"),
                          {**self._hello.get("generation", {}), "worker": self.adapter},
                          self._hello.get("device"), self._hello.get("dtype"), seconds)

    def draft(self, batch: Sequence[StudyInput],
              sections: Sequence[str] = SECTIONS) -> list[DraftResult]:
        sections = check_sections(sections)
        out: list[DraftResult] = []
        with self._lock:
            self._start()
            assert self._proc is not None and self._proc.stdin is not None
            for study in batch:
                try:
                    request = self._request(study, sections)
                    self._proc.stdin.write(json.dumps(request) + "\n")
                    self._proc.stdin.flush()
                    reply = self._receive()
                except (OSError, ValueError) as exc:
                    reply = {"error": f"{type(exc).__name__}: {exc}"}
                prov = self.provenance(seconds=reply.get("seconds"))
                texts = reply.get("sections") or {}
                for section in sections:
                    error = reply.get("error") or (None if section in texts else
                                                   f"worker returned no {section}")
                    out.append(DraftResult(study.study_id, section,
                                           None if error else texts[section], prov, error))
        return out

    def stream(self, study: StudyInput, section: str) -> Iterator[str]:
        result = self.draft([study], [section])[0]
        if result.error:
            raise WorkerError(result.error)
        yield result.text or ""

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            try:
                assert proc.stdin is not None
                proc.stdin.write(json.dumps({"op": "shutdown"}) + "\n")
                proc.stdin.flush()
                proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr) if proc else ():
            if stream:
                stream.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
