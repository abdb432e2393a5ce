"""Xylo's SNN core in integers: a dense net (linear -> LIF -> linear -> LIF) mapped to Xylo's
registers and run by the chip's update rules, step by step.

Stands in for xylosim (SynSense's bit-accurate C++ simulator, 0.1.3, ``src/v2/cpp/
XyloIAFNeuron.cpp`` and ``XyloLayer.cpp``; Rockpool's ``XyloSim`` for Xylo Audio 2 and Xylo IMU
wraps it), which builds from source and is not a dependency of edgekit. The rules, in the order
xylosim applies them in one time step:

1. input events (at most 15 per channel and step) add ``weight << weight_shift`` once per event
   to the hidden neurons' synaptic current, saturating at 16 bits after each addition; the
   hidden spikes of the *previous* step are delivered to the readout neurons the same way (at
   most 31 per neuron);
2. every neuron's synaptic current decays (``i -= decay(i, dash_syn)``), the input just added
   included; the membrane then moves by ``-decay(v, dash_mem) + i + bias``, saturating;
3. ``decay(v, dash) = v >> dash`` (an arithmetic shift), or ``sign(v)`` where the shift gives 0;
4. a neuron spikes while ``v >= threshold``, subtracting the threshold each time, at most 31
   times a step for a hidden neuron and once for a readout neuron.

``tests/test_xylo_sim.py`` runs the same registers through xylosim where it is installed and
requires equal spikes at every step.

Xylo's own neuron trained in float (``edgekit.spiking.xylo_neuron.XyloLIFNode``, Rockpool's
``LIFTorch``; ``spiking-cnn:xylo`` uses it) maps as it is: its dashes, its bias on the membrane,
weights and threshold times one scale; what differs is rounding (weights to 8 bits, states to
integers, the decays' floor). The mapping of edgekit's other LIF (SpikingJelly's,
``V += (X - V) / tau``, one state) onto Xylo's two states is approximate, and the agreement
``edgekit simulate --target xylo-*`` reports measures it: ``dash_mem = log2(tau)``;
``dash_syn = 1``, the shortest synaptic memory that passes input (with 0 the current decays to
nothing in the step its input arrives), so each weight is doubled to pass ``W / tau`` and half of
it is carried to the next step; the bias enters the membrane as ``b / tau``; Xylo resets by
subtraction, with several spikes per step.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from edgekit.errors import UsageError
from edgekit.neuromorphic.fixed_point import Agreement, float_spikes
from edgekit.neuromorphic.net_layers import NetLayer
from edgekit.spiking.layers import MultiStepNet

STATE_BITS = 16
WEIGHT_BITS = 8
MAX_INPUT_EVENTS = 15  # xylosim XyloIAFNeuron.h MAX_NUM_INP_SPIKES
MAX_HIDDEN_SPIKES = 31  # MAX_NUM_SPIKES
MAX_OUTPUT_SPIKES = 1  # MAX_NUM_OUT_SPIKES
DASH_SYN = 1
DASH_MAX = 15  # the decays are 4-bit shifts (XyloIAFNeuron.h: dash_mem "should be 4 bits")
STATE_MAX = 2 ** (STATE_BITS - 1) - 1
STATE_MIN = -(2 ** (STATE_BITS - 1))
WEIGHT_MAX = 2 ** (WEIGHT_BITS - 1) - 1


@dataclass(frozen=True)
class XyloPopulation:
    """One population's registers: ``weights`` [pre, post] int8, per-neuron int16 thresholds and
    biases, and the decays as bit shifts."""
    weights: np.ndarray
    threshold: np.ndarray
    bias: np.ndarray
    dash_mem: int
    dash_syn: int
    max_spikes: int
    scale: float  # float state -> integer state


@dataclass(frozen=True)
class XyloNet:
    hidden: XyloPopulation  # fed by the inputs
    readout: XyloPopulation  # fed by the hidden neurons, one step later


def _dash(tau: float) -> int:
    dash = math.log2(tau)
    if dash != round(dash) or dash < 1:
        raise UsageError(f"Xylo's decays are bit shifts: tau {tau} is not a power of two >= 2")
    return round(dash)


def _xylo_population(linear: NetLayer, node: NetLayer, max_spikes: int) -> XyloPopulation:
    """Xylo's own neuron: weights, threshold and bias times one scale, the dashes as they are."""
    if linear.module.bias is not None:
        raise UsageError(f"Xylo's synapses carry no bias: give {linear.name} bias=False (the "
                         "bias of Xylo's neuron is on its membrane)")
    module = node.module
    w = linear.module.weight.detach().double().numpy().T  # [pre, post]
    b = (np.zeros(w.shape[1]) if module.bias is None
         else module.bias.detach().double().numpy())
    threshold = float(module.v_threshold)
    scale = min(WEIGHT_MAX / max(float(np.abs(w).max()), 1e-12), STATE_MAX / (2.0 * threshold),
                STATE_MAX / max(float(np.abs(b).max()), 1e-12))
    n = w.shape[1]
    return XyloPopulation(np.round(w * scale).astype(np.int64),
                          np.full(n, round(threshold * scale), dtype=np.int64),
                          np.round(b * scale).astype(np.int64), module.dash_mem, module.dash_syn,
                          max_spikes, float(scale))


