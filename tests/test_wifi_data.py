"""WiFi CSI format, loader, preprocessing and simulator."""
from __future__ import annotations

import numpy as np
import pytest

from edgekit.errors import UsageError
from edgekit.methods.wifi_mamba.csi import (
    CSI_SHAPE,
    SUBCARRIER_INDEX,
    denoise_amplitude,
    load_csi,
    load_keypoints,
    load_sample,
    preprocess,
    sanitize_phase,
)
from edgekit.methods.wifi_mamba.simulator import Geometry, Impairments, render_csi, simulate_dataset

pytestmark = pytest.mark.usefixtures("single_thread")


def _complex_csi(seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(CSI_SHAPE) + 1j * rng.standard_normal(CSI_SHAPE)


def test_load_csi_npy_mat_v5_and_v73(tmp_path):
    import h5py
    from scipy.io import savemat

    csi = _complex_csi()
    np.save(tmp_path / "a.npy", csi)
    savemat(tmp_path / "b.mat", {"csi_out": csi})
    raw = np.empty(csi.shape[::-1], dtype=[("real", "<f8"), ("imag", "<f8")])
    raw["real"], raw["imag"] = csi.real.T, csi.imag.T  # MATLAB v7.3 stores the reversed axes
    with h5py.File(tmp_path / "c.mat", "w") as f:
        f["csi_out"] = raw
    for name in ("a.npy", "b.mat", "c.mat"):
        np.testing.assert_array_equal(load_csi(tmp_path / name), csi)


def test_load_sample_layout_and_errors(tmp_path):
    (tmp_path / "csi").mkdir()
    (tmp_path / "keypoint").mkdir()
    np.save(tmp_path / "csi" / "x.npy", _complex_csi())
    from scipy.io import savemat
    savemat(tmp_path / "csi" / "s1.mat", {"csi_out": _complex_csi(1)})
    kp = np.random.default_rng(0).random((2, 14, 3))
    np.save(tmp_path / "keypoint" / "s1.npy", kp)
    csi, kpts = load_sample(tmp_path, "s1")
    assert csi.shape == CSI_SHAPE and kpts.shape == (2, 14, 3) and kpts.dtype == np.float32
    np.save(tmp_path / "bad.npy", np.zeros((3, 3, 30, 20)))  # real, not complex
    with pytest.raises(UsageError, match="expected complex"):
        load_csi(tmp_path / "bad.npy")
    np.save(tmp_path / "badk.npy", np.zeros((2, 13, 3)))
    with pytest.raises(UsageError, match=r"expected \(N, 14, 3\)"):
        load_keypoints(tmp_path / "badk.npy")
    with pytest.raises(UsageError, match="does not exist"):
        load_csi(tmp_path / "missing.mat")


def test_phase_sanitisation_removes_injected_slope_and_offset_exactly():
    rng = np.random.default_rng(0)
    true = 0.3 * np.sin(SUBCARRIER_INDEX[:, None] / 9.0 + rng.uniform(0, 6, (3, 3, 1, 20)))
    slope = rng.uniform(-0.05, 0.05, (3, 3, 1, 20))  # rad per subcarrier index
    offset = rng.uniform(-10, 10, (3, 3, 1, 20))
    observed = np.angle(np.exp(1j * (true + slope * SUBCARRIER_INDEX[:, None] + offset)))  # wrapped
    clean = sanitize_phase(observed)
    np.testing.assert_allclose(clean, sanitize_phase(true), atol=1e-10)
    # what is left has no line in it: orthogonal to the offset and the slope
    np.testing.assert_allclose(clean.sum(axis=-2), 0, atol=1e-10)
    np.testing.assert_allclose((clean * SUBCARRIER_INDEX[:, None]).sum(axis=-2), 0, atol=1e-9)


def test_simulated_hardware_offsets_vanish_after_sanitisation():
    geo, imp = Geometry(), Impairments(snr_db=300.0, agc_std=0.0)
    kpts = np.random.default_rng(0).uniform([-1, 2, 0], [1, 4, 1.8], (20, 14, 3))
    a = render_csi(kpts, geo, imp, np.random.default_rng(1))
    b = render_csi(kpts, geo, imp, np.random.default_rng(2))
    assert np.abs(np.angle(a * b.conj())).max() > 1.0  # raw phases differ by the random offsets
    np.testing.assert_allclose(sanitize_phase(np.angle(a)), sanitize_phase(np.angle(b)), atol=1e-6)
    np.testing.assert_allclose(np.abs(a), np.abs(b), rtol=1e-9)


def test_wavelet_denoising_reduces_injected_noise():
    rng = np.random.default_rng(0)
    t = np.arange(20)
    clean = 1.0 + 0.3 * np.sin(2 * np.pi * t / 20 + rng.uniform(0, 6, (3, 3, 30, 1)))
    noisy = clean + rng.normal(0, 0.1, clean.shape)
    den = denoise_amplitude(noisy)
    assert den.shape == noisy.shape
    before, after = np.mean((noisy - clean) ** 2), np.mean((den - clean) ** 2)
    assert after < 0.75 * before


def test_preprocess_shapes_and_scale():
    feats = preprocess(np.stack([_complex_csi(0), _complex_csi(1)]))
    assert feats.shape == (2, 2, 270, 20) and feats.dtype == np.float32
    np.testing.assert_allclose(feats[:, 0].mean(axis=(1, 2)), 1.0, rtol=1e-5)


def test_simulator_format_and_labels():
    data = simulate_dataset(3, 6, seed=0)
    assert data.csi.shape == (18, 3, 3, 30, 20) and data.csi.dtype == np.complex64
    assert data.keypoints.shape == (18, 3, 14, 3)
    assert list(data.n_persons) == [1] * 6 + [2] * 6 + [3] * 6
    for k, n in zip(data.keypoints, data.n_persons, strict=False):
        assert np.all(k[n:] == 0) and np.all(k[:n, :, 2].max(-1) > 1.4)  # heads above 1.4 m
        assert np.all(k[:n, 0, 2] > k[:n, 10, 2] + 1.3)  # head well above the ankle
    step = np.abs(np.diff(data.keypoints[:6, 0], axis=0)).max()
    assert 0 < step < 0.3  # smooth motion across consecutive frames (0.1 s)
    again = simulate_dataset(3, 6, seed=0)
    np.testing.assert_array_equal(again.csi, data.csi)


def test_csi_depends_on_the_body():
    geo, imp = Geometry(), Impairments(snr_db=300.0, sto_ns=0.0, agc_std=0.0)
    kpts = np.random.default_rng(0).uniform([-1, 2, 0], [1, 4, 1.8], (20, 14, 3))
    moved = kpts + np.array([0.3, 0.0, 0.0])
    rng = lambda: np.random.default_rng(5)  # noqa: E731 (same offsets both times)
    a, b = render_csi(kpts, geo, imp, rng()), render_csi(moved, geo, imp, rng())
    assert np.abs(np.abs(a) - np.abs(b)).mean() > 1e-3 * np.abs(a).mean()


def test_station_data_are_named_and_keyed_apart_from_the_walkers():
    """Checkpoints record the dataset's name and digest: station data must not pass for the
    built-in walkers, nor one station setting for another."""
    from edgekit.methods.wifi_mamba.dataset import DATASET_NAME, STATION_NAME, load_wifi_pose
    from edgekit.methods.wifi_mamba.simulator import Station

    walk, station = load_wifi_pose(3, 1), load_wifi_pose(3, 1, station=Station())
    other = load_wifi_pose(3, 1, station=Station(sway_m=(0.0, 0.0)))
    assert (walk.name, station.name, other.name) == (DATASET_NAME, STATION_NAME, STATION_NAME)
    assert station.name != walk.name
    assert len({walk.digest, station.digest, other.digest}) == 3
    assert station.x_train.shape[1:] == walk.x_train.shape[1:]
    assert np.isnan(station.y_train[:, 1:]).all() and np.isfinite(station.y_train[:, 0]).all()
