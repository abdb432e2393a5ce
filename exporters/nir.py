"""PyTorch -> NIR (Neuromorphic Intermediate Representation) for spiking nets, validated.

NIR (``nir``, neuroir.org) describes a spiking net per time step with a small set of primitives;
SpikingJelly maps conv, linear, average pooling, flatten and IF/LIF neurons (hard reset) onto them
(``spikingjelly.activation_based.nir_exchange``). Before exporting, edgekit runs the net once and
records every operation that is not one of those modules: a Hadamard product of spike maps, an
attention matmul, a residual add, a BatchNorm, a grouped convolution... Any such operation refuses
the export with a message that names it and the layer it is in, instead of a file a simulator
would run differently.

The exported graph is the net's time-major body, ``[T, B, C, H, W] -> [T, B, classes]``; the
encoding (the image is the input current at every step) and decoding (the mean of the output
over T) of ``MultiStepNet`` are recorded in the manifest. Validation writes the file, reads it
back with ``nir.read``, imports it with SpikingJelly's NIR importer and compares its outputs with
PyTorch's on the entry's example inputs. Everything happens in a staging folder, as for ONNX.
"""
from __future__ import annotations

import operator
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from edgekit.errors import UsageError
from edgekit.exporters.artifact import (
    MANIFEST_SCHEMA,
    ArtifactOptions,
    ExportResult,
    file_record,
    task_record,
    write_manifest,
)
from edgekit.exporters.reference import make_spiking_net_fire
from edgekit.exporters.validate import ValidationFailed, ValidationReport, compare_outputs
from edgekit.fileio import atomic_directory
from edgekit.optional import SPIKING, require
from edgekit.provenance import provenance
from edgekit.spiking.layers import MultiStepNet, functional, layer, mean_firing_rate, neuron
from edgekit.targets import ModelSource

MODEL_FILE = "model.nir"
DEFAULT_DT = 1e-4  # seconds per step; SpikingJelly's and most NIR simulators' default
VALIDATION_BATCH = 4
NIR_PRIMITIVES = "conv, linear, LIF/IF neurons, average pooling and flatten"

# The module types SpikingJelly's NIR exporter maps (nir_exchange/to_nir.py), by exact type.
_SUPPORTED = (nn.Linear, layer.Linear, nn.Conv1d, layer.Conv1d, nn.Conv2d, layer.Conv2d,
              nn.AvgPool2d, layer.AvgPool2d, nn.Flatten, layer.Flatten, neuron.IFNode,
              neuron.LIFNode, neuron.ParametricLIFNode, neuron.CUBALIFNode)
_CONTAINERS = (nn.Sequential,)
_HARMLESS = {"__get__", "size", "dim", "numel", "__len__", "__format__", "__repr__"}
_BINARY = {"mul": "Hadamard product (elementwise mul of two tensors)", "add": "elementwise add",
           "sub": "elementwise sub", "div": "elementwise div", "matmul": "matmul",
           "bmm": "matmul"}


@dataclass(frozen=True)
class Blocker:
    """An operation NIR cannot express, and the layer it is in."""

    layer: str
    operation: str
    rank: int  # message order: multi-spike neurons, arithmetic, reductions, reshapes, modules

    def __str__(self) -> str:
        return f"{self.operation} in layer '{self.layer}'"


def _config_problem(module: nn.Module) -> str | None:
    """Why a module of a supported type still has no NIR form, or None."""
    if isinstance(module, (nn.Conv1d, nn.Conv2d)):
        if module.groups != 1:
            return f"grouped {type(module).__name__} (groups={module.groups})"
        if module.padding_mode != "zeros":
            return f"{type(module).__name__} with {module.padding_mode} padding"
    if isinstance(module, neuron.BaseNode) and module.v_reset is None:
        return f"soft-reset {type(module).__name__}"
    if isinstance(module, nn.AvgPool2d) and (module.ceil_mode or module.divisor_override):
        return "AvgPool2d with ceil_mode or divisor_override"
    return None


