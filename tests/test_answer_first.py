"""Issue 28, the answer first, on plain data: a workload run's one line and its leading metrics, the
illustrative price, the links into the UI, and the report run's name, description and readable tables.
The store-side halves (which experiment the report goes to, the printed links on a real server) are in
test_report_store.py; the pictures and the first screens in `make screenshots`."""

from __future__ import annotations

import math
import subprocess
from types import SimpleNamespace

import pytest
from test_report_cost import run as priced_run

from devicebench.errors import UsageError
from devicebench.pricing.prices import Price, pricing_for, resolve_price
from devicebench.report.judge.judgement import judge
from devicebench.report.judge.pair_rules import explain
from devicebench.report.links import link_lines, ui_base
from devicebench.report.model.comparison import compare
from devicebench.report.render.content import build_doc
from devicebench.report.render.document import to_markdown
from devicebench.report.render.headline import headline_metrics, report_name, summary_note
from devicebench.report.render.labels import describe, varying_params
from devicebench.run.run_line import glance_metrics, summary_line
from devicebench.schema import GLANCE

ILLUSTRATIVE = Price(usd_per_hour=1.0, source="illustrative")

# ----------------------------------------------------------------------------------- workload runs


def test_a_training_run_line_has_time_throughput_quality_device_and_cost() -> None:
    result = SimpleNamespace(train_s=0.5612, train_samples_per_s=3542.3, accuracy=0.9021)
    glance = glance_metrics("cifar", result, {"cost/usd_per_epoch": 0.000159, "cost/usd": 0.1})
    assert glance == {
        "at_a_glance/train_s": 0.5612,
        "at_a_glance/train_samples_per_s": 3542.3,
        "at_a_glance/accuracy": 0.9021,
        "at_a_glance/usd_per_epoch": 0.000159,
    }
    line = summary_line("cifar", "cuda:0", glance, ILLUSTRATIVE)
    assert line == "train 561.20 ms · 3,542 img/s · acc 0.902 · cuda:0 · $0.000159/epoch (illustrative $1/h)"
    table = Price(usd_per_hour=2.95, source="table:prices.yaml", shape="VM.GPU.A10.1")
    assert summary_line("cifar", "cuda:0", glance, table).endswith("(VM.GPU.A10.1, $2.95/h)")
    assert summary_line("cifar", "cpu", glance, Price(usd_per_hour=3.0)).endswith("($3/h set by hand)")


def test_a_run_without_a_price_says_why_and_a_unet_run_shows_miou() -> None:
    result = SimpleNamespace(train_s=4.2, train_samples_per_s=23.1, miou=0.047, accuracy=None)
    glance = glance_metrics("unet", result, {})
    assert "at_a_glance/usd_per_epoch" not in glance and "at_a_glance/accuracy" not in glance
    line = summary_line("unet", "cpu", glance, "no OCI shape (not on OCI) and no price_per_hour", 2)
    assert (
        line
        == "train 4.20 s · 23.1 img/s · mIoU 0.047 · cpu ×2 · no price: no OCI shape (not on OCI) and no price_per_hour"
    )


def test_a_matmul_run_line_speaks_for_torch_at_its_largest_size() -> None:
    def point(backend: str, dtype: str, size: int, s: float) -> SimpleNamespace:
        return SimpleNamespace(
            backend=backend,
            dtype=dtype,
            size=size,
            stats=SimpleNamespace(median_s=s),
            gflops=2 * size**3 / s / 1e9,
            rel_error=1e-7,
        )

    points = [point("numpy", "float32", 1024, 0.002), point("torch", "float32", 512, 0.0001)]
    points += [point("torch", "float32", 1024, 0.004), point("torch", "float64", 1024, 0.008)]
    glance = glance_metrics("matmul", points, {"cost/gflop_per_usd": 3_983_108.0})
    assert glance["at_a_glance/time_s"] == 0.004 and glance["at_a_glance/gflops"] == pytest.approx(
        536.87, rel=1e-3
    )
    line = summary_line("matmul", "cpu", glance, ILLUSTRATIVE)
    assert (
        line
        == "4.00 ms per product · 537 GFLOP/s · rel err 1.0e-07 · cpu · 3,983,108 GFLOP per $ (illustrative $1/h)"
    )


def test_glance_metrics_sort_before_every_other_metric_name() -> None:
    """MLflow lists metric names in name order; the originals stay (reports and old runs read them)."""
    others = ["cost/usd", "dist/allreduce_s", "eval/accuracy", "matmul/torch/float32/gflops"]
    others += ["memory/peak_bytes", "system/cpu", "throughput/train_samples_per_s", "time/train_s"]
    others += ["train/loss", "cost_ratio/x", "eval/acc/airplane"]
    assert all(f"{GLANCE}/train_s" < name and f"{GLANCE}/zzz" < name for name in others)
    # the UI's own sort is case-insensitive in places: no upper-case letter may decide it
    assert all(f"{GLANCE}/x".lower() < name.lower() for name in others)


