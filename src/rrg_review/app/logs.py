"""The one logging set-up, used by `rrg-review` and by `launch.py`.

Modules only ever call `logging.getLogger(__name__)`; handlers, levels and the log file are
chosen here, once, by the program that owns the process. Our packages log at the level asked
for (`--log-level`); third-party libraries stay at WARNING so their chatter does not bury ours.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

OUR_PACKAGES = ("rrg_review",)
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_OURS = "_rrg_review_handler"  # marks the handlers made here, so a second set-up replaces them


def configure_logging(level: str = "WARNING", log_file: Path | None = None) -> Path | None:
    """Send our packages' records at `level` and above to stderr and, when given, to
    `log_file` (created 0600, appended to). Calling it again replaces what an earlier call set
    up (tests run several CLI commands in one process) and leaves other handlers (pytest's)
    alone.

    Args:
        level: one of LEVELS (case-insensitive).
        log_file: a file to append every record to as well; its folder must exist.

    Returns:
        The log file in use, or None.
    """
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r} (use one of {', '.join(LEVELS)})")
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, _OURS, False)]:
        root.removeHandler(handler)
        handler.close()
    handlers: list[logging.Handler] = [logging.StreamHandler()]
    problem = None
    if log_file is not None:
        try:
            fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.close(fd)  # created private before logging opens it
            handlers.append(logging.FileHandler(log_file, encoding="utf-8"))
        except OSError as exc:  # a read-only folder must not stop the app: stderr only
            problem, log_file = f"cannot write the log file {log_file}: {exc}", None
    for handler in handlers:
        handler.setFormatter(logging.Formatter(FORMAT))
        setattr(handler, _OURS, True)
        root.addHandler(handler)
    if root.level > logging.WARNING or root.level == logging.NOTSET:
        root.setLevel(logging.WARNING)  # libraries: warnings and errors only
    for name in OUR_PACKAGES:
        logging.getLogger(name).setLevel(numeric)
    if problem:
        logging.getLogger(__name__).warning("%s; logging to stderr only", problem)
    return log_file
