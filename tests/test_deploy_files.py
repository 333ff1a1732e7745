"""Checks of deploy/: Kubernetes manifests as real client objects, the MLflow kubernetes backend config
as MLflow itself reads it, systemd units with `systemd-analyze verify`, and the OCI cloud-init file
against cloud-init's own JSON schema (deploy/oci/cloud-config.schema.json, taken unchanged from
Debian's cloud-init 22.4.2 package: cloudinit/config/schemas/schema-cloud-config-v1.json). The
multi-node PyTorchJob is checked against the Kubeflow Training Operator's own CRD schema
(deploy/k8s/pytorchjob.schema.yaml, its header says where from), its pods as core v1 pods."""

from __future__ import annotations

import configparser
import copy
import functools
import json
import re
import shlex
import shutil
import subprocess
import sys
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
    # a web address (https://git.k8s.io/.../x.md in the CRD schema's descriptions) is not a repository file
    pointer = re.compile(r"(?:file:///opt/devicebench/|(?<![\w./:-]))((?:docs/)?[\w./-]+\.md)\b")
    missing = set()
    for path in [*ROOT.glob("deploy/**/*"), *ROOT.glob("docker/*"), ROOT / "MLproject", ROOT / "Makefile"]:
        if path.is_file():
            for doc in pointer.findall(path.read_text(errors="replace")):
                if not (ROOT / doc).is_file():
                    missing.add(f"{path.relative_to(ROOT)} -> {doc}")
    assert not missing, sorted(missing)


# --- Beyond one node: deploy/k8s/pytorchjob.yaml (Kubeflow Training Operator) and indexed-job.yaml ---


@functools.cache
def _pytorchjob_schema() -> dict[str, Any]:
    return _strict(load_yaml(K8S / "pytorchjob.schema.yaml"))


def _strict(schema: Any) -> Any:
    """The CRD schema as the API server applies it with strict field validation (kubectl's default):
    a field the schema does not declare is an error, not silently pruned; only subtrees marked
    x-kubernetes-preserve-unknown-fields keep unknown fields."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def crd_errors(manifest: dict[str, Any]) -> list[str]:
    """Where `manifest` breaks the PyTorchJob CRD's openAPIV3Schema, one line each ([] when valid)."""
    import jsonschema

    validator = jsonschema.Draft7Validator(_pytorchjob_schema())
    return sorted(
        f"{'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
        for e in validator.iter_errors(manifest)
    )


def _replicas(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return job["spec"]["pytorchReplicaSpecs"]


def test_pytorchjob_is_valid_against_the_operators_crd_schema() -> None:
    job = load_yaml(K8S / "pytorchjob.yaml")
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    assert crd_errors(job) == []
    assert set(_replicas(job)) == {"Master", "Worker"}
    assert _replicas(job)["Master"]["replicas"] == 1, "one Master: node 0, where rank 0 owns the run"
    assert job["spec"]["runPolicy"]["backoffLimit"] == 0, "a dead rank must end the job, not restart it"
    assert {r["restartPolicy"] for r in _replicas(job).values()} == {"Never"}


def _set(obj: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for key in parents:
        obj = obj[key]
    if value is _DELETE:
        del obj[last]
    else:
        obj[last] = value


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "needle"),
    [
        ("spec.nprocPerNod", "8", "'nprocPerNod' was unexpected"),  # a typo
        ("spec.nprocPerNode", 8, "spec.nprocPerNode: 8 is not of type 'string'"),
        ("spec.pytorchReplicaSpecs.Worker.replicas", "one", "replicas: 'one' is not of type 'integer'"),
        ("spec.runPolicy.backofLimit", 0, "'backofLimit' was unexpected"),
        ("spec.pytorchReplicaSpecs", _DELETE, "'pytorchReplicaSpecs' is a required property"),
        ("spec.runPolicy.schedulingPolicy", {"minResources": {"cpu": "lots"}}, "does not match"),
    ],
)
def test_crd_schema_check_rejects_a_broken_pytorchjob(path: str, value: Any, needle: str) -> None:
    job = copy.deepcopy(load_yaml(K8S / "pytorchjob.yaml"))
    _set(job, path, value)
    errors = crd_errors(job)
    assert any(needle in e for e in errors), errors


def test_pytorchjob_pod_templates_are_valid_gpu_pods_like_the_cronjobs() -> None:
    job = load_yaml(K8S / "pytorchjob.yaml")
    cron = load_yaml(K8S / "cronjob.yaml")
    cron_container = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    secret_keys = set(load_yaml(K8S / "secret.example.yaml")["stringData"])
    for role, replica in _replicas(job).items():
        template = k8s_model(replica["template"], "V1PodTemplateSpec")
        pod = template.spec
        (container,) = pod.containers
        # the operator reads the rendezvous port from this container and port name only
        assert container.name == "pytorch", role
        assert [(p.name, p.container_port) for p in container.ports] == [("pytorchjob-port", 23456)], role
        assert container.image == cron_container["image"], "the same trainer image as the CronJob"
        assert container.resources.limits["nvidia.com/gpu"] == job["spec"]["nprocPerNode"], role
        assert pod.security_context.run_as_non_root is True
        shm = {v.name: v for v in pod.volumes}[
            next(m.name for m in container.volume_mounts if m.mount_path == "/dev/shm")
        ]
        assert shm.empty_dir.medium == "Memory", role
        assert {m.name for m in container.volume_mounts} <= {v.name for v in pod.volumes}
        refs = [e.value_from.secret_key_ref for e in container.env if e.value_from]
        assert {r.name for r in refs} == {"devicebench-tracking"}, "the CronJob's Secret"
        assert {r.key for r in refs} == {
            "MLFLOW_TRACKING_URI",
            "MLFLOW_TRACKING_USERNAME",
            "MLFLOW_TRACKING_PASSWORD",
        }
        assert {r.key for r in refs} <= secret_keys


