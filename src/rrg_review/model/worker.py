"""Drafting worker: runs one model in its own Python environment and talks JSON lines.

For models that need `trust_remote_code` or a `transformers` version other than the app's
(CheXagent-2, MAIRA-2). This file is self-contained (standard library + torch + transformers +
Pillow in the worker's environment); the app starts it as
`<python> worker.py --adapter A --model ID`.

Protocol, one JSON object per line:
  worker -> app  {"ready": true, "model_id", "revision", "device", "dtype", "generation"}
                 or {"ready": false, "error": "..."} and exit
  app -> worker  {"id": 7, "images": [{"path": "/tmp/x.png", "view": "frontal"}, ...],
                  "indication": str|null, "comparison": str|null,
                  "prior": {"images": [...], "report": str|null} | null,
                  "sections": ["findings", "impression"]}
  worker -> app  {"id": 7, "sections": {"findings": "...", "impression": "..."}, "seconds": 1.2}
                 or {"id": 7, "error": "..."}
  app -> worker  {"op": "shutdown"}
Anything else the model libraries print goes to stderr, never to stdout (the app drains stderr
continuously and keeps its tail for error messages, so a chatty library cannot block the worker).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
from typing import TYPE_CHECKING, ClassVar, TypedDict

if TYPE_CHECKING:
    import torch
    from PIL import Image

log = logging.getLogger(__name__)


class ImageRef(TypedDict):
    """One image of a request: a PNG the app wrote, with its view group."""

    path: str
    view: str | None


class PriorRef(TypedDict, total=False):
    images: list[ImageRef]
    report: str | None


class Request(TypedDict):
    """One drafting request line (see the protocol above)."""

    id: int
    images: list[ImageRef]
    indication: str | None
    comparison: str | None
    prior: PriorRef | None
    sections: list[str]


def _placement(device: str, dtype: str) -> tuple[str, str, torch.dtype]:
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if dtype == "auto":
        dtype = ("bfloat16" if device.startswith("cuda") and torch.cuda.is_bf16_supported()
                 else "float16" if device.startswith("cuda") else "float32")
    return device, dtype, getattr(torch, dtype)


def _open(path: str | None) -> Image.Image:
    from PIL import Image

    if path is None:
        raise ValueError("the study has no frontal image")
    return Image.open(path).convert("RGB")


def _first(images: list[ImageRef], view: str) -> str | None:
    for image in images:
        if image.get("view") == view:
            return image["path"]
    return images[0]["path"] if images and view == "frontal" else None


def _revision(path: str) -> str:
    # a hub snapshot folder is named by its commit hash
    name = os.path.basename(os.path.normpath(path))
    return name if re.fullmatch(r"[0-9a-f]{40}", name) else "local"


def _local_path(model_id: str) -> str:
    if os.path.isdir(model_id):
        return model_id
    from huggingface_hub import snapshot_download

    return snapshot_download(model_id)


class EncoderDecoderAdapter:
    """A VisionEncoderDecoderModel, one frontal image per section (the stand-in used in tests)."""

    def __init__(self, model_id: str, device: str, dtype: torch.dtype,
                 generation: dict[str, object]) -> None:
        from transformers import AutoImageProcessor, AutoTokenizer, VisionEncoderDecoderModel

        self.path = _local_path(model_id)
        self.model = VisionEncoderDecoderModel.from_pretrained(self.path, dtype=dtype)
        self.model = self.model.to(device).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(self.path)
        self.processor = AutoImageProcessor.from_pretrained(self.path)
        self.device, self.dtype = device, dtype
        cfg = self.model.config.decoder
        self.generation = {"bos_token_id": cfg.bos_token_id, "eos_token_id": cfg.eos_token_id,
                           "pad_token_id": cfg.pad_token_id if cfg.pad_token_id is not None
                           else self.tokenizer.pad_token_id,
                           "decoder_start_token_id": self.tokenizer.cls_token_id, **generation}

    def run(self, request: Request) -> dict[str, str]:
        import torch

        frontal = _first(request["images"], "frontal")
        if frontal is None:
            raise ValueError("no image")
        pixels = self.processor(images=[_open(frontal)], return_tensors="pt").pixel_values
        with torch.inference_mode():
            out = self.model.generate(pixels.to(self.device, self.dtype), **self.generation)
        text = self.tokenizer.batch_decode(out, skip_special_tokens=True)[0].strip()
        return {section: text for section in request["sections"]}


class CheXagent2Adapter:
    """StanfordAIMI/CheXagent-2-3b through its remote code (`generate` with its prompt format)."""

    PROMPTS: ClassVar[dict[str, str]] = {
        "findings": "Write a structured findings section for the CXR.",
        "impression": "Write the impression section of the radiology report for the CXR."}

    def __init__(self, model_id: str, device: str, dtype: torch.dtype,
                 generation: dict[str, object]) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.path = _local_path(model_id)
        self.tokenizer = AutoTokenizer.from_pretrained(self.path, trust_remote_code=True)
        self.model = AutoModelForCausalLM.from_pretrained(
            self.path, dtype=dtype, trust_remote_code=True
        ).to(device).eval()
        self.device = device
        self.generation = {"do_sample": False, "max_new_tokens": 512, **generation}

    def run(self, request: Request) -> dict[str, str]:
        import torch

        paths = [im["path"] for im in request["images"]]
        out: dict[str, str] = {}
        for section in request["sections"]:
            query = self.tokenizer.from_list_format(
                [*[{"image": p} for p in paths], {"text": self.PROMPTS[section]}])
            conv = [{"from": "system", "value": "You are a helpful assistant."},
                    {"from": "human", "value": query}]
            input_ids = self.tokenizer.apply_chat_template(
                conv, add_generation_prompt=True, return_tensors="pt").to(self.device)
            with torch.inference_mode():
                ids = self.model.generate(input_ids, **self.generation)[0]
            out[section] = self.tokenizer.decode(ids[input_ids.size(1):-1]).strip()
        return out


class Maira2Adapter:
    """microsoft/maira-2 findings (frontal, lateral, prior, indication); it writes no impression."""

    def __init__(self, model_id: str, device: str, dtype: torch.dtype,
                 generation: dict[str, object]) -> None:
        from transformers import AutoModelForCausalLM, AutoProcessor

        self.path = _local_path(model_id)
        self.model = AutoModelForCausalLM.from_pretrained(
            self.path, dtype=dtype, trust_remote_code=True
        ).to(device).eval()
        self.processor = AutoProcessor.from_pretrained(self.path, trust_remote_code=True)
        self.device = device
        self.generation = {"max_new_tokens": 300, "do_sample": False, **generation}

    def run(self, request: Request) -> dict[str, str]:
        import torch

        images = request["images"]
        prior = request.get("prior") or {}
        lateral = _first(images, "lateral")
        prior_frontal = _first(prior.get("images") or [], "frontal")
        inputs = self.processor.format_and_preprocess_reporting_input(
            current_frontal=_open(_first(images, "frontal")),
            current_lateral=_open(lateral) if lateral else None,
            prior_frontal=_open(prior_frontal) if prior_frontal else None,
            indication=request.get("indication"), technique=None,
            comparison=request.get("comparison"), prior_report=prior.get("report"),
            return_tensors="pt", get_grounding=False).to(self.device)
        with torch.inference_mode():
            ids = self.model.generate(**inputs, **self.generation)
        prompt_length = inputs["input_ids"].shape[-1]
        text = self.processor.decode(ids[0][prompt_length:], skip_special_tokens=True).strip()
        findings = self.processor.convert_output_to_plaintext_or_grounded_sequence(text)
        out: dict[str, str] = {}
        for section in request["sections"]:
            if section == "findings":
                out[section] = findings
            else:
                raise ValueError("MAIRA-2 generates the findings section only")
        return out


ADAPTERS: dict[str, type[EncoderDecoderAdapter | CheXagent2Adapter | Maira2Adapter]] = {
    "vision-encoder-decoder": EncoderDecoderAdapter, "chexagent-2": CheXagent2Adapter,
            "maira-2": Maira2Adapter}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adapter", required=True, choices=sorted(ADAPTERS))
    parser.add_argument("--model", required=True)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--generation", default="{}", help="JSON generation settings")
    args = parser.parse_args(argv)

    # the protocol owns stdout; libraries that print go to stderr
    protocol = sys.stdout
    sys.stdout = sys.stderr

    def send(message: dict[str, object]) -> None:
        protocol.write(json.dumps(message) + "\n")
        protocol.flush()

    try:
        device, dtype_name, dtype = _placement(args.device, args.dtype)
        adapter = ADAPTERS[args.adapter](args.model, device, dtype, json.loads(args.generation))
    except Exception as exc:  # the reason goes to the app; the traceback to stderr
        log.exception("loading %s failed", args.model)
        send({"ready": False, "error": f"{type(exc).__name__}: {exc}"})
        return 1
    send({"ready": True, "model_id": args.model, "revision": _revision(adapter.path),
          "device": device, "dtype": dtype_name, "generation": adapter.generation})
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError as exc:  # the app checks reply ids, so say which line was bad
            send({"id": None, "error": f"bad request line: {exc}"})
            continue
        if request.get("op") == "shutdown":
            break
        start = time.perf_counter()
        try:
            sections = adapter.run(request)
            send({"id": request.get("id"), "sections": sections,
                  "seconds": time.perf_counter() - start})
        except Exception as exc:  # one study's failure; the worker keeps serving
            log.warning("request %s failed", request.get("id"), exc_info=True)
            send({"id": request.get("id"), "error": f"{type(exc).__name__}: {exc}"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
