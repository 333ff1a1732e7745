"""`python -m devicebench`: what MLproject's entry points run, so they work without the console script.

torchrun starts a job's ranks this way too. A rank leaves with `os._exit` once its command has returned
(its run ended, its failure report written): interpreter shutdown would destroy gloo's and DDP's C++
threads while they still run, and libstdc++ then aborts with "terminate called without an active
exception" under the launcher's one line (seen in CI when torchrun stopped rank 0 after rank 1 failed).
Any other command leaves through `util.leave` (its `atexit` handlers run, no module teardown).
"""

import os
import sys

from devicebench.host.job import worker_rank
from devicebench.run.cli import main
from devicebench.util.leave import leave

code = main()
if worker_rank() is not None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
leave(code)
