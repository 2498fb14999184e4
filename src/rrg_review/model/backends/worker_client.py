"""Drafting through a worker process (model/worker.py) in another Python environment.

The app's own environment never changes: models needing `trust_remote_code` or another
`transformers` run under the interpreter named by `--worker-python` or the preset's environment
variable (e.g. RRG_REVIEW_MAIRA_PYTHON=/opt/maira/.venv/bin/python).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from rrg_review.core.vocabulary import SECTIONS
from rrg_review.core.worker_client import (
    WorkerClient,
    WorkerCrashed,
    WorkerError,
    WorkerProcess,
    WorkerStartFailed,
    WorkerTimeout,
)
from rrg_review.model.base import check_sections, stream_whole
from rrg_review.model.device import Placement
from rrg_review.model.hub import ModelUnavailable, resolve
from rrg_review.model.inputs import DraftResult, InputImage, Provenance, StudyInput
from rrg_review.model.options import DrafterOptions
from rrg_review.model.presets import Preset

logger = logging.getLogger(__name__)

__all__ = ["WorkerCrashed", "WorkerDrafter", "WorkerError", "WorkerTimeout"]

DEFAULT_STARTUP_TIMEOUT = 600.0  # loading a 3-7B model from disk onto a GPU
DEFAULT_REQUEST_TIMEOUT = 300.0  # one study, all its sections


class WorkerDrafter:
    """Drafts through one warm worker process.

    It cannot freeze the app (core/worker_client.py: stderr drained, start-up and request
    timeouts, a hung worker killed and the next study given a fresh one, each reply matched to
    its request's id); here, a request's temporary PNGs are deleted when its reply arrives, and
    a worker that crashes mid-request is restarted once for that study before the study is
    reported as failed.
    Timeouts come from the preset's options (`startup_timeout`, `request_timeout`, seconds).
    """

    streams = False

    def __init__(self, preset: Preset, placement: Placement, python: str | None = None,
                 download: bool = True, startup_timeout: float | None = None,
                 request_timeout: float | None = None) -> None:
        self.preset = preset.name
        self._preset = preset
        self.placement = placement
        env_name = preset.options.get("python_env")
        self.python = python  # app.settings reads the preset's variable (Settings.worker_python)
        if not self.python:
            raise ModelUnavailable(
                preset.model_for("findings").model_id,
                f"preset {preset.name} runs in its own Python environment; set "
                f"{env_name or 'the preset python_env variable'} (or --worker-python) to that "
                "environment's python", preset.name)
        self.adapter = preset.options.get("adapter", "vision-encoder-decoder")
        self.download = download
        self.startup_timeout = float(startup_timeout or preset.options.get(
            "startup_timeout", DEFAULT_STARTUP_TIMEOUT))
        self.request_timeout = float(request_timeout or preset.options.get(
            "request_timeout", DEFAULT_REQUEST_TIMEOUT))
        self._client = WorkerClient("the worker", self.startup_timeout, self.request_timeout)
        self._model_id = preset.model_for("findings").model_id
        self._lock = threading.Lock()
        self._tmp = tempfile.TemporaryDirectory(prefix="rrg-worker-")

    @property
    def _worker(self) -> WorkerProcess | None:
        """The running worker (None when none is)."""
        return self._client.process

    @property
    def _proc(self) -> subprocess.Popen[str] | None:
        """The current worker's Popen (None when none is running)."""
        return self._client.process.proc if self._client.process is not None else None

    @property
    def _hello(self) -> dict[str, Any]:
        return self._client.hello

    @property
    def starts(self) -> int:
        """Worker processes started so far (restarts included)."""
        return self._client.starts

    @property
    def temp_dir(self) -> Path:
        return Path(self._tmp.name)

    def _start(self) -> None:
        if self._client.running:
            return
        self._client.discard()
        ref = self._preset.model_for("findings")
        model = str(resolve(ref.model_id, ref.revision, self.preset, self.download).path)
        script = str(resources.files("rrg_review.model").joinpath("worker.py"))
        cmd = [self.python, script, "--adapter", self.adapter, "--model", model,
               "--device", self.placement.device, "--dtype", self.placement.dtype,
               "--generation", json.dumps(self._preset.generation)]
        try:
            self._client.start(cmd, {**os.environ, "PYTHONUNBUFFERED": "1"})
        except WorkerStartFailed as exc:
            raise WorkerError(f"worker for {ref.model_id} {exc.reason}") from None
        self._model_id = ref.model_id

    def _image_paths(self, images: Sequence[InputImage], folder: Path,
                     tag: str) -> list[dict[str, str]]:
        from PIL import Image

        out = []
        for i, image in enumerate(images):
            path = folder / f"{tag}-{i}.png"
            Image.fromarray(image.pixels).save(path)
            out.append({"path": str(path), "view": image.view_group or "unknown"})
        return out

    def _request(self, study: StudyInput, sections: Sequence[str], folder: Path
                 ) -> dict[str, Any]:
        prior = None
        if study.prior is not None:
            prior = {"images": self._image_paths(study.prior.images, folder, "prior"),
                     "report": study.prior.report}
        return {"images": self._image_paths(study.images, folder, "study"),
                "indication": study.indication, "comparison": study.comparison,
                "prior": prior, "sections": list(sections)}

    def _ask(self, study: StudyInput, sections: Sequence[str]) -> dict[str, Any]:
        """One study's reply (or {"error": ...}); its temporary images are gone afterwards."""
        folder = Path(tempfile.mkdtemp(prefix=f"study-{study.study_id}-", dir=self._tmp.name))
        try:
            request = self._request(study, sections, folder)
            for attempt in (1, 2):
                self._start()  # a start failure raises: no study can be drafted
                try:
                    return self._client.request(request)
                except WorkerTimeout as exc:  # hung: killed, the next study gets a fresh one
                    return {"error": f"WorkerTimeout: {exc}"}
                except WorkerCrashed as exc:
                    if attempt == 1:
                        logger.warning("worker for %s crashed on study %s, restarting it: %s",
                                       self.preset, study.study_id, exc)
                        continue
                    return {"error": f"WorkerCrashed: the worker crashed on this study again "
                                     f"after a restart: {exc}"}
                except WorkerError as exc:  # out of step: stopped, never paired wrongly
                    return {"error": f"WorkerError: {exc}"}
            raise AssertionError("unreachable")
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def provenance(self, section: str | None = None, seconds: float | None = None) -> Provenance:
        return Provenance(self.preset, self._model_id, self._hello.get("revision"),
                          {**self._hello.get("generation", {}), "worker": self.adapter},
                          self._hello.get("device"), self._hello.get("dtype"), seconds)

    def draft(self, batch: Sequence[StudyInput],
              sections: Sequence[str] = SECTIONS) -> list[DraftResult]:
        sections = check_sections(sections)
        out: list[DraftResult] = []
        with self._lock:
            for study in batch:
                reply = self._ask(study, sections)
                prov = self.provenance(seconds=reply.get("seconds"))
                texts = reply.get("sections") or {}
                for section in sections:
                    error = reply.get("error") or (None if section in texts else
                                                   f"worker returned no {section}")
                    out.append(DraftResult(study.study_id, section,
                                           None if error else texts[section], prov, error))
        return out

    def stream(self, study: StudyInput, section: str) -> Iterator[str]:
        return stream_whole(self, study, section, WorkerError)

    def close(self) -> None:
        self._client.stop()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
            self._tmp.cleanup()


def from_options(preset: Preset, options: DrafterOptions) -> WorkerDrafter:
    """The registry's builder: the worker runs under `options.worker_python`."""
    from rrg_review.model.device import select

    return WorkerDrafter(preset, select(options.device, options.dtype), options.worker_python,
                         options.download)
