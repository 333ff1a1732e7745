"""One run as the report sees it: plain dicts, no MLflow entities, so every rule of the report can be
tested on data made in the test. The query (query.py) makes them, whole (a matmul run's per-size history
included); everything after it reads them and changes none."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from devicebench.config.workloads import KIND_OF
from devicebench.schema import SCHEMA_VERSION, Kind, run_facts
from devicebench.schema import TAG_PREFIX as TAG
from devicebench.util.text import visible


@dataclass(frozen=True)
class RunRecord:
    """One run as the report sees it: plain dicts, no MLflow entities (so the logic is testable on data)."""

    run_id: str
    status: str
    start_time: int  # ms since the epoch
    tags: dict[str, str]
    params: dict[str, str]
    metrics: dict[str, float]
    experiment_id: str = ""
    run_name: str = ""
    # matmul only: metric key -> {step (matrix size): value}
    history: dict[str, dict[int, float]] = field(default_factory=dict)

    def tag(self, name: str, default: str = "") -> str:
        """A `devicebench.<name>` tag, or `default` when the run does not carry it."""
        return self.tags.get(TAG + name, default)

    @property
    def workload(self) -> str:
        return self.tag("workload")

    @property
    def kind(self) -> Kind | None:
        """What kind of work its workload is (config.workloads.KIND_OF); None for a name no workload has."""
        return KIND_OF.get(self.workload)

    @property
    def config_key(self) -> str:
        return self.tag("config_key")

    @property
    def device(self) -> str:
        """The resolved device (`cuda:0`), falling back to the requested one for runs that died early."""
        return self.tag("device.resolved") or self.tag("device") or "?"

    @property
    def tuned(self) -> bool:
        """A `devicebench tune` run: the device set up the fastest way its trials found. It may share its
        config key with the side as configured (a tuning that chose the config's own setting), yet it is
        another configuration: never a repeat of the untuned runs."""
        return self.tag("tuned") == "true"

    @property
    def world_size(self) -> int:
        """The processes of the job (`devicebench.world_size`): 1 for a workload that logs none (it runs
        one process) and for a tag that is not a count."""
        try:
            return max(int(self.tag("world_size") or 1), 1)
        except ValueError:
            return 1

    @property
    def device_name(self) -> str:
        """The hardware model: what makes `cuda:0` on an A10 different from `cuda:0` on an H100."""
        if self.device.startswith("cpu"):
            return self.tag("device.name") or self.tag("host.cpu_model")
        return self.tag("device.name") or self.tag("host.gpu_name")

    @property
    def host(self) -> str:
        """The machine, as the regression check and the per-host tables group it: `DEVICEBENCH_HOST`
        where it was set, else its hardware (OCI shape, GPU count × model, CPU model).

        Never the hostname: under `compose run` it is a fresh container ID and under the CronJob a fresh
        pod name every night, so no night would ever find a baseline.
        """
        label = self.tag("host.label")
        if label:
            return label
        gpus = self.tag("host.gpu_name")
        count = self.tag("host.gpu_count")
        if gpus and gpus != "none" and count not in ("", "0", "1"):
            gpus = f"{count}× {gpus}"
        parts = (self.tag("host.oci.shape"), gpus if gpus != "none" else "", self.tag("host.cpu_model"))
        return " / ".join(x for x in parts if x) or self.tag("host.hostname") or "?"

    def sizes(self) -> list[int]:
        """The matmul sizes a run swept (from its params)."""
        out = []
        for s in self.params.get("sizes", "").split(","):
            s = s.strip()
            if s.isdigit():
                out.append(int(s))
        return sorted(set(out))


MAX_NAMED = 5  # runs a left-out line names before it counts the rest


def schema_version(run: RunRecord) -> int | None:
    """The form a run was logged in, read as a plain ASCII integer; None where the tag is missing or is
    anything else (`²` passes str.isdigit and fails int; `1e3` and `-1` are no version either)."""
    version = run.tag("schema")
    return int(version) if version.isascii() and version.isdigit() else None


def schema_mismatch(run: RunRecord) -> str:
    """Why a run cannot be read as this report reads runs ("" where it can): a form older than
    schema.SCHEMA_VERSION, a newer one (a newer devicebench logged it), or a tag that is no version."""
    version = schema_version(run)
    if version == SCHEMA_VERSION:
        return ""
    if version is None and run.tag("schema"):
        return "unreadable"
    return "newer" if version is not None and version > SCHEMA_VERSION else "older"


# what each mismatch says and what to do about it, in the order the read line names them
_LEFT_OUT_AS = {
    "older": ("logged by an older devicebench", "rerun them to compare them"),
    "newer": (
        f"logged by a newer devicebench (this one reads schema {SCHEMA_VERSION})",
        "compare them with that devicebench",
    ),
    "unreadable": ("whose devicebench.schema tag is no version", "rerun them to compare them"),
}


def left_out_line(left_out: Sequence[RunRecord]) -> str:
    """`left out 2 runs logged by an older devicebench (a, b): rerun them to compare them`, one clause per
    kind of mismatch (schema_mismatch), joined by '; '; "" for none."""
    clauses = []
    for why, (said, fix) in _LEFT_OUT_AS.items():
        runs = [r for r in left_out if schema_mismatch(r) == why]
        if not runs:
            continue
        names = [r.run_name or r.run_id for r in runs[:MAX_NAMED]]
        more = f" and {len(runs) - MAX_NAMED} more" if len(runs) > MAX_NAMED else ""
        n = len(runs)
        clauses.append(f"left out {n} run{'s' if n != 1 else ''} {said} ({', '.join(names)}{more}): {fix}")
    return "; ".join(clauses)


def visible_values(values: dict[str, str]) -> dict[str, str]:
    """A run's params or tags as every output may show them (util.text.visible): applied once, as a
    run is read, so no writer has to remember it."""
    return {k: visible(str(v)) for k, v in values.items()}


def tags_and_params(tags: dict[str, str], params: dict[str, str]) -> dict[str, dict[str, str]]:
    """A run's `tags` and `params` fields as every stage after the reader sees them, in one form: its
    `devicebench.*` facts all tags, wherever each was logged (schema.run_facts), and its params its
    config's alone (what labels, varying params and runs.csv read)."""
    return {
        "tags": visible_values(run_facts(tags, params)),
        "params": visible_values({k: v for k, v in params.items() if not k.startswith(TAG)}),
    }
