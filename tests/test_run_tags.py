"""A workload run carries at most 15 tags of devicebench's own, every other fact is a param of the same
name, and `compare` reads a store of old runs (every fact a tag) and new ones alike (issue 41, finding
2); an oversubscribed CPU run says so in its line and in the report, paired or not (finding 8).

The end-to-end tests check the limit on the runs they already make (own_tags.facts_of); here the names
the code can set, a GPU run's included (this host has no GPU), go through the real tracker to a real
store, and old- and new-form runs are read back by the report's reader from a real `mlflow server`.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient
from own_tags import facts_of, own_tags

from benchmarks.bench_compare import Spec, log_runs, specs_for
from devicebench.config.settings import load_settings
from devicebench.host.cpu import cpu_budget
from devicebench.host.device import host_fingerprint
from devicebench.pricing.prices import Price
from devicebench.report.judge.judgement import Judgement, judge
from devicebench.report.model.comparison import compare
from devicebench.report.read.options import Query
from devicebench.report.read.query import read_runs, record
from devicebench.report.read.records import RunRecord
from devicebench.run.run_line import summary_line
from devicebench.schema import (
    MAX_RUN_TAGS,
    OTHER_RUN_TAGS,
    RUN_TAGS,
    TAG_PREFIX,
    glance_key,
    is_tag,
    run_facts,
    tag,
)
from devicebench.tracking.runs import run_context
from servers import MlflowServer

SRC = Path(__file__).resolve().parents[1] / "src" / "devicebench"

# What a GPU host adds to the fingerprint (host/device.cuda_facts, host/gpu_info.gpu_identity, the
# capability) and an OCI host's metadata (host/device.oci_metadata): set on no run this host makes.
GPU_HOST = ("driver", "cuda_driver", "cudnn", "gpu_capability", "gpu_uuid", "gpu_mig_mode", "gpu_mig_profile",
            "gpu_parent_uuid", "oci.shape", "oci.region", "oci.availability_domain", "oci.ocpus",
            "oci.memory_gb", "label", "env.OMP_NUM_THREADS")  # fmt: skip


def _named_in_code() -> dict[str, set[str]]:
    """Every `tag("<name>")` in src/ (schema.py, which declares them, aside), with the files it is in."""
    out: dict[str, set[str]] = {}
    for path in (p for p in SRC.rglob("*.py") if p.name != "schema.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "tag"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                out.setdefault(tag(node.args[0].value), set()).add(str(path.relative_to(SRC)))
    return out


def every_fact_a_gpu_run_can_carry() -> dict[str, str]:
    """Every devicebench name a workload run of any kind can be given: the names spelled in src/, the
    host fingerprint of this host and of a GPU and OCI host (its keys spelled in f-strings), the price's
    and the CPU budget's; what only report and suite runs carry left out."""
    names = {n for n in _named_in_code() if n not in OTHER_RUN_TAGS}
    host = host_fingerprint(torch.device("cpu"), "", 0)
    names |= {tag(f"host.{k}") for k in [*host, *GPU_HOST]}
    price = Price(2.0, "USD", "table:prices.yaml", "VM.GPU.A10.1", "2026-11-23", "its list", "1 GPU", True)
    names |= set(price.tags()) | {tag(k) for k in cpu_budget(2, 2)}
    return {n: "x" for n in names}


def test_a_workload_run_keeps_at_most_15_own_tags_whatever_it_is_given(
    mlflow_server: MlflowServer, tmp_path: Path, experiment_name: str
) -> None:
    """Every name the code can set for a GPU run in a plan, tuned, as a job, failed, replayed, through
    the real tracker to a real store: the tags are RUN_TAGS only, every other fact a param, none lost."""
    assert len(RUN_TAGS) <= MAX_RUN_TAGS == 15 and len(set(RUN_TAGS)) == len(RUN_TAGS)
    given = every_fact_a_gpu_run_can_carry()
    assert len(given) > 50 and {tag("host.gpu_uuid"), tag("price.gpu_shape"), tag("dist.backend")} <= set(
        given
    )
    settings = load_settings(
        {
            "MLFLOW_TRACKING_URI": mlflow_server.url,
            "DEVICEBENCH_EXPERIMENT": experiment_name,
            "DEVICEBENCH_SPOOL_DIR": str(tmp_path / "spool"),
        }
    )
    start = {k: given[k] for k in (tag("device"), tag("tuned"), tag("tuned.setting"), tag("suite"))}
    with run_context(settings, "cifar", {"batch_size": 4}, tags=start) as tracker:
        tracker.set_tags(given)
        run_id = tracker.run_id
    run = MlflowClient(mlflow_server.url).get_run(run_id)
    facts = facts_of(run)  # at most 15 own tags, each a RUN_TAGS name
    assert set(own_tags(run)) == set(given) & set(RUN_TAGS) | {tag("workload")}
    assert {k: facts[k] for k in given} == given, "a fact was lost"
    assert run.data.params["batch_size"] == "4" and tag("host.torch") in run.data.params


