"""Does the simulated CSI carry pose? Probes on the former and the current simulator.

Before a model is trained, a regressor on the preprocessed CSI (``csi.preprocess``, what the
models see, or fixed physical features of it) predicts body yaw, the higher wrist's height, the
right ankle's signed swing, the stride (the ankles' distance along the forward axis) and the hip
position from single-person frames (``edgekit.methods.wifi_mamba.observability``). Both
simulators render the same people and motions from the same seeds: ``points`` (the former one,
``simulator.POINTS``: a point scatterer per keypoint, no shadowing, packets over 19 ms) and
``physical`` (the default, ``simulator.PHYSICAL``: bones as cylinders with orientation-dependent
returns, body shadowing, packets over the whole 100 ms frame).
Feature sets: ``raw``, ``doppler`` and ``spectrum`` (``observability.features``); regressors:
ridge on every set, 10 nearest neighbours on the two spectra. Training and held-out frames come
from different seeds (other people, other motions). Each round uses its own seeds; the table
quotes medians over rounds. ``mirror bound``: PA-MPJPE of the body-frame template against the
best guess that knows the true pose but not left from right (``observability.mirror_bound``).

    python benchmarks/wifi_observability.py [--rounds R] [--train-sequences N] [--test-sequences M]
"""
from __future__ import annotations

import argparse
import os
import time

from common import markdown_table, median, write_result

from edgekit.methods.wifi_mamba.csi import preprocess
from edgekit.methods.wifi_mamba.observability import mirror_bound, probe
from edgekit.methods.wifi_mamba.simulator import PHYSICAL, POINTS, simulate_dataset

FRAMES = 8
SIMULATORS = {"points": POINTS, "physical": PHYSICAL}
PROBES = (("raw", "ridge"), ("doppler", "ridge"), ("doppler", "knn"), ("spectrum", "ridge"),
          ("spectrum", "knn"))
METRICS = ("yaw_error_deg", "position_r2", "wrist_height_r2", "ankle_swing_r2", "stride_r2")
BOUND = ("template_pa_mpjpe_mm", "coin_pa_mpjpe_mm", "blind_pa_mpjpe_mm")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="independent seeds")
    parser.add_argument("--train-sequences", type=int, default=200)
    parser.add_argument("--test-sequences", type=int, default=50)
    args = parser.parse_args()
    started = time.perf_counter()
    scores: dict[str, dict[str, list[dict[str, float]]]] = {
        s: {f"{k} {r}": [] for k, r in PROBES} for s in SIMULATORS}
    bounds: dict[str, list[dict[str, float]]] = {s: [] for s in SIMULATORS}
    sim_seconds: dict[str, list[float]] = {s: [] for s in SIMULATORS}
    for r in range(args.rounds):
        for name, (body, imp) in SIMULATORS.items():
            t0 = time.perf_counter()
            train = simulate_dataset(args.train_sequences, FRAMES, seed=r, persons=(1,),
                                     body=body, imp=imp)
            test = simulate_dataset(args.test_sequences, FRAMES, seed=10_000 + r, persons=(1,),
                                    body=body, imp=imp)
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
    print(table)
    print(bound_table)
    write_result("wifi_observability", {
        "settings": {**vars(args), "frames_per_sequence": FRAMES, "persons": 1,
                     "phase": "per receiver (csi.preprocess)", "cpu_count": os.cpu_count()},
        "machine_load": {"loadavg_after": os.getloadavg()},
        "seconds": round(time.perf_counter() - started, 1),
        "simulate_seconds": sim_seconds,
        "rounds": scores, "median": summary, "mirror_bound": bounds,
        "mirror_bound_median": bound_summary, "table": table, "mirror_bound_table": bound_table,
    })


if __name__ == "__main__":
    main()
