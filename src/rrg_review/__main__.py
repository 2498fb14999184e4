"""`python -m rrg_review ...`: the same as `rrg-review ...` (the command line is the app layer's;
this entry point, like the console script, sits above every layer and nothing imports it)."""

import sys

from rrg_review.app.cli import main

sys.exit(main())