def test_illustrative_price_is_tagged_as_such_and_needs_a_price() -> None:
    price = resolve_price(pricing_for(1.0, 0.0, "", illustrative=True), {})
    assert price == ILLUSTRATIVE and price.tags()["devicebench.price.source"] == "illustrative"
    assert resolve_price(pricing_for(1.0, 0.0, ""), {}).source == "override"
    with pytest.raises(
        UsageError, match=r"^--illustrative_price: .*price_per_hour, or list prices as if on price_shape"
    ):
        pricing_for(0.0, 2.0, "", illustrative=True)  # the host's price is not made up


def test_the_demo_plan_marks_its_price_illustrative(repo_root) -> None:
    from devicebench.plan.spec import load_plan

    plan = load_plan(repo_root / "experiments" / "demo.yaml")
    for item in plan.runs:
        # list prices of shapes this host is not (as if), never a made-up number; marked illustrative
        assert "price_per_hour" not in item.params, item.label
        assert (item.params["price_shape"], item.params["illustrative_price"]) == ("VM.GPU.A10.1", "true")


# ------------------------------------------------------------------------------------------- links


def test_links_point_at_the_ui_the_user_started() -> None:
    server = "https://alice:secret@mlflow.example.com:8443/"
    assert ui_base(server) == "https://mlflow.example.com:8443"  # credentials never printed
    assert ui_base(server, ui_url="http://127.0.0.1:8080/") == "http://127.0.0.1:8080"
    assert ui_base("sqlite:///mlflow.db") == "http://127.0.0.1:5000"
    assert ui_base("sqlite:///mlflow.db", ui_port="5077") == "http://127.0.0.1:5077"
    lines = link_lines("http://127.0.0.1:5000", "7", "abc")
    assert lines == [  # each named for the page it opens: no "answer" where the report has no pair
        "the report run: http://127.0.0.1:5000/#/experiments/7/runs/abc?workflowType=machine_learning",
        "the runs list: http://127.0.0.1:5000/#/experiments/7/runs?workflowType=machine_learning",
    ]


def test_a_store_without_a_server_says_to_start_make_ui(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "Makefile").write_text("ui:\n")
    lines = link_lines("sqlite:///mlflow.db", "1", None)
    assert (
        lines[0] == "the runs list: http://127.0.0.1:5000/#/experiments/1/runs?workflowType=machine_learning"
    )
    assert lines[1].startswith("  (start the UI first: make ui")
    assert len(link_lines("sqlite:///mlflow.db", "1", None, ui_url="http://tunnel:9000")) == 1


def test_make_help_prints_addresses_not_make_syntax(repo_root) -> None:
    out = subprocess.run(["make", "-s", "help"], cwd=repo_root, capture_output=True, text=True, check=True)
    assert "docker-up" in out.stdout and "$" not in out.stdout
    lines = out.stdout.splitlines()
    rows = {line.split()[0]: line for line in lines}
    assert len(rows) == len(lines), "each target once"
    # issue 41: the port the printed links name, and what the demo prints (links, not a path)
    assert "MLFLOW_UI_PORT" in rows["ui"]
    assert "links" in rows["demo"] and "path" not in rows["demo"]


# ------------------------------------------------------------------------------------------- report


def cpu_gpu(price_source: str = "illustrative") -> list:
    runs = [
        priced_run("cpu", 12.0, 1.0, params={"lr": "0.02"}),
        priced_run("cuda:0", 1.0, 1.0, params={"lr": "0.02"}),
    ]
    for r in runs:
        r.tags["devicebench.price.source"] = price_source
    return runs


def test_the_report_run_is_named_for_its_answer() -> None:
    comp = compare(cpu_gpu())
    assert report_name(comp, "demo") == "report · demo · 1 CPU/GPU pair · best 12.0×"
    alone = compare(
        [priced_run("cpu", 12.0, 1.0), priced_run("cpu", 11.0, 1.0, key="k2", params={"width": "2"})]
    )
    assert report_name(alone, "devicebench-demo") == "report · devicebench-demo · 2 runs · no CPU/GPU pair"


