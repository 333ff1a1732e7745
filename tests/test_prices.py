"""Issue 17, the run side: the price table validates, a host is priced by its OCI shape (fixed or flex)
or an override, and a run logs its price tags and `cost/*` metrics, or says why it has none.

The table checks run in-process against prices.py (cheap); the runs are real `devicebench matmul`
processes (forks of the warm zygote) against the session's `mlflow server` and a fake OCI metadata
service on 127.0.0.1 that answers like the real one. No training run: matmul is the cheap workload."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from mlflow.tracking import MlflowClient
from own_tags import facts_of

from devicebench.config.fields import build_config
from devicebench.config.settings import load_settings
from devicebench.config.workloads import CONFIGS
from devicebench.errors import UsageError
from devicebench.pricing.costs import headline_gflop_per_usd, matmul_costs, training_costs
from devicebench.pricing.price_table import MAX_PRICES_BYTES, default_path, load_prices
from devicebench.pricing.prices import (
    Price,
    Pricing,
    Usage,
    mig_share,
    price_side,
    pricing_for,
    resolve_price,
)
from servers import (
    QUICK_MATMUL,
    MlflowServer,
    devicebench_env,
    fake_oci_metadata,
    one_error_line,
    run_cli,
    runs_of,
)

GOOD = """\
version: 1
shapes:
  VM.X.1: {usd_per_hour: 2.5, currency: USD, date: 2026-11-23, source: "test"}
  VM.Flex: {usd_per_ocpu_hour: 0.5, usd_per_gb_hour: 0.25, currency: USD, date: 2026-11-23, source: t}
