"""`make screenshots`: the README's pictures, taken by headless Chromium from a real `mlflow ui`.

It runs the demo plan into a fresh embedded store (or reads the store given with --store), starts a real
MLflow server on it on 127.0.0.1, and for each page a newcomer looks at -- the runs list, a cifar run,
the report run's overview, and the report.html the report run carries -- first checks that the page
shows what it must (Chromium's DOM after the UI's scripts ran), then writes a PNG to docs/. A page that
lost its answer fails the command instead of producing a picture of an empty page.

Needs Debian's `chromium` (`apt-get install chromium`); `--chromium PATH` names another build.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from testbed.mlflow_server import VENV_BIN, MlflowServer

ROOT = Path(__file__).resolve().parents[1]
DEMO_EXPERIMENT = "devicebench-demo"
WINDOW = "1440,1000"


@dataclass(frozen=True)
class Page:
    name: str  # docs/<name>.png
    url: str
    must_show: tuple[str, ...]  # texts the rendered page must contain


def chromium(binary: str, url: str, *args: str, budget_ms: int = 20000) -> subprocess.CompletedProcess:
    """One headless Chromium call on a page, after its scripts had `budget_ms` of virtual time."""
    cmd = [
        binary,
        "--headless=new",
        "--no-sandbox",  # root in a container: Chromium's sandbox needs user namespaces
        "--disable-gpu",
        "--hide-scrollbars",
        f"--window-size={WINDOW}",
        f"--virtual-time-budget={budget_ms}",
        *args,
        url,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def check_and_shoot(binary: str, page: Page, out_dir: Path) -> Path:
    """Fail with the missing texts when the page does not show its answer; else write its PNG."""
    dom = chromium(binary, page.url, "--dump-dom").stdout
    missing = [text for text in page.must_show if text not in dom]
    if missing:
        raise SystemExit(f"screenshots: {page.name} ({page.url}) does not show {missing}")
    target = out_dir / f"{page.name}.png"
    shot = chromium(binary, page.url, f"--screenshot={target}")
    if not target.is_file():
        raise SystemExit(f"screenshots: no picture of {page.name}: {shot.stderr[-500:]}")
    return target


def run_demo(work: Path) -> str:
    """The demo plan into a fresh embedded store under `work`; returns the store's URI."""
    uri = f"sqlite:///{work / 'mlflow.db'}"
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "DEVICEBENCH_DOTENV": "none"}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    demo = [str(VENV_BIN / "devicebench"), "suite", str(ROOT / "experiments" / "demo.yaml")]
    subprocess.run(demo, env=env, cwd=work, check=True, timeout=600)
    return uri


def pages(server: MlflowServer, work: Path) -> list[Page]:
    """The four pages, found through the server's API the way the UI finds them."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(server.url)
    exp = client.get_experiment_by_name(DEMO_EXPERIMENT)
    if exp is None:
        raise SystemExit(f"screenshots: the store has no experiment {DEMO_EXPERIMENT!r}; run the demo first")
    runs = client.search_runs([exp.experiment_id], order_by=["attributes.start_time DESC"])
    by_workload = {}
    for r in runs:  # newest first: the latest demo's runs win
        key = (r.data.tags.get("devicebench.workload"), r.data.tags.get("devicebench.device"))
        by_workload.setdefault(key, r)
    cifar, report = by_workload[("cifar", "cpu")], by_workload[("report", None)]
    suite = by_workload[("suite", None)]  # the list shows a plan's runs folded under their parent run
    html = Path(client.download_artifacts(report.info.run_id, "report.html", str(work)))
    base = f"{server.url}/#/experiments/{exp.experiment_id}"
    return [
        Page("ui-runs", f"{base}/runs", (suite.info.run_name, report.info.run_name)),
        Page("ui-cifar-run", f"{base}/runs/{cifar.info.run_id}", (cifar.info.run_name, "eval/accuracy")),
        # the run's description: the verdicts, the pairs, where the full report is
        Page("ui-report-run", f"{base}/runs/{report.info.run_id}", ("pairs", "report.html")),
        Page("report", html.as_uri(), ("Speedups", "Price-performance")),
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m testbed.screenshots", description=__doc__)
    p.add_argument("--store", help="an existing sqlite:/// store holding a demo (default: run the demo)")
    p.add_argument("--out", type=Path, default=ROOT / "docs", help="where the PNGs go (default: docs/)")
    p.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser"))
    args = p.parse_args(argv)
    if not args.chromium:
        print("screenshots: no chromium found; apt-get install chromium, or --chromium PATH", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="devicebench-shots-") as tmp:
        work = Path(tmp)
        uri = args.store or run_demo(work)
        server = MlflowServer(uri, work / "artifacts", log_path=work / "server.log")
        server.start()
        try:
            for page in pages(server, work):
                print(f"{page.name}: {check_and_shoot(args.chromium, page, args.out)}")
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
