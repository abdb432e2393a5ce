"""Is pose observable in the CSI? Probes of body yaw and articulation.

Before a network is trained on simulated CSI, a ridge regressor on the preprocessed CSI (exactly
what the models see, ``csi.preprocess``) asks whether the data carry what the labels claim.
Targets are read from single-person keypoints in the body frame:

- ``yaw``: the body's heading, from the left-minus-right shoulder and hip vectors; regressed as
  (cos, sin) and scored by the mean absolute angle error in degrees (chance: 90°);
- ``wrist_height``: the higher wrist's height above the floor, in metres (R²);
- ``ankle_swing``: the right ankle's offset along the body's forward axis from the hip centre,
  in metres (R²), the phase of the gait; a walker and its left-right mirror image move alike
  (the mirror is the same walk half a gait cycle later), so Doppler alone cannot sign it;
- ``stride``: the distance between the ankles along the forward axis (R²), the unsigned part
  of the same gait phase, which the legs' Doppler spread does carry;
- ``position``: the hip centre's x and y (mean R²), for reference: what a probe does find.

Four feature sets: ``raw``, the flattened ``(2, 270, P)`` array, ``summary``, per feature its
mean, standard deviation and the magnitude of its first Doppler bins over the packets, fixed
functions of the same preprocessed array; ``doppler``, per receiver the power spectrum over the
packets (signed Doppler bins) of the CSI ratio of its second and third antenna to its first
(rebuilt from amplitude and per-receiver phase, less its mean over the packets: background
subtraction), averaged over antennas and subcarriers and normalised to sum 1. The ratio cancels
what a receiver's antennas share (offsets, gain) and turns with the sign of each path's Doppler
shift [Zeng et al., FarSense, MobiCom 2019]; ``spectrum``, per receiver the log power of the
background-subtracted CSI over signed Doppler bins and the array's three elevation beams
(normalised), with the log power of the static part per beam and the total dynamic power:
physical quantities that change smoothly with the body's motion, where the raw phase of a path
turns once per 5.3 cm of path length. Regressors: ridge, its penalty chosen by efficient
leave-one-out (``sklearn.linear_model.RidgeCV``), or the 10 nearest neighbours (``knn``).

``mirror_bound`` says how much a model could gain over the body-frame template without knowing
left from right: the PA-MPJPE of the template against that of the least-squares best
left-right-blind guess (each true skeleton averaged with its mirror image).
"""
from __future__ import annotations

import numpy as np

from edgekit.methods.wifi_mamba.body import body_frame
from edgekit.methods.wifi_mamba.csi import JOINT_NAMES, N_ANT, N_RX, N_SUB

_J = {name: i for i, name in enumerate(JOINT_NAMES)}
TARGETS = ("yaw", "wrist_height", "ankle_swing", "stride")
REGRESSORS = ("ridge", "knn")
DOPPLER_BINS = 4  # magnitudes of rfft bins 1..4 over the packets


def body_yaw(kpts: np.ndarray) -> np.ndarray:
    """Heading (rad) of ``(..., 14, 3)`` skeletons (the body frame's forward axis)."""
    _, fwd = body_frame(np.asarray(kpts, np.float64))
    return np.arctan2(fwd[..., 1], fwd[..., 0])


def articulation(kpts: np.ndarray) -> dict[str, np.ndarray]:
    """``wrist_height``, ``ankle_swing`` and ``stride`` (metres) of ``(..., 14, 3)`` skeletons."""
    yaw = body_yaw(kpts)
    forward = np.stack([np.cos(yaw), np.sin(yaw)], axis=-1)
    hips = 0.5 * (kpts[..., _J["l_hip"], :2] + kpts[..., _J["r_hip"], :2])
    swing = ((kpts[..., _J["r_ankle"], :2] - hips) * forward).sum(-1)
    apart = ((kpts[..., _J["r_ankle"], :2] - kpts[..., _J["l_ankle"], :2]) * forward).sum(-1)
    wrist = np.maximum(kpts[..., _J["r_wrist"], 2], kpts[..., _J["l_wrist"], 2])
    return {"wrist_height": wrist, "ankle_swing": swing, "stride": np.abs(apart)}


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
    if kind == "spectrum":
        return doppler_elevation(x)
    raise ValueError(f"unknown feature kind {kind!r}: use 'raw', 'summary', 'doppler' or "
                     "'spectrum'")


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


