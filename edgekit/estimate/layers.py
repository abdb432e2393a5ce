"""What an estimate is computed from: a model's layers, its weights and its live activations.

Both analyses (a torch module traced op by op, an ONNX graph node by node) produce one
``Analysis``; the roofline in ``roofline.py`` prices it on any device profile at any precision.
Sizes are kept as ``Footprint``s rather than bytes because the precision decides the width of
a floating-point tensor, while integer tensors (token ids, masks, indices) keep their own.
"""
from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Footprint:
    """Tensor sizes: ``floats`` floating-point elements, whose width the precision decides, and
    ``fixed`` bytes of integer or boolean tensors, which keep their own width."""

    floats: int = 0
    fixed: int = 0

    def __add__(self, other: Footprint) -> Footprint:
        return Footprint(self.floats + other.floats, self.fixed + other.fixed)

    def __sub__(self, other: Footprint) -> Footprint:
        return Footprint(self.floats - other.floats, self.fixed - other.fixed)

    def bytes_at(self, element_bytes: float) -> float:
        return self.floats * element_bytes + self.fixed


@dataclass
class Layer:
    """One row of the per-layer table: a torch module (the innermost one running each op) or
    an ONNX node. ``weights``: weights read; ``activations``: activations read and written."""

    name: str
    kind: str  # the module's class ("Conv2d") or the node's op type ("MatMul")
    flops: int = 0
    weights: Footprint = Footprint()
    activations: Footprint = Footprint()
    ops: int = 0  # aten ops or ONNX nodes folded into this row


@dataclass(frozen=True)
class Analysis:
    name: str
    method: str  # how the layers were read, for the report
    flop_rule: str  # what the FLOP count includes, for the report
    layers: tuple[Layer, ...]
    weights: Footprint  # every weight once: the model's size
    live: tuple[Footprint, ...]  # live activations at each step of the sequential liveness
    uncounted: dict[str, int] = field(default_factory=dict)  # ops with no FLOP formula -> count

    @property
    def flops(self) -> int:
        return sum(layer.flops for layer in self.layers)

    def peak_activations(self, element_bytes: float) -> float:
        """The largest sum of live activations, in bytes, at this precision's width."""
        return max((step.bytes_at(element_bytes) for step in self.live), default=0.0)


class Liveness:
    """A simple sequential liveness: a tensor is live from the step that makes it to the last
    step that reads it (a model input from step 0, a model output to the end). No reuse of
    buffers, no in-place planning: what a runtime's memory planner does is not modelled."""

    def __init__(self) -> None:
        self._spans: dict[Hashable, list] = {}  # key -> [footprint, first step, last step]
        self._retired: list[list] = []  # spans whose key a later tensor took over

    def make(self, key: Hashable, size: Footprint, step: int) -> None:
        """A new tensor under ``key`` (a buffer address reused by a new tensor starts anew)."""
        if key in self._spans:
            self._retired.append(self._spans[key])
        self._spans[key] = [size, step, step]

    def read(self, key: Hashable, step: int) -> None:
        if key in self._spans:
            self._spans[key][2] = max(self._spans[key][2], step)

    def keep(self, key: Hashable, step: int) -> None:
        """``key`` is a model output: live until the last step."""
        self.read(key, step)

    def timeline(self, steps: int) -> tuple[Footprint, ...]:
        """Live activations at each of ``steps`` steps (a sweep over the spans' ends)."""
        delta = [Footprint()] * (steps + 1)
        for size, first, last in [*self._retired, *self._spans.values()]:
            delta[first] = delta[first] + size
            delta[min(last, steps - 1) + 1] = delta[min(last, steps - 1) + 1] - size
        live, total = [], Footprint()
        for change in delta[:steps]:
            total = total + change
            live.append(total)
        return tuple(live)