def _population(linear: NetLayer, node: NetLayer, max_spikes: int) -> XyloPopulation:
    if node.detail.get("max_spikes") is not None:
        return _xylo_population(linear, node, max_spikes)
    w = linear.module.weight.detach().double().numpy().T  # [pre, post]
    b = (np.zeros(w.shape[1]) if linear.module.bias is None
         else linear.module.bias.detach().double().numpy())
    tau = float(getattr(node.module, "tau", 1.0))  # an IF neuron: no leak, input as it is
    # no leak: the largest shift, where Xylo still takes one unit a step (decay's sign floor)
    dash_mem = _dash(tau) if tau != 1.0 else DASH_MAX
    gain = 2.0 ** DASH_SYN / tau  # dash_syn passes 1 / 2^dash_syn of it, the LIF wants 1 / tau
    threshold = float(node.detail["threshold"])
    scale = min(WEIGHT_MAX / (np.abs(w).max() * gain), STATE_MAX / (2.0 * threshold),
                STATE_MAX / max(float(np.abs(b).max()) / tau, 1e-12))
    n = w.shape[1]
    return XyloPopulation(np.round(w * gain * scale).astype(np.int64),
                          np.full(n, round(threshold * scale), dtype=np.int64),
                          np.round(b / tau * scale).astype(np.int64), dash_mem, DASH_SYN,
                          max_spikes, float(scale))


def map_to_xylo(layers: list[NetLayer]) -> XyloNet:
    """Xylo's registers for a net of [flatten] linear -> neuron -> linear -> neuron (Xylo's own,
    or LIF/IF)."""
    core = [lay for lay in layers if lay.kind != "flatten"]
    kinds = [lay.kind for lay in core]
    if kinds != ["linear", "neuron", "linear", "neuron"]:
        raise UsageError("Xylo's simulation maps linear -> neuron -> linear -> neuron, got "
                         + " -> ".join(kinds))
    hidden = _population(core[0], core[1], MAX_HIDDEN_SPIKES)
    readout = _population(core[2], core[3], MAX_OUTPUT_SPIKES)
    return XyloNet(hidden, readout)


def _decay(v: np.ndarray, dash: int) -> np.ndarray:
    dv = v >> dash
    return np.where((dv == 0) & (v != 0), np.sign(v), dv)


def _deliver(current: np.ndarray, counts: np.ndarray, weights: np.ndarray,
             max_count: int) -> np.ndarray:
    """Presynaptic neuron by neuron, event by event, each addition saturating (the order
    matters once the current saturates)."""
    counts = np.minimum(counts, max_count)
    for pre in np.flatnonzero(counts.any(0)):
        for k in range(int(counts[:, pre].max())):
            firing = (counts[:, pre] > k)[:, None]
            current = np.where(firing, np.clip(current + weights[pre], STATE_MIN, STATE_MAX),
                               current)
    return current


