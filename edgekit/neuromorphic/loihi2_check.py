"""Does the fixed-point net do what the float net does? Spikes, predictions and task accuracy.

The float reference is the PyTorch net itself (SpikingJelly's neurons) on the float inputs; the
fixed-point net is ``loihi2_sim`` on the same inputs in 8-bit graded form. Spike agreement is the
share of (step, sample, neuron) elements of every spiking layer on which the two agree; a
prediction is the arg-max of the output summed over the T steps. The export passes when the
spikes agree on at least ``min_agreement``, the predictions on at least ``min_same``, and, where
the samples have labels, the fixed-point accuracy is at most ``max_drop`` below the float one.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from edgekit.errors import CheckFailed
from edgekit.neuromorphic.loihi2_quantize import ChipNet
from edgekit.neuromorphic.loihi2_sim import ChipRun, run_chip
from edgekit.spiking.layers import functional, neuron

MIN_AGREEMENT = 0.95
MIN_SAME = 0.95
MAX_DROP = 0.02  # accuracy, as a fraction


@dataclass(frozen=True)
class LayerCheck:
    name: str
    elements: int
    agree: int
    spikes_float: int
    spikes_fixed: int
    peak_input: int
    peak_voltage: int
    saturated: int


@dataclass(frozen=True)
class Loihi2Check:
    samples: int
    inputs: str  # where the samples came from
    layers: tuple[LayerCheck, ...]
    same_predictions: int
    accuracy_float: float | None
    accuracy_fixed: float | None
    min_agreement: float = MIN_AGREEMENT
    min_same: float = MIN_SAME
    max_drop: float = MAX_DROP

    @property
    def agreement(self) -> float:
        return sum(c.agree for c in self.layers) / max(1, sum(c.elements for c in self.layers))

    @property
    def failures(self) -> list[str]:
        why = []
        if self.agreement < self.min_agreement:
            why.append(f"spike agreement {self.agreement:.2%} < {self.min_agreement:.0%}")
        if self.same_predictions < self.min_same * self.samples:
            why.append(f"same predictions {self.same_predictions}/{self.samples} < "
                       f"{self.min_same:.0%}")
        if self.accuracy_fixed is not None and self.accuracy_float is not None \
                and self.accuracy_fixed < self.accuracy_float - self.max_drop:
            why.append(f"accuracy {self.accuracy_fixed:.2%} more than "
                       f"{self.max_drop * 100:g} points below the float net's "
                       f"{self.accuracy_float:.2%}")
        if sum(c.spikes_float for c in self.layers) == 0:
            why.append("the float net never fires on these samples, which proves nothing")
        return why

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "against": "torch (the float net)",
                "inputs": self.inputs, "samples": self.samples,
                "spike_agreement": self.agreement, "same_predictions": self.same_predictions,
                "accuracy_float": self.accuracy_float, "accuracy_fixed": self.accuracy_fixed,
                "thresholds": {"min_agreement": self.min_agreement, "min_same": self.min_same,
                               "max_accuracy_drop": self.max_drop},
                "failures": self.failures, "layers": [asdict(c) for c in self.layers]}

    def lines(self) -> list[str]:
        mark = "[✓]" if self.passed else "[x]"
        lines = [f"{mark} spikes: {self.agreement:.2%} agree with the float net "
                 f"(at least {self.min_agreement:.0%}); same predictions "
                 f"{self.same_predictions}/{self.samples}"]
        if self.accuracy_fixed is not None and self.accuracy_float is not None:
            lines.append(f"{mark} accuracy: {self.accuracy_fixed:.2%} fixed point vs "
                         f"{self.accuracy_float:.2%} float (at most {self.max_drop * 100:g} "
                         f"points lower)")
        lines += [f"    {c.name}: {c.agree / max(1, c.elements):.2%} agree, spikes "
                  f"{c.spikes_fixed} fixed vs {c.spikes_float} float"
                  + (f", v saturated {c.saturated} times" if c.saturated else "")
                  for c in self.layers]
        return lines


@torch.no_grad()
def float_run(model: Any, x: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """The float net's logits (N, classes) and every spiking layer's spikes (T, N, neurons),
    in the order the layers run."""
    lifs = [m for m in model.modules() if isinstance(m, neuron.BaseNode)]
    spikes: list[tuple[int, np.ndarray]] = []
    handles = [m.register_forward_hook(
        lambda mod, args, out, i=i: spikes.append((i, out.reshape(out.shape[0], out.shape[1], -1)
                                                   .numpy().astype(bool))))
        for i, m in enumerate(lifs)]
    try:
        functional.reset_net(model)
        logits = model.forward_seq(model.encode(torch.from_numpy(x))).sum(0).numpy()
    finally:
        for h in handles:
            h.remove()
        functional.reset_net(model)
    return logits, [s for _, s in spikes]


def check(model: Any, chip: ChipNet, x: np.ndarray, y: np.ndarray | None,
          inputs: str) -> tuple[Loihi2Check, ChipRun]:
    """The fixed-point ``chip`` against the float ``model`` on samples ``x`` (labels ``y``)."""
    logits, float_spikes = float_run(model.eval(), np.asarray(x, dtype=np.float32))
    run = run_chip(chip, chip.input_format.encode(x), model.T)
    spiking = [t for t in run.traces if t.spikes is not None]
    if len(spiking) != len(float_spikes):
        raise CheckFailed(f"the chip has {len(spiking)} neuron layers, the float net ran "
                          f"{len(float_spikes)}", hint="a neuron module called more than once "
                                                       "has no Loihi 2 lowering here")
    layers = tuple(
        LayerCheck(t.name if chip_layer.neuron_name is None else chip_layer.neuron_name,
                   int(s.size), int(np.count_nonzero(t.spikes == s)), int(s.sum()),
                   int(t.spikes.sum()), t.peak_input, t.peak_voltage, t.saturated)
        for t, s, chip_layer in zip(spiking, float_spikes,
                                    [c for c in chip.layers if c.neurons is not None],
                                    strict=True))
    float_pred, fixed_pred = logits.argmax(1), run.output.argmax(1)
    accuracy_float = accuracy_fixed = None
    if y is not None:
        accuracy_float = float(np.mean(float_pred == y))
        accuracy_fixed = float(np.mean(fixed_pred == y))
    return Loihi2Check(len(x), inputs, layers, int(np.sum(float_pred == fixed_pred)),
                       accuracy_float, accuracy_fixed), run
