"""A lowered spiking net (``lowering.LoweredNet``) in Loihi 2's fixed-point formats.

The chip's neuron is a CUBA LIF (``loihi2_rules``). A population ``v <- (1 - decay) v + gain I``
becomes: du = 4095 (the current is cleared every step, so it carries only this step's input),
dv = round(4096 decay) (0.5 is exactly 2048), and a scale ``s`` of chip units per float unit of
v, so that the synaptic input is ``a_in = s gain I / 64`` (the chip shifts it left by 6) and the
threshold is ``vth = s v_threshold / 64`` (also shifted left by 6). ``s`` and the layer's weight
exponent ``e`` are chosen together: the largest weight or bias magnitude becomes the mantissa
254, and ``e`` moves ``vth`` into [2**9, 2**12] (fine enough to place the threshold, small
enough that v has 2**11 thresholds of headroom in 24 bits); ``s`` is then set from the integer
``vth``, so the threshold is exact. Mantissas are rounded to the nearest even value (mixed-sign
8-bit weights drop their lowest bit, ``loihi2_rules.truncate_weights``) and clipped to
[-256, 254].

The bias cannot be the neuron's own bias on the chip: each synapse layer delays its spikes by
one step, so layer k's input arrives k steps after its bias would start. It is a column of the
weight matrix fed by an always-on relay neuron of the previous layer (a chain of relays from the
input), quantised with the layer's weights. The first layer's relay is an input channel, so it
sends the graded value 255 (the bias's mantissa is then on the scale of the input's weights, not
255 times theirs); the others are neurons that spike 1. The readout (the last synapse layer, no
neurons) is the synapse's integer output, ``k`` chip units per float unit, its largest magnitude
at 254.

The input is 8-bit graded spikes: ``x ~ x_low + q step`` with q in [0, 255] from the
calibration data's range (x_low = 0 where the data are non-negative). A non-zero x_low is
folded, per neuron, into the first layer's bias (``M @ x_low``, exact also at a convolution's
zero padding).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from edgekit.errors import UsageError
from edgekit.neuromorphic import loihi2_rules as rules
from edgekit.neuromorphic.lowering import LoweredNet, Neurons

INPUT_BITS = 8
INPUT_LEVELS = 2 ** INPUT_BITS - 1  # q in [0, 255]
MANTISSA_TARGET = 254  # the largest magnitude's mantissa
VTH_LOW, VTH_HIGH = 2 ** 9, 2 ** 12
DU_NO_MEMORY = rules.DECAY_UNITY - rules.DU_OFFSET  # 4095: u holds this step's input only


@dataclass(frozen=True)
class InputFormat:
    """x ~ low + q * step, q an 8-bit graded spike in [0, 255]."""

    low: float
    step: float

    def encode(self, x: np.ndarray) -> np.ndarray:
        q = np.rint((np.asarray(x, dtype=np.float64) - self.low) / self.step)
        return np.clip(q, 0, INPUT_LEVELS).astype(np.int64)


@dataclass(frozen=True)
class ChipNeurons:
    du: int
    dv: int
    vth: int
    # the float population's (None where only the chip's integers are known: a file read back)
    decay: float | None = None  # which dv approximates
    gain: float | None = None
    threshold: float | None = None


@dataclass(frozen=True)
class ChipLayer:
    """One synapse layer and its population in chip integers."""

    name: str
    weights: sparse.csr_matrix  # int64 mantissas, (outputs, inputs)
    bias: np.ndarray  # int64 mantissas on the relay neuron's column, (outputs,)
    relay: int  # what the relay sends each step: 255 (graded, the first layer) or a spike, 1
    exponent: int  # weight_exp: the weighted sum is shifted by it
    scale: float  # chip units per float unit: of v (neurons) or of the output (readout)
    neurons: ChipNeurons | None
    neuron_name: str | None
    output_shape: tuple[int, ...]


@dataclass(frozen=True)
class ChipNet:
    input_format: InputFormat
    input_shape: tuple[int, ...]
    layers: tuple[ChipLayer, ...]


def input_format(calibration: np.ndarray) -> InputFormat:
    """The 8-bit graded format covering the calibration data's range."""
    x = np.asarray(calibration, dtype=np.float64)
    if not np.isfinite(x).all():
        raise UsageError("the calibration data hold NaN or infinite values")
    low = min(0.0, float(x.min()))
    high = float(x.max())
    if high <= low:
        raise UsageError("the calibration data are constant; they cannot set the input scale")
    return InputFormat(low, (high - low) / INPUT_LEVELS)


