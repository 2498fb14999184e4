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
import tempfile
import threading
from collections.abc import Iterator, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from rrg_review.core.vocabulary import SECTIONS
from rrg_review.model.backends.worker_process import (
    WorkerCrashed,
    WorkerError,
    WorkerProcess,
    WorkerTimeout,
)
from rrg_review.model.base import check_sections, stream_whole
from rrg_review.model.device import Placement
from rrg_review.model.hub import ModelUnavailable, resolve
from rrg_review.model.inputs import DraftResult, InputImage, Provenance, StudyInput
from rrg_review.model.presets import Preset

logger = logging.getLogger(__name__)

__all__ = ["WorkerCrashed", "WorkerDrafter", "WorkerError", "WorkerTimeout"]

DEFAULT_STARTUP_TIMEOUT = 600.0  # loading a 3-7B model from disk onto a GPU
DEFAULT_REQUEST_TIMEOUT = 300.0  # one study, all its sections


class WorkerDrafter:
    """Drafts through one warm worker process.

    It cannot freeze the app: the worker's stderr is drained by a thread (its tail goes into
    error messages), start-up and every request have a timeout (a hung worker is killed and the
    next study starts a fresh one), each reply must carry its request's id, a request's
    temporary PNGs are deleted when its reply arrives, and a worker that crashes mid-request is
    restarted once for that study before the study is reported as failed.
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
        self._worker: WorkerProcess | None = None
        self._hello: dict[str, Any] = {}
        self._model_id = preset.model_for("findings").model_id
        self._lock = threading.Lock()
        self._next_id = 0
        self.starts = 0  # worker processes started so far (restarts included)
        self._tmp = tempfile.TemporaryDirectory(prefix="rrg-worker-")

    @property
    def _proc(self):
        """The current worker's Popen (None when none is running)."""
        return self._worker.proc if self._worker is not None else None

    @property
    def temp_dir(self) -> Path:
        return Path(self._tmp.name)

    def _start(self) -> WorkerProcess:
        if self._worker is not None and self._worker.alive:
            return self._worker
        self._discard()
        ref = self._preset.model_for("findings")
        model = str(resolve(ref.model_id, ref.revision, self.preset, self.download).path)
        script = str(resources.files("rrg_review.model").joinpath("worker.py"))
        cmd = [self.python, script, "--adapter", self.adapter, "--model", model,
               "--device", self.placement.device, "--dtype", self.placement.dtype,
               "--generation", json.dumps(self._preset.generation)]
        worker = WorkerProcess(cmd, {**os.environ, "PYTHONUNBUFFERED": "1"})
        self.starts += 1
        try:
            hello = worker.receive(self.startup_timeout)
        except WorkerTimeout:
            tail = worker.stderr_tail()
            worker.kill()
            raise WorkerError(f"worker for {ref.model_id} did not start within "
                              f"{self.startup_timeout:g} s" + (f": {tail}" if tail else "")
                              ) from None
        except WorkerCrashed as exc:
            worker.kill()
            raise WorkerError(f"worker for {ref.model_id} failed to start: {exc}") from None
        if not hello.get("ready"):
            worker.stop(grace=2)
            raise WorkerError(f"worker for {ref.model_id} failed to start: "
                              f"{hello.get('error', 'no reason given')}")
        self._hello = hello
        self._model_id = ref.model_id
        self._worker = worker
        return worker

    def _discard(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.kill()

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
        self._next_id += 1
        prior = None
        if study.prior is not None:
            prior = {"images": self._image_paths(study.prior.images, folder, "prior"),
                     "report": study.prior.report}
        return {"id": self._next_id, "images": self._image_paths(study.images, folder, "study"),
                "indication": study.indication, "comparison": study.comparison,
                "prior": prior, "sections": list(sections)}

    def _ask(self, study: StudyInput, sections: Sequence[str]) -> dict[str, Any]:
        """One study's reply (or {"error": ...}); its temporary images are gone afterwards."""
        folder = Path(tempfile.mkdtemp(prefix=f"study-{study.study_id}-", dir=self._tmp.name))
        try:
            request = self._request(study, sections, folder)
            for attempt in (1, 2):
                worker = self._start()  # a start failure raises: no study can be drafted
                try:
                    worker.send(request)
                    reply = worker.receive(self.request_timeout)
                except WorkerTimeout:
                    tail = worker.stderr_tail(500)
                    self._discard()  # hung: killed, the next study starts a fresh worker
                    return {"error": f"WorkerTimeout: the worker gave no reply within "
                                     f"{self.request_timeout:g} s and was stopped"
                                     + (f" ({tail})" if tail else "")}
                except WorkerCrashed as exc:
                    self._discard()
                    if attempt == 1:
                        logger.warning("worker for %s crashed on study %s, restarting it: %s",
                                       self.preset, study.study_id, exc)
                        continue
                    return {"error": f"WorkerCrashed: the worker crashed on this study again "
                                     f"after a restart: {exc}"}
                if reply.get("id") != request["id"]:
                    self._discard()  # out of step: never pair a reply with the wrong study
                    return {"error": f"WorkerError: the worker answered request "
                                     f"{reply.get('id')!r} when {request['id']} was asked; "
                                     "it was stopped"}
                return reply
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
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.stop()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
            self._tmp.cleanup()
