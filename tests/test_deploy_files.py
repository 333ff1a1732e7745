"""Checks of deploy/: Kubernetes manifests as real client objects, the MLflow kubernetes backend config
as MLflow itself reads it, systemd units with `systemd-analyze verify`, and the OCI cloud-init file
against cloud-init's own JSON schema (deploy/oci/cloud-config.schema.json, taken unchanged from
Debian's cloud-init 22.4.2 package: cloudinit/config/schemas/schema-cloud-config-v1.json)."""

from __future__ import annotations

import configparser
import copy
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from servers import VENV_BIN

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
SYSTEMD = DEPLOY / "systemd"
OCI = DEPLOY / "oci"


class _Response:
    """What older clients' ApiClient.deserialize reads: the JSON body of a (here imagined) API answer."""

    def __init__(self, obj: Any) -> None:
        self.data = json.dumps(obj)


def _lost_keys(original: Any, roundtrip: Any, path: str = "") -> list[str]:
    """Keys of the manifest that the model did not keep: misspelt or misplaced fields."""
    lost = []
    if isinstance(original, dict):
        for key, value in original.items():
            if not isinstance(roundtrip, dict) or key not in roundtrip:
                lost.append(f"{path}.{key}")
            else:
                lost += _lost_keys(value, roundtrip[key], f"{path}.{key}")
    elif isinstance(original, list) and isinstance(roundtrip, list):
        for i, (a, b) in enumerate(zip(original, roundtrip, strict=False)):
            lost += _lost_keys(a, b, f"{path}[{i}]")
    return lost


def k8s_model(obj: dict[str, Any], kind: str) -> Any:
    """The manifest as the kubernetes client's model (e.g. V1CronJob): types are checked on the way
    in, and a field the model does not know (a typo) fails the round trip back to a manifest."""
    from kubernetes import client

    api = client.ApiClient()
    klass = getattr(client, kind)
    # newer clients build pydantic models with from_dict; older ones deserialize an API answer
    model = klass.from_dict(obj) if hasattr(klass, "from_dict") else api.deserialize(_Response(obj), kind)
    lost = _lost_keys(obj, api.sanitize_for_serialization(model))
    assert not lost, f"{kind} does not know these fields: {lost}"
    return model


def test_k8s_model_helper_rejects_typos_and_wrong_types() -> None:
    manifest = load_yaml(K8S / "cronjob.yaml")
    typo = copy.deepcopy(manifest)
    typo["spec"]["concurencyPolicy"] = typo["spec"].pop("concurrencyPolicy")
    with pytest.raises(AssertionError, match="concurencyPolicy"):
        k8s_model(typo, "V1CronJob")
    from kubernetes import client

    if hasattr(client.V1CronJob, "from_dict"):  # older clients do not check types
        wrong = copy.deepcopy(manifest)
        wrong["spec"]["jobTemplate"]["spec"]["backoffLimit"] = "never"
        with pytest.raises((ValueError, TypeError)):
            k8s_model(wrong, "V1CronJob")


def load_yaml(path: Path) -> Any:
    with open(path) as f:
        return yaml.safe_load(f)


def test_cronjob_is_a_valid_object_with_gpu_forbid_and_secret() -> None:
    manifest = load_yaml(K8S / "cronjob.yaml")
    assert (manifest["apiVersion"], manifest["kind"]) == ("batch/v1", "CronJob")
    cron = k8s_model(manifest, "V1CronJob")
    assert cron.spec.concurrency_policy == "Forbid"
    assert len(cron.spec.schedule.split()) == 5
    pod = cron.spec.job_template.spec.template.spec
    assert pod.restart_policy == "Never"
    assert pod.security_context.run_as_non_root is True
    (container,) = pod.containers
    assert container.resources.limits["nvidia.com/gpu"] == "1"
    assert container.args[:2] == ["suite", "experiments/nightly.yaml"]
    env = {e.name: e for e in container.env}
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        ref = env[name].value_from.secret_key_ref
        assert ref is not None and ref.name == "devicebench-tracking" and ref.key == name, name
        assert env[name].value is None, f"{name} is written inline"
    # every volume a container mounts is declared
    declared = {v.name for v in pod.volumes}
    assert {m.name for m in container.volume_mounts} <= declared


def test_secret_example_matches_what_the_cronjob_reads() -> None:
    manifest = load_yaml(K8S / "secret.example.yaml")
    secret = k8s_model(manifest, "V1Secret")
    assert secret.metadata.name == "devicebench-tracking"
    cron = load_yaml(K8S / "cronjob.yaml")
    assert secret.metadata.namespace == cron["metadata"]["namespace"]
    container = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    keys = {e["valueFrom"]["secretKeyRef"]["key"] for e in container["env"] if "valueFrom" in e}
    assert keys <= set(secret.string_data), keys - set(secret.string_data)
    assert secret.string_data["MLFLOW_TRACKING_PASSWORD"] == "REPLACE_ME"


