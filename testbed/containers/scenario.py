"""The end-to-end steps: stand-ins, builds, the stack up, and what the issue asks of it."""

from __future__ import annotations

import secrets
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psycopg2

from testbed.containers import standins, verify
from testbed.containers.engine import Engine
from testbed.containers.stack import SERVER_IMAGE, TRAINER_IMAGE, Stack, compose_program
from testbed.containers.steps import Steps

ROOT = Path(__file__).resolve().parents[2]
TORCH = "as the Dockerfile pins it (its CUDA wheels where the wheelhouse has no CPU build)"
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


def prepare_images(steps: Steps, engine: Engine, scratch: Path, cleanup: ExitStack) -> None:
    """Base image (a stand-in where the engine is ours), the wheelhouse on loopback, both builds."""
    base = standins.base_image(ROOT / "docker" / "server.Dockerfile")
    with steps.step(f"base image {base}"):
        have = engine.docker("image", "inspect", base, check=False).returncode == 0
        if have or not engine.private:
            steps.say(
                f"{base}: {'already in the engine' if have else 'pulled by the build from your registry'}"
            )
        else:
            steps.figures.append(f"stand-in: {standins.make_python_standin(engine, base, scratch)}")
            steps.say(steps.figures[-1])
    with steps.step("wheelhouse (make docker-wheelhouse) served on 127.0.0.1"):
        standins.build_wheelhouse(scratch / "wheelhouse")
        server, url = standins.serve(scratch / "wheelhouse")
        cleanup.callback(server.kill)
        steps.say(f"{len(list((scratch / 'wheelhouse').glob('*.whl')))} wheels at {url}")
    for dockerfile, tag in (("server.Dockerfile", SERVER_IMAGE), ("trainer.Dockerfile", TRAINER_IMAGE)):
        with steps.step(f"build docker/{dockerfile}"):
            start = time.monotonic()
            engine.docker(
                "build",
                "--network",
                "host",
                "--pull=false",
                "-f",
                f"docker/{dockerfile}",
                "-t",
                tag,
                "--build-arg",
                f"WHEELHOUSE={url}",
                ".",
                cwd=ROOT,
                timeout=1800,
                env={"DOCKER_BUILDKIT": "1"},
            )
            size = int(engine.docker("image", "inspect", "-f", "{{.Size}}", tag).stdout)
            steps.figures.append(f"{tag}: {size / 1e9:.2f} GB, built in {time.monotonic() - start:.0f} s")
            if dockerfile.startswith("trainer"):
                steps.figures.append(
                    f"{tag} stands in for trainer-cpu's image: torch {TORCH} from the wheelhouse"
                )
            steps.say(steps.figures[-1])
        if not engine.private:
            cleanup.callback(engine.docker, "image", "rm", tag, check=False)


def scratch_database(cleanup: ExitStack) -> str:
    """A database of its own on the host's PostgreSQL, dropped when the test ends."""
    name = f"devicebench_containers_{secrets.token_hex(4)}"
    admin = psycopg2.connect(PG_ADMIN)
    admin.autocommit = True
    admin.cursor().execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        admin.cursor().execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()

    cleanup.callback(drop)
    return name


def start_stack(steps: Steps, engine: Engine, scratch: Path, cleanup: ExitStack) -> Stack:
    with steps.step("compose config on the host network only (PostgreSQL: the host's, a scratch database)"):
        stack = Stack(engine, scratch, standins.free_port(), scratch_database(cleanup))
        stack.write()
        cleanup.callback(
            stack.compose,
            "--profile",
            "cpu",
            "--profile",
            "gpu",
            "down",
            "-v",
            "--remove-orphans",
            check=False,
        )
        steps.figures.append(
            f"stand-in: PostgreSQL is the host's 127.0.0.1:5432 (scratch database {stack.database}), not the "
            f"postgres service's image; compose: {' '.join(compose_program())}, on a copy without name: and ports:"
        )
        steps.say(f"project {stack.project}, server on 127.0.0.1:{stack.port}; {steps.figures[-1]}")
    with steps.step("server refuses to start unauthenticated beyond loopback"):
        for env in ({"MLFLOW_HOST": "0.0.0.0"}, {"MLFLOW_PUBLISHED_ON": "0.0.0.0"}):
            argv = stack.run_argv("mlflow", env={"MLFLOW_AUTH": "false", **env})
            proc = stack.compose(*argv, check=False, timeout=120)
            if proc.returncode != 2 or "beyond loopback" not in proc.stderr + proc.stdout:
                raise AssertionError(
                    f"with {env} and auth off: exit {proc.returncode}: {(proc.stderr + proc.stdout)[-600:]}"
                )
    with steps.step("server container turns healthy (auth on)"):
        stack.compose("up", "-d", "--no-deps", "mlflow")
        steps.figures.append(f"server healthy {stack.wait_healthy():.0f} s after start")
        steps.say(steps.figures[-1])
    return stack


