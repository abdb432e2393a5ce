"""Does the simulated CSI carry pose? Ridge probes on the former and the current simulator.

Before a model is trained, a ridge regressor on the preprocessed CSI (``csi.preprocess``, what
the models see) predicts body yaw, the higher wrist's height, the right ankle's swing and the
hip position from single-person frames (``edgekit.methods.wifi_mamba.observability``). Both
simulators render the same people and motions from the same seeds: ``points`` (the default and
former one: a point scatterer per keypoint, no shadowing, packets over 19 ms) and ``physical``
(bones as cylinders with orientation-dependent returns, body shadowing, packets over the whole
100 ms frame).
Each simulator's CSI is preprocessed twice: with phase sanitised per receiver (``per-receiver``,
the current ``csi.preprocess``: one line fitted to the first antenna, removed from all three) and
per antenna (``per-antenna``, the former one, which erases the sign of the Doppler shift).
Feature sets: ``raw``, ``summary`` and ``doppler`` (``observability.features``).
Training and held-out frames come from different seeds (other people, other motions). Each
round uses its own seeds; the table quotes medians over rounds.

    python benchmarks/wifi_observability.py [--rounds R] [--train-sequences N] [--test-sequences M]
"""
from __future__ import annotations

import argparse
import os
import time

from common import markdown_table, median, write_result

from edgekit.methods.wifi_mamba.csi import preprocess
from edgekit.methods.wifi_mamba.observability import probe
from edgekit.methods.wifi_mamba.simulator import PHYSICAL, BodyModel, Impairments, simulate_dataset

FRAMES = 8
SIMULATORS = {"points": (BodyModel(), Impairments()), "physical": PHYSICAL}
KINDS = ("raw", "summary", "doppler")
PHASES = {"per-receiver": True, "per-antenna": False}
METRICS = ("yaw_error_deg", "wrist_height_r2", "ankle_swing_r2", "position_r2")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="independent seeds")
    parser.add_argument("--train-sequences", type=int, default=200)
    parser.add_argument("--test-sequences", type=int, default=50)
    args = parser.parse_args()
    started = time.perf_counter()
    scores: dict[str, dict[str, list[dict[str, float]]]] = {
        f"{s} {p}": {k: [] for k in KINDS} for s in SIMULATORS for p in PHASES}
    sim_seconds: dict[str, list[float]] = {s: [] for s in SIMULATORS}
    for r in range(args.rounds):
        for name, (body, imp) in SIMULATORS.items():
            t0 = time.perf_counter()
            train = simulate_dataset(args.train_sequences, FRAMES, seed=r, persons=(1,),
                                     body=body, imp=imp)
            test = simulate_dataset(args.test_sequences, FRAMES, seed=10_000 + r, persons=(1,),
                                    body=body, imp=imp)
            sim_seconds[name].append(time.perf_counter() - t0)
            for phase, per_receiver in PHASES.items():
                x_train, x_test = (preprocess(d.csi, per_receiver) for d in (train, test))
                row = scores[f"{name} {phase}"]
                for kind in KINDS:
                    row[kind].append(probe(x_train, train.keypoints[:, 0], x_test,
                                           test.keypoints[:, 0], kind))
                    print(name, phase, kind, row[kind][-1], flush=True)
    summary = {s: {k: {m: median([run[m] for run in runs]) for m in METRICS}
                   for k, runs in per_kind.items()} for s, per_kind in scores.items()}
    rows = [[s, k] + [f"{summary[s][k][m]:.1f}" if m.endswith("deg") else f"{summary[s][k][m]:.3f}"
                      for m in METRICS] for s in scores for k in KINDS]
    table = markdown_table(["simulator, phase", "features", "yaw error deg (chance 90)",
                            "wrist height R²", "ankle swing R²", "hip position R²"], rows)
    print(table)
    write_result("wifi_observability", {
        "settings": {**vars(args), "frames_per_sequence": FRAMES, "persons": 1,
                     "probe": "RidgeCV, (cos, sin) for yaw",
                     "cpu_count": os.cpu_count()},
        "machine_load": {"loadavg_after": os.getloadavg()},
        "seconds": round(time.perf_counter() - started, 1),
        "simulate_seconds": sim_seconds,
        "rounds": scores, "median": summary, "table": table,
    })


if __name__ == "__main__":
    main()
