"""A workload run's tags of devicebench's own, checked on the runs the end-to-end tests already make.

The MLflow UI lists a run's tags above its description; a CPU run's 42 `devicebench.*` tags pushed its
one-line answer below the first screen (issue 41). Every tag not starting with `mlflow.` counts, and
every one must be a RUN_TAGS name: any other fact is a param (schema.RUN_TAGS says why).
"""

from __future__ import annotations

from typing import Any

from devicebench.schema import MAX_RUN_TAGS, RUN_TAGS, run_facts


def own_tags(run: Any) -> list[str]:
    """The run's tags that are not MLflow's own, sorted."""
    return sorted(k for k in run.data.tags if not k.startswith("mlflow."))


def facts_of(run: Any) -> dict[str, str]:
    """The run's facts wherever they were logged (tags, or params of the same name), after checking that
    its own tags are few and each a RUN_TAGS name: what every test that reads a workload run's facts
    calls, so each such run is also a check of the limit."""
    own = own_tags(run)
    assert len(own) <= MAX_RUN_TAGS, f"{len(own)} own tags: {own}"
    assert set(own) <= set(RUN_TAGS), f"tags that should be params: {sorted(set(own) - set(RUN_TAGS))}"
    return run_facts(run.data.tags, run.data.params)
