"""Do ONNX Runtime's spikes agree with PyTorch's? Element by element, with ties explained.

Exporting a spiking net to ONNX unrolls its T steps and keeps each neuron's membrane state inside
the graph. Comparing logits within a tolerance says little about the spikes themselves: a neuron
whose membrane lands within float32 rounding of the threshold may fire in one runtime and not in
the other, and that flip is legitimate. This module checks the spikes directly.

A probe copy of the model returns, besides the logits, every LIF layer's spikes and its margin
``h - v_th`` (``h``: the membrane after charging, before firing, recomputed from the layer's input
and its stored membrane sequence with the LIF equation). The probe goes through the same steps as
an artifact (the entry's exporter settings, then onnxslim: its rewrites, BatchNorm folded into the
convolutions for one, change float rounding, hence which ties flip) and runs on ONNX Runtime and
on PyTorch over the same inputs.

A disagreement is a *root* when it is the first of its sample: in the first layer (in run order)
where that sample disagrees, the earliest step at which each neuron disagrees. Every other
disagreement follows from a root (through the neuron's own reset, or downstream layers). A root
sits at a *tie* when ``|h - v_th| < eps`` in either runtime. The ONNX export is sound when spikes
agree on at least ``min_agreement`` of all elements and every root sits at a tie.
"""
from __future__ import annotations

import copy
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from edgekit.errors import UsageError
from edgekit.exporters.onnx import export_graph
from edgekit.spiking.layers import MultiStepNet, neuron
from edgekit.targets import ModelSource

DEFAULT_EPS = 1e-4
MIN_AGREEMENT = 0.999


@dataclass(frozen=True)
class LayerAgreement:
    name: str
    elements: int
    spikes_torch: int
    disagree: int
    at_tie: int  # disagreements with |h - v_th| < eps in either runtime
    roots: int
    roots_at_tie: int
    ties_torch: int  # elements with |h - v_th| < eps in PyTorch, agreeing or not


@dataclass(frozen=True)
class AgreementReport:
    model: str
    samples: int
    T: int
    eps: float
    min_agreement: float
    layers: tuple[LayerAgreement, ...]
    logits_max_abs: float
    predictions_differ: int

    @property
    def elements(self) -> int:
        return sum(layer.elements for layer in self.layers)

    @property
    def disagree(self) -> int:
        return sum(layer.disagree for layer in self.layers)

    @property
    def agreement(self) -> float:
        return 1.0 - self.disagree / self.elements if self.elements else 1.0

    @property
    def roots(self) -> int:
        return sum(layer.roots for layer in self.layers)

    @property
    def roots_at_tie(self) -> int:
        return sum(layer.roots_at_tie for layer in self.layers)

    @property
    def passed(self) -> bool:
        return self.agreement >= self.min_agreement and self.roots_at_tie == self.roots

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc.update(elements=self.elements, disagree=self.disagree, agreement=self.agreement,
                   roots=self.roots, roots_at_tie=self.roots_at_tie, passed=self.passed)
        return doc

    def summary(self) -> str:
        return (f"{self.model}: spikes agree on {self.agreement * 100:.7f}% of "
                f"{self.elements:,} elements ({self.samples} samples, T={self.T}); "
                f"{self.disagree} disagree, {self.roots} first disagreements, "
                f"{self.roots_at_tie} of them at threshold ties (|h - v_th| < {self.eps:g}); "
                f"logits max abs diff {self.logits_max_abs:.3g}")


