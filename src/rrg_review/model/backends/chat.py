"""Chat vision-language models (AutoModelForImageTextToText + AutoProcessor chat template),
MedGemma- or LLaVA-class: prompts are data (prompts.json), output parsed into the two sections."""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from rrg_review.core.vocabulary import SECTIONS
from rrg_review.model.backends.hf import (
    InProcessDrafter,
    free_accelerator,
    isolate_errors,
    results_for,
    stream_generate,
)
from rrg_review.model.base import check_sections, length_buckets
from rrg_review.model.device import Placement, select
from rrg_review.model.hub import ResolvedModel, resolve
from rrg_review.model.inputs import DraftResult, InputImage, Provenance, StudyInput
from rrg_review.model.options import DrafterOptions
from rrg_review.model.presets import Preset, load_prompts
from rrg_review.studies.reports import split_sections

if TYPE_CHECKING:
    import torch
    from transformers import BatchFeature

_VIEW_WORDS = {"frontal": "a frontal", "lateral": "a lateral", "prior": "the prior study's frontal"}


class _Blank(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return "not given"


def parse_report(text: str) -> dict[str, str]:
    """Findings and impression from a report with 'FINDINGS:'/'IMPRESSION:' headers."""
    sections = split_sections(text)
    return {k: v for k, v in sections.items() if k in SECTIONS}


@dataclass
class _Loaded:
    # Any, not transformers' classes: their annotations do not describe what is used here
    # (mypy sees `generate` as a Tensor, processors without their tokenizer)
    resolved: ResolvedModel
    model: Any
    processor: Any


class ChatPrompting:
    """What every chat-model backend shares, in-process or behind a server: the prompt (prompts
    are data, with views, indication, comparison and prior report filled in), which images go
    with it, and turning one streamed generation into section drafts.

    A subclass sets `prompts`, `views`, `mode` and implements `_stream_key` and `provenance`.
    """

    prompts: dict[str, str]
    views: list[str]
    mode: str

    def _stream_key(self, study: StudyInput, key: str) -> Iterator[str]:
        raise NotImplementedError

    def provenance(self, section: str | None = None) -> Provenance:
        raise NotImplementedError

    def images_for(self, study: StudyInput) -> list[InputImage]:
        chosen: list[InputImage] = []
        for view in self.views:
            image = {"frontal": study.frontal, "lateral": study.lateral}.get(view)
            if image is not None:
                found = image()
            elif view == "prior" and study.prior is not None and study.prior.images:
                found = study.prior.images[0]
            else:
                found = None
            if found is not None and found not in chosen:
                chosen.append(found)
        if not chosen:
            raise ValueError(f"study {study.study_id} has no image to draft from")
        return chosen

    def messages(self, study: StudyInput, key: str) -> list[dict[str, Any]]:
        images = self.images_for(study)
        views = [w for w in self.views if w != "prior" or study.prior is not None]
        described = ", ".join(_VIEW_WORDS.get(v, v) for v in views[:len(images)])
        fields = _Blank(indication=study.indication or "not given",
                        comparison=study.comparison or "none",
                        prior_report=(study.prior.report if study.prior else None) or "none",
                        views=f"Chest X-ray images: {described} view.")
        text = self.prompts[key].format_map(fields)
        content = [{"type": "image"} for _ in images] + [{"type": "text", "text": text}]
        messages = [{"role": "user", "content": content}]
        if self.prompts.get("system"):
            messages.insert(0, {"role": "system",
                                "content": [{"type": "text", "text": self.prompts["system"]}]})
        return messages

    def stream_sections(self, study: StudyInput, sections: Sequence[str] = SECTIONS
                        ) -> Generator[dict[str, str], None, list[DraftResult]]:
        """The growing text of every section of one study; returns their DraftResults.

        In "report" mode one generation writes the whole report and is parsed into the sections
        (never one generation per section); in "sections" mode each section is its own prompt.
        """
        sections = check_sections(sections)
        if self.mode != "report":
            texts: dict[str, str] = {}
            results = []
            for section in sections:
                start = time.perf_counter()
                for text in self.stream(study, section):
                    texts[section] = text
                    yield dict(texts)
                prov = replace(self.provenance(), seconds=time.perf_counter() - start)
                results.append(DraftResult(study.study_id, section, texts.get(section, ""), prov))
            return results
        start = time.perf_counter()
        text = ""
        for text in self._stream_key(study, "report"):
            yield _visible_sections(text, sections)
        prov = replace(self.provenance(), seconds=time.perf_counter() - start)
        return report_results(study.study_id, text, None, sections, prov)

    def stream(self, study: StudyInput, section: str) -> Iterator[str]:
        section = check_sections([section])[0]
        key = "report" if self.mode == "report" else section
        for text in self._stream_key(study, key):
            yield (parse_report(text).get(section, text) if key == "report"
                   else _strip_header(text, section)) or ""


class ChatDrafter(ChatPrompting, InProcessDrafter):
    def __init__(self, preset: Preset, placement: Placement, batch_size: int | None = None,
                 download: bool = True) -> None:
        super().__init__(preset, placement, batch_size, download)
        self.prompts = load_prompts(preset.prompts or "radiology-report")
        self.views: list[str] = list(preset.options.get("images", ["frontal"]))
        self.mode: str = preset.options.get("prompt_mode", "report")
        if self.mode not in ("report", "sections"):
            raise ValueError(f"preset {preset.name}: prompt_mode must be 'report' or 'sections'")
        self._loaded: _Loaded | None = None

    def _load(self) -> _Loaded:
        with self._lock:
            if self._loaded is None:
                from transformers import AutoModelForImageTextToText, AutoProcessor

                ref = self._preset.model_for("findings")
                resolved = resolve(ref.model_id, ref.revision, self.preset, self.download)
                model = AutoModelForImageTextToText.from_pretrained(
                    resolved.path, dtype=self.placement.torch_dtype()
                ).to(self.placement.device).eval()
                processor = AutoProcessor.from_pretrained(resolved.path)
                processor.tokenizer.padding_side = "left"  # decoder-only: pad on the left
                self._loaded = _Loaded(resolved, model, processor)
            return self._loaded

    def _inputs(self, loaded: _Loaded, studies: Sequence[StudyInput], key: str) -> BatchFeature:
        processor = loaded.processor
        texts = [processor.apply_chat_template(self.messages(s, key), add_generation_prompt=True,
                                               tokenize=False) for s in studies]
        images = [[im.pil() for im in self.images_for(s)] for s in studies]
        inputs: BatchFeature = processor(text=texts, images=images, padding=True,
                                         return_tensors="pt")
        if "token_type_ids" in inputs and not _accepts(loaded.model, "token_type_ids"):
            inputs.pop("token_type_ids")  # e.g. LLaVA: the tokenizer returns them, forward doesn't
        inputs = inputs.to(self.placement.device)
        if "pixel_values" in inputs:
            inputs["pixel_values"] = inputs["pixel_values"].to(self.placement.torch_dtype())
        return inputs

    def _generation(self, loaded: _Loaded) -> dict[str, Any]:
        tokenizer = loaded.processor.tokenizer
        settings = {"pad_token_id": tokenizer.pad_token_id
                    if tokenizer.pad_token_id is not None else tokenizer.eos_token_id}
        settings.update(self._preset.generation)
        return settings

    def _generate(self, loaded: _Loaded, studies: Sequence[StudyInput], key: str) -> list[str]:
        import torch

        inputs = self._inputs(loaded, studies, key)
        with torch.inference_mode():
            out = loaded.model.generate(**inputs, **self._generation(loaded))
        new_tokens = out[:, inputs["input_ids"].shape[1]:]
        texts: list[str] = loaded.processor.batch_decode(new_tokens, skip_special_tokens=True)
        return texts

    def provenance(self, section: str | None = None) -> Provenance:
        loaded = self._load()
        return Provenance(self.preset, loaded.resolved.model_id, loaded.resolved.revision,
                          {**self._generation(loaded), "prompt_mode": self.mode,
                           "prompts": self._preset.prompts if isinstance(self._preset.prompts, str)
                           else "inline", "images": self.views},
                          self.placement.device, self.placement.dtype)

    def _prompt_length(self, study: StudyInput) -> int:
        """Images dominate the prompt (hundreds of tokens each), then indication/comparison."""
        return 10_000 * len(study.images) + len(study.indication or "") + len(
            study.comparison or "")

    # -- Drafter ---------------------------------------------------------------------------
    def draft(self, batch: Sequence[StudyInput],
              sections: Sequence[str] = SECTIONS) -> list[DraftResult]:
        sections = check_sections(sections)
        loaded = self._load()
        base = self.provenance()
        by_key: dict[tuple[int, str], DraftResult] = {}
        keys = ["report"] if self.mode == "report" else list(sections)
        for key in keys:
            for idx in length_buckets(batch, self.batch_size, self._prompt_length):
                chunk = [batch[i] for i in idx]
                texts, errors, seconds = isolate_errors(
                    chunk, partial(self._generate, loaded, key=key), self.batch_size)
                prov = replace(base, seconds=seconds)
                if key != "report":
                    for r in results_for(key, chunk, texts, errors, prov):
                        by_key[(r.study_id, key)] = replace(r, text=_strip_header(r.text, key))
                    continue
                for study, text, error in zip(chunk, texts, errors, strict=True):
                    for r in report_results(study.study_id, text, error, sections, prov):
                        by_key[(study.study_id, r.section)] = r
        return [by_key[(s.study_id, sec)] for s in batch for sec in sections]

    def _stream_key(self, study: StudyInput, key: str) -> Iterator[str]:
        """The growing raw output of one prompt (`report` or a section's)."""
        loaded = self._load()
        from transformers import TextIteratorStreamer

        streamer = TextIteratorStreamer(loaded.processor.tokenizer, skip_prompt=True,
                                        skip_special_tokens=True)
        inputs = self._inputs(loaded, [study], key)
        yield from stream_generate(loaded.model, streamer,
                                   dict(**inputs, streamer=streamer, **self._generation(loaded)))

    def close(self) -> None:
        with self._lock:
            self._loaded = None
        free_accelerator()


def report_results(study_id: int, text: str | None, error: str | None,
                   sections: Sequence[str], provenance: Provenance) -> list[DraftResult]:
    """One generated report parsed into section drafts; a missing header is that section's
    error (a report with no headers at all is kept as the findings, so the text stays visible)."""
    parsed = parse_report(text or "")
    if not parsed and (text or "").strip():
        parsed = {"findings": (text or "").strip()}
    out = []
    for section in sections:
        missing = None if error or section in parsed else (
            f"the model's output has no '{section.upper()}:' section: "
            f"{(text or '').strip()[:300]!r}")
        out.append(DraftResult(study_id, section, parsed.get(section), provenance,
                               error or missing))
    return out


def _visible_sections(text: str, sections: Sequence[str]) -> dict[str, str]:
    parsed = parse_report(text)
    if not parsed:
        parsed = {"findings": text.strip()}
    return {s: parsed.get(s, "") for s in sections}


def _accepts(model: torch.nn.Module, name: str) -> bool:
    import inspect

    return name in inspect.signature(model.forward).parameters


def _strip_header(text: str | None, section: str) -> str | None:
    if text is None:
        return None
    head = section.upper() + ":"
    stripped = text.strip()
    return stripped[len(head):].strip() if stripped.upper().startswith(head) else stripped


def from_options(preset: Preset, options: DrafterOptions) -> ChatDrafter:
    """The registry's builder: on the device and dtype asked for (auto: the best here)."""
    return ChatDrafter(preset, select(options.device, options.dtype), options.batch_size,
                       options.download)
