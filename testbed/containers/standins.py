"""What stands in here for what a user's engine would pull: the Dockerfiles' `python:3.11.x-slim-bookworm`
base made with debootstrap from the host's Debian mirror, and their Python packages from a wheelhouse
served on 127.0.0.1 (the WHEELHOUSE build argument, what an offline GPU host uses too)."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from testbed.containers.engine import Engine

ROOT = Path(__file__).resolve().parents[2]
PYTHON_PACKAGES = "python3,python3-venv,python3-pip,ca-certificates"


def base_image(dockerfile: Path) -> str:
    """The image a Dockerfile starts FROM."""
    found = re.search(r"^FROM\s+(\S+)", dockerfile.read_text(), re.MULTILINE)
    if not found:
        raise RuntimeError(f"{dockerfile}: no FROM")
    return found[1]


def debian_mirror() -> str:
    """The Debian archive the host's apt uses (deb822 or one-line sources)."""
    for path in sorted(Path("/etc/apt").glob("sources.list*")) + sorted(
        Path("/etc/apt/sources.list.d").glob("*")
    ):
        if path.is_file():
            for url in re.findall(r"(?:URIs:|deb)\s+(https?://\S+/debian)\b", path.read_text()):
                return url
    return "http://deb.debian.org/debian"


def make_python_standin(engine: Engine, tag: str, work: Path) -> str:
    """`tag` made from Debian bookworm's own Python (3.11.2) with pip, as the official image has it."""
    rootfs = work / "rootfs"
    mirror = debian_mirror()
    subprocess.run(
        ["debootstrap", "--variant=minbase", f"--include={PYTHON_PACKAGES}", "bookworm", str(rootfs), mirror],
        check=True,
        capture_output=True,
        timeout=900,
    )
    try:
        # The official image has `python` and `pip` on PATH and no EXTERNALLY-MANAGED marker.
        (rootfs / "usr/bin/python").symlink_to("python3")
        for marker in rootfs.glob("usr/lib/python3*/EXTERNALLY-MANAGED"):
            marker.unlink()
        for junk in ("var/lib/apt/lists", "var/cache/apt"):
            shutil.rmtree(rootfs / junk, ignore_errors=True)
        (rootfs / "var/lib/apt/lists/partial").mkdir(parents=True)
        (rootfs / "etc/apt/sources.list").unlink(missing_ok=True)
        for source in Path("/etc/apt/sources.list.d").glob("*.sources"):
            shutil.copy(source, rootfs / "etc/apt/sources.list.d" / source.name)
        policy = rootfs / "usr/sbin/policy-rc.d"
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        engine.docker(
            "import",
            "--change",
            'CMD ["python3"]',
            "--change",
            "ENV LANG=C.UTF-8",
            "-",
            tag,
            stdin=tar.stdout,
        )
        tar.wait()
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)
    return f"{tag}: a stand-in made here with debootstrap (bookworm minbase, {mirror}) and Debian's python3 3.11.2"


# The wheelhouse's URL is a build argument: the same port each time keeps the builds' layers cached.
WHEELHOUSE_PORT = 48765


def free_port(preferred: int = 0) -> int:
    """`preferred` when it is free on 127.0.0.1, else any free port."""
    for port in (preferred, 0) if preferred else (0,):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise RuntimeError("no free port on 127.0.0.1")


def build_wheelhouse(dest: Path) -> None:
    """`make docker-wheelhouse` into `dest`, with the host's pip (this host's indexes and local wheels)."""
    env = {"IMAGES": "1", "PYTHON": shutil.which("python3") or sys.executable}
    proc = subprocess.run(
        ["bash", "deploy/offline/wheelhouse.sh", str(dest), "3.11"],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"wheelhouse: {proc.stderr.strip().splitlines()[-3:]}")


def serve(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A plain HTTP server for `directory` on 127.0.0.1 (builds share the host's network)."""
    port = free_port(WHEELHOUSE_PORT)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "http.server",
            "--bind",
            "127.0.0.1",
            "--directory",
            str(directory),
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"http://127.0.0.1:{port}/"
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the wheelhouse's HTTP server did not start")
