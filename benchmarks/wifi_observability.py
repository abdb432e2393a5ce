"""Does the simulated CSI carry pose? Probes on both body models and both protocols.

Before a model is trained, a regressor on the preprocessed CSI (``csi.preprocess``, what the
models see, or fixed physical features of it) predicts body yaw, the higher wrist's height, the
right ankle's signed swing, the stride (the ankles' distance along the forward axis) and the hip
position from single-person frames (``edgekit.methods.wifi_mamba.observability``). The walking
simulators render the same people and motions from the same seeds: ``points`` (the built-in
dataset's, ``simulator.POINTS``: a point scatterer per keypoint, no shadowing, packets over
19 ms) and ``physical`` (opt-in, ``simulator.PHYSICAL``: bones as cylinders with
orientation-dependent returns, body shadowing, packets over the whole 100 ms frame), both with
people walking across the area, and ``station`` (point scatterers, one person acting on a mark,
``simulator.Station``).
``speckle``: the wrist-height probe on the station protocol as the person sways further off the
mark (``SWAYS_M``) or is drawn from a pool of body sizes (``SIZE_POOLS``), which says how
densely training frames would have to cover place and size for limb pose to be learnt.
Feature sets: ``raw``, ``doppler`` and ``spectrum`` (``observability.features``); regressors:
ridge and 10 nearest neighbours on every set. Training and held-out frames come
from different seeds (other people, other motions). Each round uses its own seeds; the table
quotes medians over rounds. ``mirror bound``: PA-MPJPE of the body-frame template against the
best guess that knows the true pose but not left from right (``observability.mirror_bound``).
``physics``: what the radio geometry allows, from the simulated skeletons: the bistatic
path-length change that raising a wrist by 0.65 m makes at the area's centre, per receiver, in
wavelengths; the Doppler shifts of torso, arm and leg keypoints (their velocities between
frames projected on the bistatic bisector), against the Doppler resolution of a frame's packets;
the share of the amplitude's variation over the packets that the wavelet denoising keeps,
noise-free.

    python benchmarks/wifi_observability.py [--rounds R] [--train-sequences N] [--test-sequences M]
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
from common import markdown_table, median, write_result

from edgekit.methods.wifi_mamba.csi import JOINT_NAMES, denoise_amplitude, preprocess
from edgekit.methods.wifi_mamba.observability import REGRESSORS, mirror_bound, probe
from edgekit.methods.wifi_mamba.simulator import (
    PHYSICAL,
    POINTS,
    WAVELENGTH,
    Geometry,
    Impairments,
    Station,
    simulate_dataset,
)

FRAMES = 8
# name: (body, impairments, protocol); None is 1-3 people walking, here one
SIMULATORS = {"points": (*POINTS, None), "physical": (*PHYSICAL, None),
              "station": (*POINTS, Station())}
# what a pose looks like in the CSI, as the person moves off the mark or is another size: the
# station protocol with the sway (per axis) or the pool of body sizes below, no yaw jitter
SWAYS_M = (0.0, 0.01, 0.03, 0.1, 0.3)
SIZE_POOLS = ((0.98, 1.0, 1.02), (0.94, 0.98, 1.02, 1.06), (0.88, 0.95, 1.02, 1.1))
PROBES = tuple((kind, regressor) for kind in ("raw", "doppler", "spectrum")
               for regressor in ("ridge", "knn"))
METRICS = ("yaw_error_deg", "position_r2", "wrist_height_r2", "ankle_swing_r2", "stride_r2")
BOUND = ("template_pa_mpjpe_mm", "coin_pa_mpjpe_mm", "blind_pa_mpjpe_mm")
PARTS = {"torso": ("neck", "r_shoulder", "l_shoulder", "r_hip", "l_hip"),
         "wrists": ("r_wrist", "l_wrist"), "ankles": ("r_ankle", "l_ankle")}


def physics(seed: int = 0, sequences: int = 60) -> dict:
    """Path-length change of a wrist raise, Doppler of body parts, what denoising keeps."""
    geo = Geometry()
    ants = geo.antennas()[:, 1]  # each receiver's middle antenna
    wrist = np.array([0.0, 3.0, 0.86])

    def path(q: np.ndarray) -> np.ndarray:
        return np.linalg.norm(q - geo.tx, axis=-1) + np.linalg.norm(ants - q, axis=-1)

    raise_waves = (path(wrist + [0.0, 0.0, 0.65]) - path(wrist)) / WAVELENGTH
    clean = Impairments(snr_db=300.0, sto_ns=0.0, agc_std=0.0)
    data = simulate_dataset(sequences, FRAMES, seed=seed, persons=(1,), imp=clean)
    kp = data.keypoints[:, 0].astype(np.float64)
    same = data.sequence[1:] == data.sequence[:-1]
    vel = ((kp[1:] - kp[:-1]) / clean.frame_interval_s)[same]  # (N, 14, 3) m/s
    mid = kp[:-1][same]
    to_tx = geo.tx - mid
    to_rx = ants[:, None, None] - mid[None]  # (3, N, 14, 3)
    unit_tx = to_tx / np.linalg.norm(to_tx, axis=-1, keepdims=True)
    bisector = unit_tx[None] + to_rx / np.linalg.norm(to_rx, axis=-1, keepdims=True)
    doppler = np.abs((vel[None] * bisector).sum(-1)) / WAVELENGTH  # (3, N, 14) Hz
    idx = {n: i for i, n in enumerate(JOINT_NAMES)}
    parts = {part: {"median_hz": float(np.median(doppler[..., [idx[j] for j in joints]])),
                    "p90_hz": float(np.percentile(doppler[..., [idx[j] for j in joints]], 90))}
             for part, joints in PARTS.items()}
    amp = np.abs(data.csi)
    still = amp - amp.mean(-1, keepdims=True)
    kept = denoise_amplitude(amp, axis=-1)
    kept = kept - kept.mean(-1, keepdims=True)
    return {"wavelength_mm": WAVELENGTH * 1e3,
            "wrist_raise_0.65m_path_change_wavelengths": raise_waves.round(2).tolist(),
            "delay_resolution_m": 299_792_458.0 / 40e6,
            "doppler_by_part": parts,
            "doppler_resolution_hz": {"points (1 ms)": 1 / (20 * POINTS[1].packet_interval_s),
                                      "physical (5 ms)": 1 / (20 * PHYSICAL[1].packet_interval_s)},
            "denoising_keeps_share_of_amplitude_variation": float((kept ** 2).sum()
                                                                  / (still ** 2).sum())}


def speckle(train_sequences: int, test_sequences: int, seed: int) -> list[dict]:
    """Wrist-height R² (raw CSI, ridge and 10 nearest neighbours) on the station protocol as the
    sway grows (one body size) and as the pool of body sizes widens (1-3 cm of sway)."""
    cases = [(f"sway {s * 100:g} cm", Station(sway_m=(s, s), yaw_jitter_deg=0.0))
             for s in SWAYS_M]
    cases += [(f"sizes {', '.join(f'{x:g}' for x in pool)}", Station(scales=pool))
              for pool in SIZE_POOLS]
    out = []
    for label, station in cases:
        train = simulate_dataset(train_sequences, FRAMES, seed=seed, station=station)
        test = simulate_dataset(test_sequences, FRAMES, seed=10_000 + seed, station=station)
        x_train, x_test = preprocess(train.csi), preprocess(test.csi)
        row = {"case": label}
        for regressor in REGRESSORS:
            row[regressor] = probe(x_train, train.keypoints[:, 0], x_test, test.keypoints[:, 0],
                                   "raw", regressor)["wrist_height_r2"]
        print("speckle", row, flush=True)
        out.append(row)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="independent seeds")
    parser.add_argument("--train-sequences", type=int, default=200)
    parser.add_argument("--test-sequences", type=int, default=50)
    args = parser.parse_args()
    started = time.perf_counter()
    physical_limits = physics()
    print("physics", physical_limits, flush=True)
    scores: dict[str, dict[str, list[dict[str, float]]]] = {
        s: {f"{k} {r}": [] for k, r in PROBES} for s in SIMULATORS}
    bounds: dict[str, list[dict[str, float]]] = {s: [] for s in SIMULATORS}
    sim_seconds: dict[str, list[float]] = {s: [] for s in SIMULATORS}
    for r in range(args.rounds):
        for name, (body, imp, station) in SIMULATORS.items():
            t0 = time.perf_counter()
            train = simulate_dataset(args.train_sequences, FRAMES, seed=r, persons=(1,),
                                     body=body, imp=imp, station=station)
            test = simulate_dataset(args.test_sequences, FRAMES, seed=10_000 + r, persons=(1,),
                                    body=body, imp=imp, station=station)
            sim_seconds[name].append(time.perf_counter() - t0)
            bounds[name].append(mirror_bound(train.keypoints[:, 0], test.keypoints[:, 0]))
            x_train, x_test = preprocess(train.csi), preprocess(test.csi)
            for kind, regressor in PROBES:
                run = probe(x_train, train.keypoints[:, 0], x_test, test.keypoints[:, 0], kind,
                            regressor)
                scores[name][f"{kind} {regressor}"].append(run)
                print(name, kind, regressor, {m: round(v, 3) for m, v in run.items()},
                      flush=True)
    summary = {s: {p: {m: median([run[m] for run in runs]) for m in METRICS}
                   for p, runs in per_probe.items()} for s, per_probe in scores.items()}
    bound_summary = {s: {m: median([b[m] for b in runs]) for m in BOUND}
                     for s, runs in bounds.items()}
    rows = [[s, p] + [f"{summary[s][p][m]:.1f}" if m.endswith("deg") else f"{summary[s][p][m]:.2f}"
                      for m in METRICS] for s in scores for p in scores[s]]
    table = markdown_table(["simulator", "features, regressor", "yaw error deg (chance 90)",
                            "hip position R²", "wrist height R²", "ankle swing R² (signed)",
                            "stride R²"], rows)
    bound_table = markdown_table(
        ["simulator", "template PA-MPJPE mm", "left/right coin", "left/right-blind best"],
        [[s] + [f"{bound_summary[s][m]:.1f}" for m in BOUND] for s in SIMULATORS])
    speckle_rows = speckle(args.train_sequences, args.test_sequences, seed=0)
    speckle_table = markdown_table(
        ["station protocol", "wrist height R², ridge", "wrist height R², 10 neighbours"],
        [[row["case"], f"{row['ridge']:.2f}", f"{row['knn']:.2f}"] for row in speckle_rows])
    print(table)
    print(bound_table)
    print(speckle_table)
    write_result("wifi_observability", {
        "settings": {**vars(args), "frames_per_sequence": FRAMES, "persons": 1,
                     "phase": "per receiver (csi.preprocess)", "cpu_count": os.cpu_count()},
        "machine_load": {"loadavg_after": os.getloadavg()},
        "seconds": round(time.perf_counter() - started, 1),
        "simulate_seconds": sim_seconds,
        "physics": physical_limits, "rounds": scores, "median": summary, "mirror_bound": bounds,
        "mirror_bound_median": bound_summary, "table": table, "mirror_bound_table": bound_table,
        "speckle": speckle_rows, "speckle_table": speckle_table,
    })


if __name__ == "__main__":
    main()
