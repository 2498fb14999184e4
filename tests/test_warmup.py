"""The app's warm-up fixes matplotlib before any request thread runs (app/warmup.py).

Gradio switches matplotlib's backend around every event (`matplotlib.use("agg")`); an export
imports pyplot in its own thread. Under load a browser test caught the two racing: the switch
called into a half-imported pyplot and the reader saw a traceback. After the warm-up the switch
must have nothing to do and pyplot must be imported already, in a fresh interpreter as the
server has one."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import os, sys
os.environ.pop("MPLBACKEND", None)
from rrg_review.app.warmup import _matplotlib
_matplotlib()
import matplotlib
print(matplotlib.rcParams._get_backend_or_none(), "matplotlib.pyplot" in sys.modules)
"""


def test_the_warm_up_fixes_the_backend_and_imports_pyplot_once():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["agg", "True"]
