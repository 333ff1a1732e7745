"""Config parsing: every value arrives as a string (MLflow checks none), so this is the real gate."""

from __future__ import annotations

import pytest

from devicebench.config.fields import build_config, config_key, to_params
from devicebench.errors import UsageError
from devicebench.workloads.matmul import Config


def test_defaults_reproduce_the_tutorial() -> None:
    cfg = build_config(Config, {})
    assert cfg.sizes == (8000,)
    assert cfg.dtypes == ("float64", "float32")
    assert cfg.backends == ("numpy", "torch")


def test_strings_are_parsed_into_typed_values() -> None:
    cfg = build_config(Config, {"sizes": "512, 1024", "repeats": "3", "dtypes": "FLOAT32"})
    assert cfg.sizes == (512, 1024)
    assert cfg.repeats == 3
    assert cfg.dtypes == ("float32",)


def test_yaml_lists_are_accepted() -> None:
    assert build_config(Config, {"sizes": [64, 128]}).sizes == (64, 128)


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"sizes": "-5"}, "--sizes: '-5' is out of range"),
        ({"sizes": "abc"}, "--sizes: 'abc' is not"),
        ({"sizes": ","}, "--sizes: needs at least one value"),
        (
            {"dtypes": "float8"},
            "--dtypes: unknown value 'float8'; allowed: float64, float32, bfloat16, float16",
        ),
        ({"repeats": "0"}, "--repeats: '0' is out of range"),
        ({"repeats": "2.5"}, "--repeats: '2.5' is not an integer"),
        ({"colour": "red"}, "unknown parameter 'colour'; known: device, sizes"),
        ({"dtypes": "bfloat16", "backends": "numpy"}, "--dtypes: no backend supports dtypes bfloat16"),
    ],
)
def test_bad_values_name_the_parameter_and_what_is_allowed(values: dict, needle: str) -> None:
    with pytest.raises(UsageError) as err:
        build_config(Config, values)
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def test_params_are_every_field_as_strings() -> None:
    cfg = build_config(Config, {"sizes": "64,128"})
    params = to_params(cfg)
    assert params == {
        "device": "cpu",
        "sizes": "64,128",
        "dtypes": "float64,float32",
        "backends": "numpy,torch",
        "repeats": "5",
        "min_time_s": "0.2",
        "warmup": "1",
        "isolation": "process",
        "seed": "0",
        "price_per_hour": "0.0",
        "illustrative_price": "false",
        "cpu_shape": "default",
        "price_shape": "none",
        "cpu_threads": "0",
    }


def test_config_key_ignores_device_and_seed_but_not_the_work() -> None:
    base = build_config(Config, {"sizes": "64"})
    how = build_config(Config, {"sizes": "64", "isolation": "none", "min_time_s": "1"})
    assert config_key("matmul", base) == config_key("matmul", how), "how it was measured is not the work"
    assert config_key("matmul", base) == config_key(
        "matmul", build_config(Config, {"sizes": "64", "device": "cuda"})
    )
    assert config_key("matmul", base) == config_key(
        "matmul", build_config(Config, {"sizes": "64", "seed": "7"})
    )
    assert config_key("matmul", base) != config_key("matmul", build_config(Config, {"sizes": "128"}))
    assert config_key("matmul", base) != config_key("other", base)


@pytest.mark.parametrize("raw", ["inf", "-inf", "1e309", "nan", "Infinity"])
def test_no_float_parameter_of_any_workload_takes_a_non_finite_number(raw: str) -> None:
    """`--lr inf` once ran to FINISHED with a NaN loss: every float field refuses what is not finite."""
    import dataclasses
    import typing

    from devicebench.workloads import load

    checked = 0
    for name in ("matmul", "cifar", "unet"):
        cls = load(name).Config
        for f in dataclasses.fields(cls):
            if typing.get_type_hints(cls)[f.name] is float:
                with pytest.raises(UsageError, match=rf"--{f.name}: '{raw}' is not a finite number"):
                    build_config(cls, {f.name: raw})
                checked += 1
    assert checked >= 3  # cifar lr, momentum, target_accuracy; unet lr


def test_an_integer_beyond_64_bits_is_out_of_range() -> None:
    with pytest.raises(UsageError, match=r"--seed: '99999999999999999999' is out of range"):
        build_config(Config, {"seed": "99999999999999999999"})
    assert build_config(Config, {"seed": str(2**63 - 1)}).seed == 2**63 - 1


def test_the_work_key_leaves_out_how_the_cpu_was_fed_and_nothing_else() -> None:
    """A tuned CPU side (loader=tensor, its own workers and threads) did the same training as the
    tutorial's DataLoader run: one work key, two config keys; a different batch is different work."""
    from devicebench.config.fields import config_key, work_key
    from devicebench.config.workloads import CifarConfig, MatmulConfig

    base = CifarConfig()
    fed = CifarConfig(loader="tensor", num_workers=0, cpu_threads=4)
    assert work_key("cifar", fed) == work_key("cifar", base)
    assert config_key("cifar", fed) != config_key("cifar", base)
    assert work_key("cifar", CifarConfig(batch_size=8)) != work_key("cifar", base)
    assert work_key("matmul", MatmulConfig()) == config_key("matmul", MatmulConfig()), "matmul is not fed"