def doppler_elevation(x: np.ndarray) -> np.ndarray:
    """``(F, 2, 270, P)`` preprocessed CSI -> ``(F, 3 * (3 * P + 4))``: per receiver, the log
    share of the dynamic power (CSI less its mean over the packets) in each elevation beam (FFT
    over the vertical array) and signed Doppler bin, averaged over subcarriers; the log power of
    the static part per beam; the log total dynamic power."""
    n, n_pkt = len(x), x.shape[-1]
    x = np.asarray(x, np.float64).reshape(n, 2, N_RX, N_ANT, N_SUB, n_pkt)
    z = x[:, 0] * np.exp(1j * x[:, 1])  # (F, rx, antenna, subcarrier, packet)
    static = z.mean(-1, keepdims=True)
    dyn = np.fft.fft(np.fft.fft((z - static) * np.hanning(n_pkt), axis=-1), axis=2)
    power = (np.abs(np.fft.fftshift(dyn, axes=(2, -1))) ** 2).mean(3)  # (F, rx, beam, doppler)
    total = power.sum(axis=(2, 3))  # (F, rx)
    share = np.log(power / np.maximum(total[..., None, None], 1e-30) + 1e-6)
    beams = np.log((np.abs(np.fft.fft(static[..., 0], axis=2)) ** 2).mean(3) + 1e-12)
    return np.concatenate([share.reshape(n, -1), beams.reshape(n, -1),
                           np.log(total + 1e-12)], axis=1)


def _regress(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray,
             regressor: str = "ridge") -> np.ndarray:
    from sklearn.linear_model import RidgeCV
    from sklearn.neighbors import KNeighborsRegressor

    mu, sd = train_x.mean(0), train_x.std(0) + 1e-8
    if regressor == "ridge":
        model = RidgeCV(alphas=np.logspace(-1, 5, 13))
    elif regressor == "knn":
        model = KNeighborsRegressor(10, weights="distance")
    else:
        raise ValueError(f"unknown regressor {regressor!r}: use one of {REGRESSORS}")
    y_mu, y_sd = train_y.mean(0), train_y.std(0) + 1e-12  # knn sees every target alike
    model.fit((train_x - mu) / sd, (train_y - y_mu) / y_sd)
    return model.predict((test_x - mu) / sd) * y_sd + y_mu


def r2(pred: np.ndarray, truth: np.ndarray) -> float:
    """Coefficient of determination on held-out data (can be negative; NaN for a constant)."""
    spread = ((truth - truth.mean()) ** 2).sum()
    return float(1 - ((pred - truth) ** 2).sum() / spread) if spread > 0 else float("nan")


def probe(train_x: np.ndarray, train_kpts: np.ndarray, test_x: np.ndarray,
          test_kpts: np.ndarray, kind: str = "raw", regressor: str = "ridge") -> dict[str, float]:
    """Probes fitted on ``train`` and scored on ``test``: preprocessed CSI ``(F, 2, 270, P)``
    and one skeleton per frame ``(F, 14, 3)``. Returns ``yaw_error_deg`` (chance 90),
    ``wrist_height_r2``, ``ankle_swing_r2``, ``stride_r2`` and ``position_r2`` (chance 0 or
    below)."""
    fx_train, fx_test = features(train_x, kind), features(test_x, kind)
    yaw_train, yaw_test = body_yaw(train_kpts), body_yaw(test_kpts)
    cs = _regress(fx_train, np.stack([np.cos(yaw_train), np.sin(yaw_train)], 1), fx_test,
                  regressor)
    err = np.abs(np.angle(np.exp(1j * (np.arctan2(cs[:, 1], cs[:, 0]) - yaw_test))))
    out = {"yaw_error_deg": float(np.degrees(err).mean())}
    art_train, art_test = articulation(train_kpts), articulation(test_kpts)
    for name in ("wrist_height", "ankle_swing", "stride"):
        out[f"{name}_r2"] = r2(_regress(fx_train, art_train[name], fx_test, regressor),
                               art_test[name])
    hips_train = 0.5 * (train_kpts[:, _J["r_hip"], :2] + train_kpts[:, _J["l_hip"], :2])
    hips_test = 0.5 * (test_kpts[:, _J["r_hip"], :2] + test_kpts[:, _J["l_hip"], :2])
    pred = _regress(fx_train, hips_train, fx_test, regressor)
    out["position_r2"] = float(np.mean([r2(pred[:, i], hips_test[:, i]) for i in range(2)]))
    return out


MIRROR = (0, 1, 5, 6, 7, 2, 3, 4, 11, 12, 13, 8, 9, 10)  # joint order with left and right swapped


def mirror_bound(train_kpts: np.ndarray, test_kpts: np.ndarray) -> dict[str, float]:
    """PA-MPJPE (mm) on ``test_kpts`` ``(N, 14, 3)`` of the body-frame template fitted on
    ``train_kpts`` against two guesses that know the true pose up to left and right: a fair coin
    between it and its mirror image (``coin``) and their average (``blind``, the least-squares
    guess); a model that cannot tell left from right can beat the template by about the gap at
    most (the average is the best such guess in squared error, not exactly in PA-MPJPE)."""
    from edgekit.methods.wifi_mamba.metrics import pa_mpjpe, template_skeleton, to_body_frame

    truth = to_body_frame(test_kpts)
    mirrored = truth[:, MIRROR] * np.array([-1.0, 1.0, 1.0])
    template = np.broadcast_to(template_skeleton(train_kpts), truth.shape)
    return {"template_pa_mpjpe_mm": pa_mpjpe(template, truth),
            "coin_pa_mpjpe_mm": 0.5 * pa_mpjpe(mirrored, truth),
            "blind_pa_mpjpe_mm": pa_mpjpe(0.5 * (truth + mirrored), truth)}