def test_pod_template_check_rejects_a_broken_container() -> None:
    job = copy.deepcopy(load_yaml(K8S / "pytorchjob.yaml"))
    template = copy.deepcopy(_replicas(job)["Worker"]["template"])
    container = template["spec"]["containers"][0]
    container["volumeMount"] = container.pop("volumeMounts")
    with pytest.raises(AssertionError, match="volumeMount"):
        k8s_model(template, "V1PodTemplateSpec")


def _run_pod_command(container: dict[str, Any], env: dict[str, str], tmp_path: Path) -> dict[str, Any]:
    """Run the container's `sh -c` script as its pod would, with a stand-in `devicebench` on PATH that
    reports the arguments and environment it was started with."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    stub = bin_dir / "devicebench"
    stub.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        "print(json.dumps({'argv': sys.argv[1:], 'env': dict(os.environ)}))\n"
    )
    stub.chmod(0o755)
    assert container["command"] == ["sh", "-c"]
    (script,) = container["args"]
    proc = subprocess.run(
        ["sh", "-c", script],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _cifar_config(argv: list[str]) -> Any:
    """The config the CLI builds from `argv`, through the CLI's own parser and checks."""
    from devicebench.config.fields import config_from_args
    from devicebench.config.workloads import CifarConfig
    from devicebench.run.cli import build_parser

    assert argv[0] == "cifar", argv
    return config_from_args(CifarConfig, build_parser("cifar").parse_args(argv))


def test_pytorchjob_pods_run_one_node_each_of_the_same_job(tmp_path: Path) -> None:
    """Each pod's command, with the variables the operator sets (RANK = the pod's index, Master 0 and
    Worker i as i + 1; MASTER_ADDR = <job>-master-0; MASTER_PORT = the pytorchjob-port), is a valid
    `devicebench cifar` for its node: same job size, its own node rank, node 0's address."""
    job = load_yaml(K8S / "pytorchjob.yaml")
    name = job["metadata"]["name"]
    nodes = sum(r["replicas"] for r in _replicas(job).values())
    pods = [("Master", 0, 0)] + [("Worker", i, i + 1) for i in range(_replicas(job)["Worker"]["replicas"])]
    seen = set()
    for role, _index, rank in pods:
        container = _replicas(job)[role]["template"]["spec"]["containers"][0]
        port = container["ports"][0]["containerPort"]
        operator_env = {
            "RANK": str(rank),
            "WORLD_SIZE": str(nodes * int(job["spec"]["nprocPerNode"])),
            "MASTER_ADDR": f"{name}-master-0",
            "MASTER_PORT": str(port),
            "PET_NPROC_PER_NODE": job["spec"]["nprocPerNode"],
            "PET_NODE_RANK": str(rank),
            "PET_NNODES": str(nodes),
        }
        ran = _run_pod_command(container, operator_env, tmp_path)
        assert "RANK" not in ran["env"] and "WORLD_SIZE" not in ran["env"], "torchrun sets them per process"
        cfg = _cifar_config(ran["argv"])
        assert cfg.device == "cuda"
        assert cfg.nnodes == nodes, "--nnodes must equal Master + Worker replicas"
        assert (
            cfg.nproc
            == int(job["spec"]["nprocPerNode"])
            == int(container["resources"]["limits"]["nvidia.com/gpu"])
        )
        assert cfg.node_rank == rank
        assert cfg.rdzv_endpoint == f"{name}-master-0:{port}"
        assert cfg.loader == "dataloader", "each process reads its shard through a DistributedSampler"
        seen.add(cfg.node_rank)
    assert seen == set(range(nodes))


def test_indexed_job_is_the_same_job_without_the_operator(tmp_path: Path) -> None:
    with open(K8S / "indexed-job.yaml") as f:
        service_doc, job_doc = yaml.safe_load_all(f)
    service = k8s_model(service_doc, "V1Service")
    job = k8s_model(job_doc, "V1Job")
    name = job.metadata.name
    assert service.spec.cluster_ip == "None", "headless: DNS names the pods, not a virtual IP"
    assert service.spec.selector == {"job-name": name}, "the label the Job controller puts on its pods"
    assert service.metadata.namespace == job.metadata.namespace
    assert job.spec.completion_mode == "Indexed"
    assert job.spec.completions == job.spec.parallelism, "every node at once"
    assert job.spec.backoff_limit == 0
    pod = job.spec.template.spec
    assert pod.subdomain == service.metadata.name and pod.restart_policy == "Never"
    (container,) = pod.containers
    assert {m.name for m in container.volume_mounts} <= {v.name for v in pod.volumes}
    pytorchjob = load_yaml(K8S / "pytorchjob.yaml")
    assert container.image == _replicas(pytorchjob)["Master"]["template"]["spec"]["containers"][0]["image"]
    seen = set()
    for index in range(job.spec.completions):
        ran = _run_pod_command(
            job_doc["spec"]["template"]["spec"]["containers"][0],
            {"JOB_COMPLETION_INDEX": str(index)},
            tmp_path,
        )
        cfg = _cifar_config(ran["argv"])
        assert cfg.nnodes == job.spec.completions
        assert cfg.node_rank == index
        assert cfg.nproc == int(container.resources.limits["nvidia.com/gpu"])
        # node 0's host name: <job>-0 (Indexed Job) under the Service's subdomain
        host, port = cfg.rdzv_endpoint.rsplit(":", 1)
        assert host == f"{name}-0.{service.metadata.name}"
        assert int(port) in {p.port for p in service.spec.ports}
        seen.add(cfg.node_rank)
    assert seen == set(range(job.spec.completions))
