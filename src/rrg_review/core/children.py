"""Worker processes that end with the process that started them.

A pool's workers wait for work on a queue; when their parent is killed outright (SIGKILL, the
OOM killer) nothing tells them, and they wait forever: a trial killed an import and found both
image-checking workers asleep 40 s later, re-parented to PID 1. Linux can send a process a
signal when its parent dies (`prctl(PR_SET_PDEATHSIG)`); a worker asks for SIGTERM as it starts.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def end_with_parent(parent: int) -> None:
    """A pool worker's initializer: SIGTERM this process when its parent dies (Linux; elsewhere
    nothing). `parent`: the pid of the process that made the pool (`os.getpid()` there), so a
    parent gone before the request was made is noticed too."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
            log.debug("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
            return
    except (OSError, AttributeError):  # no C library to ask (a static or unusual build)
        log.debug("prctl is not available", exc_info=True)
        return
    if os.getppid() != parent:  # the parent died before the request was in place
        os._exit(1)