class _Probe(nn.Module):
    """The model, returning logits plus every LIF layer's spikes and margin h - v_th."""

    def __init__(self, model: MultiStepNet) -> None:
        super().__init__()
        self.model = copy.deepcopy(model).eval()
        self.names: list[str] = []
        self._records: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        for name, module in self.model.named_modules():
            if isinstance(module, neuron.BaseNode):
                if type(module) not in (neuron.LIFNode, neuron.IFNode) or module.v_reset is None:
                    raise UsageError(f"spike agreement supports hard-reset LIF and IF neurons; "
                                     f"layer {name} is a {type(module).__name__}")
                module.store_v_seq = True
                module.register_forward_hook(self._record(name))
                self.names.append(name)

    def _record(self, name: str):
        def hook(module: nn.Module, args: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
            self._records[name] = (args[0], out, module.v_seq)
        return hook

    @staticmethod
    def _margin(module: nn.Module, x_seq: torch.Tensor, v_seq: torch.Tensor) -> torch.Tensor:
        """h[t] - v_th, with v[t-1] the stored membrane after the previous step's reset."""
        v_prev = torch.cat([torch.full_like(v_seq[:1], module.v_reset), v_seq[:-1]])
        if isinstance(module, neuron.LIFNode):
            if module.decay_input:
                h = v_prev + (x_seq - (v_prev - module.v_reset)) / module.tau
            else:
                h = v_prev - (v_prev - module.v_reset) / module.tau + x_seq
        else:  # IF
            h = v_prev + x_seq
        return h - module.v_threshold

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        self._records = {}
        logits = self.model(x)
        modules = dict(self.model.named_modules())
        spikes, margins = [], []
        for name in self.names:
            x_seq, out, v_seq = self._records[name]
            spikes.append(out)
            margins.append(self._margin(modules[name], x_seq, v_seq))
        return (logits, *spikes, *margins)


def _export(probe: _Probe, example: torch.Tensor, path: Path, opset: int, dynamo: bool) -> None:
    names = ["logits"] + [f"spikes.{i}" for i in range(len(probe.names))] \
        + [f"margin.{i}" for i in range(len(probe.names))]
    with torch.no_grad():
        export_graph(probe, (example,), path, opset=opset, input_names=["input"],
                     output_names=names, dynamo=dynamo, dynamic_batch=True,
                     batch_axes={n: 1 for n in names[1:]})  # spikes and margins: [T, B, ...]


def _roots(disagree: list[np.ndarray]) -> list[np.ndarray]:
    """Per layer, a boolean mask of the disagreements that are roots (see the module docstring).

    ``disagree[l]`` has shape [T, B, ...]; the layers are in run order.
    """
    batch = disagree[0].shape[1]
    seen = np.zeros(batch, dtype=bool)  # the sample already disagreed in an earlier layer
    roots = []
    for d in disagree:
        flat = d.reshape(d.shape[0], batch, -1)  # [T, B, neurons]
        first_layer = flat.any(axis=(0, 2)) & ~seen  # this layer is the sample's first
        first_t = np.where(flat.any(axis=0), flat.argmax(axis=0), -1)  # [B, neurons]
        root = np.zeros_like(flat)
        b, n = np.nonzero((first_t >= 0) & first_layer[:, None])
        root[first_t[b, n], b, n] = True
        roots.append(root.reshape(d.shape))
        seen |= flat.any(axis=(0, 2))
    return roots


def spike_agreement(source: ModelSource, x: np.ndarray, *, eps: float = DEFAULT_EPS,
                    min_agreement: float = MIN_AGREEMENT, batch_size: int = 64,
                    opset: int | None = None) -> AgreementReport:
    """Export ``source`` (as a probe) to ONNX and compare its spikes with PyTorch's on ``x``."""
    from edgekit.backends import make_session

    model = source.model
    if not isinstance(model, MultiStepNet):
        raise UsageError(f"{source.name} is not a multi-step spiking net")
    if not eps > 0:
        raise UsageError(f"eps must be positive, got {eps}")
    probe = _Probe(model)
    if not probe.names:
        raise UsageError(f"{source.name} has no spiking neurons to compare")
    settings = source.export_settings
    # per layer: elements, PyTorch spikes, disagreements, at ties, roots, roots at ties,
    # PyTorch ties
    stats = {name: np.zeros(7, dtype=np.int64) for name in probe.names}
    logits_diff, predictions_differ = 0.0, 0
    with tempfile.TemporaryDirectory(prefix="edgekit-agreement-") as tmp:
        path = Path(tmp) / "probe.onnx"
        _export(probe, torch.from_numpy(x[:2]), path, opset or settings.opset, settings.dynamo)
        session = make_session(path, threads=None)
        k = len(probe.names)
        for start in range(0, len(x), batch_size):
            xb = x[start:start + batch_size]
            ort_out = session.run(None, {"input": xb})
            with torch.no_grad():
                torch_out = [t.numpy() for t in probe(torch.from_numpy(xb))]
            logits_diff = max(logits_diff, float(np.abs(ort_out[0] - torch_out[0]).max()))
            predictions_differ += int((ort_out[0].argmax(-1) != torch_out[0].argmax(-1)).sum())
            disagree = [ort_out[1 + i] != torch_out[1 + i] for i in range(k)]
            for i, (name, d, root) in enumerate(zip(probe.names, disagree, _roots(disagree),
                                                    strict=False)):
                torch_tie = np.abs(torch_out[1 + k + i]) < eps
                tie = torch_tie | (np.abs(ort_out[1 + k + i]) < eps)
                stats[name] += [d.size, int(torch_out[1 + i].sum()), int(d.sum()),
                                int((d & tie).sum()), int(root.sum()), int((root & tie).sum()),
                                int(torch_tie.sum())]
    layers = tuple(LayerAgreement(name, *map(int, stats[name])) for name in probe.names)
    return AgreementReport(source.name, len(x), model.T, eps, min_agreement, layers, logits_diff,
                           predictions_differ)