def test_the_description_holds_verdicts_and_key_metrics_and_never_says_do_the_impossible() -> None:
    comp = compare(cpu_gpu())
    note = summary_note(judge(comp), "read 2 runs from 1 experiment: x (2)", metrics=headline_metrics(comp))
    # the answer first (issue 55: who is faster, by how much, what it costs, the verdict), then the metrics
    assert note.startswith(
        "**cifar · bs 128 · lr 0.02: cuda:0 (A10) is 12.0× faster than cpu (EPYC)**; cost per epoch: "
    )
    assert "`speedup/best` = 12" in note and "`cost_ratio/" in note and "`pairs`" not in note
    assert note.index("; verdict: ") < note.index("`speedup/best`")
    alone = compare([priced_run("cpu", 12.0, 1.0)])
    text = summary_note(judge(alone), "read 1 run from 1 experiment: x (1)")
    assert "No CPU/GPU pair yet" in text and "another --device" not in text


def test_illustrative_prices_say_so_in_tables_and_verdicts() -> None:
    comp = compare(cpu_gpu())
    (pair,) = comp.pairs
    assert explain(pair)[0].endswith("(illustrative prices, not real ones)")
    md = to_markdown(build_doc(judge(comp), {}, {}))
    assert "$1.00 (illustrative)" in md and "(override)" not in md
    assert "epochs per USD (illustrative price)" in md and ", illustrative)" in md
    real = compare(cpu_gpu("override"))
    assert "illustrative" not in to_markdown(build_doc(judge(real), {}, {}))


def test_configs_are_labelled_by_what_differs_never_by_a_bare_hash() -> None:
    one = compare(
        [priced_run("cpu", 12.0, 1.0, key="33791aa0831504f7", params={"lr": "0.02", "batch_size": "32"})]
    )
    (side,) = one.all_sides
    assert describe(side, varying_params(one.all_sides)) == "cifar · bs 32 · lr 0.02"  # epochs 2: default
    md = to_markdown(build_doc(judge(one), {}, {}))
    assert "33791aa0831504f7" not in md.split("## Runs without a partner device")[1]
    header = next(ln for ln in md.splitlines() if ln.startswith("| config | device | time |"))
    assert "config key" not in header and "what is timed" in header
    assert "| training, all epochs |" in md


def test_report_tables_are_narrow_enough_for_the_artifact_view() -> None:
    """MLflow's artifact view shows report.md without sideways scrolling up to about 7 columns; the
    verdicts, sentences, are a list under the tables."""
    comp = compare([*cpu_gpu(), *(priced_run(d, 3.0, 1.0, "k2", {"width": "2"}) for d in ("cpu", "cuda:0"))])
    md = to_markdown(build_doc(judge(comp), {}, {}))
    widths = [ln.count("|") - 1 for ln in md.splitlines() if ln.startswith("|")]
    assert widths and max(widths) <= 7
    assert "| verdict |" not in md and "| what is timed |" in md
    assert "- cifar · w 2: cuda:0 (A10) over cpu (EPYC)" in md and "\n  - one run on a side:" in md


def test_speedups_metric_is_finite_for_the_pair() -> None:
    m = headline_metrics(compare(cpu_gpu()))
    assert math.isclose(m["speedup/best"], 12.0)


def test_the_key_shows_only_where_two_configs_would_share_a_label() -> None:
    """Runs of two configs that logged the same params (an older version's key, say) are told apart."""
    a = priced_run("cpu", 12.0, 1.0, key="aaaa1111", params={"lr": "0.02"})
    b = priced_run("cpu", 11.0, 1.0, key="bbbb2222", params={"lr": "0.02"})
    c = priced_run("cpu", 10.0, 1.0, key="cccc3333", params={"lr": "0.5"})
    comp = compare([a, b, c])
    varying = varying_params(comp.all_sides)
    labels = sorted(describe(s, varying) for s in comp.all_sides)
    assert labels == ["cifar · lr 0.02 (key aaaa1111)", "cifar · lr 0.02 (key bbbb2222)", "cifar · lr 0.5"]


def test_a_cpu_config_without_a_gpu_points_to_tune_until_a_tuned_run_of_its_work_exists() -> None:
    """The no-GPU demo never pointed to `tune`, the clearest answer a host without a GPU has."""
    from test_report_logic import rec, train

    from devicebench.report.render.answer import answers

    work = {"devicebench.work_key": "w-hint"}
    plain = rec("cpu", key="k-hint", metrics=train(2.0), tags=work)
    hint = "next: devicebench tune cifar with its run's flags measures this CPU at its best"
    judged = judge(compare([plain]))
    ((_, lines),) = answers(judged, lambda s: s.config_key)
    assert lines[-1] == hint, lines
    tuned = rec("cpu", key="k-hint-tuned", metrics=train(1.0), tags={**work, "devicebench.tuned": "true"})
    judged = judge(compare([plain, tuned]))
    assert not any(hint in line for _, said in answers(judged, lambda s: s.config_key) for line in said)
