"""A user's own model: ``file.py:callable``, ``package.module:callable``, a ``.pt2`` file or an
``nn.Module`` object, made into what edgekit runs.

The callable returns an ``nn.Module`` (or an ``ExportedProgram``), or a pair of it and its
example inputs (a tensor, a tuple of tensors or a dict of named tensors), as Polygraphy's
``polygraphy run my.py:load_network`` and AI Hub's ``model=..., input_specs=...`` take them. The
module is wrapped in ``FlatModule`` so that every backend and exporter sees one contract:
positional tensors in the input spec's order, a flat tuple of tensors out, named after the
structure the model returned (a Hugging Face ``ModelOutput``'s keys, a tuple's positions), so
no output is dropped.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import inspect
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from edgekit.errors import UsageError
from edgekit.inputs import InputOverride, InputSpec, spec_from_tensors


class FlatModule(nn.Module):
    """The user's module behind edgekit's contract: positional inputs in, a flat tuple out.

    ``keywords`` calls the module with the inputs as keyword arguments (a Hugging Face model's
    ``input_ids=..., attention_mask=...``), else positionally."""

    def __init__(self, inner: nn.Module, input_names: Sequence[str], keywords: bool) -> None:
        super().__init__()
        self.inner = inner
        self.input_names = list(input_names)
        self.keywords = keywords

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.keywords:
            out = self.inner(**dict(zip(self.input_names, inputs, strict=True)))
        else:
            out = self.inner(*inputs)
        return tuple(t for _, t in flatten_outputs(out))


def flatten_outputs(out: Any, prefix: str = "") -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) for every tensor in a model's output, depth first: a lone tensor is
    ``output``, a mapping's entries take their keys (None values skipped, as a ModelOutput
    does), a sequence's take ``output_<i>`` (nested: ``<key>.<i>``)."""
    if isinstance(out, torch.Tensor):
        return [(prefix or "output", out)]
    if isinstance(out, Mapping):
        found = []
        for key, value in out.items():
            if value is not None:
                found += flatten_outputs(value, f"{prefix}.{key}" if prefix else str(key))
        return found
    if isinstance(out, (tuple, list)):
        found = []
        for i, value in enumerate(out):
            if value is not None:
                found += flatten_outputs(value, f"{prefix}.{i}" if prefix else f"output_{i}")
        return found
    raise UsageError(f"the model returned a {type(out).__name__}"
                     + (f" at '{prefix}'" if prefix else "")
                     + "; edgekit takes tensors, tuples and dicts of tensors")


@dataclass(frozen=True)
class LoadedModel:
    """A user's module as loaded, before it is adapted: its example inputs if it came with any
    (names, tensors), whether to call it by keyword, and where it came from."""

    module: nn.Module
    example_names: tuple[str, ...]
    example: tuple[torch.Tensor, ...]
    keywords: bool
    origin: str  # what the user wrote: "my_model.py:build", "model.pt2", "nn.Module MyNet"
    files: tuple[Path, ...] = ()  # what it was read from, for provenance and overlap checks


class ProgramModule(nn.Module):
    """An ``ExportedProgram``'s module. Its train/eval behaviour was fixed when it was exported
    and its graph module refuses ``train()``/``eval()``, so mode changes stop here."""

    def __init__(self, graph_module: nn.Module) -> None:
        super().__init__()
        self.program = graph_module

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.program(*args, **kwargs)

    def train(self, mode: bool = True) -> ProgramModule:
        self.training = mode
        return self


def _forward_names(module: nn.Module) -> list[str]:
    """The names of ``forward``'s positional parameters (``*args`` and keyword-only left out)."""
    if isinstance(module, ProgramModule):
        module = module.program
    try:
        params = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in params if p.kind in kinds]


def _as_module(obj: Any, origin: str) -> nn.Module:
    if isinstance(obj, torch.export.ExportedProgram):
        return ProgramModule(obj.module())
    if isinstance(obj, nn.Module):
        return obj
    raise UsageError(f"{origin} returned a {type(obj).__name__}, not an nn.Module",
                     hint="return a module, or (module, example_inputs)")


def from_object(obj: Any, origin: str, files: Sequence[Path] = ()) -> LoadedModel:
    """What a callable returned (or an object handed to the API) as a ``LoadedModel``."""
    example: Any = None
    if isinstance(obj, tuple) and len(obj) == 2 and not isinstance(obj[0], torch.Tensor):
        obj, example = obj
    if isinstance(obj, torch.export.ExportedProgram) and example is None \
            and obj.example_inputs is not None:
        args, kwargs = obj.example_inputs
        example = dict(kwargs) if kwargs and not args else tuple(args)
    module = _as_module(obj, origin)
    if example is None:
        return LoadedModel(module, (), (), False, origin, tuple(files))
    if isinstance(example, torch.Tensor):
        example = (example,)
    if isinstance(example, Mapping):
        names, tensors, keywords = tuple(map(str, example)), tuple(example.values()), True
    elif isinstance(example, (tuple, list)):
        forward = _forward_names(module)
        tensors = tuple(example)
        names = tuple(forward[i] if i < len(forward) else f"input_{i}"
                      for i in range(len(tensors)))
        keywords = False
    else:
        raise UsageError(f"{origin}: example inputs must be a tensor, a tuple or a dict of "
                         f"tensors, not {type(example).__name__}")
    bad = [n for n, t in zip(names, tensors, strict=True) if not isinstance(t, torch.Tensor)]
    if bad:
        raise UsageError(f"{origin}: example input '{bad[0]}' is not a tensor")
    return LoadedModel(module, names, tensors, keywords, origin, tuple(files))


