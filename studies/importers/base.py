"""The Importer interface and the registry of dataset layouts.

An importer only reads: `read(path)` yields plain StudyRecords (images as paths or bytes, the
reference report, patient and date). Validating pixels and persisting each study atomically is the
ingest service's job.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol

from studies.errors import DatasetLayoutError
from studies.records import StudyRecord


@dataclass(frozen=True)
class ImportOptions:
    """Options some layouts need: where images live when apart from the reports."""

    images: Path | None = None


class Importer(Protocol):
    name: ClassVar[str]

    def __init__(self, options: ImportOptions) -> None: ...

    def detect(self, path: Path) -> bool:
        """Cheap check (file names, headers) whether `path` has this importer's layout."""
        ...

    def count(self, path: Path) -> int | None:
        """Number of studies `read` will yield, when knowable cheaply (for progress bars)."""
        ...

    def read(self, path: Path) -> Iterator[StudyRecord]: ...


# Detection order matters: specific layouts first, the plain folder last.
_REGISTRY: dict[str, str] = {
    "rexgradient": "studies.importers.rexgradient:ReXGradientImporter",
    "mimic-cxr": "studies.importers.mimic_cxr:MimicCxrImporter",
    "iu-xray": "studies.importers.iu_xray:IUXrayImporter",
    "interpret-cxr": "studies.importers.interpret_cxr:InterpretCxrImporter",
    "folder": "studies.importers.folder:FolderImporter",
}
IMPORTER_NAMES: tuple[str, ...] = tuple(_REGISTRY)


def get_importer(name: str, options: ImportOptions | None = None) -> Importer:
    try:
        target = _REGISTRY[name]
    except KeyError:
        known = ", ".join(IMPORTER_NAMES)
        raise ValueError(f"unknown import format {name!r} (known: {known}, auto)") from None
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)(options or ImportOptions())


def detect_format(path: Path, options: ImportOptions | None = None) -> Importer:
    """The first importer whose layout matches `path`."""
    if not path.exists():
        raise DatasetLayoutError(str(path), "does not exist")
    for name in IMPORTER_NAMES:
        importer = get_importer(name, options)
        if importer.detect(path):
            return importer
    raise DatasetLayoutError(
        str(path), "no known dataset layout found (use --format to choose one: "
        + ", ".join(IMPORTER_NAMES) + ")"
    )