"""
ENTRY = "currency: USD, date: 2026-11-23, source: t"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "prices.yaml"
    path.write_text(text)
    return path


# ------------------------------------------------------------------------------------- the table


def test_prices_and_costs_import_neither_torch_nor_numpy_nor_mlflow() -> None:
    code = (
        "import json, sys; import devicebench.pricing.prices, devicebench.pricing.costs; "
        "print(json.dumps(sorted(m for m in ('torch', 'numpy', 'mlflow') if m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_the_shipped_table_validates_and_prices_the_shapes_the_issue_names() -> None:
    table = load_prices(default_path())
    gpus = {
        "VM.GPU.A10.1": 1,
        "VM.GPU.A10.2": 2,
        "BM.GPU.A10.4": 4,
        "BM.GPU.H100.8": 8,
        "BM.GPU.A100-v2.8": 8,
    }
    for shape, n in gpus.items():
        entry = table.entries[shape]
        assert entry.gpus == n and entry.per_gpu > 0 and entry.hourly(None, None) == entry.per_gpu * n, shape
    for shape in ("VM.Standard.E4.Flex", "VM.Standard.E5.Flex", "VM.Standard.A1.Flex", "VM.Standard3.Flex"):
        entry = table.entries[shape]
        assert entry.usd_per_hour is None and entry.usd_per_ocpu_hour > 0 and entry.usd_per_gb_hour > 0
        assert not entry.is_gpu and entry.min_gb_per_ocpu == 1
    assert (
        table.entries["VM.Standard.A1.Flex"].arch == "arm"
        and table.entries["VM.Standard.E5.Flex"].arch == "x86"
    )
    assert all(e.currency and e.date and e.source for e in table.entries.values())


@pytest.mark.parametrize(
    ("text", "key", "needle"),
    [
        (GOOD.replace("version: 1", "versoin: 1"), "versoin", "unknown key"),
        (GOOD.replace("version: 1", "version: 2"), "version", "not a known version"),
        (
            f"version: 1\nshapes:\n  VM.X.1: {{usd_per_hr: 2, {ENTRY}}}\n",
            "shapes[VM.X.1].usd_per_hr",
            "unknown key",
        ),
        (
            f"version: 1\nshapes:\n  VM.X.1: {{usd_per_hour: -1, {ENTRY}}}\n",
            "shapes[VM.X.1].usd_per_hour",
            "out of range",
        ),
        (
            f"version: 1\nshapes:\n  VM.X.1: {{usd_per_hour: '2.0', {ENTRY}}}\n",
            "shapes[VM.X.1].usd_per_hour",
            "not a number",
        ),
        (
            f"version: 1\nshapes:\n  VM.X.1: {{usd_per_hour: .inf, {ENTRY}}}\n",
            "shapes[VM.X.1].usd_per_hour",
            "not a number",
        ),
        (
            f"version: 1\nshapes:\n  VM.X.1: {{usd_per_hour: true, {ENTRY}}}\n",
            "shapes[VM.X.1].usd_per_hour",
            "not a number",
        ),
        (
            "version: 1\nshapes:\n  VM.X.1: {usd_per_hour: 2, date: 2026-11-23, source: t}\n",
            "shapes[VM.X.1].currency",
            "missing",
        ),
        (
            "version: 1\nshapes:\n  VM.X.1: {usd_per_hour: 2, currency: USD, source: t}\n",
            "shapes[VM.X.1].date",
            "missing",
        ),
        (
            "version: 1\nshapes:\n  VM.X.1: {usd_per_hour: 2, currency: USD, date: 2026-11-23}\n",
            "shapes[VM.X.1].source",
            "missing",
        ),
        (
            f"version: 1\nshapes:\n  VM.F: {{usd_per_hour: 2, usd_per_ocpu_hour: 1, usd_per_gb_hour: 1, {ENTRY}}}\n",
            "shapes[VM.F].usd_per_ocpu_hour",
            "one price",
        ),
        (
            f"version: 1\nshapes:\n  VM.F: {{usd_per_ocpu_hour: 1, {ENTRY}}}\n",
            "shapes[VM.F].usd_per_gb_hour",
            "missing",
        ),
        (
            "version: 1\nshapes:\n  VM.X.1: {usd_per_hour: 2, currency: usd, date: 2026-11-23, source: t}\n",
            "shapes[VM.X.1].currency",
            "currency code",
        ),
        (
            "version: 1\nshapes:\n  VM.X.1: {usd_per_hour: 2, currency: USD, date: soon, source: t}\n",
            "shapes[VM.X.1].date",
            "YYYY-MM-DD",
        ),
        ("version: 1\nshapes: [a, b]\n", "shapes", "mapping"),
        (
            f"version: 1\nshapes:\n  VM.GPU.X.1: {{usd_per_hour: 2, {ENTRY}}}\n",
            "shapes[VM.GPU.X.1].gpus",
            "missing",
        ),
        (
            f"version: 1\nshapes:\n  VM.X.1: {{usd_per_gpu_hour: 2, {ENTRY}}}\n",
            "shapes[VM.X.1].gpus",
            "how many GPUs",
        ),
        (
            f"version: 1\nshapes:\n  BM.GPU.X.8: {{usd_per_gpu_hour: 2, gpus: -1, {ENTRY}}}\n",
            "shapes[BM.GPU.X.8].gpus",
            "out of range",
        ),
        (
            f"version: 1\nshapes:\n  BM.GPU.X.8: {{usd_per_gpu_hour: 2, gpus: 1000, {ENTRY}}}\n",
            "shapes[BM.GPU.X.8].gpus",
            "out of range",
        ),
        (
            f"version: 1\nshapes:\n  BM.GPU.X.8: {{usd_per_gpu_hour: 2, gpus: 1.5, {ENTRY}}}\n",
            "shapes[BM.GPU.X.8].gpus",
            "whole number",
        ),
        (
            f"version: 1\nshapes:\n  VM.F: {{usd_per_ocpu_hour: 1, usd_per_gb_hour: 1, arch: sparc, {ENTRY}}}\n",
            "shapes[VM.F].arch",
            "allowed: x86, arm",
        ),
        (
            "version: 1\nshapes:\n  VM.X.1: &e {usd_per_hour: 2, currency: USD, date: 2026-11-23, source: t}\n  VM.X.2: *e\n",
            "YAML",
            "aliases",
        ),
        ("version: 1\nshapes: {a: [\n", "line", "not valid YAML"),
    ],
)
def test_a_bad_table_is_one_line_naming_the_file_and_the_key(
    tmp_path: Path, text: str, key: str, needle: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(UsageError) as err:
        load_prices(path)
    msg = str(err.value)
    assert msg.startswith(f"price table {path}: {key}"), msg
    assert needle in msg and "\n" not in msg
    assert err.value.exit_code == 2


def test_the_file_size_is_capped_like_a_plan(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD + "#" * MAX_PRICES_BYTES)
    with pytest.raises(UsageError, match=rf"price table {path}: file: .* at most"):
        load_prices(path)


def test_a_bad_user_table_names_the_setting(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("2.5", "-2.5"))
    with pytest.raises(UsageError, match=r"\(DEVICEBENCH_PRICES\): shapes\[VM.X.1\].usd_per_hour"):
        pricing_for(0.0, 0.0, str(path))
    with pytest.raises(UsageError, match=r"DEVICEBENCH_PRICES=.*no such file"):
        pricing_for(0.0, 0.0, str(tmp_path / "absent.yaml"))
    assert pricing_for(0.9, 0.0, str(tmp_path / "absent.yaml")).override == 0.9  # an override needs no table


def test_a_bad_table_refuses_the_run_before_it_exists(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("currency: USD, date", "date"))
    env = devicebench_env(f"sqlite:///{tmp_path / 'x.db'}", DEVICEBENCH_PRICES=str(path))
    proc = run_cli(["matmul", "--sizes", "64", *QUICK_MATMUL], env, cwd=tmp_path)
    assert proc.returncode == 2
    line = one_error_line(proc.stderr)
    assert str(path) in line and "shapes[VM.X.1].currency" in line
    assert not (tmp_path / "x.db").exists(), "no run was created"


@pytest.mark.parametrize(
    ("flag", "value", "needle"),
    [
        ("--cpu_shape", "VM.Standard.E9.Flex", "--cpu_shape: 'VM.Standard.E9.Flex' is not a flex CPU shape"),
        ("--price_shape", "VM.Standard.E5.Flex", "--price_shape: 'VM.Standard.E5.Flex' is not a GPU shape"),
    ],
)
def test_a_bad_shape_refuses_the_run_before_it_exists(
    tmp_path: Path, flag: str, value: str, needle: str
) -> None:
    env = devicebench_env(f"sqlite:///{tmp_path / 'x.db'}")
    proc = run_cli(["matmul", "--sizes", "64", *QUICK_MATMUL, flag, value], env, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert needle in one_error_line(proc.stderr)
    assert not (tmp_path / "x.db").exists(), "no run was created"


# ------------------------------------------------------------------------------------- resolving


def test_the_price_comes_from_param_then_setting_then_table(tmp_path: Path) -> None:
    table = write(tmp_path, GOOD)
    a10 = {"oci.shape": "VM.X.1"}
    assert resolve_price(pricing_for(0.9, 1.5, str(table)), a10) == Price(usd_per_hour=0.9)
    assert resolve_price(pricing_for(0.0, 1.5, str(table)), a10) == Price(usd_per_hour=1.5)
    price = resolve_price(pricing_for(0.0, 0.0, str(table)), a10)
    assert isinstance(price, Price)
    assert (price.usd_per_hour, price.source, price.shape, price.date) == (
        2.5,
        "table:prices.yaml",
        "VM.X.1",
        "2026-11-23",
    )


def test_a_flex_shape_is_priced_by_ocpus_and_memory(tmp_path: Path) -> None:
    pricing = pricing_for(0.0, 0.0, str(write(tmp_path, GOOD)))
    price = resolve_price(pricing, {"oci.shape": "VM.Flex", "oci.ocpus": "2.0", "oci.memory_gb": "16.0"})
    assert isinstance(price, Price) and price.usd_per_hour == 2 * 0.5 + 16 * 0.25
    assert "no shapeConfig" in str(resolve_price(pricing, {"oci.shape": "VM.Flex"}))


def test_a_host_without_a_price_gets_the_reason(tmp_path: Path) -> None:
    pricing = pricing_for(0.0, 0.0, str(write(tmp_path, GOOD)))
    assert resolve_price(pricing, {}) == "no OCI shape (not on OCI) and no price_per_hour"
    assert resolve_price(pricing, {"oci.shape": "VM.Foo.1"}).startswith("shape VM.Foo.1 is not in ")
    assert "no price table" in str(
        resolve_price(Pricing(missing="no price table (x)"), {"oci.shape": "VM.Foo.1"})
    )


# ------------------------------------------------------------------------------------- a side as what it used

SHIPPED = str(default_path())
H100_HOST = {"oci.shape": "BM.GPU.H100.8", "oci.ocpus": "112", "oci.memory_gb": "2048"}


def test_a_cpu_run_on_a_gpu_host_is_priced_as_the_cpu_shape_that_gives_it_its_cores() -> None:
    """The acceptance case: cpu_threads=2 on an H100 host is 1 OCPU of the reference flex shape (x86: 2
    vCPUs an OCPU) and the memory it needed, as if; not the H100 host's $80/h."""
    e5 = load_prices(default_path()).entries["VM.Standard.E5.Flex"]
    price = price_side(pricing_for(0.0, 0.0, SHIPPED), H100_HOST, Usage("cpu", vcpus=2, memory_gb=1.4))
    assert isinstance(price, Price)
    assert price.usd_per_hour == pytest.approx(e5.usd_per_ocpu_hour + 2 * e5.usd_per_gb_hour)
    assert price.usd_per_hour < 1.0, "well under the H100 host's $80/h"
    assert (price.shape, price.units, price.as_if) == ("VM.Standard.E5.Flex", "1 OCPU + 2 GB", True)
    assert price.tags()["devicebench.price.as_if"] == "true"
    tuned = price_side(pricing_for(0.0, 0.0, SHIPPED), H100_HOST, Usage("cpu", vcpus=5, memory_gb=3.2))
    assert isinstance(tuned, Price) and tuned.units == "3 OCPUs + 4 GB", "rounded up: OCI rents whole OCPUs"
    arm = price_side(
        pricing_for(0.0, 0.0, SHIPPED, cpu_shape="VM.Standard.A1.Flex"), {}, Usage("cpu", vcpus=2)
    )
    assert isinstance(arm, Price) and arm.units == "2 OCPUs + 2 GB", "an Arm OCPU is one vCPU"


