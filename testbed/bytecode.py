"""Compile, once, the bytecode of what devicebench, its tests and an `mlflow server` import.

`make` installs with `pip --no-compile` (compiling all ~17,000 files took 3:05 on a 2-core VM, most of
them never imported), so the first import of a module compiles it. `make test` starts three workers at
once, and each compiled torch, MLflow and the rest for itself, as did the servers they started:
`make test` on a fresh clone took 6:00 here against 4:56 once the bytecode existed. Importing these
modules as `.venv` is made leaves the later processes nothing to compile. Two processes, one for torch's
side and one for MLflow's, take 13.5 s here against 19-20 s for one (2 cores; what both import is written
atomically by whichever gets there first). Modules that are not installed are skipped; what is left out
is compiled at first use, as before.
"""

from __future__ import annotations

import compileall
import contextlib
import importlib
import subprocess
import sys
import warnings
from pathlib import Path

TORCH_SIDE = (
    "devicebench.run.cli",
    "devicebench.workloads.cifar",
    "devicebench.workloads.unet",
    "devicebench.workloads.matmul",
    "torch._dynamo",
    "torch._inductor.compile_fx",
    "torch.distributed.run",
    "torchvision.datasets",
    "torchvision.models",
)
MLFLOW_SIDE = (
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
    "pytest",
    "xdist",
)
# Loaded by file path (alembic), not imported: compiled as folders.
FOLDERS = ("mlflow/store/db_migrations", "mlflow/server/auth/db")


def compile_side(modules: tuple[str, ...]) -> None:
    """Import `modules`; a module that fails to import is skipped (this only saves time)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in modules:
            with contextlib.suppress(Exception):
                importlib.import_module(name)


def compile_folders() -> None:
    """FOLDERS, which alembic loads by path: MLflow's side, once MLflow is imported."""
    with contextlib.suppress(ImportError):
        import mlflow

        root = Path(mlflow.__file__).parent.parent
        for folder in FOLDERS:
            compileall.compile_dir(root / folder, quiet=1)


def main(argv: list[str]) -> int:
    """Both sides at once, MLflow's in a second process (`mlflow`: that side only); 0 whatever is missing."""
    if argv == ["mlflow"]:
        compile_side(MLFLOW_SIDE)
        compile_folders()
        return 0
    other = subprocess.Popen([sys.executable, "-m", "testbed.bytecode", "mlflow"])
    compile_side(TORCH_SIDE)
    return other.wait()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
