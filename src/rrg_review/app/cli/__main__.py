"""`python -m rrg_review.app.cli ...`: the same as `rrg-review ...`."""

import sys

from rrg_review.app.cli import main

sys.exit(main())