def test_a_gpu_run_is_charged_the_gpus_it_used_not_the_whole_shape() -> None:
    pricing = pricing_for(0.0, 0.0, SHIPPED)
    one = price_side(pricing, H100_HOST, Usage("cuda", gpus=1))
    assert isinstance(one, Price) and (one.usd_per_hour, one.units, one.as_if) == (
        10.0,
        "1 of its 8 GPUs",
        False,
    )
    job = price_side(pricing, H100_HOST, Usage("cuda", gpus=4))
    assert isinstance(job, Price) and job.usd_per_hour == 40.0
    mig = price_side(pricing, H100_HOST, Usage("cuda", gpus=mig_share("1g.10gb")))
    assert isinstance(mig, Price) and mig.usd_per_hour == pytest.approx(10.0 / 7)
    assert (mig_share("3g.40gb"), mig_share(""), mig_share("junk")) == (3 / 7, 1.0, 1.0)
    whole = price_side(pricing_for(0.0, 0.0, SHIPPED, whole_shape=True), H100_HOST, Usage("cpu", vcpus=2))
    assert isinstance(whole, Price) and whole.usd_per_hour == 80.0, "the instance runs nothing else"


def test_off_oci_a_gpu_run_is_priced_as_if_on_price_shape_or_says_why_not() -> None:
    assert price_side(pricing_for(0.0, 0.0, SHIPPED), {}, Usage("cuda", gpus=1)) == (
        "no OCI shape (not on OCI), and no price_shape or price_per_hour"
    )
    as_if = price_side(pricing_for(0.0, 0.0, SHIPPED, gpu_shape="VM.GPU.A10.1"), {}, Usage("cuda", gpus=1))
    assert isinstance(as_if, Price) and (as_if.usd_per_hour, as_if.shape, as_if.as_if) == (
        2.0,
        "VM.GPU.A10.1",
        True,
    )
    demo = pricing_for(0.0, 0.0, SHIPPED, True, gpu_shape="VM.GPU.A10.1")
    made_up = price_side(demo, {}, Usage("cpu", vcpus=2))
    assert (
        isinstance(made_up, Price)
        and made_up.source == "illustrative"
        and made_up.shape == "VM.Standard.E5.Flex"
    )
    flex_host = {"oci.shape": "VM.Standard.E4.Flex", "oci.ocpus": "2", "oci.memory_gb": "16"}
    host = price_side(pricing_for(0.0, 0.0, SHIPPED), flex_host, Usage("cpu", vcpus=2))
    assert isinstance(host, Price) and (host.shape, host.as_if) == ("VM.Standard.E4.Flex", False), (
        "a CPU shape: as that host"
    )


