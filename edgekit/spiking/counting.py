"""Count what a spiking net does on real inputs: spikes per neuron layer, MACs, ACs, SOPs.

The operation counts are SpikingJelly's (``spikingjelly.activation_based.op_counter``): a
``SimpleEnergyProfiler`` runs its ``MACCounter``, ``ACCounter`` and ``SynOpCounter`` at the ATen
dispatch level, where an operand that holds only 0 and 1 is a spike tensor. A matmul or
convolution with a spike operand costs accumulates (ACs; the spike-driven ones are the synaptic
operations, SOPs = spikes x fan-out, i.e. fr · T · MACs of the layer), one with only real operands
costs MACs. BatchNorm is left out of both, as it folds into the preceding convolution at
deployment (SpikingJelly's own advice). Counts are kept per module scope; ``own`` counts of a
module exclude its children, so an attention block's own row holds its matmuls.

edgekit adds only what the counters do not see: spikes and neuron updates per neuron layer, the
spike rate entering each synaptic layer, and the spikes each attention block sends between cores.
One correction: a linear layer fed by a neuron that fires several spikes a step (Xylo's,
``edgekit.spiking.xylo_neuron``) gets spike counts, which the counters take for real values
(MACs); the chip delivers each spike as an event (``xylo_sim``), so edgekit counts it as
spikes x fan-out synaptic operations (ACs) instead. SpikingJelly's own energy report
(``simple_energy``) keeps its counters' view.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import _disable_current_modes

from edgekit.spiking.communication import CoreCommunication, communication_blocks
from edgekit.spiking.layers import neuron

COUNTER_SOURCE = ("spikingjelly.activation_based.op_counter.SimpleEnergyProfiler "
                  "(MACCounter, ACCounter, SynOpCounter); BatchNorm ignored (folds into its conv)")


@dataclass
class LayerCounts:
    """Totals over every sample simulated (divide by ``samples`` for one inference)."""

    name: str
    type: str
    macs: int = 0
    acs: int = 0
    sops: int = 0
    spikes: int = 0  # neuron layers: spikes emitted
    neuron_updates: int = 0  # neuron layers: neurons x T x samples
    input_ones: int = 0  # synaptic layers: non-zero input elements (spikes, for spike counts)
    input_elements: int = 0
    event_sops: int = 0  # linear layers fed spike counts: spikes x fan-out

    @property
    def is_neuron(self) -> bool:
        return self.neuron_updates > 0

    def per_inference(self, samples: int) -> dict[str, Any]:
        doc: dict[str, Any] = {"name": self.name, "type": self.type,
                               "macs": self.macs / samples, "acs": self.acs / samples,
                               "sops": self.sops / samples}
        if self.is_neuron:
            doc.update(spikes=self.spikes / samples, neuron_updates=self.neuron_updates / samples,
                       firing_rate=self.spikes / self.neuron_updates)
        if self.input_elements:
            doc["input_rate"] = self.input_ones / self.input_elements
        return doc


@dataclass
class AttentionCounts:
    name: str
    kind: str
    T: int = 0
    N: int = 0
    D: int = 0
    formula: str = ""  # the block's own formula for values_moved
    values_moved: int = 0  # per sample, by the block's communication model
    spikes_moved: int = 0  # over all samples: spikes of comm_source x cores each reaches


@dataclass
class Counts:
    samples: int = 0
    layers: dict[str, LayerCounts] = field(default_factory=dict)
    attention: dict[str, AttentionCounts] = field(default_factory=dict)
    totals: dict[str, int] = field(default_factory=dict)  # SpikingJelly's global counts
    simple_energy: Any = None  # SpikingJelly's SimpleEnergyReport (sums over all samples)


_SYNAPTIC = (nn.Conv1d, nn.Conv2d, nn.Linear)


def _is_binary(x: torch.Tensor) -> bool:
    return bool(((x == 0) | (x == 1)).all())


def _uncounted(hook):
    """Run a hook outside SpikingJelly's dispatch mode, so its own tensor ops are not counted."""
    def wrapper(*args: Any) -> Any:
        with _disable_current_modes():
            return hook(*args)
    return wrapper