def check_auth(steps: Steps, stack: Stack) -> None:
    with steps.step("anonymous request refused, the trainer's credentials accepted"):
        url = f"http://127.0.0.1:{stack.port}{verify.SEARCH}"
        anonymous, admitted = verify.http_status(url), verify.http_status(url, "admin", stack.password)
        if anonymous != 401 or admitted != 200:
            raise AssertionError(
                f"anonymous: {anonymous} (want 401), with credentials: {admitted} (want 200)"
            )
    with steps.step("trainer runs as uid 10001"):
        proc = stack.compose(
            "--profile", "cpu", "run", "--rm", "--no-deps", "-T", "--entrypoint", "id", "trainer-cpu", "-u"
        )
        if proc.stdout.strip() != "10001":
            raise AssertionError(f"id -u in the trainer: {proc.stdout.strip()!r}")


def run_plan(steps: Steps, stack: Stack, mlflow: Any) -> None:
    with steps.step("trainer: devicebench suite experiments/demo.yaml"):
        start = time.monotonic()
        stack.trainer("suite", "experiments/demo.yaml", timeout=1800)
        steps.figures.append(f"demo plan in the trainer: {time.monotonic() - start:.0f} s")
    with steps.step("the plan's runs in the store: FINISHED, metrics, model through the proxy, report run"):
        found = verify.check_plan_runs(mlflow, "devicebench-demo")
        model = found.pop("models")[0]
        files = verify.model_files(model, str(stack.work / "model"), f"http://127.0.0.1:{stack.port}")
        steps.say(f"{found}, model {model.model_id}: {files} files downloaded through the server")
    with steps.step(f"trainer: devicebench infer --model_uri models:/{model.model_id}"):
        stack.trainer(
            "infer",
            "--model_uri",
            f"models:/{model.model_id}",
            "--requests",
            "100",
            "--batch_sizes",
            "1,2",
            "--warmup",
            "2",
            "--min_time_s",
            "0",
            timeout=900,
        )
        infer = [
            r
            for r in verify.experiment_runs(mlflow, "devicebench")
            if r.data.tags.get("devicebench.workload") == "infer"
        ]
        if not infer or infer[0].info.status != "FINISHED":
            raise AssertionError(f"no FINISHED infer run: {[r.info.status for r in infer]}")
    with steps.step("trainer: devicebench compare writes its report"):
        before = verify.check_plan_runs(mlflow, "devicebench-demo")["report runs"]
        proc = stack.trainer("compare", "--experiment", "devicebench-demo", timeout=900)
        after = verify.check_plan_runs(mlflow, "devicebench-demo")["report runs"]
        if after != before + 1 or "report" not in proc.stdout.lower():
            raise AssertionError(f"report runs {before} -> {after}; output: {proc.stdout[-400:]}")


def run(steps: Steps, engine: Engine, scratch: Path, cleanup: ExitStack) -> None:
    """Every step, in order; what each starts is taken down by `cleanup`."""
    if engine.private:
        with steps.step("the engine lists no bridge network"):
            if "bridge" in engine.note_networks():
                raise AssertionError(f"networks: {engine.networks_seen}")
    prepare_images(steps, engine, scratch, cleanup)
    stack = start_stack(steps, engine, scratch, cleanup)
    mlflow = verify.client(f"http://127.0.0.1:{stack.port}", "admin", stack.password)
    check_auth(steps, stack)
    run_plan(steps, stack, mlflow)
    from testbed.containers.spool import spool_across_restart  # the longest step, in its own module

    spool_across_restart(steps, stack, mlflow)
    if engine.private:
        with steps.step("the engine never listed a bridge network"):
            if "bridge" in engine.note_networks() or "bridge" in engine.networks_seen:
                raise AssertionError(f"networks: {engine.networks_seen}")
    for line in steps.figures:
        steps.say(f"figure: {line}")