@pytest.mark.parametrize(
    ("kwargs", "param", "needle"),
    [
        ({"cpu_shape": "VM.Standard.E9.Flex"}, "cpu_shape", "not a flex CPU shape"),
        ({"cpu_shape": "VM.GPU.A10.1"}, "cpu_shape", "not a flex CPU shape"),
        ({"gpu_shape": "VM.Standard.E5.Flex"}, "price_shape", "not a GPU shape"),
        ({"gpu_shape": "VM.GPU.Z9.1"}, "price_shape", "not a GPU shape"),
    ],
)
def test_an_unknown_reference_or_as_if_shape_is_refused_before_any_work(
    kwargs: dict, param: str, needle: str
) -> None:
    with pytest.raises(UsageError) as err:
        pricing_for(0.0, 0.0, SHIPPED, **kwargs)
    assert err.value.param == param and needle in str(err.value) and "\n" not in str(err.value)
    assert err.value.exit_code == 2


@pytest.mark.parametrize("raw", ["abc", "0", "-1", "nan", "inf"])
def test_a_bad_price_setting_is_refused(raw: str) -> None:
    with pytest.raises(UsageError, match=f"setting DEVICEBENCH_PRICE_PER_HOUR='{raw}' is not a price"):
        load_settings({"DEVICEBENCH_PRICE_PER_HOUR": raw})


