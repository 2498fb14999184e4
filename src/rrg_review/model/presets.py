"""Presets are data: name -> backend, model ids, prompts, generation settings.

Built-in presets live in `presets.json` next to this file; a user file (`--presets PATH` or
$RRG_REVIEW_PRESETS) adds presets or replaces built-ins of the same name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

BACKENDS = ("retrieval", "vision-encoder-decoder", "chat", "worker", "openai")
ENV_PRESETS = "RRG_REVIEW_PRESETS"  # read by app.settings, which passes the file down
DEFAULT_ORDER = ("rrg24-baseline", "retrieval")  # what the app uses when nothing is configured


class UnknownPreset(LookupError):
    pass


@dataclass(frozen=True)
class ModelRef:
    model_id: str
    revision: str | None = None


@dataclass(frozen=True)
class Preset:
    name: str
    backend: str
    description: str = ""
    # "findings"/"impression" for one model per section, or "report" for one model for both
    models: dict[str, ModelRef] = field(default_factory=dict)
    generation: dict[str, Any] = field(default_factory=dict)
    prompts: str | dict[str, str] | None = None  # a name in prompts.json, or the prompts
    options: dict[str, Any] = field(default_factory=dict)
    notes: str = ""

    def model_for(self, section: str) -> ModelRef:
        """The model that drafts `section`: its own, else the whole-report one.

        Raises:
            ValueError: the preset names neither (a model-free preset such as retrieval).
        """
        ref = self.models.get(section) or self.models.get("report")
        if ref is None:
            raise ValueError(f"preset {self.name} names no model for {section} (nor a "
                             "whole-report model)")
        return ref

    @property
    def model_ids(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(ref.model_id for ref in self.models.values()))


def _parse(name: str, raw: dict[str, Any], origin: str) -> Preset:
    backend = raw.get("backend")
    if backend not in BACKENDS:
        raise ValueError(f"{origin}: preset {name!r} has unknown backend {backend!r} "
                         f"(one of {', '.join(BACKENDS)})")
    models = {}
    for key, ref in (raw.get("models") or {}).items():
        if key not in ("findings", "impression", "report"):
            raise ValueError(f"{origin}: preset {name!r}: model key {key!r} must be findings, "
                             "impression or report")
        if isinstance(ref, str):
            ref = {"model_id": ref}
        models[key] = ModelRef(ref["model_id"], ref.get("revision"))
    if backend != "retrieval" and not models:
        raise ValueError(f"{origin}: preset {name!r} names no model")
    return Preset(name=name, backend=backend, description=raw.get("description", ""),
                  models=models, generation=dict(raw.get("generation") or {}),
                  prompts=raw.get("prompts"), options=dict(raw.get("options") or {}),
                  notes=raw.get("notes", ""))


def load_presets(user_file: str | Path | None = None) -> dict[str, Preset]:
    """Built-in presets, overlaid by the user's file when there is one.

    Args:
        user_file: extra presets (JSON object of name -> preset), e.g. `Settings.presets_file`.

    Returns:
        Presets by name.

    Raises:
        ValueError: the file cannot be read or holds no JSON object.
    """
    text = resources.files("rrg_review.model").joinpath("presets.json").read_text(encoding="utf-8")
    presets = {n: _parse(n, r, "built-in presets") for n, r in json.loads(text).items()}
    if user_file:
        path = Path(user_file).expanduser()
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: cannot read presets ({exc})") from exc
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: presets must be a JSON object of name -> preset")
        presets.update({n: _parse(n, r, str(path)) for n, r in raw.items()})
    return presets


def get_preset(presets: dict[str, Preset], name: str) -> Preset:
    try:
        return presets[name]
    except KeyError:
        raise UnknownPreset(f"unknown model preset {name!r}; known presets: "
                            f"{', '.join(sorted(presets))}") from None


def load_prompts(name: str | dict[str, str]) -> dict[str, str]:
    """A prompt set by name from prompts.json (a preset may also carry its prompts inline)."""
    if isinstance(name, dict):
        return name
    text = resources.files("rrg_review.model").joinpath("prompts.json").read_text(encoding="utf-8")
    prompts: dict[str, dict[str, str]] = json.loads(text)
    if name not in prompts:
        raise UnknownPreset(f"unknown prompt set {name!r}; known: {', '.join(sorted(prompts))}")
    return prompts[name]
