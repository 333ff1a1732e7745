"""The workloads' configs live in one torch-free module, and say which params are not the work."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

from devicebench.config.fields import config_key
from devicebench.config.workloads import CONFIGS, WORKLOADS, not_work
from devicebench.workloads import load


def test_importing_configs_imports_neither_torch_nor_numpy_nor_mlflow() -> None:
    code = (
        "import json, sys; import devicebench.config.workloads; "
        "print(json.dumps(sorted(m for m in ('torch', 'numpy', 'mlflow') if m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_every_workload_reads_its_config_from_configs() -> None:
    assert tuple(CONFIGS) == WORKLOADS
    for name in WORKLOADS:
        assert load(name).Config is CONFIGS[name]


def _other(value: object) -> object:
    """A different value of the same type (validation is not the point: config_key runs none)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, tuple):
        return (*value, *value[:1]) or ("x",)
    return f"{value}x"


def test_not_work_is_exactly_what_config_key_ignores() -> None:
    ignored = set()
    for name, cls in CONFIGS.items():
        base = cls()
        for f in dataclasses.fields(cls):
            changed = dataclasses.replace(base, **{f.name: _other(getattr(base, f.name))})
            if config_key(name, changed) == config_key(name, base):
                ignored.add(f.name)
            else:
                assert f.name not in not_work(), f"{name}.{f.name} changes the config key"
    assert ignored == set(not_work())
    assert {"device", "seed", "data_dir", "log_every", "system_metrics"} <= not_work()
