"""Loihi 2's integer CUBA LIF and synapse arithmetic, rule by rule, on numpy int64 arrays.

Stands in for Lava (lava-nc 0.10), which declares Python < 3.11 and so does not install beside
edgekit. Each rule restates, without its code, what Lava's bit-accurate process models do
(lava-nc/lava, ``src/lava/proc/lif/models.py``: ``AbstractPyLifModelFixed.subthr_dynamics``,
``PyLifModelBitAcc``; ``src/lava/proc/dense/models.py``: ``PyDenseModelBitAcc.run_spk``;
``src/lava/utils/weightutils.py``: ``clip_weights``, ``truncate_weights``), the same in 0.10.0 as
on Lava's main branch. ``tests/test_loihi2.py`` runs these rules against Lava's own processes
where Lava imports (docs/neuromorphic.md says how to install it beside edgekit).

Formats: u and v are 24-bit signed, du and dv 12-bit unsigned (a decay of ``d`` multiplies by
``(4096 - d) / 4096``; the current adds 1 to du, so du = 4095 clears it every step), the
threshold is 17-bit unsigned and compared after a left shift by 6, synaptic input is left
shifted by 6 before it joins the current, weights are 8-bit mantissas (mixed sign: even values
in [-256, 254]) scaled by the layer's exponent.
"""
from __future__ import annotations

import numpy as np

UV_BITS = 24  # u and v
UV_LIMIT = 2 ** (UV_BITS - 1)  # 2**23
DECAY_BITS = 12  # du and dv
DECAY_UNITY = 2 ** DECAY_BITS  # 4096
DU_OFFSET = 1  # added to du (Lava: ds_offset), so that a decay of exactly 4096 is reachable
DV_OFFSET = 0  # added to dv (Lava: dm_offset)
ACTIVATION_SHIFT = 6  # synaptic input, left shift before it joins u
THRESHOLD_SHIFT = 6  # vth, left shift before the comparison with v
THRESHOLD_BITS = 17  # vth
WEIGHT_BITS = 8  # mantissa; mixed-sign weights lose their least significant bit
WEIGHT_MIN, WEIGHT_MAX = -(2 ** WEIGHT_BITS), 2 ** WEIGHT_BITS - 2  # -256, 254: even values


def truncate_weights(mantissas: np.ndarray) -> np.ndarray:
    """Mixed-sign 8-bit weights as the synapse stores them: clipped to [-256, 255], then the
    lowest bit dropped by an arithmetic shift right and left (odd values round down)."""
    clipped = np.clip(np.asarray(mantissas, dtype=np.int64), -(2 ** WEIGHT_BITS),
                      2 ** WEIGHT_BITS - 1)
    return (clipped >> 1) << 1


def scale_by_exponent(accumulated: np.ndarray, exponent: int) -> np.ndarray:
    """The synapse's output: the weighted sum shifted left by a positive exponent, right by a
    negative one (an arithmetic shift: it rounds towards minus infinity)."""
    if exponent > 0:
        return np.left_shift(accumulated, exponent)
    return np.right_shift(accumulated, -exponent)


def decay(state: np.ndarray, decay_constant: int) -> np.ndarray:
    """``state * (4096 - decay_constant) / 4096``, the magnitude shifted right by 12 and the sign
    put back (so it rounds towards zero), computed in 64 bits."""
    product = state.astype(np.int64) * (DECAY_UNITY - decay_constant)
    return np.sign(product) * np.right_shift(np.abs(product), DECAY_BITS)


def wrap_current(current: np.ndarray) -> np.ndarray:
    """u beyond 24 bits wraps: above +2**23 it loses 2**24; a value at or below -2**23 (tested on
    the first result) gains 2**24, Lava's two-step rule kept as written."""
    once = np.where(current > UV_LIMIT, current - 2 * UV_LIMIT, current)
    return np.where(once <= -UV_LIMIT, current + 2 * UV_LIMIT, once)


def current_update(u: np.ndarray, synaptic_input: np.ndarray, du: int) -> np.ndarray:
    """u decays by du + 1, then takes the synaptic input shifted left by 6, wrapped to 24 bits."""
    decayed = decay(u, du + DU_OFFSET)
    return wrap_current(decayed + np.left_shift(synaptic_input.astype(np.int64),
                                                ACTIVATION_SHIFT))


def voltage_update(v: np.ndarray, u: np.ndarray, dv: int, bias: int = 0) -> np.ndarray:
    """v decays by dv, adds u and the bias, and saturates at +-(2**23 - 1)."""
    updated = decay(v, dv + DV_OFFSET) + u + bias
    return np.clip(updated, -UV_LIMIT + 1, UV_LIMIT - 1)


def fire(v: np.ndarray, vth: int) -> np.ndarray:
    """A spike where v is strictly above the threshold shifted left by 6."""
    return v > (int(vth) << THRESHOLD_SHIFT)


def lif_step(u: np.ndarray, v: np.ndarray, synaptic_input: np.ndarray, du: int, dv: int,
             vth: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One time step of a population: (u, v, spikes) after it; a neuron that fires resets v to 0
    (u keeps its value)."""
    u = current_update(u, synaptic_input, du)
    v = voltage_update(v, u, dv)
    spikes = fire(v, vth)
    return u, np.where(spikes, 0, v), spikes
