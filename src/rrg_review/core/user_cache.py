"""The user's cache folder for what is the same for every database and can be made again
(~/.cache/rrg-review): the score cache, the metric workers' environments, the front-end files
the server keeps compressed. One place names it, so the three cannot drift apart."""

from __future__ import annotations

from pathlib import Path


def user_cache_dir(home: str | None = None) -> Path:
    """~/.cache/rrg-review (it may not exist yet).

    Args:
        home: the home folder to use (a configuration's HOME); None or blank: this user's.
    """
    base = Path(home) if home and home.strip() else Path.home()
    return base / ".cache" / "rrg-review"
