"""What an import may read: files under the dataset root (or --images), regular files only,
within size limits.

Datasets name their images in metadata (`../deid_png/...`, `/p10/...`, absolute paths), and a
hostile or careless file can name anything: `/etc/passwd`, `../../home`, a symlink to a private
folder, a FIFO that blocks `open()` forever, a 1.5 GB file. Every path an importer takes from
metadata goes through `Guard.inside` (lexical containment) and every file is opened through
`Guard.read` (symlinks refused unless followed on purpose, the resolved path contained, regular
file checked with lstat *before* opening, size capped), so none of those reach a reader's screen.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from rrg_review.studies.errors import StudyLoadError


@dataclass(frozen=True)
class Limits:
    """Size limits; the defaults are far above any real chest radiograph or report."""

    image_bytes: int = 256 << 20  # an uncompressed 4k x 4k 16-bit DICOM is 32 MiB
    image_pixels: int = 60_000_000  # rows x columns (x frames); bombs are refused before decode
    text_bytes: int = 2 << 20  # one report.txt / report.json / XML report
    metadata_bytes: int = 8 << 30  # one metadata table (read streaming where possible)


@dataclass(frozen=True)
class Guard:
    """Containment and file-type checks for one import (picklable for the image workers)."""

    roots: tuple[Path, ...]
    follow_symlinks: bool = False
    limits: Limits = field(default_factory=Limits)
    _bases: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def for_roots(cls, *roots: Path | None, follow_symlinks: bool = False,
                  limits: Limits | None = None) -> Guard:
        resolved = tuple(dict.fromkeys(Path(os.path.realpath(r)) for r in roots if r is not None))
        return cls(resolved, follow_symlinks, limits or Limits())

    # --- paths -------------------------------------------------------------------------------

    def inside(self, base: Path, rel: object, origin: str) -> Path:
        """`base / rel` for a path taken from metadata, refused when it leaves the roots.

        Absolute paths and `..` that climb out are refused with the reason; the check is
        lexical (the file need not exist yet), `read` re-checks the resolved path.
        """
        if not isinstance(rel, str) or not rel.strip():
            raise StudyLoadError(origin, f"image path {rel!r} is not a path")
        if "\x00" in rel:
            raise StudyLoadError(origin, f"image path {rel!r} contains a NUL byte")
        if os.path.isabs(rel) or rel.startswith("\\") or (len(rel) > 1 and rel[1] == ":"):
            raise StudyLoadError(origin, f"absolute image path {rel!r} refused "
                                         "(paths must be relative to the dataset root)")
        candidate = Path(os.path.normpath(os.path.join(self._real_base(base), rel)))
        if not self.contains(candidate):
            raise StudyLoadError(origin, f"image path {rel!r} points outside the dataset root "
                                         f"({self.describe_roots()})")
        return candidate

    def _real_base(self, base: Path) -> str:
        """realpath(base), remembered for the import: every image of a metadata file shares
        its base, and resolving it costs a syscall per path component. (Only the lexical check
        uses it; `read` resolves each file again before opening it.)"""
        key = str(base)
        real = self._bases.get(key)
        if real is None:
            real = self._bases[key] = os.path.realpath(base)
        return real

    def contains(self, path: Path) -> bool:
        """Whether an absolute, normalised path is a root or lies under one (string prefixes:
        `Path.parents` comparisons were a third of the parent's per-image cost)."""
        text = str(path)
        return any(text == root or text.startswith(prefix)
                   for root, prefix in self._root_prefixes)

    @property
    def _root_prefixes(self) -> tuple[tuple[str, str], ...]:
        return tuple((str(r), str(r).rstrip(os.sep) + os.sep) for r in self.roots)

    def describe_roots(self) -> str:
        return " or ".join(str(r) for r in self.roots) or "no root"

    def check(self, path: Path | str, name: str | None = None) -> Path:
        """The file's real path after the containment, symlink and file-type checks."""
        name = name or str(path)
        p = Path(os.path.normpath(os.path.abspath(path)))
        if not self.follow_symlinks:
            self._refuse_symlinks(p, name)
        real = Path(os.path.realpath(p))
        if not self.follow_symlinks and not self.contains(real):
            raise StudyLoadError(name, f"outside the dataset root ({self.describe_roots()})")
        if self.follow_symlinks and not (self.contains(p) or self.contains(real)):
            raise StudyLoadError(name, f"outside the dataset root ({self.describe_roots()})")
        try:
            st = os.stat(real)
        except FileNotFoundError:
            raise StudyLoadError(name, "file not found") from None
        except OSError as exc:
            raise StudyLoadError(name, f"cannot read file ({exc.strerror or exc})") from None
        if not stat.S_ISREG(st.st_mode):
            raise StudyLoadError(name, f"not a regular file ({_kind(st.st_mode)})")
        return real

    def _refuse_symlinks(self, p: Path, name: str) -> None:
        """Refuse a symlink anywhere between the root and the file (the root itself may be one:
        the user named it)."""
        root = next((r for r in self.roots if p == r or r in p.parents), None)
        parts = p.parts
        start = len(root.parts) if root is not None else 1
        for i in range(start, len(parts) + 1):
            partial = Path(*parts[:i])
            try:
                if stat.S_ISLNK(os.lstat(partial).st_mode):
                    raise StudyLoadError(
                        name, "is a symbolic link (refused; use --follow-symlinks to follow links)"
                    )
            except FileNotFoundError:
                return  # reported by the caller as "file not found"
            except OSError:
                return

    # --- reading ---------------------------------------------------------------------------

    def read(self, path: Path | str, name: str | None = None, *, limit: int | None = None,
             what: str = "file") -> bytes:
        """All bytes of a checked regular file, refused above `limit` bytes (default: image)."""
        return self.read_real(path, name, limit=limit, what=what)[1]

    def read_real(self, path: Path | str, name: str | None = None, *, limit: int | None = None,
                  what: str = "file") -> tuple[Path, bytes]:
        """`read`, plus the real path it checked (so a caller never resolves it again)."""
        name = name or str(path)
        limit = self.limits.image_bytes if limit is None else limit
        real = self.check(path, name)
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(real, flags)
        except OSError as exc:
            raise StudyLoadError(name, f"cannot read file ({exc.strerror or exc})") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):  # swapped between the check and the open
                raise StudyLoadError(name, f"not a regular file ({_kind(st.st_mode)})")
            if st.st_size > limit:
                raise StudyLoadError(
                    name, f"{what} too large ({st.st_size:,} bytes; the limit is {limit:,})"
                )
            # Read what fstat announced (+1 to notice growth): read(limit) would allocate the
            # whole limit up front.
            with os.fdopen(os.dup(fd), "rb", buffering=0) as fh:
                data = fh.read(min(st.st_size, limit) + 1)
                while len(data) <= limit:  # grew while being read (or reported no size)
                    chunk = fh.read(min(1 << 20, limit + 1 - len(data)))
                    if not chunk:
                        break
                    data += chunk
        except OSError as exc:
            raise StudyLoadError(name, f"cannot read file ({exc.strerror or exc})") from None
        finally:
            os.close(fd)
        if len(data) > limit:
            raise StudyLoadError(name, f"{what} too large (more than {limit:,} bytes)")
        return real, data

    def read_text(self, path: Path | str, name: str | None = None) -> str:
        """A small text file (a report), UTF-8 (with or without BOM) or refused with the reason."""
        name = name or str(path)
        data = self.read(path, name, limit=self.limits.text_bytes, what="text file")
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise StudyLoadError(name, f"not UTF-8 text ({exc.reason} at byte {exc.start})") \
                from None

    def open_metadata(self, path: Path | str, name: str | None = None) -> BinaryIO:
        """A binary file object of a checked metadata file (read streaming by the caller)."""
        name = name or str(path)
        real = self.check(path, name)
        size = os.stat(real).st_size
        if size > self.limits.metadata_bytes:
            raise StudyLoadError(name, f"metadata file too large ({size:,} bytes)")
        return open(real, "rb")


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a plain file"