def test_only_run_tags_are_written_around_the_tracker_and_report_tags_only_on_reports() -> None:
    """What bypasses the tracker's split (the client's own `set_tag`, `RunTag`, `create_run(tags=)`)
    names RUN_TAGS only; the report's and the suite's own tags are written by those commands alone."""
    around = re.compile(r"(?:set_tag\(\s*\w+,\s*|RunTag\(|tags=\{)tag\(\"([^\"]+)\"\)")
    written = {tag(m) for p in SRC.rglob("*.py") for m in around.findall(p.read_text())}
    assert tag("error") in written and written <= set(RUN_TAGS) | set(OTHER_RUN_TAGS), written
    where = _named_in_code()
    for name in OTHER_RUN_TAGS:
        assert where[name] <= {"report/command.py", "plan/suite.py"}, (name, where[name])
    assert all(not is_tag(n) for n in every_fact_a_gpu_run_can_carry() if n not in RUN_TAGS)


def test_the_reader_takes_facts_from_params_and_leaves_params_the_config() -> None:
    tags = {tag("workload"): "cifar", "mlflow.user": "me", tag("data"): "synthetic"}
    params = {"batch_size": "4", tag("host.torch_threads"): "2", tag("data"): "cifar10"}
    assert run_facts(tags, params) == {**tags, tag("host.torch_threads"): "2"}  # a tag wins


# ------------------------------------------------------------------------------------------- the report


def _specs() -> list[Spec]:
    """Two repeats of a priced cifar CPU/GPU pair whose CPU ran oversubscribed, a unet CPU side alone
    and oversubscribed, and a matmul pair: every fact the report pairs, prices and explains by."""
    over = {
        tag("cpu.oversubscribed"): "true",
        tag("cpu.busy_threads"): "4",
        tag("cpu.usable_cores"): "2",
        tag("host.torch_threads"): "2",
        tag("host.blas_threads"): "2",
    }
    specs = (
        specs_for("cifar", ["cpu", "cuda:0"] * 2)
        + specs_for("unet", ["cpu"])
        + specs_for("matmul", ["cpu", "cuda:0"])
    )
    for spec in specs:
        cpu = spec.device == "cpu"
        hourly = 0.1 if cpu else 2.0
        spec.metrics["cost/usd_per_epoch"] = hourly * spec.metrics.get("time/train_s", 1.0) / 2 / 3600
        spec.extra_tags = {
            tag("price.usd_per_hour"): str(hourly),
            tag("price.currency"): "USD",
            tag("price.source"): "table:prices.yaml",
            tag("price.shape"): "VM.Standard.E5.Flex" if cpu else "VM.GPU.A10.1",
            tag("price.units"): "1 OCPU + 2 GB" if cpu else "1 GPU",
            **({tag("price.as_if"): "true"} if cpu else {}),
            **(over if cpu and spec.workload != "matmul" else {}),
        }
    return specs


def _log_new_form(client: Any, exp_id: str, spec: Spec) -> str:
    """The spec as a run logged now: its tags the RUN_TAGS among them, every other fact a param."""
    every = spec.tags()
    run = client.create_run(
        exp_id,
        start_time=spec.start_time or None,
        tags={k: v for k, v in every.items() if is_tag(k)},
        run_name=f"{spec.workload}-{spec.device}",
    )
    rid = run.info.run_id
    facts = {k: v for k, v in every.items() if not is_tag(k)}
    params = [Param(k, v) for k, v in {**spec.params, **facts}.items()]
    metrics = [Metric(k, float(v), 0, 0) for k, v in spec.metrics.items()]
    metrics += [Metric(k, float(v), 0, int(n)) for k, hist in spec.history.items() for n, v in hist.items()]
    for i in range(0, max(len(params), len(metrics)), 100):
        client.log_batch(rid, metrics=metrics[i : i + 100], params=params[i : i + 100])
    client.set_terminated(rid, spec.status)
    return rid


def _judged(client: Any, experiment: str) -> tuple[list[RunRecord], Judgement]:
    runs = read_runs(client, Query(experiments=(experiment,))).runs
    return runs, judge(compare(runs))


def _said(judged: Judgement) -> list[tuple[Any, ...]]:
    """What the report says of each pair and side, without run ids: pairing, speedups, prices, verdicts."""
    comp = judged.comp
    pairs = [
        (p.workload, p.config_key, p.base.device, p.other.device, dict(p.speedups), p.cost_ratio,
         p.base.price.hourly, p.other.price.shape, p.other.price.as_if, tuple(judged.of(p)))
        for p in comp.pairs
    ]  # fmt: skip
    alone = [
        (s.workload, s.device, tuple(s.hosts), judged.break_even.get(s), tuple(judged.alone(s)))
        for s in comp.unpaired
    ]
    return sorted(pairs, key=repr) + sorted(alone, key=repr)


def _as_read(runs: list[RunRecord]) -> list[tuple[Any, ...]]:
    """Each run as the stages after the reader see it, but for its id and start time."""
    return sorted(
        (r.workload, r.device, *(sorted(d.items()) for d in (r.tags, r.params, r.metrics))) for r in runs
    )


