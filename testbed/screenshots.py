"""`make screenshots`: the README's pictures, taken by headless Chromium from a real `mlflow ui`.

It runs the demo plan into a fresh embedded store (or reads the store given with --store), starts a real
MLflow server on it on 127.0.0.1, and opens the pages a newcomer opens, by the links the demo printed
(the report run and the runs list, in the UI's machine-learning view), plus a cifar run and the
report.html the report run carries. For each it checks what a person sees *before scrolling*: the
texts it must show are looked up in the rendered page (Chromium's DevTools protocol: the DOM after the
UI's scripts ran, with each text's position) and must lie within the first screen, 1440×900, nothing
scrolled (a cifar run's one-line description included); report.html is opened 625 px wide, as the UI's
artifact view shows it, and nothing on it may be wider than that. Only then does it write a PNG to
docs/. A page that lost its answer fails the command, naming every check it failed, instead of
producing a picture of an empty page. It ends with the date and host each README caption names.

The H100 picture (docs/h100-demo-report.png) is the report.html a real GPU host wrote
(docs/evidence/h100-2026-11-24-demo/, `--evidence DIR` names another), shot as it is.

Needs Debian's `chromium` (`apt-get install chromium`); `--chromium PATH` names another build; and
websocket-client (installed with the dev extras) to speak DevTools.
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.mlflow_server import VENV_BIN, MlflowServer

ROOT = Path(__file__).resolve().parents[1]
DEMO_EXPERIMENT = "devicebench-demo"
WIDTH, HEIGHT = 1440, 900  # a laptop's browser window; nothing is scrolled before a check or a picture
ARTIFACT_WIDTH = 625  # the frame MLflow's artifact view gives report.html in a 1440-wide window
EVIDENCE = ROOT / "docs" / "evidence" / "h100-2026-11-24-demo"
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",  # root in a container: Chromium's sandbox needs user namespaces
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    f"--window-size={WIDTH},{HEIGHT}",
)

# For each text: is it rendered, and where (the top of its first visible occurrence, in CSS pixels)?
FIND = """
(texts) => texts.map((t) => {
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  let best = null;
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const i = n.textContent.indexOf(t);
    if (i < 0) continue;
    const r = document.createRange();
    r.setStart(n, i);
    r.setEnd(n, i + t.length);
    const box = r.getBoundingClientRect();
    if (box.width === 0 && box.height === 0) continue;
    if (best === null || box.top < best) best = box.top;
  }
  return best;
})
"""

# How wide the page is laid out: wider than its window means a horizontal scroll bar, cut tables
SCROLL_WIDTH = "Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)"


@dataclass(frozen=True)
class Page:
    name: str  # docs/<name>.png
    url: str
    first_screen: tuple[str, ...]  # texts that must be visible without scrolling
    anywhere: tuple[str, ...] = ()  # texts that must be on the page (below the fold is fine)
    width: int = WIDTH  # the window's width; the page must fit it (no horizontal scrolling)


class DevTools:
    """One headless Chromium and one page, spoken to over the DevTools protocol."""

    def __init__(self, binary: str, profile: Path) -> None:
        import websocket  # websocket-client, a dev extra (via kubernetes)

        self.proc = subprocess.Popen(
            [
                binary,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                "--remote-debugging-port=0",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.is_file() or not port_file.read_text().strip():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit("screenshots: chromium did not open its DevTools port")
            time.sleep(0.2)
        port = port_file.read_text().split()[0]
        targets = json.loads(_get(f"http://127.0.0.1:{port}/json/list"))
        page = next(t for t in targets if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=60)
        self.ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        mid = next(self.ids)
        self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == mid:
                if "error" in msg:
                    raise SystemExit(f"screenshots: {method}: {msg['error']}")
                return msg.get("result", {})

    def evaluate(self, expression: str) -> Any:
        out = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return out.get("result", {}).get("value")

    def tops(self, texts: tuple[str, ...]) -> list[float | None]:
        return self.evaluate(f"({FIND})({json.dumps(list(texts))})")

    def close(self) -> None:
        self.ws.close()
        self.proc.terminate()
        self.proc.wait(10)


def _get(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def check_and_shoot(tools: DevTools, page: Page, out_dir: Path, wait_s: float = 60.0) -> Path:
    """Open the page, wait until its texts are rendered, fail naming those not on the first screen
    (or not on the page) and a page wider than its window; else write its PNG, as it first shows."""
    tools.call(
        "Emulation.setDeviceMetricsOverride",
        width=page.width,
        height=HEIGHT,
        deviceScaleFactor=1,
        mobile=False,
    )
    tools.call("Page.navigate", url=page.url)
    texts = page.first_screen + page.anywhere
    deadline = time.monotonic() + wait_s
    while True:
        time.sleep(1.0)
        tops = tools.tops(texts)
        if all(t is not None for t in tops) or time.monotonic() > deadline:
            break
    time.sleep(1.0)  # late layout (fonts, charts) settles
    tops = tools.tops(texts)
    missing = [t for t, top in zip(texts, tops, strict=True) if top is None]
    below = [t for t, top in zip(page.first_screen, tops, strict=False) if top is not None and top >= HEIGHT]
    wide = tools.evaluate(SCROLL_WIDTH)
    if missing or below or wide > page.width:
        raise SystemExit(
            f"screenshots: {page.name} ({page.url}): not on the page: {missing}; "
            f"below the first {page.width}x{HEIGHT} screen: {below}; laid out {wide} px wide in {page.width}"
        )
    shot = tools.call("Page.captureScreenshot", format="png")
    target = out_dir / f"{page.name}.png"
    target.write_bytes(base64.b64decode(shot["data"]))
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
    """The pages, found through the server's API; the report run and the runs list by the links
    `devicebench.report.links` builds, the very ones the demo prints."""
    from mlflow.tracking import MlflowClient

    from devicebench.report.links import run_url, runs_list_url

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
    eid, note = exp.experiment_id, report.data.tags["mlflow.note.content"]
    verdict = re.sub(r"[*_`]", "", note.splitlines()[0]).split(":")[0]  # its first verdict, as rendered
    cifar_line = cifar.data.tags["mlflow.note.content"]
    return [
        Page("ui-runs", runs_list_url(server.url, eid), (suite.info.run_name, report.info.run_name)),
        # the printed link: the report run, its name, its verdict and its metrics before any scrolling
        Page(
            "ui-report-run",
            run_url(server.url, eid, report.info.run_id),
            (report.info.run_name, verdict, "Description"),
            anywhere=("report.html",),
        ),
        # a workload run leads with its figures: its one-line description on the first screen
        Page(
            "ui-cifar-run",
            run_url(server.url, eid, cifar.info.run_id),
            (cifar.info.run_name, cifar_line),
            anywhere=("at_a_glance/train_s",),
        ),
        # as the report run's Artifacts tab frames it
        Page(
            "report",
            html.as_uri(),
            ("devicebench compare", " ran: ", "verdict: ", "illustrative"),  # the answer, per config
            anywhere=("what is timed",),
            width=ARTIFACT_WIDTH,
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m testbed.screenshots", description=__doc__)
    p.add_argument("--store", help="an existing sqlite:/// store holding a demo (default: run the demo)")
    p.add_argument("--out", type=Path, default=ROOT / "docs", help="where the PNGs go (default: docs/)")
    p.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser"))
    p.add_argument("--evidence", type=Path, default=EVIDENCE, help="a GPU host's demo report folder")
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
        tools = DevTools(args.chromium, work / "profile")
        try:
            shots = pages(server, work)
            gpu = args.evidence / "report.html"
            if gpu.is_file():  # a real CPU-vs-GPU answer: pairs, verdicts, costs
                shots.append(Page("h100-demo-report", gpu.as_uri(), ("Speedups", "cuda:0 (NVIDIA H100")))
            failed = shoot_all(tools, shots, args.out)
        finally:
            tools.close()
            server.stop()
    print(f"taken {taken_on()}: the caption under each picture but the H100's (README.md)")
    return 1 if failed else 0


def shoot_all(tools: DevTools, shots: list[Page], out: Path) -> int:
    """Every page checked (and shot where it passes), so one run names every failed check; how many failed."""
    failed = 0
    for page in shots:
        try:
            print(f"{page.name}: {check_and_shoot(tools, page, out)}")
        except SystemExit as e:  # its checks failed: no picture, the old one stays
            print(e, file=sys.stderr)
            failed += 1
    return failed


def taken_on() -> str:
    """The date and host a README caption names: the timings in a picture are this machine's, today's."""
    cpuinfo = Path("/proc/cpuinfo")
    models = [
        ln.split(":", 1)[1].strip()
        for ln in (cpuinfo.read_text() if cpuinfo.is_file() else "").splitlines()
        if ln.startswith("model name")
    ]
    cpu = models[0] if models else (platform.processor() or "an unknown CPU")
    load = os.getloadavg()[0]
    return f"{time.strftime('%Y-%m-%d')} on {socket.gethostname()}, {os.cpu_count()} CPUs ({cpu}), load {load:.1f}"


if __name__ == "__main__":
    sys.exit(main())
