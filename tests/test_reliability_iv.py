"""Issue 40, "Reliability IV": inputs that were accepted wrongly or refused badly (a key written twice,
a `.env` that steers the interpreter or expands without end, credentials in a tracking URI, a login
refused at once, settings that fell into the generic error path, a slow metadata answer, a server bound
beyond loopback without auth). In-process where possible; no training run."""

from __future__ import annotations

from pathlib import Path

import pytest

from devicebench.errors import UsageError
from devicebench.plan.spec import load_plan
from devicebench.pricing.prices import load_prices

# ------------------------------------------------------------------------- 5: a key written twice

PRICE = "currency: USD, date: 2026-11-23, source: t"


@pytest.mark.parametrize(
    ("name", "text", "needle"),
    [
        (
            "plan.yaml",
            "name: x\nruns:\n  - entry: matmul\n    params: {sizes: '64'}\nruns:\n  - entry: matmul\n",
            "line 5: key 'runs' is written twice (first on line 2)",
        ),
        (
            "plan.yaml",
            "name: x\nruns:\n  - entry: cifar\n    params:\n      epochs: 1\n      lr: 0.1\n      epochs: 200\n",
            "line 7: key 'epochs' is written twice (first on line 5)",
        ),
        (
            "plan.yaml",
            "name: x\nruns:\n  - entry: cifar\n    params: {epochs: 1, epochs: 200}\n",
            "line 4: key 'epochs' is written twice (first on line 4)",
        ),
        (
            "prices.yaml",
            f"version: 1\nshapes:\n  VM.X.1: {{usd_per_hour: 2.5, {PRICE}}}\n  VM.X.1: {{usd_per_hour: 0.1, {PRICE}}}\n",
            "line 4: key 'VM.X.1' is written twice (first on line 3)",
        ),
    ],
)
def test_a_key_written_twice_is_refused_naming_the_key_and_its_line(
    tmp_path: Path, name: str, text: str, needle: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(UsageError) as err:
        (load_plan if name == "plan.yaml" else load_prices)(path)
    msg = str(err.value)
    assert needle in msg and str(path) in msg and "\n" not in msg, msg
    assert err.value.exit_code == 2


def test_a_merge_key_may_still_be_overridden(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(
        "name: x\nruns:\n  - entry: matmul\n    params: &b {sizes: '64', repeats: 1}\n"
        "  - entry: matmul\n    params: {<<: *b, repeats: 2}\n"
    )
    assert [r.params["repeats"] for r in load_plan(path).runs] == ["1", "2"]


# ------------------------------------------------------------------- 16: a control character, one line


@pytest.mark.parametrize("name", ["plan.yaml", "prices.yaml"])
def test_a_control_character_is_refused_in_one_line_naming_its_line(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text("name: x\nruns:\n  - entry: matmul\n    params: {sizes: '64\x07'}\n")
    with pytest.raises(UsageError) as err:
        (load_plan if name == "plan.yaml" else load_prices)(path)
    msg = str(err.value)
    assert "\n" not in msg, msg
    assert "line 4: not valid YAML (control character U+0007 is not allowed)" in msg, msg
