"""Atomic file writes, the one way the project replaces a file: readers see the old file or the
whole new one, never a half-written one, and two writers of the same file never share a
temporary file (each gets a unique one in the target's folder, so `os.replace` stays a rename
on one file system)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

Writer = Callable[[Path], None]  # writes the whole file at the path it is given


def atomic_write(path: Path | str, data: bytes | str | Writer, *, mode: int = 0o600,
                 durable: bool = True) -> Path:
    """Replace `path` with `data` atomically and durably.

    Args:
        path: the file to write (its folder must exist).
        data: the bytes, text (written as UTF-8, newlines untranslated), or a function that
            writes the file at the temporary path it is given (an image encoder, a database
            copy).
        mode: the permissions of the new file (private by default).
        durable: sync the file and the rename to disk; False for what can be made again (a
            cache): still never half-written, but a power cut may lose the last writes.
    Returns:
        `path`.
    Raises:
        OSError: the folder cannot be written; nothing is left behind.
    """
    path = Path(path)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(name)
    try:
        if callable(data):
            os.close(fd)
            data(tmp)
            fd = os.open(tmp, os.O_RDONLY)
        else:
            payload = data.encode("utf-8") if isinstance(data, str) else data
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view):]
        if durable:
            os.fsync(fd)
        os.close(fd)
        fd = -1
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        _sync_folder(path.parent)
    return path


def _sync_folder(folder: Path) -> None:
    """Make the rename itself durable (best effort: not every file system allows it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
