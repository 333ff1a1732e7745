"""The compose stack as shipped (docker/compose.yaml: its environment, volumes, users, healthchecks and
the server's entrypoint script), run by Debian's compose v1 on the host network only.

What differs from a user's `make docker-up`, and why, is all in `override()`: every service on the host
network (these machines' rule), the server on a free loopback port (the host network is shared), the
compose names `postgres` and `mlflow` pointed at 127.0.0.1, and PostgreSQL the host's own on a scratch
database. compose v1 refuses the file's top-level `name:`, so the copy it reads gives the name as -p."""

from __future__ import annotations

import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testbed.containers.engine import Engine, tail

ROOT = Path(__file__).resolve().parents[2]
SERVER_IMAGE = "devicebench-mlflow:test-containers"
TRAINER_IMAGE = "devicebench-trainer:test-containers"
ADMIN = "admin"


def v1_copy(dest: Path) -> str:
    """docker/compose.yaml as compose v1 on the host network takes it: without the top-level `name:` (v1
    refuses the key; it becomes -p) and without `ports:` (Docker refuses port bindings on the host network,
    where the server's own port is what is reached). The project name."""
    config = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())  # merge keys resolved
    name = str(config.pop("name", "devicebench"))
    for service in config["services"].values():
        service.pop("ports", None)
    dest.write_text(yaml.safe_dump(config, sort_keys=False))
    return name


def override(port: int) -> dict[str, Any]:
    host_only = {"network_mode": "host"}
    return {
        "services": {
            "postgres": {**host_only},
            "mlflow": {
                **host_only,
                "image": SERVER_IMAGE,
                "extra_hosts": ["postgres:127.0.0.1"],
                # compose's MLFLOW_HOST=0.0.0.0 is for a network of the container's own; on the shared
                # host network the server stays on loopback.
                "environment": {"MLFLOW_PORT": str(port), "MLFLOW_HOST": "127.0.0.1"},
            },
            "trainer": {**host_only, "extra_hosts": ["mlflow:127.0.0.1"], "image": TRAINER_IMAGE},
            # The trainer image built here (torch's CUDA wheels: the only torch 2.14.1 on this host).
            "trainer-cpu": {**host_only, "extra_hosts": ["mlflow:127.0.0.1"], "image": TRAINER_IMAGE},
        }
    }


def host_network_only(config: dict[str, Any]) -> None:
    """Refuse a compose config that would make a network: any service off the host network, any network."""
    if config.get("networks"):
        raise RuntimeError(f"the compose config defines networks {sorted(config['networks'])}: refused")
    for name, service in config.get("services", {}).items():
        if service.get("network_mode") != "host" or service.get("networks"):
            raise RuntimeError(f"compose service {name!r} is not on the host network only: refused")


def compose_program() -> list[str]:
    """Debian's compose v1 where installed (what this test runs here), else the docker CLI's compose plugin."""
    return ["docker-compose"] if shutil.which("docker-compose") else ["docker", "compose"]


@dataclass
class Stack:
    engine: Engine
    work: Path
    port: int
    database: str
    project: str = ""
    password: str = ""

    def write(self) -> None:
        """The v1 copy, the override and the .env the stack runs with; checked before anything starts."""
        self.project = v1_copy(self.work / "compose.yaml") + "-test"
        (self.work / "override.yaml").write_text(yaml.safe_dump(override(self.port)))
        self.password = secrets.token_hex(16)
        settings = {
            "POSTGRES_USER": "postgres",
            "POSTGRES_PASSWORD": secrets.token_hex(12),  # the host's PostgreSQL trusts loopback
            "POSTGRES_DB": self.database,
            "MLFLOW_PORT": str(self.port),
            "MLFLOW_WORKERS": "1",
            "TRAINER_TRACKING_URI": f"http://mlflow:{self.port}",
            "MLFLOW_AUTH": "true",
            "MLFLOW_AUTH_ADMIN_USERNAME": ADMIN,
            "MLFLOW_AUTH_ADMIN_PASSWORD": self.password,
            "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(32),
            "MLFLOW_TRACKING_USERNAME": ADMIN,
            "MLFLOW_TRACKING_PASSWORD": self.password,
        }
        (self.work / ".env").write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        config = yaml.safe_load(self.compose("--profile", "cpu", "--profile", "gpu", "config").stdout)
        host_network_only(config)

    def command(self, *args: str) -> list[str]:
        return [
            *compose_program(),
            "--ansi",
            "never",
            "-p",
            self.project,
            "--env-file",
            str(self.work / ".env"),
            "-f",
            str(self.work / "compose.yaml"),
            "-f",
            str(self.work / "override.yaml"),
            *args,
        ]

    def compose(
        self, *args: str, check: bool = True, timeout: float = 900
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            self.command(*args), env=self.engine.env, capture_output=True, text=True, timeout=timeout
        )
        if check and proc.returncode != 0:
            raise RuntimeError(
                f"docker-compose {' '.join(args[:4])}: exit {proc.returncode}: {tail(proc.stderr + proc.stdout, 12)}"
            )
        return proc

    def run_argv(self, service: str, *args: str, env: dict[str, str] | None = None) -> list[str]:
        """`compose --profile cpu run --rm SERVICE ARGS` (as the README says), the stack already up."""
        extra = [f"-e{k}={v}" for k, v in (env or {}).items()]
        return ["--profile", "cpu", "run", "--rm", "--no-deps", "-T", *extra, service, *args]

    def trainer(
        self, *args: str, env: dict[str, str] | None = None, check: bool = True, timeout: float = 900
    ) -> subprocess.CompletedProcess[str]:
        return self.compose(*self.run_argv("trainer-cpu", *args, env=env), check=check, timeout=timeout)

    def popen_trainer(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        argv = self.run_argv("trainer-cpu", *args, env=env)
        return subprocess.Popen(
            self.command(*argv),
            env=self.engine.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def server_container(self) -> str:
        return self.compose("ps", "-q", "mlflow").stdout.strip()

    def wait_healthy(self, timeout: float = 300) -> float:
        """Seconds until the server container's healthcheck says healthy."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            cid = self.server_container()
            state = self.engine.docker(
                "inspect", "-f", "{{.State.Status}} {{.State.Health.Status}}", cid, check=False
            ).stdout.split()
            if state[-1:] == ["healthy"]:
                return time.monotonic() - start
            if state[:1] in (["exited"], ["dead"]):
                break
            time.sleep(2)
        logs = self.compose("logs", "--tail", "20", "mlflow", check=False).stdout
        raise RuntimeError(f"the server container did not turn healthy in {timeout:.0f} s: {tail(logs, 12)}")