def even_mantissas(values: np.ndarray) -> np.ndarray:
    """Nearest even integers, clipped to [-256, 254]."""
    even = 2 * np.rint(np.asarray(values, dtype=np.float64) / 2)
    return np.clip(even, rules.WEIGHT_MIN, rules.WEIGHT_MAX).astype(np.int64)


def _neuron_exponent(vth_at_zero: float) -> int:
    """The weight exponent that brings ``vth`` into [VTH_LOW, VTH_HIGH]."""
    if vth_at_zero < VTH_LOW:
        return math.ceil(math.log2(VTH_LOW / vth_at_zero))
    if vth_at_zero > VTH_HIGH:
        return -math.ceil(math.log2(vth_at_zero / VTH_HIGH))
    return 0


def _chip_neurons(neurons: Neurons, peak: float, name: str) -> tuple[ChipNeurons, int, float]:
    if not 0.0 <= neurons.decay <= 1.0 or neurons.gain <= 0 or neurons.threshold <= 0:
        raise UsageError(f"neuron layer '{name}' (decay {neurons.decay:g}, gain "
                         f"{neurons.gain:g}, threshold {neurons.threshold:g}) has no Loihi 2 "
                         f"form", hint="Loihi 2 takes a decay in [0, 1], a positive input gain "
                                       "and a positive threshold")
    dv = int(round(neurons.decay * rules.DECAY_UNITY))
    if dv > rules.DECAY_UNITY - 1:
        raise UsageError(f"neuron layer '{name}' forgets its membrane every step (decay "
                         f"{neurons.decay:g}); dv has 12 bits, at most 4095")
    shift = 2 ** rules.ACTIVATION_SHIFT
    # a_in = s gain I / 64 and its peak mantissa is 254: s = 254 * 64 * 2**e / (gain * peak)
    vth_at_zero = MANTISSA_TARGET * neurons.threshold / (neurons.gain * peak)
    exponent = _neuron_exponent(vth_at_zero)
    vth = int(round(vth_at_zero * 2.0 ** exponent))
    if not 1 <= vth < 2 ** rules.THRESHOLD_BITS:
        raise UsageError(f"neuron layer '{name}': threshold {vth} does not fit 17 bits")
    scale = vth * shift / neurons.threshold
    chip = ChipNeurons(DU_NO_MEMORY, dv, vth, neurons.decay, neurons.gain, neurons.threshold)
    return chip, exponent, scale


def quantize(net: LoweredNet, calibration: np.ndarray) -> ChipNet:
    """``net`` in Loihi 2's formats, its input scaled to cover ``calibration`` (N, *input)."""
    fmt = input_format(calibration)
    layers = []
    for index, layer in enumerate(net.layers):
        matrix, bias = layer.matrix.astype(np.float64), layer.bias.astype(np.float64)
        relay = 1
        if index == 0:  # the input in q units: x = low + q step; the relay sends 255
            bias = bias + matrix @ np.full(matrix.shape[1], fmt.low)
            matrix = matrix * fmt.step
            relay = INPUT_LEVELS
            bias = bias / relay
        peak = max(float(abs(matrix).max()) if matrix.nnz else 0.0,
                   float(np.abs(bias).max()) if bias.size else 0.0)
        if peak == 0.0:
            raise UsageError(f"synapse layer '{layer.name}' has only zero weights and biases")
        if layer.neurons is None:
            neurons, exponent, scale = None, 0, MANTISSA_TARGET / peak
            per_unit = scale
        else:
            neurons, exponent, scale = _chip_neurons(layer.neurons, peak, layer.name)
            per_unit = scale * layer.neurons.gain / 2 ** rules.ACTIVATION_SHIFT
        factor = per_unit / 2.0 ** exponent
        weights = matrix.tocsr(copy=True)
        weights.data = even_mantissas(weights.data * factor).astype(np.float64)
        weights.eliminate_zeros()
        layers.append(ChipLayer(layer.name, weights.astype(np.int64), even_mantissas(bias * factor),
                                relay, exponent, scale, neurons, layer.neuron_name,
                                layer.output_shape))
    return ChipNet(fmt, net.input_shape, tuple(layers))
