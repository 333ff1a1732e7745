"""Compile, once, the bytecode of what devicebench, its tests and an `mlflow server` import.

`make` installs with `pip --no-compile` (compiling all ~17,000 files took 3:05 on a 2-core VM, most of
them never imported), so the first import of a module compiles it. `make test` starts three workers at
once, and each compiled torch, MLflow and the rest for itself, as did the servers they started:
`make test` on a fresh clone took 6:00 here against 4:56 once the bytecode existed. Importing these
modules in one process as `.venv` is made (~20 s) leaves the later processes nothing to compile.
Modules that are not installed are skipped; what is left out is compiled at first use, as before.
"""

from __future__ import annotations

import compileall
import contextlib
import importlib
import warnings
from pathlib import Path

MODULES = (
    "devicebench.run.cli",
    "devicebench.workloads.cifar",
    "devicebench.workloads.unet",
    "devicebench.workloads.matmul",
    "devicebench.report.command",
    "devicebench.plan.suite",
    "devicebench.tracking",
    "mlflow.pytorch",
    "mlflow.pyfunc",
    "mlflow.projects",
    "mlflow.projects.docker",
    "mlflow.projects.kubernetes",
    "mlflow.deployments",
    "mlflow.server.handlers",
    "mlflow.server.fastapi_app",
    "mlflow.server.auth",
    "mlflow.store.tracking.sqlalchemy_store",
    "psycopg",
    "uvicorn",
    "matplotlib.pyplot",
    "torch._dynamo",
    "torch._inductor.compile_fx",
    "torch.distributed.run",
    "torchvision.datasets",
    "torchvision.models",
    "pytest",
    "xdist",
)
# Loaded by file path (alembic), not imported: compiled as folders.
FOLDERS = ("mlflow/store/db_migrations", "mlflow/server/auth/db")


def main() -> int:
    """Import MODULES and compile FOLDERS; 0 whatever is missing (this only saves time)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in MODULES:
            with contextlib.suppress(Exception):
                importlib.import_module(name)
    with contextlib.suppress(ImportError):
        import mlflow

        root = Path(mlflow.__file__).parent.parent
        for folder in FOLDERS:
            compileall.compile_dir(root / folder, quiet=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
