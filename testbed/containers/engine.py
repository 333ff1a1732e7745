"""The container engine `make test-containers` runs on: the user's own (DOCKER_HOST, or a default engine
that answers `docker info`), else, as root on Debian, Debian's docker.io started privately on the host
network only, and stopped by its pid afterwards.

These machines' network rule: nothing may make a bridge or a private-range address, so the private
engine starts with no bridge and no iptables, and every build, run and compose service uses the host's
network (`checks.host_network_only` refuses a compose file that would not)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEBIAN_PACKAGES = ("docker.io", "debootstrap", "docker-compose")
NETWORK_FLAGS = (
    "--bridge=none",
    "--iptables=false",
    "--ip-masq=false",
    "--ip-forward=false",
    "--ip6tables=false",
)
# Debian's docker.io starts a default dockerd (with its 172.17 bridge) from its install script unless this
# says services may not start.
POLICY_RC = Path("/usr/sbin/policy-rc.d")


class Skip(Exception):
    """No engine here and none can be started: said in one line, never a silent pass."""


@dataclass
class Engine:
    """How to reach an engine; `private` when this test started it (and must stop it)."""

    env: dict[str, str]
    what: str
    private: bool = False
    root: Path | None = None
    process: subprocess.Popen[bytes] | None = None
    networks_seen: set[str] = field(default_factory=set)

    def docker(
        self,
        *args: str,
        check: bool = True,
        timeout: float = 600,
        env: dict[str, str] | None = None,
        **kw: Any,
    ) -> subprocess.CompletedProcess[str]:
        """The docker client (Debian's 20.10 one where present: BuildKit without buildx)."""
        run_env = {**self.env, **(env or {})}
        proc = subprocess.run(
            [client(), *args], env=run_env, capture_output=True, text=True, timeout=timeout, **kw
        )
        if check and proc.returncode != 0:
            raise RuntimeError(
                f"docker {' '.join(args[:3])}: exit {proc.returncode}: {tail(proc.stderr or proc.stdout)}"
            )
        return proc

    def note_networks(self) -> set[str]:
        """The engine's network drivers now; every look is kept, to say afterwards none was a bridge."""
        drivers = set(self.docker("network", "ls", "--format", "{{.Driver}}").stdout.split())
        self.networks_seen |= drivers
        return drivers


def tail(text: str, lines: int = 8) -> str:
    return " | ".join(text.strip().splitlines()[-lines:])


def client() -> str:
    for path in ("/usr/bin/docker", shutil.which("docker") or ""):
        if path and os.access(path, os.X_OK):
            return path
    raise Skip("no docker client on PATH")


def existing_engine() -> Engine | None:
    """The user's engine when one answers: DOCKER_HOST's, or the default socket's."""
    if not shutil.which("docker") and not os.access("/usr/bin/docker", os.X_OK):
        return None
    env = dict(os.environ)
    probe = subprocess.run(
        [client(), "info", "--format", "{{.ServerVersion}}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    if probe.returncode != 0:
        return None
    where = env.get("DOCKER_HOST", "the default socket")
    return Engine(env=env, what=f"your engine ({where}, dockerd {probe.stdout.strip()})")


def can_start_private() -> str | None:
    """Why a private engine cannot be started here, or None when it can."""
    if os.geteuid() != 0:
        return "not root"
    if not Path("/etc/debian_version").exists():
        return "not Debian"
    return None


def install_debian_engine() -> list[str]:
    """Debian's engine and tools, without starting Debian's default dockerd; what was installed."""
    missing = [
        p for p in DEBIAN_PACKAGES if subprocess.run(["dpkg", "-s", p], capture_output=True).returncode != 0
    ]
    if not missing:
        return []
    if not POLICY_RC.exists() or subprocess.run([str(POLICY_RC)]).returncode != 101:
        POLICY_RC.write_text("#!/bin/sh\n# no service starts from a package's install script\nexit 101\n")
        POLICY_RC.chmod(0o755)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], env=env, check=True, capture_output=True, timeout=600)
    subprocess.run(
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing],
        env=env,
        check=True,
        capture_output=True,
        timeout=900,
    )
    return missing


def start_private(root: Path) -> Engine:
    """dockerd on its own data root and socket, on the host network only; nothing in /etc/docker."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "daemon.json").write_text(json.dumps({"deprecated-key-path": str(root / "key.json")}))
    sock = root / "docker.sock"
    cmd = [
        "dockerd",
        "--config-file",
        str(root / "daemon.json"),
        "--storage-driver=overlay2",
        *NETWORK_FLAGS,
        "--data-root",
        str(root / "data"),
        "--exec-root",
        str(root / "exec"),
        "--pidfile",
        str(root / "docker.pid"),
        "-H",
        f"unix://{sock}",
    ]
    log = open(root / "dockerd.log", "wb")  # noqa: SIM115 - the daemon writes it until stopped
    process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    env = {**os.environ, "DOCKER_HOST": f"unix://{sock}", "DOCKER_CONFIG": str(root / "cfg")}
    engine = Engine(
        env=env,
        what=f"a private dockerd (pid {process.pid}, {root})",
        private=True,
        root=root,
        process=process,
    )
    deadline = time.monotonic() + 60
    while engine.docker("version", check=False, timeout=10).returncode != 0:
        if process.poll() is not None or time.monotonic() > deadline:
            stop_private(engine)
            raise RuntimeError(
                f"dockerd did not start: {tail((root / 'dockerd.log').read_text(errors='replace'))}"
            )
        time.sleep(0.5)
    return engine


def stop_private(engine: Engine) -> None:
    """Stop the private dockerd by its pid and unmount what it leaves mounted."""
    if engine.process is not None and engine.process.poll() is None:
        engine.process.send_signal(signal.SIGTERM)
        try:
            engine.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            engine.process.kill()
            engine.process.wait(timeout=30)
    if engine.root is not None:
        for mount in mounts_under(engine.root):
            subprocess.run(["umount", "-l", mount], capture_output=True)


def mounts_under(root: Path) -> list[str]:
    """Mount points under `root`, deepest first."""
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return sorted((p for p in points if p.startswith(f"{root}/")), key=len, reverse=True)
