"""Drafting benchmark: the EncoderDecoderDrafter pipeline vs raw batched `generate`, and batched
vs one-by-one `generate`, on the same model and inputs in the same process.

Prints studies/s and ratios (target: pipeline >= 0.9x raw batched generate). `--size tiny` is a
2-layer random model; `--size base` is a full-size random model of the RRG24 baseline's shape
(ViT-base encoder at 224 px + 12-layer BERT-base decoder), for GPU machines. Random weights decode
to `max_length`, the worst case for time per study.
Run: `.venv/bin/python -m bench.drafting [--size tiny|base] [--n 32] [--batch-size 8]`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=("tiny", "base"), default="tiny")
    parser.add_argument("--n", type=int, default=32, help="studies")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--beams", type=int, default=2, help="num_beams (the preset uses 2)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    import numpy as np
    import torch

    from rrg_review.model.backends.encoder_decoder import EncoderDecoderDrafter
    from rrg_review.model.device import select
    from rrg_review.model.inputs import InputImage, StudyInput
    from rrg_review.model.presets import ModelRef, Preset
    from tests.tiny_models import tiny_encoder_decoder

    placement = select(args.device)
    shape = dict(image_size=32, hidden=32, layers=2) if args.size == "tiny" else dict(
        image_size=224, hidden=768, layers=12)
    with tempfile.TemporaryDirectory() as tmp:
        path = tiny_encoder_decoder(Path(tmp) / "m", **shape)
        ref = ModelRef(str(path))
        preset = Preset("bench", "vision-encoder-decoder",
                        models={"findings": ref, "impression": ref},
                        generation={"max_length": args.max_length, "num_beams": args.beams})
        drafter = EncoderDecoderDrafter(preset, placement, batch_size=args.batch_size)
        rng = np.random.default_rng(0)
        studies = [StudyInput(i, (InputImage(rng.integers(0, 256, (512, 512), dtype=np.uint8),
                                             "PA", "frontal"),)) for i in range(args.n)]
        loaded = drafter._load(ref)
        pixels = drafter._pixels(loaded, studies)
        gen = loaded.generation

        def sync() -> None:
            if placement.device.startswith("cuda"):
                torch.cuda.synchronize()

        def raw_batched() -> None:
            with torch.inference_mode():
                for i in range(0, args.n, args.batch_size):
                    loaded.model.generate(pixels[i:i + args.batch_size], **gen)
            sync()

        def raw_single() -> None:
            with torch.inference_mode():
                for i in range(args.n):
                    loaded.model.generate(pixels[i:i + 1], **gen)
            sync()

        def pipeline() -> None:
            drafter.draft(studies, ["findings"])
            sync()

        def best(fn) -> float:
            fn()  # warm-up
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            return min(times)

        t_raw, t_pipe, t_one = best(raw_batched), best(pipeline), best(raw_single)
    print(f"{args.size} model on {placement.device}/{placement.dtype}, {args.n} studies, "
          f"batch {args.batch_size}, max_length {args.max_length}, beams {args.beams}")
    for name, t in (("raw batched generate", t_raw), ("pipeline (preprocess + generate + "
                    "decode + provenance)", t_pipe), ("raw one-by-one generate", t_one)):
        print(f"  {name:<58} {args.n / t:8.1f} studies/s  {t / args.n * 1000:8.1f} ms/study")
    print(f"pipeline / raw batched throughput: {t_raw / t_pipe:.2f}x (target >= 0.9x)")
    print(f"batched / one-by-one throughput:   {t_one / t_raw:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