def import_user_script(path: Path) -> Any:
    """A user's script as a module (``edgekit.scripts``); its failure is one line."""
    from edgekit.scripts import NotImportable, import_script

    try:
        return import_script(path, "edgekit_user")
    except NotImportable as exc:
        raise UsageError(str(exc)) from exc
    except Exception as exc:
        raise UsageError(f"importing {path} failed: {type(exc).__name__}: {exc}",
                         hint="run with --debug for the full trace") from exc


def load_callable(target: str) -> LoadedModel:
    """``path/to/file.py:callable`` or ``package.module:callable``, called with no arguments."""
    where, _, attr = target.rpartition(":")
    files: tuple[Path, ...] = ()
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise UsageError(f"{path} does not exist")
        module = import_user_script(path)
        files = (path.resolve(),)
    else:
        try:
            module = importlib.import_module(where)
        except Exception as exc:
            raise UsageError(f"cannot import '{where}': {type(exc).__name__}: {exc}") from exc
        if getattr(module, "__file__", None):
            files = (Path(module.__file__),)
    fn = getattr(module, attr, None)
    if fn is None or not callable(fn):
        have = sorted(n for n, v in vars(module).items()
                      if callable(v) and not n.startswith("_") and getattr(v, "__module__", "")
                      == module.__name__)
        raise UsageError(f"{where} has no callable '{attr}'",
                         hint=f"it has {', '.join(have[:12]) or 'none'}")
    try:
        obj = fn()
    except UsageError:
        raise
    except Exception as exc:
        raise UsageError(f"{target} raised {type(exc).__name__}: {exc}",
                         hint="run with --debug for the full trace") from exc
    return from_object(obj, target, files)


@contextlib.contextmanager
def _weights_only_loads() -> Iterator[None]:
    """Every ``torch.load`` inside (``torch.export.load`` falls back to full unpickling when a
    weights-only load fails) stays weights-only: a ``.pt2`` never runs code it carries."""
    saved = {k: os.environ.get(k) for k in ("TORCH_FORCE_WEIGHTS_ONLY_LOAD",
                                            "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")}
    os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"
    os.environ.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def load_pt2(path: Path) -> LoadedModel:
    """A ``torch.export.save`` file, loaded without unpickling anything but tensors."""
    if not path.is_file():
        raise UsageError(f"{path} does not exist")
    try:
        with _weights_only_loads():
            program = torch.export.load(str(path))
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise UsageError(f"{path} is not a loadable torch.export program: {first}") from exc
    return from_object(program, str(path), (path.resolve(),))


def adapt(loaded: LoadedModel, overrides: Sequence[InputOverride] = ()) -> tuple[
        nn.Module, InputSpec, tuple[str, ...]]:
    """The module edgekit runs (wrapped in ``FlatModule`` where the user's takes keywords or
    returns more than a flat tuple of tensors), its input spec and its output names.

    Inputs come from the example inputs, changed by ``--input`` (``overrides``); with no
    example, ``--input`` must name every input. The outputs are named by running the module
    once on example inputs, which also shows at once a spec the module does not accept."""
    module = loaded.module.eval()
    if loaded.example:
        spec = spec_from_tensors(loaded.example_names, loaded.example).with_overrides(overrides)
        keywords = loaded.keywords
    elif overrides:
        spec = InputSpec(tuple(o.apply() for o in overrides))
        forward = _forward_names(module)
        keywords = bool(forward) and set(spec.names) <= set(forward) \
            and spec.names != forward[:len(spec.names)]
    else:
        forward = _forward_names(module)
        shape = "x".join(["1", "..."])
        raise UsageError(f"{loaded.origin} came with no example inputs, so edgekit does not know "
                         f"the shapes it takes",
                         hint=f"give each input: --input {forward[0] if forward else 'input'}:"
                              f"{shape}[:DTYPE], or return (module, example_inputs)")
    try:
        with torch.inference_mode():
            out = module(**dict(zip(spec.names, spec.example(), strict=True))) if keywords \
                else module(*spec.example())
    except UsageError:
        raise
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise UsageError(f"{loaded.origin} does not run on inputs {spec.describe()}: "
                         f"{type(exc).__name__}: {first}",
                         hint="check --input against what the model takes") from exc
    names = tuple(n for n, _ in flatten_outputs(out))
    if not names:
        raise UsageError(f"{loaded.origin} returned no tensor")
    plain = isinstance(out, torch.Tensor) or (isinstance(out, (tuple, list))
                                              and all(isinstance(t, torch.Tensor) for t in out))
    if plain and not keywords:  # it keeps edgekit's contract already: left as it is (a spiking
        return module, spec, names  # MultiStepNet stays one, for NIR and simulate)
    return FlatModule(module, spec.names, keywords).eval(), spec, names


def weights_sha256(module: nn.Module) -> str:
    """SHA-256 over the module's state (names sorted; each name, dtype, shape and raw bytes), so
    a user's weights are named by their content in every manifest and report."""
    h = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{list(t.shape)};".encode())
        if t.numel():
            h.update(t.view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()
