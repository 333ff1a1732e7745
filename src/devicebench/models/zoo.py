"""Any model by name: a torchvision model (built with `weights=None`: nothing is downloaded) or the user's
own, given as `module.path:factory` or `path/to/file.py:factory` (a callable returning an `nn.Module`).

What the `model` and `infer` workloads need before any run exists: the builder, checked on the meta
device against the input shape (no memory, no compute), so an unknown name, a factory that does not
import or returns something else, or a shape the model rejects is one line and exit 2 with nothing
logged. torchvision's model zoo is imported here only, and only by these workloads: importing it loads
`torch._dynamo` (about 2 s), which cifar's tutorial Net never needs.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import torch
from torch import nn

from devicebench.errors import UsageError

TORCHVISION_CLASSES = {"classification": 1000, "segmentation": 21}  # torchvision's own defaults


class FirstOutput(nn.Module):
    """A model whose forward returns a dict (torchvision's segmentation models: `out`, `aux`) or a tuple
    (GoogLeNet's and Inception's auxiliary logits in train mode), reduced to its main output: the loss,
    the metrics and a served model take one tensor."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return main_output(self.model(x))


def main_output(out: Any) -> torch.Tensor:
    """`out["out"]` of a dict, the first element of a tuple (a namedtuple included), else `out`."""
    if isinstance(out, dict):
        return out["out"]
    if isinstance(out, tuple | list):
        return out[0]
    return out


def one_per_sample(out: Any, batch: int, name: str, param: str = "model") -> torch.Tensor:
    """`main_output(out)` where it is a tensor with one row per sample of the batch; anything else is one
    line naming `param`: a dict without `out`, an empty tuple, a loss or a mean (one figure per batch:
    a batch of 32 would be served as 32 predictions)."""
    if isinstance(out, dict) and "out" not in out:
        keys = ", ".join(repr(k) for k in list(out)[:5])
        raise UsageError(
            f"{name} returned a dict of {keys} without 'out'; return a tensor, or a dict whose 'out' is the "
            "prediction",
            param=param,
        )
    main = None if isinstance(out, tuple | list) and not out else main_output(out)
    if not isinstance(main, torch.Tensor) or main.dim() == 0 or main.shape[0] != batch:
        got = tuple(main.shape) if isinstance(main, torch.Tensor) else type(main).__name__
        raise UsageError(
            f"{name} returned {got} for a batch of {batch}; expected one output per sample (N first)",
            param=param,
        )
    return main


@dataclass(frozen=True)
class Spec:
    """A resolved `model` value: what builds it, and what to call it in names and tables."""

    name: str  # `resnet18`, or the factory's `module:factory` as given
    make: Callable[[int], nn.Module]  # num_classes (0: the model's own default) -> a fresh module
    torchvision: bool
    task: str  # classification or segmentation (a factory's is read from its output's shape)
    classes: int = 0  # the head's width as built for the checked num_classes (`checked` reads it)
    wraps: bool = False  # its forward returns a dict or a tuple (`checked` reads it): built in FirstOutput
    trains_on_one: bool = True  # a training step takes a batch of one sample (BatchNorm's may not)

    def build(self, num_classes: int) -> nn.Module:
        """A fresh module whose forward returns one tensor."""
        model = self.make(num_classes)
        return FirstOutput(model) if self.wraps else model


def _torchvision(name: str) -> Spec:
    from torchvision import models  # lazy: the zoo loads torch._dynamo (module doc)

    known = models.list_models()
    if name not in known:
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        hint = (
            f"; closest: {', '.join(close)}"
            if close
            else f"; {len(known)} names: torchvision.models.list_models()"
        )
        raise UsageError(f"unknown torchvision model {name!r}{hint}", param="model")
    task = "segmentation" if name in models.list_models(module=models.segmentation) else "classification"
    if name not in models.list_models(module=models) and task != "segmentation":
        raise UsageError(
            f"{name!r} is a {_family(name)} model; devicebench trains and serves classification and "
            "segmentation models",
            param="model",
        )
    signature = inspect.signature(models.get_model_builder(name)).parameters

    def make(num_classes: int) -> nn.Module:
        kwargs: dict[str, Any] = {"weights": None, "num_classes": num_classes or TORCHVISION_CLASSES[task]}
        if "weights_backbone" in signature:  # a segmentation model would fetch its ImageNet backbone
            kwargs["weights_backbone"] = None
        if "aux_logits" in signature:  # GoogLeNet, Inception v3: a second head the loss never sees
            kwargs["aux_logits"] = False
            kwargs["init_weights"] = True
        return models.get_model(name, **kwargs)

    return Spec(name, make, True, task)


def _family(name: str) -> str:
    from torchvision import models  # lazy: see the module doc

    for family in ("detection", "video", "optical_flow", "quantization"):
        if name in models.list_models(module=getattr(models, family)):
            return family.replace("_", " ")
    return "non-classification"


def _import(module_text: str) -> Any:
    """The user's module, from a file path or an importable name (the working directory searched first,
    as `python -m` would). Registered for pickling by value, so the logged model carries its class and
    loads where the file is not."""
    path = Path(os.path.expanduser(module_text))
    try:
        if module_text.endswith(".py"):
            if not path.is_file():
                raise UsageError(f"{module_text} is not a file", param="model")
            name = f"devicebench_user_{path.stem}"
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:
                raise UsageError(f"{module_text} cannot be imported as Python", param="model")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        else:
            if os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(module_text)
    except UsageError:
        raise
    except Exception as e:  # anything the user's code raises while importing: its one line
        raise UsageError(f"importing {module_text} failed: {_error_line(e)}", param="model") from None
    import cloudpickle  # lazy: MLflow's pickler; only a user's own model is pickled by value

    cloudpickle.register_pickle_by_value(module)
    return module


def _factory(spec: str) -> Spec:
    module_text, _, attr = spec.rpartition(":")
    module = _import(module_text)
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise UsageError(f"{module_text} has no callable {attr!r}", param="model")
    takes_classes = "num_classes" in _parameters(factory)

    def make(num_classes: int) -> nn.Module:
        try:
            model = factory(num_classes=num_classes) if takes_classes and num_classes else factory()
        except Exception as e:
            raise UsageError(f"{spec}() failed: {_error_line(e)}", param="model") from None
        if not isinstance(model, nn.Module):
            raise UsageError(
                f"{spec}() returned {type(model).__name__}, not a torch.nn.Module", param="model"
            )
        return model

    return Spec(spec, make, False, "classification")


def _error_line(e: BaseException) -> str:
    """The user's code's error as one line (tracking.protocol.one_line is a layer above this one)."""
    return f"{type(e).__name__}: {' '.join(str(e).split())}"[:500]


def _parameters(fn: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    try:
        return dict(inspect.signature(fn).parameters)
    except (TypeError, ValueError):  # a builtin or a C callable: call it without arguments
        return {}


@cache
def resolve(spec: str) -> Spec:
    """The builder for a `model` value (its form was checked by config.spelling.check_model_spec)."""
    return _factory(spec) if ":" in spec else _torchvision(spec)


@cache
def checked(spec: str, shape: tuple[int, int, int], num_classes: int) -> Spec:
    """`spec` resolved, built on the meta device and run on a meta batch of `shape`: a factory's task and
    every model's head width (`Spec.classes`) are read from its output (N×K: classification, N×K×H×W:
    segmentation). Any error is one line naming the parameter, the model's own message included.
    Cached: the CLI's check before the run and the workload's own ask the same question once."""
    resolved = resolve(spec)
    with torch.device("meta"):
        model = resolved.make(num_classes)
    if not isinstance(model, nn.Module):  # torchvision's builders always return one
        raise UsageError(f"{spec} did not build a torch.nn.Module", param="model")
    model.eval()
    try:
        with torch.no_grad():
            raw = model(torch.empty(2, *shape, device="meta"))
    except Exception as e:  # the model's own words on why this input does not fit it
        raise UsageError(
            f"{resolved.name} does not take {'x'.join(map(str, shape))} inputs: {_error_line(e)}",
            param="input",
        ) from None
    out = one_per_sample(raw, 2, resolved.name)
    if out.dim() not in (2, 4):
        raise UsageError(
            f"{resolved.name} returned {tuple(out.shape)}; expected N×classes (classification) or N×classes×H×W "
            "(segmentation)",
            param="model",
        )
    task = "classification" if out.dim() == 2 else "segmentation"
    if out.dim() == 4 and tuple(out.shape[2:]) != shape[1:]:
        raise UsageError(
            f"{resolved.name} maps {shape[1]}x{shape[2]} inputs to {out.shape[2]}x{out.shape[3]} outputs; "
            "a segmentation model's output must match its input's height and width",
            param="input",
        )
    torchvision = resolved.torchvision and task == resolved.task
    wraps = not isinstance(raw, torch.Tensor)
    one = _trains_on_one(model, shape)
    return Spec(resolved.name, resolved.make, torchvision, task, int(out.shape[1]), wraps, one)


def served_checked(module: nn.Module, shape: tuple[int, ...], name: str) -> None:
    """A loaded model (its weights real, on the CPU) run on a meta batch of 2 with meta stand-ins for its
    weights: no memory, no compute. An output that is not one per sample is one line naming `model_uri`;
    a model that cannot run on the meta device is left to the run's first request, which asks again."""
    state = {**dict(module.named_parameters()), **dict(module.named_buffers())}
    meta = {k: torch.empty_like(v, device="meta") for k, v in state.items()}
    try:
        with torch.no_grad():
            raw = torch.func.functional_call(module, meta, (torch.empty(2, *shape, device="meta"),))
    except Exception:  # a tensor the module holds outside its parameters and buffers, a CPU-only op
        return
    one_per_sample(raw, 2, name, "model_uri")


def _trains_on_one(model: nn.Module, shape: tuple[int, int, int]) -> bool:
    """Whether a training forward takes a batch of one sample, asked on the meta device: BatchNorm
    refuses one value per channel (a 1×1 map, or BatchNorm1d), so a last batch of one would fail the
    run after a whole epoch's work."""
    model.train()
    try:
        with torch.no_grad():
            model(torch.empty(1, *shape, device="meta"))
    except Exception:  # BatchNorm's "Expected more than 1 value per channel when training", or the like
        return False
    return True
