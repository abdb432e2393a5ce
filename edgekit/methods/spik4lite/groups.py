"""Channel dependency groups of a spiking net, from its graph (torch-pruning's DepGraph).

A group is every tensor axis that must lose the same channels together: the producing convs and
their BatchNorms, every consumer's input axis, and everything tied to them by element-wise ops
(the residual stream shared by all blocks of a stage, GWFFN's ``up + mid(up)``, the Hadamard pair
``A ⊙ V`` of SSA). DepGraph (Fang et al., CVPR 2023) finds them by tracing the autograd graph.

Why the neurons are swapped out while tracing: SpikingJelly's multi-step LIF loops over the T
axis, and DepGraph reads that loop's ``unbind`` of dim 0 as a split of the *channel* axis into T
slices, which scrambles the channel indices of every group behind a neuron (pruning channels
[0, 1, 9, 17] of a GWFFN ``up`` conv maps to [0, 1, 9, 17, 64, 65, ...] in its BN). A spiking neuron
maps channel c to channel c, so for dependency analysis it is exactly an element-wise op: while
tracing, every neuron is replaced by one (and every Spik4lite gate by the layer it wraps), then put
back.

Constraints a group carries: ``blocks``, the number of equal contiguous blocks its channels fall
into that must each lose the same count (a grouped conv's groups, the heads of an attention
module that reshapes by ``heads``); ``embedding``, whether it is written by the patch embedding,
which has its own per-step cap: every layer that runs before the first module declaring ``heads``
(the authors' cap covers every block of Spikingformer's tokenizer [code]), or, in a net without
attention, the net's first conv.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from edgekit.errors import UsageError
from edgekit.methods.spik4lite.gates import GatedLayer
from edgekit.methods.spik4lite.probe import probe_forward
from edgekit.spiking.layers import functional, neuron

PRUNABLE = (nn.Conv2d, nn.Linear, nn.modules.batchnorm._BatchNorm)


@dataclass(frozen=True)
class Member:
    name: str  # qualified name of the conv/linear/BN (of its GatedLayer while gated)
    role: str  # "out": its output channels (and a BN's features); "in": its input channels


@dataclass(frozen=True)
class ChannelGroup:
    width: int
    members: tuple[Member, ...]
    blocks: int = 1
    embedding: bool = False

    def names(self, role: str) -> list[str]:
        return [m.name for m in self.members if m.role == role]


class _ElementWise(nn.Module):
    """What a spiking neuron is to the channel axis while DepGraph traces."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 1.0


def _set(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, leaf = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, module)


@contextmanager
def traceable(model: nn.Module) -> Iterator[None]:
    """Swap neurons for element-wise stand-ins and gates for the layers they wrap (under the
    gate's own name), and back on exit."""
    swapped: list[tuple[str, nn.Module]] = []
    for name, module in list(model.named_modules()):
        if isinstance(module, GatedLayer):
            swapped.append((name, module))
            _set(model, name, module.layer)
    for name, module in list(model.named_modules()):
        if isinstance(module, neuron.BaseNode):
            swapped.append((name, module))
            _set(model, name, _ElementWise())
    try:
        yield
    finally:
        for name, module in reversed(swapped):
            _set(model, name, module)
        # reset_net caches each net's resettable modules: one cached while the neurons were
        # out would leave their membranes un-reset from then on
        functional.invalidate_reset_cache(model)


@torch.no_grad()
def _before_attention(model: nn.Module, x: torch.Tensor) -> set[str]:
    """Names of the modules that run before the first one declaring ``heads`` (empty if none)."""
    order: list[str] = []
    handles = [m.register_forward_pre_hook(lambda mod, args, name=name: order.append(name))
               for name, m in model.named_modules() if name]
    probe_forward(model, x, handles)
    for i, name in enumerate(order):
        heads = getattr(model.get_submodule(name), "heads", None)
        if isinstance(heads, int) and not isinstance(heads, bool):
            return set(order[:i])
    return set()


def _heads_of(model: nn.Module, name: str) -> int:
    """The ``heads`` of the nearest enclosing module that declares them (1 if none)."""
    parts = name.split(".")
    for i in range(len(parts) - 1, -1, -1):
        owner = model.get_submodule(".".join(parts[:i])) if i else model
        heads = getattr(owner, "heads", None)
        if isinstance(heads, int) and not isinstance(heads, bool) and heads > 1:
            return heads
    return 1


@torch.enable_grad()  # DepGraph traces the autograd graph
def channel_groups(model: nn.Module, x: torch.Tensor) -> list[ChannelGroup]:
    """Every dependency group rooted at a conv or linear layer's output that feeds at least one
    layer (the classifier's own output feeds none and is never a group), but the stem's: the
    channels only the image-fed first conv writes (Spikingformer's tokenizer prunes from its
    second block on [code]; on the digits net removing half the stem's 8 channels alone costs
    15 points after recalibration). A stem that writes a residual stream others write too
    (SpikingResformer's prologue) stays a group: that is the stream's width."""
    import torch_pruning as tp

    was_training = model.training
    model.eval()
    with traceable(model):
        graph = tp.DependencyGraph().build_dependency(model, example_inputs=x)
        names = {m: n for n, m in model.named_modules()}
        layers = [(n, m) for n, m in model.named_modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
        first = layers[0][0] if layers else None
        embedding = _before_attention(model, x) or {first}
        covered: set[str] = set()
        groups: list[ChannelGroup] = []
        for name, module in layers:
            if name in covered:
                continue
            width = module.out_channels if isinstance(module, nn.Conv2d) else module.out_features
            handler = (tp.prune_conv_out_channels if isinstance(module, nn.Conv2d)
                       else tp.prune_linear_out_channels)
            group = graph.get_pruning_group(module, handler, idxs=list(range(width)))
            members, unsupported = [], []
            for dep, idxs in group.items:
                target = dep.target.module
                if not any(p.numel() for p in target.parameters(recurse=False)) and \
                        not isinstance(target, PRUNABLE):
                    continue  # an op or a parameter-free module: nothing to slice
                if not isinstance(target, PRUNABLE) or sorted(idxs) != list(range(width)):
                    unsupported.append(names.get(target, str(target)))
                    continue
                is_out = "out" in getattr(dep.handler, "__name__", "")
                role = "out" if is_out or isinstance(target, nn.modules.batchnorm._BatchNorm) \
                    else "in"
                members.append(Member(names[target], role))
            outs = {m.name for m in members if m.role == "out"}
            covered |= outs
            if unsupported or not any(m.role == "in" for m in members):
                continue  # a concat/split or an unknown layer in the group; or feeds nothing
            if {n for n in outs if isinstance(model.get_submodule(n), (nn.Conv2d, nn.Linear))} \
                    == {first}:
                continue  # written by the image-fed stem alone: the authors never prune it [code]
            blocks = 1
            for m in members:
                layer = model.get_submodule(m.name)
                if isinstance(layer, nn.Conv2d) and 1 < layer.groups < width:
                    blocks = math.lcm(blocks, layer.groups)
                blocks = math.lcm(blocks, _heads_of(model, m.name))
            if width % blocks:
                raise UsageError(f"channel group of {name}: width {width} does not split into "
                                 f"{blocks} equal blocks")
            unique = tuple(dict.fromkeys(members))
            groups.append(ChannelGroup(width, unique, blocks, embedding=bool(embedding & outs)))
    model.train(was_training)
    return groups