def test_price_settings_are_read() -> None:
    s = load_settings({"DEVICEBENCH_PRICE_PER_HOUR": "1.5", "DEVICEBENCH_PRICES": "/x/p.yaml"})
    assert (s.price_per_hour, s.prices_path) == (1.5, "/x/p.yaml")
    assert load_settings({"DEVICEBENCH_PRICE_PER_HOUR": ""}).price_per_hour == 0.0


@pytest.mark.parametrize("name", list(CONFIGS))
def test_price_per_hour_is_every_workloads_param_and_not_the_work(name: str) -> None:
    from devicebench.config.fields import config_key

    cls = CONFIGS[name]
    assert config_key(name, build_config(cls, {"price_per_hour": "0.9"})) == config_key(name, cls())
    with pytest.raises(UsageError, match="--price_per_hour: '-1' is out of range"):
        build_config(cls, {"price_per_hour": "-1"})


# ------------------------------------------------------------------------------------- cost arithmetic


def test_training_costs_per_epoch_and_per_1k_samples() -> None:
    got = training_costs(3.6, train_s=200.0, samples_per_s=50.0, epochs=4)
    assert got["cost/usd_per_epoch"] == pytest.approx(3.6 * 50.0 / 3600)
    assert got["cost/usd_per_1k_samples"] == pytest.approx(3.6 * (1 / 50.0) * 1000 / 3600)
    assert training_costs(3.6, train_s=math.nan, samples_per_s=0.0, epochs=4) == {}


def test_a_training_run_logs_its_cost_metrics_from_its_result() -> None:
    """What the CLI logs at the end of a cifar/unet run (no training run here: the result is planted)."""
    from devicebench.pricing.costs import log_costs
    from devicebench.tracking.protocol import MemoryTracker

    tracker = MemoryTracker()
    result = SimpleNamespace(train_s=120.0, train_samples_per_s=400.0)
    log_costs(tracker, Price(usd_per_hour=3.0), "cifar", 150.0, result, SimpleNamespace(epochs=2))
    got = {name: value for name, value, _ in tracker.metrics}
    assert got == pytest.approx(
        {
            "cost/usd": 3.0 * 150.0 / 3600,
            "cost/usd_per_hour": 3.0,
            "cost/usd_per_epoch": 3.0 * 60.0 / 3600,
            "cost/usd_per_1k_samples": 3.0 * 1000 / 400.0 / 3600,
        }
    )
    none = MemoryTracker()
    log_costs(none, "shape VM.Foo.1 is not in experiments/prices.yaml", "cifar", 150.0, result, None)
    assert none.metrics == []