def _unsupported(module: nn.Module) -> tuple[str, int]:
    """A module type NIR has no node for and its rank; a neuron firing several spikes a step
    (edgekit.spiking.xylo_neuron.XyloLIFNode) comes first, with the reason."""
    if getattr(module, "max_spikes", 1) > 1:
        return (f"{type(module).__name__} firing up to {module.max_spikes} spikes per step "
                "(NIR's LIF, CubaLIF and IF nodes fire at most once per step)"), -1
    return type(module).__name__, 3


def _describe(func: Any, args: tuple) -> tuple[str, int]:
    name = getattr(func, "__name__", str(func)).strip("_")
    name = {"iadd": "add", "imul": "mul", "rmul": "mul", "radd": "add", "truediv": "div",
            "rsub": "sub"}.get(name, name)
    tensors = sum(isinstance(a, torch.Tensor) for a in args)
    if name in _BINARY:
        if name == "mul" and tensors < 2:
            return "scaling by a constant", 1
        return _BINARY[name], 0
    if name in ("mean", "sum", "amax", "max"):
        return name, 1
    return name, 2


class _Recorder(TorchFunctionMode):
    """Records torch operations that run outside every supported module."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.stack: list[tuple[str, bool]] = []  # (module name, covered: its ops are accounted)
        self.blockers: list[Blocker] = []
        self.handles = []
        for name, module in model.named_modules():
            self.handles.append(module.register_forward_pre_hook(self._enter(name, module)))
            self.handles.append(module.register_forward_hook(self._leave))

    def _covered(self) -> bool:
        return any(covered for _, covered in self.stack)

    def _enter(self, name: str, module: nn.Module):
        def hook(mod: nn.Module, args: Any) -> None:
            covered = False
            if not self._covered():
                if type(module) in _SUPPORTED:
                    problem = _config_problem(module)
                    if problem:
                        self.blockers.append(Blocker(name, problem, 3))
                    covered = True
                elif isinstance(module, neuron.BaseNode) or (
                        not isinstance(module, _CONTAINERS) and not any(module.children())):
                    self.blockers.append(Blocker(name, *_unsupported(module)))
                    covered = True
            self.stack.append((name, covered))
        return hook

    def _leave(self, mod: nn.Module, args: Any, out: Any) -> None:
        self.stack.pop()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self._covered():
            name = getattr(func, "__name__", "")
            if name not in _HARMLESS and func is not operator.getitem:
                operation, rank = _describe(func, args)
                where = self.stack[-1][0] if self.stack else ""
                self.blockers.append(Blocker(where or "forward_seq", operation, rank))
        return func(*args, **kwargs)

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()


class TimeMajorBody(nn.Module):
    """The time-major part of a ``MultiStepNet`` as a module, which is what NIR describes."""

    def __init__(self, model: MultiStepNet) -> None:
        super().__init__()
        self.model = model

    def forward(self, x_seq: torch.Tensor) -> torch.Tensor:
        return self.model.forward_seq(x_seq)


def example_sequence(source: ModelSource, batch: int) -> torch.Tensor:
    (x,) = source.example_inputs(batch=batch)
    return source.model.encode(x)  # [T, B, C, H, W]


@torch.no_grad()
def nir_blockers(source: ModelSource) -> list[Blocker]:
    """Every operation of ``source`` NIR cannot express, in the order they first run."""
    model = source.model.eval()
    recorder = _Recorder(model)
    functional.reset_net(model)
    x_seq = example_sequence(source, 1)
    try:
        with recorder:
            model.forward_seq(x_seq)
    finally:
        recorder.close()
        functional.reset_net(model)
    return recorder.blockers


def nir_refusal(name: str, blockers: list[Blocker]) -> UsageError:
    groups: dict[str, list[Blocker]] = {}
    for b in sorted(blockers, key=lambda b: b.rank):  # stable: run order within a rank
        groups.setdefault(b.operation, []).append(b)
    (first, *_), *others = groups.values()
    layers = sorted({b.layer for b in groups[first.operation]})
    first_text = f"the {first.operation} in layer '{first.layer}'" + (
        f" (and in {len(layers) - 1} more)" if len(layers) > 1 else "")
    also = "; ".join(
        f"{g[0].operation} in '{g[0].layer}'"
        + (f" and {len({b.layer for b in g}) - 1} more" if len({b.layer for b in g}) > 1 else "")
        for g in others)
    hint = f"NIR expresses {NIR_PRIMITIVES}" + (f"; also not expressible: {also}" if also else "")
    return UsageError(f"{name} cannot be exported to NIR: {first_text} has no NIR primitive",
                      hint=hint)


FIRING_RULE = "v >= v_threshold"  # SpikingJelly's Heaviside: a membrane on the threshold fires
RESET = "hard reset to v_reset, in the step the neuron fires"


def conform(graph: Any, dt: float) -> Any:
    """Make SpikingJelly's NIR graph spec-conformant and self-describing, in place.

    * ``AvgPool2d``/``SumPool2d``: NIR declares ``kernel_size``, ``stride`` and ``padding`` as
      (height, width) arrays; SpikingJelly writes the module's ints as scalars, which readers
      that do ``tuple(node.kernel_size)`` (snnTorch, Norse) cannot take.
    * ``Flatten``: NIR types exclude the batch dimension, so SpikingJelly writes ``start_dim=0``
      for a flatten of (C, H, W); snnTorch, Norse and nirtorch pass the dims verbatim to
      ``torch.nn.Flatten`` on a batched tensor and would flatten the batch too. Negative dims
      (counted from the end) mean the same thing with or without a batch dimension, so the
      node is rewritten with them; ``nir`` computes the same output type.
    * ``metadata``: dt (NIR's neurons are continuous-time; the time constants were divided by
      this dt, and snnTorch's importer assumes 1e-4 s without reading it), the firing rule
      (SpikingJelly fires at v >= threshold, snnTorch and Norse at v > threshold: outputs can
      differ only where a membrane sits exactly on the threshold) and the reset.
    """
    import numpy as np

    nir = require("nir", SPIKING, "NIR export")
    for node in graph.nodes.values():
        if isinstance(node, (nir.AvgPool2d, nir.SumPool2d)):
            for field in ("kernel_size", "stride", "padding"):
                value = np.asarray(getattr(node, field), dtype=np.int64).reshape(-1)
                setattr(node, field, np.broadcast_to(value, (2,)).copy())
        elif isinstance(node, nir.Flatten) and node.input_type["input"] is not None:
            rank = len(node.input_type["input"])
            node.start_dim = int(node.start_dim - rank if node.start_dim >= 0 else node.start_dim)
            node.end_dim = int(node.end_dim - rank if node.end_dim >= 0 else node.end_dim)
    graph.metadata = {**(getattr(graph, "metadata", None) or {}), "dt": float(dt),
                      "firing_rule": FIRING_RULE, "reset": RESET, "writer": "edgekit"}
    return graph


def _import_and_run(path: Path, x_seq: torch.Tensor, dt: float) -> torch.Tensor:
    """``nir.read`` the file, import it with SpikingJelly, run it multi-step from rest."""
    nir = require("nir", SPIKING, "NIR export")
    from spikingjelly.activation_based.nir_exchange import import_from_nir

    graph = nir.read(str(path))
    imported = import_from_nir(graph, dt=dt, step_mode="m").eval()
    out, _ = imported(x_seq)
    return out


def validate_nir(path: Path, source: ModelSource, dt: float, atol: float, rtol: float,
                 batch: int = VALIDATION_BATCH) -> ValidationReport:
    """The NIR file, read back and run by SpikingJelly, against PyTorch on example inputs."""
    with torch.no_grad():
        x_seq = example_sequence(source, batch)
        functional.reset_net(source.model)
        reference = source.model.forward_seq(x_seq)  # [T, B, classes]
        actual = _import_and_run(path, x_seq, dt)
    return compare_outputs({"output": actual.numpy()}, {"output": reference.numpy()}, atol, rtol,
                           against="torch", inputs=f"example inputs, batch {batch}, "
                                                   f"T={source.model.T}, run from rest")


def export_nir(source: ModelSource, out_dir: str | Path, options: ArtifactOptions | None = None,
               *, dt: float = DEFAULT_DT) -> ExportResult:
    """Export a spiking net to ``out_dir/model.nir`` with a manifest; refuses nets NIR cannot
    express (UsageError naming the operation and layer) and fails beyond tolerance."""
    options = options if options is not None else ArtifactOptions()
    nir = require("nir", SPIKING, "NIR export")
    from spikingjelly.activation_based.nir_exchange import export_to_nir

    model = source.model.eval()
    if not source.spiking or not isinstance(model, MultiStepNet):
        raise UsageError(f"{source.name} is not a spiking net; NIR describes spiking nets",
                         hint="export it with --to onnx")
    if not dt > 0:
        raise UsageError(f"dt must be positive, got {dt}")
    blockers = nir_blockers(source)
    if blockers:
        raise nir_refusal(source.name, blockers)
    atol = source.export_settings.atol if options.atol is None else options.atol
    rtol = source.export_settings.rtol if options.rtol is None else options.rtol
    started = time.perf_counter()
    spiking = make_spiking_net_fire(source)
    (x_rate,) = source.example_inputs(batch=1)
    spiking["firing_rate"] = mean_firing_rate(model, x_rate)
    spiking["firing_rate_of"] = "every spiking neuron on the model's example input (batch 1)"
    with atomic_directory(out_dir, inputs=source.files, force=options.force) as staging:
        model_path = staging / MODEL_FILE
        functional.reset_net(model)
        with torch.no_grad():
            nir_graph = export_to_nir(TimeMajorBody(model), example_sequence(source, 1), dt=dt)
            graph = conform(nir_graph, dt)
        functional.reset_net(model)
        nir.write(str(model_path), graph)
        report = validate_nir(model_path, source, dt, atol, rtol)
        if not report.passed:
            raise ValidationFailed(report, f"NIR export of {source.name}")
        T = model.T
        (field,) = source.inputs.fields
        with torch.no_grad():
            classes = int(model(x_rate).shape[-1])
        functional.reset_net(model)
        manifest = {
            "schema_version": MANIFEST_SCHEMA,
            "format": "nir",
            "model_file": MODEL_FILE,
            "source": source.record(),
            "task": task_record(source.task) if source.task is not None else None,
            "inputs": [{"name": "input", "shape": [T, "batch", *field.shape[1:]],
                        "dtype": field.dtype}],
            "outputs": [{"name": "output", "shape": [T, "batch", classes],
                         "dtype": "float32"}],
            "timesteps": T,
            "dt_s": dt,
            "firing_rule": FIRING_RULE,
            "reset": RESET,
            "encoding": "direct: the (batch, C, H, W) input is the input current at each of the "
                        "T steps",
            "decoding": "rate: logits = mean over the T steps of the output node",
            "nodes": {name: type(node).__name__ for name, node in graph.nodes.items()},
            "edges": [list(e) for e in graph.edges],
            "validation": report.to_dict(),
            "spiking": spiking,
            "target_device": options.device,
            "files": {MODEL_FILE: file_record(model_path)},
            "export_seconds": round(time.perf_counter() - started, 3),
            "provenance": provenance(),
        }
        write_manifest(staging, manifest)
    return ExportResult(Path(out_dir), manifest, report, time.perf_counter() - started)
