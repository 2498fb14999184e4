"""Dataset importers behind one small interface, found by name through a lazy registry."""

from rrg_review.studies.importers.base import (
    IMPORTER_NAMES,
    Importer,
    ImportOptions,
    detect_format,
    get_importer,
)

__all__ = ["IMPORTER_NAMES", "ImportOptions", "Importer", "detect_format", "get_importer"]
