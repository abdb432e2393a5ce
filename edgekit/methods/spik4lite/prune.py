"""``prune``: remove the channels Spik4lite's gates switched off, physically (Spik4lite, ICML 2026;
docs/methods/spik4lite.md).

For every channel dependency group (``groups.py``), a channel's keep probability is the mean
keep decision of the gates that read it, averaged over the removal cycle (``keep_probability``;
without a cycle, the eval-mode decision at the running rate). Channels under 0.5 go, at most
``cap`` of the group per step (30 % for the patch embedding, 50 % elsewhere [code]), the same
count from each block of a grouped conv or of an attention's heads, and never a whole block.
With ``target_keep``, a group whose channels are all above 0.5 still loses its least-kept ones
until the net's channels are at the target [ours: the authors' ``--target-sparsity`` mode swaps the
energy penalty for an MSE term toward the target, ``SparsityTargetTerm``, which ``train.py``
imports but the published ``Spik4lite.py`` does not contain]; ``PruneReport.forced`` counts them.

Compensation [ours]: before slicing, each consumer's expected input from a removed
channel (the mean input over ``batches``, measured in eval mode, so for a gated consumer after its
mask: what the layer really received; without batches, a gated consumer's running firing rate
times its gate's mean keep decision) times its weights is folded into the consumer's bias, or, for
a bias-free conv, into the running mean of the BatchNorm right after it (``mu -= d``, the BN
shift: in eval ``BN(y + d) = BN_{mu - d}(y)``; in training the batch statistics see the change
directly), or into a new bias where there is neither. Groups are removed one after another in
the net's order, each measured on the net with the earlier removals made [ours: folds measured
all on the unpruned net stack up wrongly; on the digits Spikingformer, removing half of every
group at once, they cost accuracy where each alone recovers some]. For a conv the drive is the
mean over output positions of the conv of the constant input, so padding and stride count [ours;
a plain sum of the kernel ignores borders, which on the digits nets' 2x2 and 4x4 maps
overstates it up to 2.25x]. A BatchNorm recalibration afterwards re-estimates the running means
from the narrow net, so there the fold is superseded; it lasts where it went into a bias (a
projection with bias, the classifier).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from edgekit.errors import UsageError
from edgekit.methods.spik4lite.gates import GatedLayer, gated_layers
from edgekit.methods.spik4lite.groups import PRUNABLE, ChannelGroup, channel_groups
from edgekit.methods.spik4lite.slicing import cut_in, cut_out
from edgekit.methods.spik4lite.wrap import _probe_input
from edgekit.spiking.layers import functional


@dataclass(frozen=True)
class RemovalRule:
    """Which channels one removal step takes: those whose mean keep probability is under
    ``threshold``, at most ``cap`` of a group's width (``embedding_cap`` in the patch
    embedding). The defaults are the authors' [code]."""

    threshold: float = 0.5
    cap: float = 0.5  # MLP layers
    embedding_cap: float = 0.3  # patch embedding

    def limit(self, group: ChannelGroup) -> int:
        """The most channels one step removes from ``group``."""
        return int((self.embedding_cap if group.embedding else self.cap) * group.width)


@dataclass
class PruneReport:
    channels_before: int
    channels_after: int
    removed: dict[str, int] = field(default_factory=dict)  # group root -> channels removed
    forced: int = 0  # removed to reach target_keep although kept by their gates
    left_whole: list[str] = field(default_factory=list)  # groups whose removal broke a trial
    compensated: int = 0  # consumers whose removed inputs were folded in

    @property
    def keep(self) -> float:
        return self.channels_after / max(1, self.channels_before)


def _unwrapped(module: nn.Module) -> nn.Module:
    return module.layer if isinstance(module, GatedLayer) else module


def keep_probability(model: nn.Module, group: ChannelGroup) -> torch.Tensor | None:
    """Mean keep probability per channel over the gates reading ``group``; None if ungated."""
    probs = [_gate_keep(gate) for gate in map(model.get_submodule, group.names("in"))
             if isinstance(gate, GatedLayer)]
    return torch.stack(probs).mean(0) if probs else None