def test_mlflow_kubernetes_backend_builds_a_valid_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """What `mlflow run --backend kubernetes --backend-config deploy/k8s/kubernetes_config.json` does
    with these files, without a cluster: parse the config, fill in the template, deserialize a V1Job."""
    from mlflow.projects import _parse_kubernetes_config
    from mlflow.projects.kubernetes import _get_kubernetes_job_definition

    monkeypatch.chdir(ROOT)  # the template path in the config is relative to the repository root
    monkeypatch.delenv("KUBE_MLFLOW_TRACKING_URI", raising=False)
    config = _parse_kubernetes_config(json.loads((K8S / "kubernetes_config.json").read_text()))
    assert config["repository-uri"]
    template = copy.deepcopy(config["kube-job-template"])
    job = _get_kubernetes_job_definition(
        "devicebench",
        "registry.example/devicebench",
        "sha256:" + "0" * 64,
        ["devicebench", "suite", "/app/experiments/nightly.yaml"],
        {"MLFLOW_RUN_ID": "abc", "MLFLOW_TRACKING_URI": "http://mlflow:5000"},
        template,
    )
    v1 = k8s_model(job, "V1Job")
    (container,) = v1.spec.template.spec.containers
    assert container.image == "registry.example/devicebench@sha256:" + "0" * 64
    assert container.command == ["devicebench", "suite", "/app/experiments/nightly.yaml"]
    assert container.resources.limits["nvidia.com/gpu"] == "1"
    env = {e.name: e for e in container.env}
    assert env["MLFLOW_RUN_ID"].value == "abc"
    assert env["MLFLOW_TRACKING_PASSWORD"].value_from.secret_key_ref.name == "devicebench-tracking"
    assert v1.metadata.namespace == "devicebench"


def test_kubernetes_mlproject_is_a_docker_env_project_mlflow_accepts() -> None:
    from mlflow.projects import _project_spec
    from mlflow.projects.docker import validate_docker_env

    project = _project_spec.load_project(str(K8S / "mlproject"))
    validate_docker_env(project)
    assert project.docker_env["image"].startswith("devicebench-trainer")
    command = project.get_entry_point("suite").compute_command({}, storage_dir="/tmp")
    assert command.split()[:2] == ["devicebench", "suite"]
    assert (
        project.get_entry_point("matmul")
        .compute_command({"sizes": "64"}, "/tmp")
        .startswith("devicebench matmul")
    )


def _unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # systemd keys are case-sensitive
    parser.read_string(path.read_text().replace("\\\n", " "))
    return parser


def test_systemd_units_parse_with_a_schedule_and_a_lock() -> None:
    service = _unit(SYSTEMD / "devicebench-nightly.service")
    timer = _unit(SYSTEMD / "devicebench-nightly.timer")
    exec_start = service["Service"]["ExecStart"].split()
    assert exec_start[0] == "/usr/bin/flock" and "--nonblock" in exec_start
    assert service["Service"]["Type"] == "oneshot"
    assert "suite experiments/nightly.yaml" in " ".join(exec_start)
    assert "--profile gpu run --rm" in " ".join(exec_start)
    assert service["Service"]["StandardOutput"] == "journal"
    assert timer["Timer"]["OnCalendar"]
    assert timer["Timer"]["Unit"] == "devicebench-nightly.service"
    assert timer["Install"]["WantedBy"] == "timers.target"
    dropin = (SYSTEMD / "devicebench-nightly-venv.conf").read_text()
    assert "ExecStart=\n" in dropin, "the drop-in must reset ExecStart before replacing it"
    assert "/usr/bin/flock" in dropin and ".venv/bin/devicebench suite experiments/nightly.yaml" in dropin