@pytest.fixture(scope="module")
def old_and_mixed(mlflow_server: MlflowServer) -> dict[str, Any]:
    """One experiment of old-form runs (every fact a tag, as runs were logged before) and one of the
    same runs, some in the new form: a store that holds both, a side of both kinds among them."""
    client = MlflowClient(mlflow_server.url)
    name = f"t-tags-{id(client)}"
    old = client.create_experiment(f"{name}-old")
    mixed = client.create_experiment(f"{name}-mixed")
    specs = _specs()
    log_runs(client, old, specs, workers=1)
    new = (1, 2, 4, 5)  # a GPU and a CPU repeat of the cifar pair, the lone unet side, matmul's CPU side
    new_ids = [_log_new_form(client, mixed, specs[i]) for i in new]
    log_runs(client, mixed, [s for i, s in enumerate(specs) if i not in new], workers=1)
    return {"client": client, "old": f"{name}-old", "mixed": f"{name}-mixed", "new_ids": new_ids}


def test_compare_pairs_prices_and_explains_old_and_new_runs_alike(old_and_mixed: dict[str, Any]) -> None:
    client = old_and_mixed["client"]
    old_runs, old = _judged(client, old_and_mixed["old"])
    mixed_runs, mixed = _judged(client, old_and_mixed["mixed"])
    for rid in old_and_mixed["new_ids"]:  # the new-form runs really are: few tags, facts as params
        run = client.get_run(rid)
        assert len(own_tags(run)) <= MAX_RUN_TAGS and tag("host.cpu_model") in run.data.params
        assert record(run).tags == next(r.tags for r in mixed_runs if r.run_id == rid)  # embedded path
    assert _as_read(mixed_runs) == _as_read(old_runs), "the reader gives both forms one shape"
    assert _said(mixed) == _said(old)
    assert sorted(p.workload for p in old.comp.pairs) == ["cifar", "matmul"]
    (cifar,) = [p for p in mixed.comp.pairs if p.workload == "cifar" and p.is_cpu_gpu]
    assert cifar.cost_ratio is not None and cifar.base.price.as_if and len(cifar.base.runs) == 2
    assert (
        "cpu baseline oversubscribed: 2 torch threads + 2 loader workers on 2 cores (2/2 runs); it measures "
        "contention, so the speedup is overstated: rerun with num_workers=0 or fewer threads"
    ) in mixed.of(cifar)


def test_a_lone_oversubscribed_cpu_side_is_judged_so(old_and_mixed: dict[str, Any]) -> None:
    """Issue 41: a lone cifar run at 4 busy threads on 2 cores was said nowhere; its side now has a
    verdict line of its own beside the report's other judgements."""
    _, judged = _judged(old_and_mixed["client"], old_and_mixed["mixed"])
    (unet,) = [s for s in judged.comp.unpaired if s.workload == "unet"]
    assert judged.alone(unet) == [
        "cpu oversubscribed: 2 torch threads + 2 loader workers on 2 cores (1/1 runs); its figures measure "
        "contention, not this CPU: rerun with num_workers=0 or fewer threads"
    ]
    fits = replace(
        unet, runs=[replace(r, tags={**r.tags, tag("cpu.oversubscribed"): "false"}) for r in unet.runs]
    )
    gpu = replace(unet, device="cuda:0")
    assert judge(replace(judged.comp, unpaired=[fits, gpu])).side_lines == {}


def test_an_oversubscribed_cpu_run_says_so_in_its_line() -> None:
    glance = {glance_key("train_s"): 2.0, glance_key("train_samples_per_s"): 42.0}
    budget = {"cpu.usable_cores": "2", "cpu.busy_threads": "4", "cpu.oversubscribed": "true"}
    line = summary_line("cifar", "cpu", glance, "no price here", 1, budget)
    assert (
        line
        == "train 2.00 s · 42 img/s · cpu · oversubscribed: 4 busy threads on 2 cores · no price: no price here"
    )
    fits = {**budget, "cpu.busy_threads": "2", "cpu.oversubscribed": "false"}
    assert "oversubscribed" not in summary_line("cifar", "cpu", glance, "none", 1, fits)
    assert "oversubscribed" not in summary_line(
        "cifar", "cuda:0", glance, "none", 1, budget
    )  # its threads wait
    assert TAG_PREFIX + "cpu.oversubscribed" in RUN_TAGS  # a flag to filter on, kept a tag


def test_a_lone_oversubscribed_side_is_named_in_every_place_the_report_speaks(
    old_and_mixed: dict[str, Any],
) -> None:
    """report.md (under the sides without a partner), the terminal and the report run's description."""
    from devicebench.report.render.content import build_doc
    from devicebench.report.render.document import to_markdown
    from devicebench.report.render.headline import summary_note
    from devicebench.report.render.terminal import terminal_table

    _, judged = _judged(old_and_mixed["client"], old_and_mixed["mixed"])
    said = "cpu oversubscribed: 2 torch threads + 2 loader workers on 2 cores (1/1 runs)"
    markdown = to_markdown(build_doc(judged, {}, {}))
    assert said in markdown.split("Runs without a partner device", 1)[1]
    assert f"  {said}" in terminal_table(judged)
    assert any(said in line and line.startswith("**unet") for line in summary_note(judged, "").splitlines())