def _evolve(pop: XyloPopulation, current: np.ndarray,
            v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    current = current - _decay(current, pop.dash_syn)
    dv = np.clip(-_decay(v, pop.dash_mem) + current, STATE_MIN, STATE_MAX)
    dv = np.clip(dv + pop.bias, STATE_MIN, STATE_MAX)
    v = np.clip(v + dv, STATE_MIN, STATE_MAX)
    spikes = np.zeros_like(v)
    for _ in range(pop.max_spikes):
        fire = v >= pop.threshold
        if not fire.any():
            break
        spikes += fire
        v = v - fire * pop.threshold
    return spikes, current, v


def run_xylo(net: XyloNet, events: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hidden spike counts [T, B, hidden] and readout spikes [T, B, out] for input events
    [T, B, inputs]. Xylo delivers hidden spikes to the readout one step later, so T + 1 steps run
    (the last with no input) and the readout's steps 1..T are returned as 0..T-1."""
    T, B = events.shape[:2]
    nh, no = net.hidden.weights.shape[1], net.readout.weights.shape[1]
    ih, vh = np.zeros((B, nh), np.int64), np.zeros((B, nh), np.int64)
    io, vo = np.zeros((B, no), np.int64), np.zeros((B, no), np.int64)
    fired = np.zeros((B, nh), np.int64)
    hidden, readout = [], []
    steps = np.concatenate([events.astype(np.int64), np.zeros((1, B, events.shape[2]), np.int64)])
    for x in steps:
        ih = _deliver(ih, x, net.hidden.weights, MAX_INPUT_EVENTS)
        io = _deliver(io, fired, net.readout.weights, MAX_HIDDEN_SPIKES)
        fired, ih, vh = _evolve(net.hidden, ih, vh)
        out, io, vo = _evolve(net.readout, io, vo)
        hidden.append(fired)
        readout.append(out)
    return np.stack(hidden[:T]), np.stack(readout[1:])


def xylo_events(x_seq: torch.Tensor) -> np.ndarray:
    """The encoded input ([T, B, ...], event counts) as Xylo's input channels [T, B, inputs]."""
    flat = x_seq.flatten(2).double()
    if not torch.equal(flat, torch.round(flat)) or bool((flat < 0).any()):
        raise UsageError("Xylo's inputs are event counts: the net's encoding must give "
                         "non-negative integers")
    return flat.numpy().astype(np.int64)


def compare_on_xylo(model: MultiStepNet, layers: list[NetLayer], x: torch.Tensor,
                    y: torch.Tensor | None, batch: int = 64) -> Agreement:
    """The float net against its Xylo registers run by Xylo's rules: an entry agrees where
    Xylo's spike count (a hidden neuron may fire several times a step) equals the float spike;
    predictions are the readout's spike counts' argmax."""
    net = map_to_xylo(layers)
    equal = total = same = float_ok = fixed_ok = 0
    for start in range(0, len(x), batch):
        xb = x[start:start + batch]
        ref_spikes, ref_out = float_spikes(model, xb)
        hidden, readout = run_xylo(net, xylo_events(model.encode(xb)))
        for ref, mine in zip(ref_spikes, (hidden, readout), strict=True):
            equal += int((ref.numpy() == mine).sum())
            total += mine.size
        ref_pred = ref_out.sum(0).argmax(1).numpy()
        xylo_pred = readout.sum(0).argmax(1)
        same += int((ref_pred == xylo_pred).sum())
        if y is not None:
            yb = y[start:start + batch].numpy()
            float_ok += int((ref_pred == yb).sum())
            fixed_ok += int((xylo_pred == yb).sum())
    return Agreement(equal / total if total else math.nan, same, len(x),
                     float_ok if y is not None else None, fixed_ok if y is not None else None,
                     [net.hidden.scale, net.readout.scale])


def run_xylosim(net: XyloNet, events: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What ``run_xylo`` returns, computed by xylosim's ``XyloLayer`` itself (T + 1 steps per
    sample, the readout's steps 1..T returned): the reference ``tests/test_xylo_sim.py`` and
    ``benchmarks/xylo_crosscheck.py`` compare with. xylosim is optional (``edgekit[xylo]``)."""
    from xylosim.v2 import XyloLayer, XyloSynapse

    h, o = net.hidden, net.readout
    nin, nh = h.weights.shape
    no = o.weights.shape[1]
    syn_in = [[XyloSynapse(j, 0, int(h.weights[i, j])) for j in range(nh) if h.weights[i, j]]
              for i in range(nin)]
    syn_out = [[XyloSynapse(j, 0, int(o.weights[i, j])) for j in range(no) if o.weights[i, j]]
               for i in range(nh)]
    layer = XyloLayer(syn_in, [[] for _ in range(nh)], syn_out, [[] for _ in range(nh)],
                      [int(v) for v in h.threshold], [int(v) for v in o.threshold], True,
                      [int(v) for v in h.bias], [int(v) for v in o.bias], 0, 0, 0,
                      [h.dash_mem] * nh, [o.dash_mem] * no, [[h.dash_syn]] * nh,
                      [[o.dash_syn]] * no, "edgekit")
    T, B = events.shape[:2]
    hidden, readout = [], []
    for b in range(B):
        layer.reset_all()
        steps = [[int(c) for c in events[t, b]] for t in range(T)] + [[0] * nin]
        out = np.array(layer.evolve(steps))
        hidden.append(np.array(layer.rec_recurrent_spikes)[:T])
        readout.append(out[1:])
    return np.stack(hidden, 1), np.stack(readout, 1)
