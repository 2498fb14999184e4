"""The Importer interface and the registry of dataset layouts.

An importer only reads: `read(path)` yields, per record found, a StudyRecord (images as paths or
bytes, the reference report, patient and date) or a RecordError naming the file, the record and
the reason. A record that cannot be built never ends the iteration. Checking pixels and storing
is the ingest service's job. A wrong layout (no metadata, missing columns) raises
DatasetLayoutError before the first record.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Protocol

from rrg_review.core.registry import LazyRegistry
from rrg_review.studies.errors import DatasetLayoutError, StudyLoadError
from rrg_review.studies.records import RecordError, StudyRecord
from rrg_review.studies.safety import Guard, Limits

log = logging.getLogger(__name__)

Item = StudyRecord | RecordError


@dataclass(frozen=True)
class ImportOptions:
    """Where images live when apart from the reports, and how strict reading is."""

    images: Path | None = None
    follow_symlinks: bool = False
    allow_modality: frozenset[str] = frozenset()
    limits: Limits = field(default_factory=Limits)
    workers: int = 1  # processes for reading headers (DICOM folders); the CLI gives one per core
    # A plain folder's name (`DOE_JOHN_MRN-5550001/`) often names the patient: the folder
    # importer stores such keys as pseudonyms, as it does DICOM UIDs, unless this is set
    # (`--keep-folder-names`, for folders named by a dataset's own ids).
    keep_folder_names: bool = False

    def guard_for(self, root: Path) -> Guard:
        """The Guard of an import whose dataset root is `root` (plus --images)."""
        return Guard.for_roots(root, self.images, follow_symlinks=self.follow_symlinks,
                               limits=self.limits)


class Importer(Protocol):
    name: ClassVar[str]

    def __init__(self, options: ImportOptions) -> None: ...

    def detect(self, path: Path) -> bool:
        """Cheap check (file names, headers) whether `path` has this importer's layout."""
        ...

    def root(self, path: Path) -> Path:
        """The dataset root: image paths must resolve inside it (or inside --images)."""
        ...

    def count(self, path: Path) -> int | None:
        """Number of records `read` will yield, when knowable cheaply (for progress bars)."""
        ...

    def read(self, path: Path) -> Iterator[Item]: ...


def build(origin: str, make: Callable[..., StudyRecord], *args: object,
          record: str | None = None) -> Item:
    """Run `make(*args)` (one record's builder) in its own error boundary: the record, or why
    it failed."""
    try:
        return make(*args)
    except StudyLoadError as exc:
        return RecordError(exc.path, exc.reason, record)
    except RecursionError:
        return RecordError(origin, "structure nested too deeply", record)
    except Exception as exc:  # hostile values: wrong types, bad lengths, odd encodings
        log.debug("record %s failed", origin, exc_info=True)
        return RecordError(origin, f"malformed record ({type(exc).__name__}: {exc})", record)


def file_failure(path: Path | str, exc: BaseException, done: int) -> RecordError:
    """A metadata file that stopped being readable after `done` records."""
    reason = exc.reason if isinstance(exc, StudyLoadError) else f"{type(exc).__name__}: {exc}"
    return RecordError(str(path), f"{reason} (reading this file stopped after {done} records)")


# Detection order matters: specific layouts first, the plain folder last.
_REGISTRY = LazyRegistry("import format", {
    "rexgradient": "rrg_review.studies.importers.rexgradient:ReXGradientImporter",
    "rexrank": "rrg_review.studies.importers.rexrank:ReXrankImporter",
    "mimic-cxr": "rrg_review.studies.importers.mimic_cxr:MimicCxrImporter",
    "iu-xray": "rrg_review.studies.importers.iu_xray:IUXrayImporter",
    "interpret-cxr": "rrg_review.studies.importers.interpret_cxr:InterpretCxrImporter",
    "folder": "rrg_review.studies.importers.folder:FolderImporter",
})
IMPORTER_NAMES: tuple[str, ...] = _REGISTRY.names


def get_importer(name: str, options: ImportOptions | None = None) -> Importer:
    importer_class = _REGISTRY.load(name, also_known=("auto",))
    importer: Importer = importer_class(options or ImportOptions())
    return importer


def detect_format(path: Path, options: ImportOptions | None = None) -> Importer:
    """The first importer whose layout matches `path`."""
    if not path.exists():
        raise DatasetLayoutError(str(path), "does not exist")
    for name in IMPORTER_NAMES:
        importer = get_importer(name, options)
        try:
            found = importer.detect(path)
        except (OSError, ValueError, RecursionError):
            found = False
        if found:
            return importer
    raise DatasetLayoutError(
        str(path), "no known dataset layout found (use --format to choose one: "
        + ", ".join(IMPORTER_NAMES) + ")"
    )
