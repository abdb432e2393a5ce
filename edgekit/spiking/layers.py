"""Multi-step building blocks shared by edgekit's spiking nets, and the static-image wrapper.

Neurons are SpikingJelly's multi-step LIF with the settings of the SSA authors' code: tau = 2,
v_th = 1, v_reset = 0 (hard reset), ATan surrogate, detach_reset, decay_input. Tensors inside a
spiking net are time-major, ``[T, B, C, H, W]``; convolutions and BatchNorm run on the T*B
flattened batch (SpikingJelly's ``step_mode="m"`` layers).

``MultiStepNet`` turns a time-major net into a classifier of static images with the usual
contract ``(B, C, H, W) -> (B, classes)``: direct encoding (the image is the input current at each
of the T steps), rate decoding (the output averaged over T). It resets every neuron at the start of
its own ``forward``, so training, evaluation, profiling and export code never have to know that a
model is stateful.
"""
from __future__ import annotations

from abc import ABCMeta, abstractmethod
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from edgekit.errors import UsageError
from edgekit.optional import SPIKING, LazyModule
from edgekit.quiet import quiet
from edgekit.spiking.lean_neurons import lean_neurons


def _register_operators_quietly(neuron_module: Any) -> None:
    """torch logs one warning per missing Triton when SpikingJelly registers its operators (on a
    neuron's first step); a CPU machine without Triton is the normal case, not something to warn
    about. One step of a LIF and of an IF neuron registers them, silenced."""
    with quiet("torch._library.triton", stdout=False, warn=False):
        neuron_module.LIFNode(step_mode="m")(torch.zeros(1, 1))
        neuron_module.IFNode(v_reset=None, step_mode="m")(torch.zeros(1, 1))


# Imported on first use, so registering a spiking model works without SpikingJelly installed and
# building one fails with a one-line error naming the extra.
_SJ = "spikingjelly.activation_based"
functional, layer, surrogate = (
    LazyModule(f"{_SJ}.{name}", SPIKING, "a spiking model")
    for name in ("functional", "layer", "surrogate"))
neuron = LazyModule(f"{_SJ}.neuron", SPIKING, "a spiking model",
                    prepare=_register_operators_quietly)


ACTIVATIONS = ("lif", "relu")
TAU, V_THRESHOLD, V_RESET = 2.0, 1.0, 0.0


def lif(v_reset: float | None = V_RESET) -> neuron.LIFNode:
    """The LIF neuron of the SSA authors' code, multi-step; ``v_reset=None`` subtracts the
    threshold on a spike instead (Xylo's reset)."""
    return neuron.LIFNode(tau=TAU, decay_input=True, v_threshold=V_THRESHOLD, v_reset=v_reset,
                          surrogate_function=surrogate.ATan(), detach_reset=True, step_mode="m")


def iaf() -> neuron.IFNode:
    """Integrate-and-fire without leak, subtractive reset (``v_reset=None``): the neuron of
    SynSense's DYNAP-CNN cores (sinabs's ``IAF`` with ``MembraneSubtract``), multi-step."""
    return neuron.IFNode(v_threshold=V_THRESHOLD, v_reset=None,
                         surrogate_function=surrogate.ATan(), detach_reset=True, step_mode="m")


def activation(kind: str) -> nn.Module:
    """``"lif"`` (spiking) or ``"relu"`` (the non-spiking twin of the same net)."""
    if kind == "lif":
        return lif()
    if kind == "relu":
        return nn.ReLU()
    raise UsageError(f"unknown activation '{kind}'", hint=f"valid: {', '.join(ACTIVATIONS)}")


def conv(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1,
         bias: bool = False) -> layer.Conv2d:
    """A multi-step 'same' convolution ([T, B, C, H, W] in and out)."""
    return layer.Conv2d(cin, cout, kernel, stride, padding=kernel // 2, groups=groups, bias=bias,
                        step_mode="m")


def bn(channels: int) -> layer.BatchNorm2d:
    return layer.BatchNorm2d(channels, step_mode="m")


class SumPool2d(nn.Module):
    """Multi-step 2D sum pooling ([T, B, C, H, W]), the pooling of DYNAP-CNN cores (sinabs's
    ``SumPool2d``, which it stands in for without sinabs's dependencies): the average times the
    window's area."""

    def __init__(self, kernel: int) -> None:
        super().__init__()
        self.kernel_size = kernel

    def forward(self, x_seq: torch.Tensor) -> torch.Tensor:
        T, B = x_seq.shape[:2]
        pooled = F.avg_pool2d(x_seq.flatten(0, 1), self.kernel_size) * self.kernel_size ** 2
        return pooled.unflatten(0, (T, B))


