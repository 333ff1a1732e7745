"""How the text a config key includes is read and spelt: one sample's input shape, a model by name or
factory, a logged model's URI, a file's path. Each is read one way (a bad value is one line naming its
parameter) and spelt one way, so two spellings of one value are one work with one config key
(`config.fields.spelt`)."""

from __future__ import annotations

from pathlib import Path

from devicebench.errors import UsageError


def path_text(text: str) -> str:
    """A path as it is logged and keyed: as `pathlib` reads it (`./a//b.txt` is `a/b.txt`), `~` kept."""
    return str(Path(text))


MAX_INPUT_SIDE = 8192  # an input larger than 8192×8192 is a typo, not a model's input
MAX_CHANNELS = 64


def parse_input(text: str, param_name: str = "input") -> tuple[int, int, int]:
    """`CxHxW` (`3x224x224`) as (C, H, W): one sample's shape, the batch dimension left out."""
    parts = text.strip().lower().replace("×", "x").split("x")
    try:
        c, h, w = (int(p) for p in parts)
    except ValueError:
        raise UsageError(
            f"{text!r} is not a shape; expected CxHxW with positive integers, e.g. 3x224x224",
            param=param_name,
        ) from None
    if not (1 <= c <= MAX_CHANNELS and 1 <= h <= MAX_INPUT_SIDE and 1 <= w <= MAX_INPUT_SIDE):
        raise UsageError(
            f"{text!r} is out of range; expected CxHxW with 1 <= C <= {MAX_CHANNELS} and "
            f"1 <= H, W <= {MAX_INPUT_SIDE}, e.g. 3x224x224",
            param=param_name,
        )
    return c, h, w


def input_text(text: str) -> str:
    """An input shape as it is logged and keyed: `3X16X16`, `3×16×16` and ` 3 x 16 x 16` are `3x16x16`."""
    return "x".join(map(str, parse_input(text)))


def model_spec_text(spec: str) -> str:
    """A `model` value as it is logged and keyed: a factory's file path as `path_text` spells it."""
    check_model_spec(spec)
    module, colon, factory = spec.strip().rpartition(":")
    return f"{path_text(module)}:{factory}" if colon and module.endswith(".py") else spec.strip()


def check_model_spec(spec: str, param_name: str = "model") -> None:
    """The form of a `model` value, before torch: a torchvision name, or `module.path:factory` /
    `path/to/file.py:factory`. Whether the name exists or the factory imports is checked by the
    workload before its run is created (workloads/model.py, `check`)."""
    text = spec.strip()
    if not text:
        raise UsageError("is empty; give a torchvision model name or module.path:factory", param=param_name)
    if ":" in text:
        module, _, factory = text.rpartition(":")
        if not module or not factory.isidentifier():
            raise UsageError(
                f"{spec!r} is not module.path:factory (or path/to/file.py:factory) with a function name "
                "after the colon",
                param=param_name,
            )
    elif "/" in text or text.endswith(".py") or "." in text:
        raise UsageError(
            f"{spec!r} names a file or module but no factory; write it as {text}:factory (a callable "
            "returning an nn.Module), or give a torchvision model name",
            param=param_name,
        )


MODEL_URI_SCHEMES = ("models:/", "runs:/")


def check_model_uri(uri: str) -> None:
    """The form of a model URI; whether it exists is asked of the store before the run is created."""
    if not uri.startswith(MODEL_URI_SCHEMES) or uri.rstrip("/") in MODEL_URI_SCHEMES:
        raise UsageError(
            f"{uri!r} is not a model URI; expected models:/<model id> or runs:/<run id>/<path>",
            param="model_uri",
        )
