"""Drafting through an OpenAI-compatible model server (vLLM, `transformers serve`, TGI, ...).

This is how a team serves MedGemma or LLaVA on its GPUs and lets every workstation draft from it.
The prompts are the chat backend's (prompts are data); images go as base64 PNG data URLs; a batch
is sent as N concurrent streaming requests; the official `openai` client retries failed requests
with exponential back-off. Every draft records the server URL, the model asked for, the model id
the server reported and the settings.

Preset options: `base_url` (required, e.g. http://gpu-host:8000/v1), `api_key_env` (the variable
holding the key; default OPENAI_API_KEY, a server without a key accepts any), `concurrency`
(default 4), `max_retries` (default 3), `request_timeout` (seconds without a byte, default 120),
`images`, `prompt_mode` as for chat presets. Generation settings: `max_new_tokens` (sent as
max_tokens), `temperature`, `top_p`, `seed`, `stop`; anything else goes in the request body as is
(vLLM reads e.g. `repetition_penalty` there).
"""

from __future__ import annotations

import base64
import io
import logging
import os
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, cast

from rrg_review.core.vocabulary import SECTIONS
from rrg_review.model.backends.chat import ChatPrompting, _strip_header, report_results
from rrg_review.model.base import check_sections
from rrg_review.model.hub import ModelUnavailable
from rrg_review.model.inputs import DraftResult, InputImage, Provenance, StudyInput
from rrg_review.model.options import DrafterOptions
from rrg_review.model.presets import Preset, load_prompts

if TYPE_CHECKING:
    from openai import OpenAI
    from openai.types.chat import ChatCompletionMessageParam

logger = logging.getLogger(__name__)

_OPENAI_NAMES = {"max_new_tokens": "max_tokens", "max_tokens": "max_tokens",
                 "temperature": "temperature", "top_p": "top_p", "seed": "seed", "stop": "stop"}
_LOCAL_ONLY = {"do_sample", "num_beams", "use_cache"}  # transformers settings a server ignores


class ServerError(RuntimeError):
    """The server refused or failed a request (after the client's retries)."""


class ServerUnreachable(ModelUnavailable):
    """No connection to the server at all (after the client's retries): every study would fail
    the same way, each after its own retries (a trial's two studies took 15 s and printed four
    tracebacks; a worklist of thousands would have taken hours), so the run stops at once with
    one sentence. What was drafted before stays; a run started again goes on from there."""

    def __init__(self, base_url: str, reason: str, preset: str) -> None:
        RuntimeError.__init__(self, f"the model server {base_url} (preset {preset}) cannot be "
                                    f"reached ({reason}): start it, or correct the preset's "
                                    "base_url")
        self.model_id, self.reason = base_url, reason