class _Hooks:
    """Forward hooks that count spikes, neuron updates, synaptic input rates and sent spikes."""

    def __init__(self, model: nn.Module, counts: Counts) -> None:
        self.counts = counts
        self.handles: list[Any] = []
        self.spike_counts: dict[str, torch.Tensor] = {}  # multi-spike neurons' latest outputs
        for name, module in model.named_modules():
            if isinstance(module, neuron.BaseNode):
                self._layer(name, module)
                self.handles.append(module.register_forward_hook(self._on_neuron(name)))
            elif isinstance(module, _SYNAPTIC):
                self._layer(name, module)
                self.handles.append(module.register_forward_pre_hook(self._on_synapse(name)))
        for name, block in communication_blocks(model):
            counts.attention[name] = AttentionCounts(name, block.kind, D=block.D,
                                                     formula=block.communication_formula)
            source = getattr(block, block.comm_source)
            self.handles.append(block.register_forward_pre_hook(
                self._on_attention_input(name, block)))
            self.handles.append(source.register_forward_hook(self._on_sent(name, block)))

    def _layer(self, name: str, module: nn.Module) -> None:
        self.counts.layers.setdefault(name, LayerCounts(name, type(module).__name__))

    def _on_neuron(self, name: str):
        @_uncounted
        def hook(module: nn.Module, args: Any, out: torch.Tensor) -> None:
            layer = self.counts.layers[name]
            layer.spikes += int(out.sum())  # a multi-spike neuron's output is spike counts
            layer.neuron_updates += out.numel()
            if getattr(module, "max_spikes", 1) > 1:
                self.spike_counts[name] = out
        return hook

    def _on_synapse(self, name: str):
        @_uncounted
        def hook(module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
            x = args[0]
            layer = self.counts.layers[name]
            if isinstance(module, nn.Linear) and any(x is c for c in self.spike_counts.values()):
                spikes = int(x.sum())
                layer.input_ones += spikes
                layer.input_elements += x.numel()
                layer.event_sops += spikes * module.out_features
            elif _is_binary(x):
                layer.input_ones += int(x.count_nonzero())
                layer.input_elements += x.numel()
        return hook

    def _on_attention_input(self, name: str, block: CoreCommunication):
        @_uncounted
        def hook(module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
            T, _, _, H, W = args[0].shape  # [T, B, C, H, W]
            record = self.counts.attention[name]
            record.T, record.N = T, H * W
            record.values_moved = block.communication(T, H * W)
        return hook

    def _on_sent(self, name: str, block: CoreCommunication):
        @_uncounted
        def hook(module: nn.Module, args: Any, out: torch.Tensor) -> None:
            record = self.counts.attention[name]
            record.spikes_moved += int(out.count_nonzero()) * block.comm_fanout(record.N)
        return hook

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def _own(records: dict[str, dict[Any, int]], root: str) -> dict[str, int]:
    """Per-module counts without their children's, keyed by the module's qualified name."""
    prefix = root + "."
    totals = {scope[len(prefix):]: sum(ops.values()) for scope, ops in records.items()
              if scope.startswith(prefix)}
    own = dict(totals)
    for name, value in totals.items():
        parent = name.rpartition(".")[0]
        if parent in own:
            own[parent] -= value
    return {k: v for k, v in own.items() if v}


@torch.no_grad()
def count(model: nn.Module, batches: Iterable[torch.Tensor]) -> tuple[Counts, list[torch.Tensor]]:
    """Run ``model`` on every batch under SpikingJelly's counters and edgekit's hooks.

    Returns the counts (sums over all samples) and the model's outputs per batch.
    """
    from spikingjelly.activation_based.op_counter import SimpleEnergyConfig, SimpleEnergyProfiler

    counts = Counts()
    profiler = SimpleEnergyProfiler(config=SimpleEnergyConfig(
        extra_ignore_modules=[nn.modules.batchnorm._BatchNorm]))
    profiler.bind_model(model)
    # SpikingJelly 2.0's memory counter computes spike fan-outs with tensor ops inside the
    # dispatch counters, which then count those ops as the model's ACs; run its rules outside.
    memory = profiler.memory_counter
    memory.rules = {key: _uncounted(rule) for key, rule in memory.rules.items()}
    hooks = _Hooks(model, counts)
    outputs = []
    model.eval()
    try:
        with profiler:
            for x in batches:
                outputs.append(model(x))
                counts.samples += int(x.shape[0])
    finally:
        hooks.remove()
    root = type(model).__name__
    for attr, counter in (("macs", profiler.mac_counter), ("acs", profiler.ac_counter),
                          ("sops", profiler.synop_counter)):
        for name, value in _own(counter.get_counts(), root).items():
            layer = counts.layers.setdefault(name, LayerCounts(name, _type_of(model, name)))
            setattr(layer, attr, value)
    report = profiler.get_report()
    counts.simple_energy = report
    counts.totals = {k: int(v) for k, v in report.counts.items()}
    for layer in counts.layers.values():
        if layer.event_sops:  # spike counts in: events, not MACs (the module's docstring)
            counts.totals["mac"] -= layer.macs
            counts.totals["ac"] += layer.event_sops - layer.acs
            counts.totals["synop"] += layer.event_sops - layer.sops
            layer.macs, layer.acs, layer.sops = 0, layer.event_sops, layer.event_sops
    order = {name: i for i, (name, _) in enumerate(model.named_modules())}
    counts.layers = dict(sorted(counts.layers.items(), key=lambda kv: order.get(kv[0], 1 << 30)))
    return counts, outputs


def _type_of(model: nn.Module, name: str) -> str:
    try:
        module = model.get_submodule(name)
    except AttributeError:
        return "?"
    kind = type(module).__name__
    return f"{kind} (own ops)" if any(True for _ in module.children()) else kind


def spike_total(counts: Counts) -> tuple[int, int]:
    """(spikes, neuron updates) over every neuron layer."""
    spikes = sum(layer.spikes for layer in counts.layers.values())
    updates = sum(layer.neuron_updates for layer in counts.layers.values())
    return spikes, updates

