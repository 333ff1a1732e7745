"""`python -m devicebench`: what MLproject's entry points run, so they work without the console script."""

import sys

from devicebench.cli import main

sys.exit(main())
