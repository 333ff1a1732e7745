"""What a suite hands each run it starts: the one contract across the process boundary.

A plan item runs as its own `devicebench <workload>` process (a crash, an OOM or a CUDA fault kills one
item, not the plan), so what the child must know about its parent crosses as environment variables.
They are written by `Handoff.env` and read by `Handoff.from_env`, and nowhere else; `MLFLOW_RUN_ID` is
removed on the way, because a child that inherited it would log into the parent run instead of its own.
`MLFLOW_EXPERIMENT_ID` is MLflow's own variable, which `mlflow run` also sets: the tracker reads it.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from devicebench.schema import MAX_RUN_NAME, tag
from devicebench.util.children import SAFE_PATH

PARENT = "DEVICEBENCH_PARENT_RUN_ID"
SUITE = "DEVICEBENCH_SUITE"
ITEM = "DEVICEBENCH_SUITE_ITEM"
RUN_NAME = "DEVICEBENCH_RUN_NAME"
EXPERIMENT = "MLFLOW_EXPERIMENT_ID"
NO_MODEL = "DEVICEBENCH_NO_MODEL"  # "1": the plan logs this item's model with its first repeat only
STORE_CHECKED = "DEVICEBENCH_STORE_CHECKED"  # "<unix time> <store digest>": when the suite checked it
STORE_CHECK_FRESH_S = 900.0  # a check this recent stands for the run's own (same store, same plan)


@dataclass(frozen=True)
class Handoff:
    """One plan item's link to its suite: the parent run, the plan tag and which item of the plan it is."""

    parent_run_id: str
    experiment_id: str
    suite: str  # "<plan name>:<parent run id>": the tag the report filters a plan's runs by
    item: str  # the item's stable id: what `suite --resume` matches finished runs by
    run_name: str  # what the child adds to the name it gives its run (`repeat 2/3`), or ""
    log_model: bool = True  # False: a later repeat of a plan that logs models for the first one only
    store_checked: str = ""  # store_mark() of the store the suite checked and prepared, or ""

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        """The child's environment: `base` without the parent's run, plus this handoff."""
        env = child_env(base)
        env.update(
            {
                PARENT: self.parent_run_id,
                EXPERIMENT: self.experiment_id,
                SUITE: self.suite,
                ITEM: self.item,
                RUN_NAME: self.run_name[:MAX_RUN_NAME],
                NO_MODEL: "" if self.log_model else "1",
                STORE_CHECKED: self.store_checked,
            }
        )
        return env

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Handoff | None:
        """The handoff this process was started with, or None when a person (not a plan) started it."""
        if not environ.get(SUITE):
            return None
        return cls(
            parent_run_id=environ.get(PARENT, ""),
            experiment_id=environ.get(EXPERIMENT, ""),
            suite=environ[SUITE],
            item=environ.get(ITEM, ""),
            run_name=environ.get(RUN_NAME, ""),
            log_model=environ.get(NO_MODEL, "") != "1",
            store_checked=environ.get(STORE_CHECKED, ""),
        )

    def store_is_checked(self, tracking_uri: str, now: float | None = None) -> bool:
        """Whether the suite checked (and migrated) this very store within STORE_CHECK_FRESH_S, so the
        run need not check it again (the SQLite schema check was seconds of each run: docs/measured.md)."""
        when, _, digest = self.store_checked.partition(" ")
        try:
            age = (time.time() if now is None else now) - float(when)
        except ValueError:
            return False
        return digest == _digest(tracking_uri) and 0 <= age <= STORE_CHECK_FRESH_S

    def tags(self) -> dict[str, str]:
        """The run tags that tie a child to its plan."""
        return {tag("suite"): self.suite, tag("suite.item"): self.item}


def store_mark(tracking_uri: str, when: float) -> str:
    """What a suite hands its runs once it has checked the store `tracking_uri` at `when`."""
    return f"{when:.0f} {_digest(tracking_uri)}"


def _digest(tracking_uri: str) -> str:
    """The store named without its text: a URI may carry a password."""
    return hashlib.sha256(tracking_uri.encode()).hexdigest()[:16]


def child_env(base: Mapping[str, str]) -> dict[str, str]:
    """Any child the suite starts (a run, the report): never the parent's run, and this very package first
    on the path, so a suite started from a checkout runs that checkout's code in its children too."""
    env = {k: v for k, v in base.items() if k != "MLFLOW_RUN_ID"}
    src = str(Path(__file__).resolve().parents[2])  # src/devicebench/plan/handoff.py -> src
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(SAFE_PATH)  # and never the working directory: a numpy.py there is not ours to run
    return env