def test_matmul_gflop_per_usd_per_point_and_the_headline() -> None:
    points = [
        SimpleNamespace(backend=b, dtype=d, size=n, gflops=g)
        for b, d, n, g in [
            ("numpy", "float32", 1024, 900.0),
            ("torch", "float32", 512, 50.0),
            ("torch", "float32", 1024, 100.0),
            ("torch", "float64", 1024, 40.0),
        ]
    ]
    per_point = matmul_costs(2.0, points)
    assert per_point[512] == {"matmul/torch/float32/gflop_per_usd": 50.0 * 3600 / 2.0}
    assert per_point[1024]["matmul/numpy/float32/gflop_per_usd"] == 900.0 * 1800
    assert headline_gflop_per_usd(per_point) == 100.0 * 1800  # torch's best, at its largest size


# ------------------------------------------------------------------------------------- real runs


@pytest.fixture
def oci() -> Iterator[dict[str, Any]]:
    """A metadata service on 127.0.0.1 that, like OCI's v2, wants `Authorization: Bearer Oracle` and
    answers /opc/v2/instance/ with the document the test puts in `doc`."""
    state: dict[str, Any] = {"doc": {}}

    with fake_oci_metadata(lambda: state["doc"]) as url:
        state["url"] = url
        yield state


def instance(shape: str, **config: float) -> dict[str, Any]:
    return {
        "shape": shape,
        "canonicalRegionName": "us-phoenix-1",
        "availabilityDomain": "AD-1",
        "shapeConfig": config,
    }


