"""GitPython, loaded by a plan's warm server so that its runs do not each load it.

A new run is tagged with the git commit of the code that started it (`mlflow.source.git.commit`, from
MLflow's `resolve_tags` in `runs`), and MLflow imports GitPython for that on the run's first lookup, a
cost every forked run paid again until the warm server loaded it once (docs/measured.md).
A cold process does not import this module: it pays the import once, where it needs it. GitPython checks
for a git executable as it is imported; quiet, a host without one (a slim image) still starts warm, and
its runs then carry no commit, as they would have anyway.
"""

from __future__ import annotations

import os

os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")

import git  # noqa: F401 - imported to be loaded, not used here
