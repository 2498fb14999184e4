"""`python launch.py [options]`: the same as `rrg-review serve [options]` (kept for `make run`)."""

import sys

from rrg_review.app.serve import main

if __name__ == "__main__":
    sys.exit(main())
