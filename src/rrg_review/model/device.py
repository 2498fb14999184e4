"""Where a model runs: CUDA (bf16 where supported, else fp16) > MPS > CPU (fp32), overridable."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Placement:
    device: str  # "cuda", "cuda:1", "mps", "cpu"
    dtype: str  # "bfloat16" | "float16" | "float32"

    def torch_dtype(self) -> torch.dtype:
        import torch

        dtype: torch.dtype = getattr(torch, self.dtype)
        return dtype


def select(device: str | None = None, dtype: str | None = None) -> Placement:
    """The best available placement, or the one asked for (validated)."""
    import torch

    if device is None or device in ("", "auto"):
        if torch.cuda.is_available():
            device = "cuda"
        elif getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            device = "mps"
        else:
            device = "cpu"
    kind = device.split(":")[0]
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asked for, but CUDA is not available here")
    if kind == "mps" and not torch.backends.mps.is_available():
        raise ValueError("device 'mps' asked for, but MPS is not available here")
    if kind not in ("cuda", "mps", "cpu"):
        raise ValueError(f"unknown device {device!r} (use auto, cuda, cuda:N, mps or cpu)")
    if dtype in (None, "", "auto"):
        if kind == "cuda":
            dtype = "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
        elif kind == "mps":
            dtype = "float16"
        else:
            dtype = "float32"
    if dtype not in ("bfloat16", "float16", "float32"):
        raise ValueError(f"unknown dtype {dtype!r} (use auto, bfloat16, float16 or float32)")
    return Placement(device, dtype)
