"""The pose probe and the physical body model of the CSI simulator."""
from __future__ import annotations

import numpy as np
import pytest

from edgekit.methods.wifi_mamba import body
from edgekit.methods.wifi_mamba.observability import (
    articulation,
    body_yaw,
    doppler_elevation,
    mirror_bound,
    probe,
)
from edgekit.methods.wifi_mamba.simulator import _TEMPLATE, Station, _to_world, simulate_dataset

pytestmark = pytest.mark.usefixtures("single_thread")


def _skeleton(yaw, centre=(0.0, 3.0), raise_wrist=0.0, step=0.0):
    """The template standing at ``centre`` facing ``yaw`` (forward = (cos, sin)), its right
    wrist raised and its right ankle ``step`` ahead."""
    local = _TEMPLATE.copy()
    local[4, 2] += raise_wrist
    local[10, 1] += step
    return _to_world(local[None], yaw, np.array([centre]))[0]


def test_targets_read_from_skeletons():
    for yaw in (0.3, 2.0, -2.5):
        assert body_yaw(_skeleton(yaw)) == pytest.approx(yaw)
    art = articulation(np.stack([_skeleton(1.0), _skeleton(1.0, raise_wrist=0.4)]))
    assert art["wrist_height"][1] - art["wrist_height"][0] == pytest.approx(0.4)
    assert art["ankle_swing"] == pytest.approx([0.0, 0.0], abs=1e-9)
    art = articulation(np.stack([_skeleton(2.0, step=0.3), _skeleton(2.0, step=-0.3)]))
    assert art["ankle_swing"] == pytest.approx([0.3, -0.3])
    assert art["stride"] == pytest.approx([0.3, 0.3])  # the mirror-blind part of the gait


def test_mirror_bound_is_zero_for_symmetric_poses_and_not_for_one_sided_ones():
    symmetric = np.stack([_skeleton(a) for a in (0.0, 1.0, 2.0)])
    assert mirror_bound(symmetric, symmetric) == pytest.approx(
        {"template_pa_mpjpe_mm": 0.0, "coin_pa_mpjpe_mm": 0.0, "blind_pa_mpjpe_mm": 0.0}, abs=1e-6)
    one_sided = np.stack([_skeleton(a, raise_wrist=0.5, step=0.2) for a in (0.0, 1.0, 2.0)])
    bound = mirror_bound(symmetric, one_sided)
    assert bound["coin_pa_mpjpe_mm"] > 10 and bound["blind_pa_mpjpe_mm"] > 10
    assert bound["blind_pa_mpjpe_mm"] <= bound["template_pa_mpjpe_mm"] + 1e-9


