"""The copied store the tests open instead of a fresh one (servers.migrated_sqlite): at MLflow's current
schema, its own artifacts, and never written over a store a test already made."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from servers import migrated_sqlite


def test_a_migrated_copy_takes_runs_and_keeps_its_artifacts_in_its_own_folder(tmp_path: Path) -> None:
    first, second = migrated_sqlite(tmp_path / "a" / "m.db"), migrated_sqlite(tmp_path / "b" / "m.db")
    client = MlflowClient(first)
    run = client.create_run(client.create_experiment("x"))
    client.log_metric(run.info.run_id, "m", 1.0)
    assert client.get_run(run.info.run_id).data.metrics == {"m": 1.0}
    assert MlflowClient(second).search_runs([client.get_experiment_by_name("x").experiment_id]) == []
    for folder in ("a", "b"):
        with sqlite3.connect(tmp_path / folder / "m.db") as con:
            (where,) = con.execute(
                "SELECT artifact_location FROM experiments WHERE experiment_id = 0"
            ).fetchone()
        assert where == str(tmp_path / folder / "mlruns" / "0")


def test_a_store_that_exists_is_never_replaced(tmp_path: Path) -> None:
    (tmp_path / "m.db").write_bytes(b"a test's own store")
    with pytest.raises(FileExistsError, match="copied to a new path only"):
        migrated_sqlite(tmp_path / "m.db")
    assert (tmp_path / "m.db").read_bytes() == b"a test's own store"