def is_spiking(model: nn.Module) -> bool:
    return any(isinstance(m, neuron.BaseNode) for m in model.modules())


def check_timesteps(T: object) -> int:
    if isinstance(T, bool) or not isinstance(T, int) or T < 1:
        raise UsageError(f"T (time steps) must be a positive integer, got {T!r}")
    return T


class MultiStepNet(nn.Module, metaclass=ABCMeta):
    """A static-image classifier run for ``T`` steps; subclasses implement ``forward_seq``."""

    def __init__(self, T: int, input_shape: tuple[int, ...]) -> None:
        super().__init__()
        self.T = check_timesteps(T)
        self.input_shape = tuple(input_shape)

    @abstractmethod
    def forward_seq(self, x_seq: torch.Tensor) -> torch.Tensor:  # [T, B, ...] -> [T, B, classes]
        """All T steps at once."""

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Direct encoding: the image is the input current at every step."""
        if x.dim() != len(self.input_shape) + 1 or tuple(x.shape[1:]) != self.input_shape:
            raise UsageError(f"{type(self).__name__} expects input of shape (batch, "
                             f"{', '.join(map(str, self.input_shape))}), got {tuple(x.shape)}")
        return x.unsqueeze(0).repeat(self.T, *([1] * x.dim()))  # [T, B, C, H, W]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        functional.reset_net(self)  # a fresh membrane state for every batch
        with lean_neurons(self):  # in eval: SpikingJelly's neurons' values, in fewer operations
            return self.forward_seq(self.encode(x)).mean(0)  # rate decoding: (B, classes)


@torch.no_grad()
def calibrate_batchnorm(model: nn.Module, batches: list[torch.Tensor]) -> nn.Module:
    """Set every BatchNorm's running statistics to the exact averages over ``batches``.

    An untrained net in eval mode normalises with the initial statistics (mean 0, variance 1),
    so with small initial weights its neurons never reach threshold and every spike count is
    zero. Calibrated statistics give it the activity of a net that has seen data, which is what
    op counting and export checks of an untrained net need. Returns the model in eval mode.
    """
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    saved = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # cumulative average over the calibration batches
    model.train()
    try:
        for x in batches:
            model(x)
    finally:
        for m, momentum in zip(norms, saved, strict=False):
            m.momentum = momentum
    return model.eval()


@torch.no_grad()
def scale_to_fire(model: nn.Module, x: torch.Tensor, spread: float = 2.0) -> int:
    """Scale, layer by layer in forward order, the weights (and biases) of every convolution and
    linear layer whose output feeds a spiking neuron so that this output's standard deviation over
    ``x`` is ``spread`` (data-driven initialisation in the manner of LSUV, Mishkin & Matas 2016).

    A net without BatchNorm has no statistics to calibrate; with random weights its neurons may
    never reach threshold (v_th = 1), which leaves every output constant. A spread of twice the
    threshold makes them fire. Returns how many layers were scaled."""
    order: list[nn.Module] = []
    hooks = [m.register_forward_hook(lambda mod, a, out: order.append(mod))
             for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear, neuron.BaseNode))]
    try:
        model(x)
    finally:
        for h in hooks:
            h.remove()
    feeding = [m for m, nxt in zip(order, order[1:], strict=False)
               if isinstance(m, (nn.Conv2d, nn.Linear)) and isinstance(nxt, neuron.BaseNode)]
    for module in feeding:
        seen: list[torch.Tensor] = []
        hook = module.register_forward_hook(
            lambda mod, a, out, seen=seen: seen.append(out.detach()))
        try:
            model(x)
        finally:
            hook.remove()
        std = float(torch.cat([s.flatten() for s in seen]).std())
        if std > 0:
            module.weight.mul_(spread / std)
            if module.bias is not None:
                module.bias.mul_(spread / std)
    return len(feeding)


@torch.no_grad()
def mean_firing_rate(model: nn.Module, *inputs: torch.Tensor) -> float:
    """Spikes per neuron update over every spiking neuron of ``model`` on one run of ``inputs``
    (from rest): 0 means a silent net, whose outputs cannot show whether an export is right."""
    totals = [0.0, 0]

    def hook(module: nn.Module, args: Any, out: torch.Tensor) -> None:
        totals[0] += float(out.detach().float().sum())
        totals[1] += out.numel()

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, neuron.BaseNode)]
    functional.reset_net(model)
    try:
        model.eval()(*inputs)
    finally:
        for h in handles:
            h.remove()
        functional.reset_net(model)
    return totals[0] / totals[1] if totals[1] else 0.0
