"""edgekit's bit-accurate simulation of a ``ChipNet`` on Loihi 2, vectorised with numpy.

Stands in for Lava's runtime running ``PyDenseModelBitAcc`` and ``PyLifModelBitAcc`` (Lava
declares Python < 3.11); ``tests/test_loihi2.py`` checks spikes, v and the readout against Lava
on random nets and on the exported trained spiking-cnn, where Lava imports.

Every operation is a rule of ``loihi2_rules`` (Lava's ``PyDenseModelBitAcc`` and
``PyLifModelBitAcc``) on int64 arrays, all neurons of a layer and all samples at once. The net
is feed-forward, so it runs layer by layer over the T steps: on the chip each synapse layer
delays its spikes by one step, so layer k's step t happens at the chip's step t + k, which
shifts every layer's spike train but changes none (the relay neurons that carry the biases are
delayed alike). Direct encoding: the 8-bit graded input is sent at each of the T steps; the
output is the readout's integer synaptic output summed over its T steps.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgekit.neuromorphic import loihi2_rules as rules
from edgekit.neuromorphic.loihi2_quantize import ChipLayer, ChipNet


@dataclass(frozen=True)
class LayerTrace:
    """What one layer did: its spikes (T, N, neurons), or the readout's output (T, N, out)."""

    name: str
    spikes: np.ndarray | None
    output: np.ndarray | None
    peak_input: int  # largest |synaptic input| (a_in)
    peak_voltage: int  # largest |v| before the spike test
    saturated: int  # (step, sample, neuron) updates where v hit the 24-bit limit
    voltages: np.ndarray | None = None  # v after each step's reset (T, N, neurons), if asked


@dataclass(frozen=True)
class ChipRun:
    traces: tuple[LayerTrace, ...]

    @property
    def output(self) -> np.ndarray:
        """The readout summed over the T steps (N, out), chip integers; a net that ends in
        neurons: their spike counts."""
        last = self.traces[-1]
        return (last.output if last.output is not None else last.spikes).sum(axis=0)

    @property
    def spikes(self) -> list[np.ndarray]:
        return [t.spikes for t in self.traces if t.spikes is not None]


def synaptic_input(layer: ChipLayer, x: np.ndarray) -> np.ndarray:
    """The synapse layer's output for inputs ``x`` (T, N, inputs) of spikes or graded values:
    the weighted sum of the stored (truncated) weights plus the relay's bias column, shifted by
    the layer's exponent."""
    weights = layer.weights.copy()
    weights.data = rules.truncate_weights(weights.data)
    bias = rules.truncate_weights(layer.bias)
    steps, samples, width = x.shape
    flat = np.asarray(x, dtype=np.int64).reshape(steps * samples, width)
    accumulated = np.asarray((weights @ flat.T).T, dtype=np.int64) + bias * layer.relay
    return rules.scale_by_exponent(accumulated, layer.exponent).reshape(steps, samples, -1)


def _run_neurons(layer: ChipLayer, a_in: np.ndarray, record: bool) -> LayerTrace:
    neurons = layer.neurons
    assert neurons is not None
    u = np.zeros(a_in.shape[1:], dtype=np.int64)
    v = np.zeros_like(u)
    spikes, voltages, peak_v, saturated = [], [], 0, 0
    for t in range(a_in.shape[0]):
        u = rules.current_update(u, a_in[t], neurons.du)
        v = rules.voltage_update(v, u, neurons.dv)
        peak_v = max(peak_v, int(np.abs(v).max(initial=0)))
        saturated += int(np.count_nonzero(np.abs(v) == rules.UV_LIMIT - 1))
        fired = rules.fire(v, neurons.vth)
        v = np.where(fired, 0, v)
        spikes.append(fired)
        if record:
            voltages.append(v)
    return LayerTrace(layer.name, np.stack(spikes), None, int(np.abs(a_in).max(initial=0)),
                      peak_v, saturated, np.stack(voltages) if record else None)


def run_chip(net: ChipNet, q: np.ndarray, T: int, record_voltages: bool = False) -> ChipRun:
    """``net`` on 8-bit graded inputs ``q`` (N, *input_shape), each sent for ``T`` steps;
    ``record_voltages`` keeps every layer's v at every step (to compare with Lava's)."""
    x = np.broadcast_to(q.reshape(1, q.shape[0], -1), (T, q.shape[0], int(q[0].size)))
    traces = []
    for layer in net.layers:
        a_in = synaptic_input(layer, x)
        if layer.neurons is None:
            traces.append(LayerTrace(layer.name, None, a_in, int(np.abs(a_in).max(initial=0)),
                                     0, 0))
            break
        trace = _run_neurons(layer, a_in, record_voltages)
        traces.append(trace)
        x = trace.spikes
    return ChipRun(tuple(traces))
