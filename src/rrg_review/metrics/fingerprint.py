"""Content hashes of the files behind a model metric's numbers (weights, vocabularies, baseline
files), for the cache key: the same name with other weights must never return earlier values."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

# the files of a transformers model folder that decide its outputs (weights: the format
# transformers loads first; hubs also ship TF/Flax/ONNX copies that are never read)
_CONFIG_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt",
                 "vocab.json", "merges.txt", "special_tokens_map.json", "spiece.model",
                 "added_tokens.json")


def model_folder_files(folder: Path, weights: bool = True) -> list[Path]:
    """The config/tokenizer files of a model folder and, with `weights`, the weight files
    transformers would load (safetensors first, as it does).

    Args:
        folder: the model folder.
        weights: include the weight files (False for a backbone whose weights are replaced).

    Returns:
        The files present, config files first; empty for an empty or missing folder.
    """
    files = [folder / n for n in _CONFIG_FILES if (folder / n).is_file()]
    if weights:
        for single, shards in (("model.safetensors", "model-*-of-*.safetensors"),
                               ("pytorch_model.bin", "pytorch_model-*-of-*.bin")):
            found = [folder / single] if (folder / single).is_file() else sorted(
                folder.glob(shards))
            if found:
                files += found
                break
    return files


def all_files(folder: Path) -> list[Path]:
    """Every regular file under a folder (a model archive unpacked by its own package).

    Args:
        folder: the folder.

    Returns:
        The files at any depth, sorted, hidden files left out; empty for a missing folder.
    """
    return sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith("."))


class FileHasher:
    """sha256 of file contents, remembered per (path, size, mtime) for the life of the object,
    so a metric kept open by the app hashes its weights once."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, int, int], str] = {}

    def file(self, path: Path) -> str:
        """Args:
            path: a file (links are followed).

        Returns:
            The sha256 of its contents in hex, hashed again only when size or mtime changed.

        Raises:
            OSError: the file cannot be read.
        """
        real = Path(path).resolve()
        stat = real.stat()
        key = (str(real), stat.st_size, stat.st_mtime_ns)
        if key not in self._known:
            digest = hashlib.sha256()
            with open(real, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
            self._known[key] = digest.hexdigest()
        return self._known[key]

    def files(self, paths: Iterable[Path], *extra: str) -> str:
        """One hash over the named files' contents (names relative, order fixed) and any extra
        strings (a hub revision, settings).

        Args:
            paths: the files; only their base names and contents enter the hash.
            extra: further strings, in order.

        Returns:
            The sha256 in hex.
        """
        digest = hashlib.sha256()
        for path in sorted(Path(p) for p in paths):
            digest.update(f"{path.name}\0{self.file(path)}\0".encode())
        for item in extra:
            digest.update(f"{item}\0".encode())
        return digest.hexdigest()


def cache_id(model: str, digest: str) -> str:
    """The cache's model column: a readable model name and the content hash (kept short enough
    for the column: long local paths are hashed into the digest, not spelled out).

    Args:
        model: the model's name or local path.
        digest: the content hash from `FileHasher.files`.

    Returns:
        "name@" and the digest's first 40 hex digits; a name over 120 characters keeps its
        last 119 after "…".
    """
    name = model if len(model) <= 120 else "…" + model[-119:]
    return f"{name}@{digest[:40]}"
