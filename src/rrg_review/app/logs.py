"""The one logging set-up, used by `rrg-review` and by `launch.py`.

Modules only ever call `logging.getLogger(__name__)`; handlers, levels and the log file are
chosen here, once, by the program that owns the process. Our packages log at the level asked
for (`--log-level`); third-party libraries stay at WARNING so their chatter does not bury ours.

A library's record is shown as one line, at most WARNING, without its traceback: pydicom, for
one, logs every pixel-decoding failure at ERROR with `exc_info`, which we catch and report as
one sentence naming the file; its traceback on screen would say the same thing less clearly.
Python warnings (`warnings.warn`) go through logging too, so they are one line as well. Our
own records are shown as logged.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

OUR_PACKAGES = ("rrg_review",)
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_OURS = "_rrg_review_handler"  # marks the handlers made here, so a second set-up replaces them


def ours(name: str) -> bool:
    """Whether a logger name belongs to our packages."""
    return any(name == p or name.startswith(p + ".") for p in OUR_PACKAGES)


class OneLineForLibraries(logging.Formatter):
    """Our records as logged; a library's as one line at most WARNING, no traceback (the
    exception's own words are kept when the message does not already say them)."""

    def format(self, record: logging.LogRecord) -> str:
        if ours(record.name):
            return super().format(record)
        message = record.getMessage()
        if record.name == "py.warnings":  # "file:line: Category: text" and then the source
            message = (message.strip().splitlines() or [""])[0]
        line = " ".join(message.split())  # one line, whatever the library wrote
        exc = record.exc_info[1] if record.exc_info else None
        said = " ".join(str(exc).split()) if exc is not None else ""
        if said and said not in line:
            line = f"{line} ({type(exc).__name__}: {said})"
        shown = logging.makeLogRecord({**record.__dict__, "msg": line, "args": None,
                                       "exc_info": None, "exc_text": None, "stack_info": None})
        if shown.levelno > logging.WARNING:
            shown.levelno, shown.levelname = logging.WARNING, "WARNING"
        return super().format(shown)


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
        handler.setFormatter(OneLineForLibraries(FORMAT))
        setattr(handler, _OURS, True)
        root.addHandler(handler)
    if root.level > logging.WARNING or root.level == logging.NOTSET:
        root.setLevel(logging.WARNING)  # libraries: warnings and errors only
    for name in OUR_PACKAGES:
        logging.getLogger(name).setLevel(numeric)
    logging.captureWarnings(True)  # library warnings: one line through the handlers above
    if problem:
        logging.getLogger(__name__).warning("%s; logging to stderr only", problem)
    return log_file