def test_doppler_elevation_puts_a_moving_path_in_its_signed_doppler_bin():
    n_pkt = 20
    shift = np.exp(2j * np.pi * 3 * np.arange(n_pkt) / n_pkt)  # +3 bins, broadside (all antennas)
    z = np.ones((2, 3, 3, 30, n_pkt), complex)
    z[0, 0] += 0.2 * shift  # frame 0: receiver 0 sees a path approaching, frame 1: receding
    z[1, 0] += 0.2 * shift.conj()
    x = np.stack([np.abs(z), np.angle(z)], axis=1).reshape(2, 2, 270, n_pkt)
    feats = doppler_elevation(x)
    assert feats.shape == (2, 3 * (3 * n_pkt + 4))
    share = feats[:, :3 * 3 * n_pkt].reshape(2, 3, 3, n_pkt)
    for frame, doppler in ((0, n_pkt // 2 + 3), (1, n_pkt // 2 - 3)):
        beam, bin_ = np.unravel_index(share[frame, 0].argmax(), (3, n_pkt))
        assert (beam, bin_) == (1, doppler)  # the middle beam after fftshift: broadside


def test_probe_finds_pose_where_the_features_carry_it_and_not_where_they_do_not():
    rng = np.random.default_rng(0)
    yaw = rng.uniform(-np.pi, np.pi, 300)
    lift = rng.uniform(0, 0.5, 300)
    kpts = np.stack([_skeleton(a, raise_wrist=r) for a, r in zip(yaw, lift, strict=True)])
    mix = rng.standard_normal((3, 2 * 6 * 4))
    carried = np.stack([np.cos(yaw), np.sin(yaw), lift], 1) @ mix
    x = (carried + 0.05 * rng.standard_normal(carried.shape)).reshape(300, 2, 6, 4)
    good = probe(x[:200], kpts[:200], x[200:], kpts[200:])
    assert good["yaw_error_deg"] < 10 and good["wrist_height_r2"] > 0.9
    near = probe(x[:200], kpts[:200], x[200:], kpts[200:], regressor="knn")
    assert near["yaw_error_deg"] < 20 and near["wrist_height_r2"] > 0.8
    blind = probe(x[:200], kpts[:200], rng.permutation(x[200:]), kpts[200:])
    assert blind["yaw_error_deg"] > 60 and blind["wrist_height_r2"] < 0.2


def test_torso_returns_more_from_the_front_than_from_the_side():
    tx, rx = np.array([0.0, 0.0, 1.2]), np.array([[0.3, 0.0, 1.2]])  # nearly monostatic
    amps = []
    for yaw in (-np.pi / 2, 0.0):  # facing the radios, then side-on
        el = body.elements(_skeleton(yaw))
        amp, _, _ = body.scatter(el, tx, rx, 118.0)
        torso = slice(body.SUBSEGMENTS * len(body.BONES), body.SUBSEGMENTS * (len(body.BONES) + 1))
        amps.append(amp[0, torso].sum())
    assert amps[0] > 1.5 * amps[1]


def test_a_body_shadows_the_ray_through_it_and_not_the_ray_beside_it():
    blk = body.blockers(_skeleton(0.0, centre=(0.0, 3.0)))
    through = body.transmission(np.array([0.0, 0.0, 1.0]), np.array([0.0, 6.0, 1.0]), blk)
    beside = body.transmission(np.array([1.0, 0.0, 1.0]), np.array([1.0, 6.0, 1.0]), blk)
    above = body.transmission(np.array([0.0, 0.0, 2.2]), np.array([0.0, 6.0, 2.2]), blk)
    assert through == pytest.approx(10 ** (-body.BODY_LOSS_DB / 20), rel=0.05)
    assert beside == pytest.approx(1.0, abs=1e-3) and above == 1.0


def test_physical_rendering_is_finite_deterministic_and_sees_a_raised_arm():
    from edgekit.methods.wifi_mamba.simulator import PHYSICAL, Geometry, render_csi

    body_model, imp = PHYSICAL
    quiet = type(imp)(snr_db=300.0, sto_ns=0.0, agc_std=0.0, packet_interval_s=5e-3)
    two = np.concatenate([_skeleton(0.4, (0.0, 3.0)), _skeleton(2.0, (0.8, 2.2))])  # 2 people
    still, raised = np.repeat(two[None], 4, 0), np.repeat(two[None], 4, 0)
    raised[:, 4, 2] += 0.4
    csi = [render_csi(k, Geometry(), quiet, np.random.default_rng(3), body_model)
           for k in (still, still, raised)]
    assert csi[0].shape == (3, 3, 30, 4) and np.isfinite(csi[0]).all()
    np.testing.assert_array_equal(csi[0], csi[1])
    assert np.abs(csi[2] - csi[0]).max() > 1e-3 * np.abs(csi[0]).mean()


def test_per_receiver_sanitisation_removes_common_offsets_and_keeps_antenna_differences():
    from edgekit.methods.wifi_mamba.csi import SUBCARRIER_INDEX, sanitize_phase_per_receiver

    rng = np.random.default_rng(0)
    true = 0.3 * np.sin(SUBCARRIER_INDEX[:, None] / 9.0 + rng.uniform(0, 6, (3, 3, 1, 20)))
    true[:, 1:] += rng.uniform(-1, 1, (3, 2, 1, 20))  # antenna phase differences (Doppler)
    common = (rng.uniform(-0.05, 0.05, (3, 1, 1, 20)) * SUBCARRIER_INDEX[:, None]
              + rng.uniform(-10, 10, (3, 1, 1, 20)))  # one offset per receiver and packet
    clean = sanitize_phase_per_receiver(np.angle(np.exp(1j * (true + common))))
    np.testing.assert_allclose(clean, sanitize_phase_per_receiver(true), atol=1e-9)
    np.testing.assert_allclose(clean[:, 1:] - clean[:, :1], true[:, 1:] - true[:, :1], atol=1e-9)


def test_yaw_is_observable_with_per_receiver_phase_and_not_with_per_antenna_phase():
    """The sign of the walkers' Doppler shift (their heading is their yaw) survives only the
    per-receiver sanitisation: a ridge probe on the CSI-ratio Doppler spectrum then finds yaw,
    and the size of the stride but not its sign.
    Small sets at 40 dB SNR keep it fast (about 49° against 115°; at 25 dB and 120 training
    sequences 47° against 97°, benchmarks/wifi_observability.py)."""
    from dataclasses import replace

    from edgekit.methods.wifi_mamba.csi import preprocess
    from edgekit.methods.wifi_mamba.simulator import PHYSICAL, simulate_dataset

    body_model, imp = PHYSICAL[0], replace(PHYSICAL[1], snr_db=40.0)
    train = simulate_dataset(32, 4, seed=0, persons=(1,), body=body_model, imp=imp)
    test = simulate_dataset(12, 4, seed=10_000, persons=(1,), body=body_model, imp=imp)
    scores = {}
    for per_receiver in (True, False):
        x_train, x_test = (preprocess(d.csi, per_receiver) for d in (train, test))
        scores[per_receiver] = probe(x_train, train.keypoints[:, 0], x_test,
                                     test.keypoints[:, 0], "doppler")
    assert scores[True]["yaw_error_deg"] < 65 and scores[False]["yaw_error_deg"] > 80, scores
    # the legs' Doppler spread carries the stride (0.22 here), not which leg is ahead (-0.04)
    assert scores[True]["stride_r2"] > 0.1 and scores[True]["ankle_swing_r2"] < 0.1, scores


def test_station_keeps_one_person_on_its_mark_and_moves_their_limbs():
    data = simulate_dataset(12, 8, seed=0, station=Station())
    kpts = data.keypoints[:, 0]
    assert (data.n_persons == 1).all() and not data.keypoints[:, 1:].any()
    hips = 0.5 * (kpts[:, 8, :2] + kpts[:, 11, :2])
    assert np.abs(hips - [0.0, 3.0]).max() <= 0.03 + 1e-6  # the area's centre, 1-3 cm of sway
    assert np.degrees(np.abs(body_yaw(kpts) - np.pi / 2)).max() <= 5.0 + 1e-3
    arts = articulation(kpts)
    assert arts["wrist_height"].max() - arts["wrist_height"].min() > 0.3  # arms go up and down
    assert np.ptp(kpts[:, [9, 12], 2]) > 0.1  # and a knee is lifted


@pytest.mark.parametrize("bad", [dict(sway_m=(0.03, 0.01)), dict(sway_m=(float("nan"), 0.1)),
                                 dict(yaw_jitter_deg=-1.0), dict(scales=()),
                                 dict(scales=(1.0, float("inf")))])
def test_station_refuses_impossible_settings(bad):
    with pytest.raises(ValueError, match="a station needs"):
        Station(**bad)


def test_a_station_has_one_person():
    from edgekit.methods.wifi_mamba.simulator import simulate_sequence

    with pytest.raises(ValueError, match="one person, got 2"):
        simulate_sequence(2, 2, np.random.default_rng(0), station=Station())
    with pytest.raises(ValueError, match="one person, got 2"):
        simulate_dataset(2, 2, persons=(1, 2), station=Station())


def test_wrist_height_is_in_the_csi_on_the_mark_and_lost_a_few_decimetres_off_it():
    """Limb pose is in the CSI as the interference of the limb's paths with the body's, which a
    probe learns where training frames cover the spot (R² 0.69 with the person held on the mark)
    and cannot where the person moves 30 cm (-0.06); benchmarks/wifi_observability.py has the
    whole curve and the effect of body size."""
    from edgekit.methods.wifi_mamba.csi import preprocess

    scores = {}
    for sway in (0.0, 0.3):
        station = Station(sway_m=(sway, sway), yaw_jitter_deg=0.0)
        train = simulate_dataset(60, 8, seed=0, station=station)
        test = simulate_dataset(15, 8, seed=10_000, station=station)
        scores[sway] = probe(preprocess(train.csi), train.keypoints[:, 0], preprocess(test.csi),
                             test.keypoints[:, 0], "raw")["wrist_height_r2"]
    assert scores[0.0] > 0.5 and scores[0.3] < 0.2, scores
