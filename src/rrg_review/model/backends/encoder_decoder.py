"""Vision encoder-decoder models (VisionEncoderDecoderModel + image processor + tokenizer),
e.g. the RRG24 ViLMedic baselines: one frontal image in, one section out."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
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
from rrg_review.model.inputs import DraftResult, Provenance, StudyInput
from rrg_review.model.options import DrafterOptions
from rrg_review.model.presets import ModelRef, Preset

if TYPE_CHECKING:
    import torch
    from PIL.Image import Image as PILImage
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


@dataclass
class _Loaded:
    # Any, not transformers' classes: their annotations do not describe what is used here
    # (mypy sees `generate` as a Tensor, processors without their tokenizer)
    resolved: ResolvedModel
    model: Any
    processor: Any
    tokenizer: Any
    generation: dict[str, Any]


def _frontal_pil(study: StudyInput, processor: object | None = None) -> PILImage:
    """The frontal image as RGB PIL, already at the processor's fixed size when it has one.

    Resizing the grayscale image first (same filter) gives the processor identical pixels at a
    fraction of the cost of converting a full-resolution radiograph to RGB and resizing that.
    """
    image = study.frontal()
    if image is None:
        raise ValueError(f"study {study.study_id} has no image to draft from")
    size = getattr(processor, "size", None) or {}
    resample = getattr(processor, "resample", None)
    if "height" in size and "width" in size and resample is not None and getattr(
            processor, "do_resize", False) and image.pixels.ndim == 2:
        from PIL import Image

        small = Image.fromarray(image.pixels).resize((size["width"], size["height"]), resample)
        return small.convert("RGB")
    return image.pil()


class EncoderDecoderDrafter(InProcessDrafter):
    def __init__(self, preset: Preset, placement: Placement, batch_size: int | None = None,
                 download: bool = True) -> None:
        super().__init__(preset, placement, batch_size, download)
        self._loaded: dict[str, _Loaded] = {}  # by model id: one load when both sections share it

    def _load(self, ref: ModelRef) -> _Loaded:
        with self._lock:
            if ref.model_id in self._loaded:
                return self._loaded[ref.model_id]
            from transformers import AutoImageProcessor, AutoTokenizer, VisionEncoderDecoderModel

            resolved = resolve(ref.model_id, ref.revision, self.preset, self.download)
            model = VisionEncoderDecoderModel.from_pretrained(
                resolved.path, dtype=self.placement.torch_dtype()
            ).to(self.placement.device).eval()
            tokenizer = AutoTokenizer.from_pretrained(resolved.path)
            processor = AutoImageProcessor.from_pretrained(resolved.path)
            loaded = _Loaded(resolved, model, processor, tokenizer,
                             self._generation(model, tokenizer))
            self._loaded[ref.model_id] = loaded
            return loaded

    def _generation(self, model: PreTrainedModel,
                    tokenizer: PreTrainedTokenizerBase) -> dict[str, Any]:
        """The card's settings: bos/eos/pad from the model config, decoding starts at [CLS]."""
        cfg = model.config

        def token(name: str) -> int | None:
            value: int | None = getattr(cfg, name, None)
            fallback: int | None = getattr(cfg.decoder, name, None) if value is None else None
            return value if value is not None else fallback

        settings = {"bos_token_id": token("bos_token_id"), "eos_token_id": token("eos_token_id"),
                    "pad_token_id": token("pad_token_id"),
                    "decoder_start_token_id": tokenizer.cls_token_id}
        if settings["pad_token_id"] is None:
            settings["pad_token_id"] = tokenizer.pad_token_id
        settings.update(self._preset.generation)
        return settings

    def provenance(self, section: str) -> Provenance:
        ref = self._preset.model_for(section)
        loaded = self._load(ref)
        return Provenance(self.preset, ref.model_id, loaded.resolved.revision,
                          dict(loaded.generation), self.placement.device, self.placement.dtype)

    def _pixels(self, loaded: _Loaded, studies: Sequence[StudyInput]) -> torch.Tensor:
        images = [_frontal_pil(s, loaded.processor) for s in studies]
        pixel_values: torch.Tensor = loaded.processor(images=images,
                                                      return_tensors="pt").pixel_values
        return pixel_values.to(self.placement.device, self.placement.torch_dtype())

    def _generate(self, loaded: _Loaded, studies: Sequence[StudyInput]) -> list[str]:
        import torch

        with torch.inference_mode():
            out = loaded.model.generate(self._pixels(loaded, studies), **loaded.generation)
        texts: list[str] = loaded.tokenizer.batch_decode(out, skip_special_tokens=True)
        return texts

    def draft(self, batch: Sequence[StudyInput],
              sections: Sequence[str] = SECTIONS) -> list[DraftResult]:
        by_key: dict[tuple[int, str], DraftResult] = {}
        for section in check_sections(sections):
            loaded = self._load(self._preset.model_for(section))
            base = self.provenance(section)
            # images all resize to one shape: buckets are plain chunks in input order
            for idx in length_buckets(batch, self.batch_size, lambda s: 0):
                chunk = [batch[i] for i in idx]
                texts, errors, seconds = isolate_errors(
                    chunk, partial(self._generate, loaded), self.batch_size)
                for r in results_for(section, chunk, texts, errors,
                                     replace(base, seconds=seconds)):
                    by_key[(r.study_id, section)] = r
        return [by_key[(s.study_id, sec)] for s in batch for sec in sections]

    def stream(self, study: StudyInput, section: str) -> Iterator[str]:
        loaded = self._load(self._preset.model_for(check_sections([section])[0]))
        if loaded.generation.get("num_beams", 1) > 1:
            # transformers cannot stream beam search: the text arrives whole
            yield self._generate(loaded, [study])[0].strip()
            return
        from transformers import TextIteratorStreamer

        streamer = TextIteratorStreamer(loaded.tokenizer, skip_special_tokens=True)
        pixels = self._pixels(loaded, [study])
        yield from stream_generate(loaded.model, streamer,
                                    dict(inputs=pixels, streamer=streamer, **loaded.generation))

    def close(self) -> None:
        with self._lock:
            self._loaded.clear()
        free_accelerator()


def from_options(preset: Preset, options: DrafterOptions) -> EncoderDecoderDrafter:
    """The registry's builder: on the device and dtype asked for (auto: the best here)."""
    return EncoderDecoderDrafter(preset, select(options.device, options.dtype),
                                 options.batch_size, options.download)
