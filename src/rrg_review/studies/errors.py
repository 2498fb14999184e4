"""Errors that name the offending file and the reason, for the CLI and the UI to show as-is."""

from __future__ import annotations


class StudyLoadError(ValueError):
    """A file could not be read as a study image or dataset file."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class DatasetLayoutError(StudyLoadError):
    """A dataset folder or metadata file does not have the layout its importer expects."""