def _verify(units: list[Path], unit_dir: Path) -> subprocess.CompletedProcess:
    # A stand-in docker.service lets `verify` resolve Requires= on a machine without Docker.
    (unit_dir / "docker.service").write_text("[Unit]\nDescription=stand-in\n[Service]\nExecStart=/bin/true\n")
    return subprocess.run(
        ["systemd-analyze", "verify", *map(str, units)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"SYSTEMD_UNIT_PATH": f"{unit_dir}:", "PATH": "/usr/bin:/bin", "SYSTEMD_LOG_COLOR": "0"},
    )


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize("variant", ["docker", "venv"])
def test_systemd_analyze_verify(tmp_path: Path, variant: str) -> None:
    service = tmp_path / "devicebench-nightly.service"
    timer = tmp_path / "devicebench-nightly.timer"
    text = (SYSTEMD / "devicebench-nightly.service").read_text()
    if variant == "venv":
        # a drop-in is applied as if appended to the unit: same keys, same reset rules
        text += "\n" + (SYSTEMD / "devicebench-nightly-venv.conf").read_text()
    service.write_text(text)
    shutil.copy(SYSTEMD / "devicebench-nightly.timer", timer)
    proc = _verify([service, timer], tmp_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "Unknown" not in output and "Invalid" not in output and "ignoring" not in output, output


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_timer_calendar_is_valid() -> None:
    on_calendar = _unit(SYSTEMD / "devicebench-nightly.timer")["Timer"]["OnCalendar"]
    proc = subprocess.run(
        ["systemd-analyze", "calendar", on_calendar], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0 and "Next elapse" in proc.stdout, proc.stdout + proc.stderr


def _install_script() -> str:
    config = yaml.safe_load((OCI / "cloud-init.yaml").read_text())
    return {f["path"]: f for f in config["write_files"]}["/usr/local/sbin/devicebench-install"]["content"]


def test_cloud_init_is_valid_cloud_config() -> None:
    text = (OCI / "cloud-init.yaml").read_text()
    assert text.startswith("#cloud-config\n")
    config = yaml.safe_load(text)
    assert config["packages"] and config["runcmd"] and config["write_files"]
    packages = set(config["packages"])
    assert {"docker.io", "docker-compose-v2", "git"} <= packages
    files = {f["path"]: f for f in config["write_files"]}
    install = files["/usr/local/sbin/devicebench-install"]["content"]
    for step in (
        "nvidia-container-toolkit",
        "nvidia-ctk runtime configure --runtime=docker",
        "git clone",
        "POSTGRES_PASSWORD=",
        "systemctl enable devicebench-nightly.timer",
    ):
        assert step in install, step
    assert "openssl rand" in install, "passwords must be generated on the instance, not carried in user data"
    proc = subprocess.run(["bash", "-n"], input=install, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    ("installed", "utils"),
    [
        (
            "ii nvidia-headless-no-dkms-535-server\nii nvidia-kernel-common-535-server",
            "nvidia-utils-535-server",
        ),
        ("ii nvidia-headless-no-dkms-570-server-open", "nvidia-utils-570-server"),
        ("rc nvidia-headless-no-dkms-470-server\nii nvidia-headless-550", "nvidia-utils-550"),
        ("", None),
    ],
)
def test_cloud_init_adds_the_utils_package_of_the_headless_driver(installed: str, utils: str | None) -> None:
    """`ubuntu-drivers install --gpgpu` leaves no nvidia-smi; the install script must add the utils package
    of the branch it chose. Its function runs here against a stub dpkg-query."""
    install = _install_script()
    func = re.search(r"^nvidia_utils_package\(\) \{\n.*?^\}\n", install, re.S | re.M)
    assert func, "no nvidia_utils_package function in the install script"
    assert re.search(r'apt-get install -y "\$nvidia_utils"', install)
    assert install.index("ubuntu-drivers install --gpgpu") < install.index("nvidia_utils=")
    stub = f"dpkg-query() {{ printf '%s\\n' {shlex.quote(installed)} | grep -v '^$'; }}\n"
    proc = subprocess.run(
        ["bash", "-c", stub + func.group(0) + "nvidia_utils_package"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if utils is None:
        assert proc.returncode != 0 and "no nvidia-headless-* package" in proc.stderr
    else:
        assert proc.returncode == 0 and proc.stdout.strip() == utils, proc.stderr


def test_cloud_init_against_cloud_inits_schema() -> None:
    checker = VENV_BIN / "check-jsonschema"
    if not checker.exists():
        pytest.skip("check-jsonschema is not installed in the venv")
    proc = subprocess.run(
        [
            str(checker),
            "--schemafile",
            str(OCI / "cloud-config.schema.json"),
            str(OCI / "cloud-init.yaml"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_cloud_init_installs_the_units_the_repository_ships() -> None:
    install = yaml.safe_load((OCI / "cloud-init.yaml").read_text())["write_files"]
    content = next(f["content"] for f in install if f["path"].endswith("devicebench-install"))
    for unit in ("devicebench-nightly.service", "devicebench-nightly.timer"):
        assert f"deploy/systemd/{unit}" in content
        assert (SYSTEMD / unit).exists()
    service = _unit(SYSTEMD / "devicebench-nightly.service")
    assert service["Service"]["WorkingDirectory"] == "/opt/devicebench"
    assert "/opt/devicebench" in content


def test_every_document_a_shipped_file_points_to_exists() -> None:
    """Deploy files send readers to docs (`see docs/x.md`, `Documentation=file:///opt/devicebench/...`);
    a pointer to a file that was renamed or removed strands the reader on the one night it matters."""
    pointer = re.compile(r"(?:file:///opt/devicebench/|\b)((?:docs/)?[\w./-]+\.md)\b")
    missing = set()
    for path in [*ROOT.glob("deploy/**/*"), *ROOT.glob("docker/*"), ROOT / "MLproject", ROOT / "Makefile"]:
        if path.is_file():
            for doc in pointer.findall(path.read_text(errors="replace")):
                if not (ROOT / doc).is_file():
                    missing.add(f"{path.relative_to(ROOT)} -> {doc}")
    assert not missing, sorted(missing)