class OpenAIServerDrafter(ChatPrompting):
    streams = True

    def __init__(self, preset: Preset) -> None:
        options = preset.options
        if not options.get("base_url"):
            raise ValueError(f"preset {preset.name}: the openai backend needs options.base_url "
                             "(e.g. http://127.0.0.1:8000/v1)")
        self.preset = preset.name
        self._preset = preset
        self.base_url = str(options["base_url"]).rstrip("/")
        self.model = preset.model_for("findings").model_id
        self.api_key_env = options.get("api_key_env", "OPENAI_API_KEY")
        self.concurrency = max(1, int(options.get("concurrency", 4)))
        self.max_retries = int(options.get("max_retries", 3))
        self.timeout = float(options.get("request_timeout", 120))
        self.prompts = load_prompts(preset.prompts or "radiology-report")
        self.views = list(options.get("images", ["frontal"]))
        self.mode = options.get("prompt_mode", "report")
        if self.mode not in ("report", "sections"):
            raise ValueError(f"preset {preset.name}: prompt_mode must be 'report' or 'sections'")
        self._served_model: str | None = None  # what the server says it ran
        self._client_lock = threading.Lock()
        self._client: OpenAI | None = None

    # -- the server ---------------------------------------------------------------------------
    def client(self) -> OpenAI:
        with self._client_lock:
            if self._client is None:
                from openai import OpenAI

                self._client = OpenAI(base_url=self.base_url,
                                      api_key=os.environ.get(self.api_key_env) or "EMPTY",
                                      max_retries=self.max_retries, timeout=self.timeout)
            return self._client

    def request_settings(self) -> dict[str, Any]:
        """The generation settings as OpenAI parameters, plus `extra_body` for the rest."""
        named: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in self._preset.generation.items():
            if key in _OPENAI_NAMES:
                named[_OPENAI_NAMES[key]] = value
            elif key not in _LOCAL_ONLY:
                extra[key] = value
        if self._preset.generation.get("do_sample") is False and "temperature" not in named:
            named["temperature"] = 0.0  # greedy, as the local backends decode
        if extra:
            named["extra_body"] = extra
        return named

    def server_messages(self, study: StudyInput, key: str) -> list[dict[str, Any]]:
        """The chat prompt in the OpenAI format: image placeholders become data URLs."""
        images = iter(self.images_for(study))
        out = []
        for message in self.messages(study, key):
            if message["role"] == "system":
                out.append({"role": "system", "content": message["content"][0]["text"]})
                continue
            content = []
            for part in message["content"]:
                if part["type"] == "image":
                    content.append({"type": "image_url",
                                    "image_url": {"url": data_url(next(images))}})
                else:
                    content.append(part)
            out.append({"role": message["role"], "content": content})
        return out

    def _stream_key(self, study: StudyInput, key: str) -> Iterator[str]:
        """The growing text of one prompt, streamed from the server."""
        from openai import OpenAIError

        try:
            # the messages come from the preset's prompt file (JSON) in the OpenAI shape, which
            # the SDK's TypedDict union cannot see: the one cast of this module
            messages = cast("list[ChatCompletionMessageParam]", self.server_messages(study, key))
            stream = self.client().chat.completions.create(
                model=self.model, messages=messages, stream=True,
                **self.request_settings())
            text = ""
            with stream:
                for chunk in stream:
                    if chunk.model:
                        self._served_model = chunk.model
                    if chunk.choices and chunk.choices[0].delta.content:
                        text += chunk.choices[0].delta.content
                        yield text.strip()
        except OpenAIError as exc:
            raise ServerError(f"{self.base_url}: {type(exc).__name__}: {exc}") from exc
        if not text.strip():
            raise ServerError(f"{self.base_url} returned no text for model {self.model}")

    def _complete(self, study: StudyInput, key: str) -> tuple[str | None, str | None, float]:
        start = time.perf_counter()
        try:
            text = None
            for text in self._stream_key(study, key):  # noqa: B007 - the last is the whole text
                pass
            return text, None, time.perf_counter() - start
        except Exception as exc:  # recorded with this study's draft; the others go on
            if _no_connection(exc):
                raise ServerUnreachable(self.base_url, str(exc.__cause__ or exc),
                                        self.preset) from exc
            # (the reader and the command's summary see the reason: one line here)
            logger.warning("%s: study %s failed: %s", self.base_url, study.study_id, exc)
            logger.debug("study %s", study.study_id, exc_info=True)
            return None, f"{type(exc).__name__}: {exc}", time.perf_counter() - start

    # -- Drafter --------------------------------------------------------------------------------
    def provenance(self, section: str | None = None, seconds: float | None = None) -> Provenance:
        settings = {**self._preset.generation, "server": self.base_url,
                    "served_model": self._served_model, "prompt_mode": self.mode,
                    "prompts": self._preset.prompts if isinstance(self._preset.prompts, str)
                    else "inline", "images": self.views, "concurrency": self.concurrency}
        return Provenance(self.preset, self.model, None, settings, "server", None, seconds)

    def draft(self, batch: Sequence[StudyInput],
              sections: Sequence[str] = SECTIONS) -> list[DraftResult]:
        sections = check_sections(sections)
        keys = ["report"] if self.mode == "report" else list(sections)
        jobs = [(study, key) for study in batch for key in keys]
        with ThreadPoolExecutor(max_workers=self.concurrency,
                                thread_name_prefix="openai-draft") as pool:
            done = list(pool.map(lambda job: self._complete(*job), jobs))
        by_key: dict[tuple[int, str], DraftResult] = {}
        for (study, key), (text, error, seconds) in zip(jobs, done, strict=True):
            prov = self.provenance(seconds=seconds)
            if key == "report":
                for r in report_results(study.study_id, text, error, sections, prov):
                    by_key[(study.study_id, r.section)] = r
            else:
                by_key[(study.study_id, key)] = DraftResult(
                    study.study_id, key, None if error else _strip_header(text, key), prov, error)
        return [by_key[(s.study_id, sec)] for s in batch for sec in sections]

    def close(self) -> None:
        with self._client_lock:
            if self._client is not None:
                self._client.close()
                self._client = None


def data_url(image: InputImage) -> str:
    """An image as a base64 PNG data URL (lossless: the server sees the pixels we decoded)."""
    buffer = io.BytesIO()
    image.pil().save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def from_options(preset: Preset, options: DrafterOptions) -> OpenAIServerDrafter:
    """The registry's builder: the model runs on the preset's server (no local device)."""
    return OpenAIServerDrafter(preset)


def _no_connection(exc: BaseException) -> bool:
    """A request that never reached a server (refused, no route, no such host), not one the
    server failed or was slow to answer (those are the study's own error)."""
    from openai import APIConnectionError, APITimeoutError

    cause = exc.__cause__
    return isinstance(cause, APIConnectionError) and not isinstance(cause, APITimeoutError)