def run_matmul(server: MlflowServer, experiment: str, tmp_path: Path, oci_url: str, *extra: str) -> Any:
    env = devicebench_env(
        server.url,
        DEVICEBENCH_EXPERIMENT=experiment,
        DEVICEBENCH_SPOOL_DIR=str(tmp_path / "spool"),
        DEVICEBENCH_OCI_METADATA_URL=oci_url,
        DEVICEBENCH_OCI_TIMEOUT_S="5",
    )
    args = ["matmul", "--sizes", "64,128", "--backends", "torch", "--dtypes", "float32", "--repeats", "1"]
    proc = run_cli([*args, *QUICK_MATMUL, *extra], env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (run,) = runs_of(server.url, experiment)
    return run


def test_a_cpu_run_on_an_h100_host_is_priced_as_one_ocpu_of_the_reference_shape_and_says_so(
    oci: dict[str, Any], mlflow_server: MlflowServer, experiment_name: str, tmp_path: Path
) -> None:
    """Issue 37's acceptance: on a host whose metadata says BM.GPU.H100.8 ($80/h whole), a CPU run with
    cpu_threads=2 is priced as 1 OCPU of the reference flex shape and the memory it needed, as if, well
    under $1/h; its tags, cost metrics and description all say what it was priced as."""
    oci["doc"] = instance("BM.GPU.H100.8", ocpus=112.0, memoryInGBs=2048.0, gpus=8)
    run = run_matmul(mlflow_server, experiment_name, tmp_path, oci["url"], "--cpu_threads", "2")
    e5 = load_prices(default_path()).entries["VM.Standard.E5.Flex"]
    tags, metrics = facts_of(run), run.data.metrics
    hourly = float(tags["devicebench.price.usd_per_hour"])
    gb = round((hourly - e5.usd_per_ocpu_hour) / e5.usd_per_gb_hour)
    assert hourly == pytest.approx(e5.usd_per_ocpu_hour + gb * e5.usd_per_gb_hour) and hourly < 1.0
    assert (tags["devicebench.price.shape"], tags["devicebench.price.units"]) == (
        "VM.Standard.E5.Flex",
        f"1 OCPU + {gb} GB",
    )
    assert (
        tags["devicebench.price.as_if"] == "true" and tags["devicebench.price.source"] == "table:prices.yaml"
    )
    assert (tags["devicebench.price.date"], tags["devicebench.price.reference"]) == (e5.date, e5.source)
    assert "devicebench.price.none" not in tags and tags["devicebench.host.oci.shape"] == "BM.GPU.H100.8"
    assert metrics["cost/usd_per_hour"] == pytest.approx(hourly)
    assert metrics["cost/usd"] == pytest.approx(hourly * metrics["time/total_s"] / 3600, rel=1e-6)
    history = MlflowClient(mlflow_server.url).get_metric_history(
        run.info.run_id, "matmul/torch/float32/gflop_per_usd"
    )
    gflops = {
        m.step: m.value
        for m in MlflowClient(mlflow_server.url).get_metric_history(
            run.info.run_id, "matmul/torch/float32/gflops"
        )
    }
    assert sorted(m.step for m in history) == [64, 128]
    for m in history:
        assert m.value == pytest.approx(gflops[m.step] * 3600 / metrics["cost/usd_per_hour"], rel=1e-9)
    assert f"as if on VM.Standard.E5.Flex: 1 OCPU + {gb} GB" in tags["mlflow.note.content"]


def test_a_flex_host_is_priced_by_its_ocpus_and_memory(
    oci: dict[str, Any], mlflow_server: MlflowServer, experiment_name: str, tmp_path: Path
) -> None:
    oci["doc"] = instance("VM.Standard.E4.Flex", ocpus=2.0, memoryInGBs=16.0)
    run = run_matmul(mlflow_server, experiment_name, tmp_path, oci["url"])
    entry = load_prices(default_path()).entries["VM.Standard.E4.Flex"]
    hourly = 2 * entry.usd_per_ocpu_hour + 16 * entry.usd_per_gb_hour
    assert run.data.metrics["cost/usd_per_hour"] == pytest.approx(hourly, rel=1e-12)
    assert float(facts_of(run)["devicebench.price.usd_per_hour"]) == pytest.approx(hourly, rel=1e-9)
    assert facts_of(run)["devicebench.price.shape"] == "VM.Standard.E4.Flex"


def test_price_per_hour_overrides_the_table(
    oci: dict[str, Any], mlflow_server: MlflowServer, experiment_name: str, tmp_path: Path
) -> None:
    oci["doc"] = instance("VM.GPU.A10.1", ocpus=15.0, memoryInGBs=240.0)
    run = run_matmul(mlflow_server, experiment_name, tmp_path, oci["url"], "--price_per_hour", "0.9")
    tags, metrics = facts_of(run), run.data.metrics
    assert (tags["devicebench.price.usd_per_hour"], tags["devicebench.price.source"]) == ("0.9", "override")
    assert "devicebench.price.shape" not in tags and "devicebench.price.date" not in tags
    assert run.data.params["price_per_hour"] == "0.9"
    assert metrics["cost/usd"] == pytest.approx(0.9 * metrics["time/total_s"] / 3600, rel=1e-9)


def test_an_unknown_shape_prices_a_cpu_run_as_if_and_a_table_without_the_reference_says_why(
    oci: dict[str, Any], mlflow_server: MlflowServer, experiment_name: str, tmp_path: Path
) -> None:
    oci["doc"] = instance("VM.Foo.1", ocpus=1.0, memoryInGBs=8.0)
    run = run_matmul(mlflow_server, experiment_name, tmp_path, oci["url"])
    tags = facts_of(run)
    assert (tags["devicebench.price.shape"], tags["devicebench.price.as_if"]) == (
        "VM.Standard.E5.Flex",
        "true",
    )
    own = write(tmp_path, GOOD)  # the user's contract prices, without the reference CPU shape
    env = devicebench_env(
        mlflow_server.url,
        DEVICEBENCH_EXPERIMENT=experiment_name,
        DEVICEBENCH_SPOOL_DIR=str(tmp_path / "spool"),
        DEVICEBENCH_OCI_METADATA_URL=oci["url"],
        DEVICEBENCH_PRICES=str(own),
    )
    proc = run_cli(
        ["matmul", "--sizes", "64", "--backends", "torch", "--repeats", "1", *QUICK_MATMUL], env, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    latest = max(runs_of(mlflow_server.url, experiment_name), key=lambda r: r.info.start_time)
    assert facts_of(latest)["devicebench.price.none"] == (
        f"the reference CPU shape VM.Standard.E5.Flex is not in {own} (DEVICEBENCH_PRICES); set DEVICEBENCH_CPU_SHAPE"
    )
    assert not [k for k in latest.data.metrics if k.startswith("cost/") or k.endswith("/gflop_per_usd")]
