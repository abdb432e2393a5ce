"""Layers of a torch module, read op by op while it runs once on example inputs.

A ``TorchDispatchMode`` sees every aten op, including the functional ones a module calls
outside any submodule (an attention's ``matmul``, a residual ``add``), which per-module
forward hooks alone would miss. Each op is charged to the innermost module running it (forward
hooks keep the stack), so a row is a leaf module such as a ``Conv2d``, or a block's own
functional ops. FLOPs come from torch's own formulas (``torch.utils.flop_counter``, the table
``FlopCounterMode`` uses: 2 per multiply-accumulate of matmuls, convolutions and attention;
element-wise ops count 0), plus the CPU flash attention kernel, which that table lacks
(``FlopCounterMode`` counts it 0), by torch's own attention formula. Views move no bytes; a
gather (``embedding``) reads the rows it returns, not the whole table.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry, sdpa_flop_count

from edgekit.estimate.layers import Analysis, Footprint, Layer, Liveness

_aten = torch.ops.aten
_GATHERS = {_aten.embedding, _aten.index_select, _aten.index, _aten.gather}
FLOP_RULE = ("torch.utils.flop_counter formulas: 2 FLOPs per multiply-accumulate of matmuls, "
             "convolutions and attention (CPU flash attention included); element-wise ops, "
             "norms and softmax count 0")


def _cpu_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *args: Any,
                   **kwargs: Any) -> int:
    return sdpa_flop_count(query.shape, key.shape, value.shape)


# What torch's table lacks, by torch's own formulas.
_EXTRA_FLOPS = {_aten._scaled_dot_product_flash_attention_for_cpu: _cpu_attention}


def _size(tensor: torch.Tensor) -> Footprint:
    if tensor.is_floating_point():
        return Footprint(floats=tensor.numel())
    return Footprint(fixed=tensor.numel() * tensor.element_size())


def _key(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    return (t for t in tree_leaves(value) if isinstance(t, torch.Tensor) and t.numel())


class _Recorder(TorchDispatchMode):
    """Charges each aten op's FLOPs and bytes to the module on top of ``stack``."""

    def __init__(self, stack: list[tuple[str, str]], weights: set[int],
                 liveness: Liveness) -> None:
        super().__init__()
        self.stack, self.weights, self.liveness = stack, weights, liveness
        self.layers: dict[str, Layer] = {}
        self.step = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self._record(func, args, kwargs, out)
        return out

    def _record(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        inputs, outputs = list(_tensors((args, kwargs))), list(_tensors(out))
        packet = func.overloadpacket
        if packet in flop_registry:
            flops = int(flop_registry[packet](*args, **kwargs, out_val=out))
        else:
            flops = int(_EXTRA_FLOPS[packet](*args, **kwargs)) if packet in _EXTRA_FLOPS else 0
        name, kind = self.stack[-1]
        layer = self.layers.setdefault(name, Layer(name, kind))
        layer.ops += 1
        layer.flops += flops
        for tensor in inputs:
            if _key(tensor) not in self.weights:
                self.liveness.read(_key(tensor), self.step)
        read = {_key(t) for t in inputs}
        if not func.is_view:  # a view reads and writes nothing
            seen: set[int] = set()
            for tensor in inputs:
                key = _key(tensor)
                if key in self.weights:
                    if key not in seen:  # each weight once per op
                        seen.add(key)
                        gathered = sum((_size(o) for o in outputs), Footprint())
                        layer.weights += gathered if packet in _GATHERS else _size(tensor)
                else:
                    layer.activations += _size(tensor)
            layer.activations += sum((_size(o) for o in outputs), Footprint())
        for tensor in outputs:
            if _key(tensor) not in read:  # in-place results and views are not new tensors
                self.liveness.make(_key(tensor), _size(tensor), self.step)
        self.step += 1


def _hooks(model: nn.Module, stack: list[tuple[str, str]]) -> list[Any]:
    handles = []
    for name, module in model.named_modules():
        label = (name or type(module).__name__, type(module).__name__)

        def push(_module: nn.Module, _args: Any, label: tuple[str, str] = label) -> None:
            stack.append(label)

        def pop(_module: nn.Module, _args: Any, _out: Any) -> None:
            stack.pop()

        handles.append(module.register_forward_pre_hook(push))
        handles.append(module.register_forward_hook(pop, always_call=True))
    return handles


@torch.no_grad()
def analyse_module(model: nn.Module, inputs: tuple[torch.Tensor, ...], name: str) -> Analysis:
    """Run ``model`` once on ``inputs`` and read its layers (see the module's docstring)."""
    stack = [(type(model).__name__, type(model).__name__)]
    held = [*model.parameters(), *model.buffers()]
    weights = {_key(t) for t in held if t.numel()}
    liveness = Liveness()
    for tensor in _tensors(inputs):
        liveness.make(_key(tensor), _size(tensor), 0)
    was_training = model.training
    model.eval()
    handles = _hooks(model, stack)
    recorder = _Recorder(stack, weights, liveness)
    try:
        # inference mode hides aten ops from dispatch modes (the count would be 0): run outside it
        with torch.inference_mode(False), torch.no_grad(), recorder:
            out = model(*inputs)
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    steps = max(recorder.step, 1)
    for tensor in _tensors(out):
        liveness.keep(_key(tensor), steps - 1)
    unique = {_key(t): _size(t) for t in held if t.numel()}
    return Analysis(name=name, method="torch: every aten op of one forward pass, charged to the "
                                      "innermost module running it",
                    flop_rule=FLOP_RULE, layers=tuple(recorder.layers.values()),
                    weights=sum(unique.values(), Footprint()), live=liveness.timeline(steps))
