"""Is pose observable in the CSI? Linear probes of body yaw and articulation (methods.md §6).

Before a network is trained on simulated CSI, a ridge regressor on the preprocessed CSI (exactly
what the models see, ``csi.preprocess``) asks whether the data carry what the labels claim.
Targets are read from single-person keypoints in the body frame:

- ``yaw``: the body's heading, from the left-minus-right shoulder and hip vectors; regressed as
  (cos, sin) and scored by the mean absolute angle error in degrees (chance: 90°);
- ``wrist_height``: the higher wrist's height above the floor, in metres (R²);
- ``ankle_swing``: the right ankle's offset along the body's forward axis from the hip centre,
  in metres (R²), the phase of the gait;
- ``position``: the hip centre's x and y (mean R²), for reference: what a probe does find.

Three feature sets: ``raw``, the flattened ``(2, 270, P)`` array, ``summary``, per feature its
mean, standard deviation and the magnitude of its first Doppler bins over the packets, fixed
functions of the same preprocessed array; ``doppler``, per receiver the power spectrum over the
packets (signed Doppler bins) of the CSI ratio of its second and third antenna to its first
(rebuilt from amplitude and per-receiver phase, less its mean over the packets: background
subtraction), averaged over antennas and subcarriers and normalised to sum 1. The ratio cancels
what a receiver's antennas share (offsets, gain) and turns with the sign of each path's Doppler
shift [Zeng et al., FarSense, MobiCom 2019]. Ridge's penalty is chosen by efficient leave-one-out
(``sklearn.linear_model.RidgeCV``).
"""
from __future__ import annotations

import numpy as np

from edgekit.methods.wifi_mamba.body import body_frame
from edgekit.methods.wifi_mamba.csi import JOINT_NAMES, N_ANT, N_RX, N_SUB

_J = {name: i for i, name in enumerate(JOINT_NAMES)}
TARGETS = ("yaw", "wrist_height", "ankle_swing")
DOPPLER_BINS = 4  # magnitudes of rfft bins 1..4 over the packets


def body_yaw(kpts: np.ndarray) -> np.ndarray:
    """Heading (rad) of ``(..., 14, 3)`` skeletons (the body frame's forward axis)."""
    _, fwd = body_frame(np.asarray(kpts, np.float64))
    return np.arctan2(fwd[..., 1], fwd[..., 0])


def articulation(kpts: np.ndarray) -> dict[str, np.ndarray]:
    """``wrist_height`` and ``ankle_swing`` (metres) of ``(..., 14, 3)`` skeletons."""
    yaw = body_yaw(kpts)
    forward = np.stack([np.cos(yaw), np.sin(yaw)], axis=-1)
    hips = 0.5 * (kpts[..., _J["l_hip"], :2] + kpts[..., _J["r_hip"], :2])
    swing = ((kpts[..., _J["r_ankle"], :2] - hips) * forward).sum(-1)
    wrist = np.maximum(kpts[..., _J["r_wrist"], 2], kpts[..., _J["l_wrist"], 2])
    return {"wrist_height": wrist, "ankle_swing": swing}


def features(x: np.ndarray, kind: str = "raw") -> np.ndarray:
    """``(F, 2, 270, P)`` preprocessed CSI -> ``(F, D)`` probe features."""
    x = np.asarray(x, np.float64)
    if kind == "raw":
        return x.reshape(len(x), -1)
    if kind == "summary":
        spec = np.abs(np.fft.rfft(x - x.mean(-1, keepdims=True), axis=-1))[..., 1:1 + DOPPLER_BINS]
        parts = [x.mean(-1), x.std(-1), *np.moveaxis(spec, -1, 0)]
        return np.concatenate([p.reshape(len(x), -1) for p in parts], axis=1)
    if kind == "doppler":
        return doppler_spectrum(x)
    raise ValueError(f"unknown feature kind {kind!r}: use 'raw', 'summary' or 'doppler'")


def doppler_spectrum(x: np.ndarray) -> np.ndarray:
    """``(F, 2, 270, P)`` preprocessed CSI -> ``(F, 3 * P)``: per receiver, the normalised power
    in each signed Doppler bin of the background-subtracted CSI ratio between its antennas."""
    n, n_pkt = len(x), x.shape[-1]
    x = np.asarray(x, np.float64).reshape(n, 2, N_RX, N_ANT, N_SUB, n_pkt)
    z = x[:, 0] * np.exp(1j * x[:, 1])  # (F, rx, antenna, subcarrier, packet)
    ratio = z[:, :, 1:] / np.maximum(np.abs(z[:, :, :1]), 1e-12) * np.exp(-1j * x[:, 1, :, :1])
    ratio = (ratio - ratio.mean(-1, keepdims=True)) * np.hanning(n_pkt)
    power = (np.abs(np.fft.fftshift(np.fft.fft(ratio, axis=-1), axes=-1)) ** 2).mean(axis=(2, 3))
    power = power / np.maximum(power.sum(-1, keepdims=True), 1e-30)
    return power.reshape(n, -1)


def _ridge(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray) -> np.ndarray:
    from sklearn.linear_model import RidgeCV

    mu, sd = train_x.mean(0), train_x.std(0) + 1e-8
    model = RidgeCV(alphas=np.logspace(-1, 5, 13)).fit((train_x - mu) / sd, train_y)
    return model.predict((test_x - mu) / sd)


def r2(pred: np.ndarray, truth: np.ndarray) -> float:
    """Coefficient of determination on held-out data (can be negative; NaN for a constant)."""
    spread = ((truth - truth.mean()) ** 2).sum()
    return float(1 - ((pred - truth) ** 2).sum() / spread) if spread > 0 else float("nan")


def probe(train_x: np.ndarray, train_kpts: np.ndarray, test_x: np.ndarray,
          test_kpts: np.ndarray, kind: str = "raw") -> dict[str, float]:
    """Ridge probes fitted on ``train`` and scored on ``test``: preprocessed CSI ``(F, 2, 270, P)``
    and one skeleton per frame ``(F, 14, 3)``. Returns ``yaw_error_deg`` (chance 90),
    ``wrist_height_r2``, ``ankle_swing_r2`` and ``position_r2`` (chance 0 or below)."""
    fx_train, fx_test = features(train_x, kind), features(test_x, kind)
    yaw_train, yaw_test = body_yaw(train_kpts), body_yaw(test_kpts)
    cs = _ridge(fx_train, np.stack([np.cos(yaw_train), np.sin(yaw_train)], 1), fx_test)
    err = np.abs(np.angle(np.exp(1j * (np.arctan2(cs[:, 1], cs[:, 0]) - yaw_test))))
    out = {"yaw_error_deg": float(np.degrees(err).mean())}
    art_train, art_test = articulation(train_kpts), articulation(test_kpts)
    for name in ("wrist_height", "ankle_swing"):
        out[f"{name}_r2"] = r2(_ridge(fx_train, art_train[name], fx_test), art_test[name])
    hips_train = 0.5 * (train_kpts[:, _J["r_hip"], :2] + train_kpts[:, _J["l_hip"], :2])
    hips_test = 0.5 * (test_kpts[:, _J["r_hip"], :2] + test_kpts[:, _J["l_hip"], :2])
    pred = _ridge(fx_train, hips_train, fx_test)
    out["position_r2"] = float(np.mean([r2(pred[:, i], hips_test[:, i]) for i in range(2)]))
    return out