def _gate_keep(gate: GatedLayer) -> torch.Tensor:
    """One gate's mean keep decision per channel over the cycle; without a cycle, its eval-mode
    decision at the running rate."""
    p = gate.keep_probability()
    if p is None:
        with torch.no_grad():
            logits = gate.gate(gate.running_fr).view(-1, 2)
        p = (logits.argmax(-1) == 1).to(gate.running_fr.dtype)
    return p


def _select(p: torch.Tensor, group: ChannelGroup, limit: int, threshold: float) -> torch.Tensor:
    """At most ``limit`` channels with ``p < threshold``, the same count from every block, the
    least kept first, at least one channel left in each block."""
    per = group.width // group.blocks
    blocks = p.view(group.blocks, per)
    below = (blocks < threshold).sum(1)
    count = min(int(below.min()), limit // group.blocks, per - 1)
    if count <= 0:
        return torch.empty(0, dtype=torch.long)
    order = blocks.argsort(dim=1, stable=True)[:, :count]  # [blocks, count]
    return (order + torch.arange(group.blocks).unsqueeze(1) * per).flatten().sort().values


@dataclass
class Observed:
    """What compensation needs from one pass over calibration batches: each conv/linear's mean
    input per channel, its input's spatial size (convs), and the BatchNorm right after it."""

    means: dict[str, torch.Tensor] = field(default_factory=dict)
    sizes: dict[str, tuple[int, int]] = field(default_factory=dict)
    following: dict[str, str] = field(default_factory=dict)


@torch.no_grad()
def _observe(model: nn.Module, x: torch.Tensor,
             batches: list[torch.Tensor] | None) -> Observed:
    """Mean input per channel of every conv/linear over ``batches`` (eval mode), the spatial size
    of each conv's input, and which BatchNorm runs right after each of them."""
    sums: dict[str, torch.Tensor] = {}
    counts: dict[str, int] = {}
    sizes: dict[str, tuple[int, int]] = {}
    order: list[str] = []
    handles = []
    for name, module in model.named_modules():
        if not isinstance(module, PRUNABLE) or name.endswith(".gate"):
            continue
        owner = name[:-len(".layer")] if name.endswith(".layer") else name

        def hook(mod: nn.Module, args: tuple[torch.Tensor, ...], owner: str = owner) -> None:
            order.append(owner)
            if isinstance(mod, nn.modules.batchnorm._BatchNorm):
                return
            s = args[0]
            dim = 2 if isinstance(mod, nn.Conv2d) else s.dim() - 1
            if isinstance(mod, nn.Conv2d):
                sizes[owner] = (s.shape[-2], s.shape[-1])
            mean = s.movedim(dim, 0).flatten(1).mean(1)
            sums[owner] = sums.get(owner, 0) + mean
            counts[owner] = counts.get(owner, 0) + 1
        handles.append(module.register_forward_pre_hook(hook))
    was_training = model.training
    model.eval()
    try:
        for batch in batches or [x]:
            functional.reset_net(model)
            model(batch)
            if not batches:
                sums.clear()
                counts.clear()
    finally:
        for h in handles:
            h.remove()
        functional.reset_net(model)
        model.train(was_training)
    following = {}
    for a, b in zip(order, order[1:], strict=False):
        if isinstance(_unwrapped(model.get_submodule(b)), nn.modules.batchnorm._BatchNorm):
            following.setdefault(a, b)
    return Observed({k: v / counts[k] for k, v in sums.items()}, sizes, following)


def _contribution(layer: nn.Module, removed: torch.Tensor, mean: torch.Tensor,
                  size: tuple[int, int] | None = None) -> torch.Tensor:
    """``Σ_{c removed} W[:, c] · mean[c]``, per output channel. For a conv whose input size is
    known, the exact mean over output positions of the conv of that constant input, borders and
    stride included [ours: on the 2x2 and 4x4 maps of the digits nets a 3x3 kernel's border taps
    read padding at most positions, so the whole kernel's sum overstates the drive up to 2.25x];
    else the kernel's sum (borders ignored)."""
    if isinstance(layer, nn.Linear):
        return layer.weight[:, removed] @ mean[removed]
    h, w = size or (1, 1)
    z = torch.zeros(1, layer.in_channels, h, w, dtype=layer.weight.dtype)
    z[0, removed] = mean[removed].to(z.dtype).view(-1, 1, 1)
    if size is None:
        return F.conv2d(z, layer.weight.sum((2, 3), keepdim=True), groups=layer.groups).flatten()
    out = F.conv2d(z, layer.weight, None, layer.stride, layer.padding, layer.dilation,
                   layer.groups)
    return out.mean((0, 2, 3))


@torch.no_grad()
def prune(model: nn.Module, x: torch.Tensor | None = None,
          optimizer: torch.optim.Optimizer | None = None, *, compensate: bool = True,
          batches: list[torch.Tensor] | None = None, target_keep: float | None = None,
          rule: RemovalRule = RemovalRule()) -> PruneReport:
    """Remove, in place, the channels the gates of ``model`` (``wrap``) switched off."""
    if target_keep is not None and not 0 < target_keep <= 1:
        raise UsageError(f"target keep must be in (0, 1], got {target_keep}")
    x = _probe_input(model) if x is None else x
    groups = channel_groups(model, x)
    if not any(isinstance(m, GatedLayer) for m in model.modules()):
        raise UsageError("the model has no Spik4lite gates", hint="call spik4lite.wrap first")
    total = count_channels(groups)
    report = PruneReport(total, total)
    budget = None if target_keep is None else total - round(target_keep * total)
    plans: list[tuple[ChannelGroup, torch.Tensor]] = []
    for group in groups:
        p = keep_probability(model, group)
        if p is None:
            continue
        removed = _select(p, group, rule.limit(group), rule.threshold)
        plans.append((group, removed))
    if budget is not None:
        plans = _to_budget(model, plans, budget, report, rule)
    plans = _trial(model, plans, x, report)
    observed = _observe(model, x, batches) if compensate else None
    for group, removed in plans:
        if len(removed):
            if compensate and batches and report.removed:  # measured on the net as it is now:
                # a fold computed before an earlier removal assumes rates that removal changed
                observed = _observe(model, x, batches)
            report.compensated += _remove(model, group, removed, optimizer, observed)
            report.removed[group.names("out")[0]] = len(removed)
            report.channels_after -= len(removed)
    return report


def _runs(model: nn.Module, plans: list[tuple[ChannelGroup, torch.Tensor]],
          x: torch.Tensor) -> bool:
    """Whether a copy of ``model`` with ``plans`` removed still runs on ``x``."""
    trial = copy.deepcopy(model)
    for group, removed in plans:
        if len(removed):
            _remove(trial, group, removed, None, None)
    try:
        functional.reset_net(trial)
        trial.eval()(x)
    except RuntimeError:
        return False
    return True


def _trial(model: nn.Module, plans: list[tuple[ChannelGroup, torch.Tensor]], x: torch.Tensor,
           report: PruneReport) -> list[tuple[ChannelGroup, torch.Tensor]]:
    """Channels contracted by a matmul (attention's ``Q^T S``) are tied in a way DepGraph does
    not trace; a trial removal on a copy finds the groups that break the forward pass, and those
    are left whole."""
    for _, gate in gated_layers(model):
        gate.penalty = None  # holds the last graph; a copy needs plain tensors
    if _runs(model, plans, x):
        return plans
    kept = []
    for group, removed in plans:
        if len(removed) and not _runs(model, [(group, removed)], x):
            report.left_whole.append(group.names("out")[0])
            removed = removed[:0]
        kept.append((group, removed))
    return kept


def _to_budget(model: nn.Module, plans: list[tuple[ChannelGroup, torch.Tensor]], budget: int,
               report: PruneReport, rule: RemovalRule) -> list[tuple[ChannelGroup, torch.Tensor]]:
    """Trim the plans to remove at most ``budget`` channels; if they remove fewer, add the least
    kept channels of the groups (within their caps) until they do."""
    out, left = [], budget
    for group, removed in plans:
        take = min(len(removed), max(0, left)) // group.blocks * group.blocks
        removed = _select(_rank(model, group), group, take, 2.0) if take < len(removed) \
            else removed
        out.append((group, removed))
        left -= len(removed)
    width, share = sum(g.width for g, _ in out) or 1, left
    for fair in (True, False):  # a share in proportion to each group's width, then the rest
        for i, (group, removed) in enumerate(out):
            want = min(left, -(-share * group.width // width)) if fair else left
            if want < group.blocks:
                continue
            extra = _select(_rank(model, group), group,
                            min(rule.limit(group), len(removed) + want), 2.0)
            report.forced += len(extra) - len(removed)
            left -= len(extra) - len(removed)
            out[i] = (group, extra)
    return out


def _rank(model: nn.Module, group: ChannelGroup) -> torch.Tensor:
    """Keep probabilities with the running firing rate breaking ties (silent channels first)."""
    p = keep_probability(model, group)
    rates = [model.get_submodule(n).running_fr for n in group.names("in")
             if isinstance(model.get_submodule(n), GatedLayer)]
    tie = torch.stack(rates).mean(0) if rates else torch.zeros_like(p)
    return p + 1e-3 * tie / (1 + tie.max())


@torch.no_grad()
def _remove(model: nn.Module, group: ChannelGroup, removed: torch.Tensor,
            optimizer: torch.optim.Optimizer | None, observed: Observed | None) -> int:
    """Slice the group; with ``observed`` (None: no compensation), fold what went into the
    consumers."""
    keep = torch.tensor([c for c in range(group.width) if c not in set(removed.tolist())])
    shifts: dict[str, torch.Tensor] = {}
    for name in group.names("in") if observed is not None else ():
        module = model.get_submodule(name)
        mean = observed.means.get(name)  # measured in eval: for a gated layer, after its mask
        if mean is None and isinstance(module, GatedLayer) and bool(module.seen):
            mean = module.running_fr * _gate_keep(module)  # no batches: the training rate
        if mean is not None:
            shifts[name] = _contribution(_unwrapped(module), removed, mean,
                                         observed.sizes.get(name))
    outs = set(group.names("out"))
    for member in group.members:
        if member.role == "in":
            cut_in(model.get_submodule(member.name), keep, optimizer)
    for member in group.members:
        if member.role == "out":
            cut_out(_unwrapped(model.get_submodule(member.name)), keep, optimizer)
    for name, d in shifts.items():
        _fold(model, name, d[keep] if name in outs else d, observed.following.get(name),
              optimizer)
    return len(shifts)


def _fold(model: nn.Module, name: str, d: torch.Tensor, bn_name: str | None,
          optimizer: torch.optim.Optimizer | None) -> None:
    layer = _unwrapped(model.get_submodule(name))
    if layer.bias is not None:
        layer.bias.add_(d)
        return
    bn = _unwrapped(model.get_submodule(bn_name)) if bn_name else None
    if bn is not None and bn.running_mean is not None and bn.running_mean.numel() == d.numel():
        bn.running_mean.sub_(d)
        return
    layer.bias = nn.Parameter(d.clone())
    if optimizer is not None:
        optimizer.param_groups[0]["params"].append(layer.bias)


def count_channels(groups: list[ChannelGroup]) -> int:
    """The prunable channels of ``groups``, all together."""
    return sum(g.width for g in groups)


def describe(report: PruneReport) -> dict[str, Any]:
    return {"channels_before": report.channels_before, "channels_after": report.channels_after,
            "keep": round(report.keep, 4), "forced": report.forced,
            "compensated_layers": report.compensated, "removed": dict(report.removed),
            "left_whole": list(report.left_whole)}
