"""A real cifar run whose tracking server is killed mid-training, during its evaluation and while it
logs its model: each ends by itself soon after its work, into its spool (exit 3), and `sync` after the
server is back delivers every point exactly once.

The three runs go at once, each against its own real `mlflow server` (SQLite), so the module costs one
run's time. Each kill is triggered by what the run has sent to its store, never by a clock: a loss point
(mid-training, two epochs to go), the last epoch's loss (evaluation next), the evaluation's accuracy
(tables, the confusion figure and the model next). What the store held before the sync shows the kill
came in the phase it was meant for.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient
from test_faults import FAST, _journal_snapshot, error_lines, metric_counts

from devicebench.schema import ACCURACY, EPOCH_LOSS, TRAIN_LOSS, TRAIN_S
from servers import MlflowServer, devicebench_env, run_cli
from zygote import shared

pytestmark = pytest.mark.e2e  # servers killed and restarted under running commands: `make test-e2e`

EPOCHS = 3
CIFAR = [
    "cifar", "--data", "synthetic", "--epochs", str(EPOCHS), "--batch_size", "8", "--log_every", "25",
    "--train_limit", "1600", "--test_limit", "6000", "--loader", "tensor",
]  # fmt: skip
FINAL_FLUSH_S = 15  # the default is 60; after it the run gives up, spooled (one flush per wait on the
# store, the old fault, would take 3 x 15 s: over the bound below)
ONE_TRY_S = 15  # the sender's last try: its backoff (at most 5 s) and one request (the store timeout, 3 s)


def _has(key: str, points: int = 1) -> Callable[[MlflowClient, str], bool]:
    return lambda client, run_id: len(client.get_metric_history(run_id, key)) >= points


MOMENTS: dict[str, Callable[[MlflowClient, str], bool]] = {
    "mid-training": _has(TRAIN_LOSS),
    "during evaluation": _has(EPOCH_LOSS, EPOCHS),
    "while logging the model": _has(ACCURACY),
}


@dataclass
class Outage:
    moment: str
    rc: int | None = None
    err: str = ""
    kill_to_exit_s: float = 0.0
    train_s: float = 0.0
    before_sync: dict[str, int] = field(default_factory=dict)
    journal: dict[str, Any] = field(default_factory=dict)
    after_sync: list[dict[str, int]] = field(default_factory=list)
    sync_out: list[str] = field(default_factory=list)


def _run_id(client: MlflowClient, experiment: str) -> str | None:
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id]) if exp else []
    return runs[0].info.run_id if runs else None


def _one(moment: str, root: Path) -> Outage:
    """A server, a run killed at `moment`, the server back, two syncs."""
    out = Outage(moment)
    d = root / moment.replace(" ", "-")
    d.mkdir()
    server = MlflowServer.in_folder(d)
    server.start()
    try:
        experiment = f"outage-{d.name}"
        env = devicebench_env(
            server.url,
            **{
                **FAST,
                "DEVICEBENCH_FLUSH_INTERVAL_S": "0.1",
                "DEVICEBENCH_FINAL_FLUSH_S": str(FINAL_FLUSH_S),
            },
        )
        env.update(DEVICEBENCH_EXPERIMENT=experiment, DEVICEBENCH_SPOOL_DIR=str(d / "spool"))
        proc = shared().start(CIFAR, env, d)
        client = MlflowClient(server.url)
        deadline = time.monotonic() + 120
        run_id = None
        while proc.poll() is None and time.monotonic() < deadline:
            run_id = run_id or _run_id(client, experiment)
            if run_id and MOMENTS[moment](client, run_id):
                break
            time.sleep(0.2)  # each look is two requests to a server the other two runs share a core with
        assert run_id and proc.poll() is None, f"{moment}: the run ended before the kill"
        out.before_sync = {k: len(client.get_metric_history(run_id, k)) for k in (EPOCH_LOSS, ACCURACY)}
        server.stop()
        killed = time.monotonic()
        _, out.err = proc.communicate(timeout=240)
        out.rc, out.kill_to_exit_s = proc.returncode, time.monotonic() - killed
        out.journal = _journal_snapshot(d / "spool")
        out.train_s = max(
            (v for op in _ops(out.journal) for k, v in op.get("values", {}).items() if k == TRAIN_S),
            default=0,
        )
        server.start()
        sync_env = devicebench_env(server.url, DEVICEBENCH_SPOOL_DIR=str(d / "spool"))
        for _ in range(2):
            done = run_cli(["sync"], sync_env, cwd=d, timeout_s=120)
            out.sync_out.append(f"{done.returncode}: {done.stdout.strip()} {done.stderr.strip()}")
            out.after_sync.append(dict(metric_counts(client, run_id)))
        return out
    finally:
        server.stop()


def _ops(journal: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (journal["dir"] / "ops.jsonl").read_text().splitlines() if x.strip()]


@pytest.fixture(scope="module")
def outages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Outage]]:
    root = tmp_path_factory.mktemp("outage-mid-run")
    with ThreadPoolExecutor(len(MOMENTS)) as pool:
        done = dict(zip(MOMENTS, pool.map(lambda m: _one(m, root), MOMENTS), strict=True))
    yield done


@pytest.mark.timeout(420)
@pytest.mark.parametrize("moment", list(MOMENTS))
def test_a_run_outlives_its_server_and_sync_delivers_each_point_once(
    outages: dict[str, Outage], moment: str
) -> None:
    o = outages[moment]
    assert o.rc == 3, o.err
    (line,) = error_lines(o.err)
    assert "spooled to" in line and "devicebench sync" in line, line
    # the work left plus the final flush counted from the outage, never one final flush per wait on the
    # store (a model's upload, the end's drain, the close: three before, a hang to the plan's time limit)
    bound = o.train_s + FINAL_FLUSH_S + ONE_TRY_S
    assert o.kill_to_exit_s < bound, f"{o.kill_to_exit_s:.1f} s after the kill, over {bound:.1f} s"
    if moment == "mid-training":
        assert o.before_sync[EPOCH_LOSS] < EPOCHS
    elif moment == "during evaluation":
        assert o.before_sync[ACCURACY] == 0
    else:
        assert o.journal["kinds"]["model"] == 1, "the model was not spooled: the kill came after it"
    assert o.journal["ends"] == ["FINISHED"]
    first, second = o.after_sync
    assert first == dict(o.journal["points"]), f"a point lost or sent twice: {o.sync_out}"
    assert "1 run(s) replayed, 0 still pending" in o.sync_out[0] and o.sync_out[0].startswith("0:"), (
        o.sync_out
    )
    assert second == first and "0 run(s) replayed" in o.sync_out[1], o.sync_out
    print(
        f"\n{moment}: ended {o.kill_to_exit_s:.1f} s after the kill (training {o.train_s:.1f} s), "
        f"{sum(first.values())} points delivered once ({first.get(TRAIN_LOSS, 0)} {TRAIN_LOSS})"
    )
