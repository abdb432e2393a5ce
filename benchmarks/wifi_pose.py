"""WiFi-Mamba against the PETR baseline on simulated CSI, over seeds, with the two baselines.

Per seed: the built-in dataset is simulated from that seed (``dataset.load_wifi_pose``: other
people and motions for each seed, held-out sequences from another), both registry entries are
built and trained for the same number of optimiser steps (``train.train_pose_model``, the loop
``edgekit train`` runs, at the entries' batch size and learning rate; steps, not seconds, so
that the result does not depend on the machine's load), and scored on the held-out sequences
(MPJPE and PA-MPJPE in mm, WiFi-Mamba streaming its memory) beside the mean pose and the
body-frame template (``metrics.baseline_scores``). Verdicts follow issue 19's targets: both
models beat the template on PA-MPJPE; WiFi-Mamba beats the baseline on MPJPE and PA-MPJPE with
at most 10 % of its parameters; each holds on every seed and on the medians. The models are
taken from the registry by name, so the script does not depend on their internals.

``--protocol station`` simulates one person acting on a mark (``simulator.Station``), where
limb pose is recoverable from the CSI, instead of 1-3 people walking across the area, where it is
not (``benchmarks/wifi_observability.py``); results go to ``results/wifi_pose_station.json``
(``--result NAME``: ``results/NAME.json``).

``--validation F`` holds out a fraction F of the training sequences (``train.hold_out``) and
keeps, for each model, the weights that scored best on them, measured every
``--validate-every`` steps: both models are then judged at their best rather than at whatever
the step budget leaves, which matters where the larger one overfits 2,400 training frames (its
held-out curve is in the JSON). ``--jobs J`` trains J seeds at once in separate processes (each
run depends on its seed alone: the same figures as one after the other).

    python benchmarks/wifi_pose.py [--seeds 3] [--first-seed 0] [--steps 400]
                                   [--train-sequences 300] [--test-sequences 60] [--threads T]
                                   [--protocol walk|station]
                                   [--validation F] [--validate-every 100] [--jobs J]
                                   [--result NAME]
"""
from __future__ import annotations

import argparse
import math
import os
import re
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any

import torch
from common import markdown_table, median, write_result

from edgekit.methods.wifi_mamba.dataset import load_wifi_pose, to_split
from edgekit.methods.wifi_mamba.simulator import Station
from edgekit.methods.wifi_mamba.train import (
    baselines,
    evaluate_pose_model,
    hold_out,
    train_pose_model,
)
from edgekit.registry import get_entry

MODELS = ("wifi-mamba", "wifi-petr")
ROWS = (*MODELS, "template", "mean_pose")


def train_one(name: str, train, test, steps: int, seed: int, validation=None,
              validate_every: int = 100) -> dict[str, Any]:
    entry = get_entry(name)
    torch.manual_seed(seed)
    model = entry.build()
    curve: list[list[float]] = []
    started = time.perf_counter()
    done, loss = train_pose_model(model, train, seconds=math.inf, batch=entry.train.batch_size,
                                  lr=entry.train.lr, seed=seed, max_steps=steps,
                                  validation=validation, validate_every=validate_every,
                                  on_validate=lambda step, mm: curve.append([step, round(mm, 2)]))
    seconds = time.perf_counter() - started
    result = {"params": sum(p.numel() for p in model.parameters()), "steps": done,
              "final_loss": loss, "train_seconds": round(seconds, 1),
              "test": evaluate_pose_model(model, test)}
    if curve:
        result["validation_mpjpe_mm"] = curve  # [step, MPJPE]; the model kept the best
        result["selected_step"] = min(curve, key=lambda c: c[1])[0]
    return result


def run_seed(seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """Simulate one seed's data, train and score both models and the baselines on it."""
    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    data = load_wifi_pose(args.train_sequences, args.test_sequences, seed=seed,
                          station=Station() if args.protocol == "station" else None)
    train, test = to_split(data.x_train, data.y_train), to_split(data.x_test, data.y_test)
    validation = None
    if args.validation:
        train, validation = hold_out(train, args.validation, seed=seed)
    run: dict[str, Any] = {"seed": seed, "simulate_seconds": round(time.perf_counter() - t0, 1),
                           "models": {}}
    for name in MODELS:
        run["models"][name] = res = train_one(name, train, test, args.steps, seed, validation,
                                              args.validate_every)
        picked = f", kept step {res['selected_step']}" if "selected_step" in res else ""
        print(f"seed {seed} {name}: {res['steps']} steps in {res['train_seconds']} s{picked}, "
              f"MPJPE {res['test']['all']['mpjpe_mm']:.1f} mm, "
              f"PA-MPJPE {res['test']['all']['pa_mpjpe_mm']:.1f} mm", flush=True)
    run["baselines"] = baselines(train, test)
    run["scores"] = {**{m: run["models"][m]["test"]["all"] for m in MODELS},
                     **{b: run["baselines"][b]["all"] for b in ("template", "mean_pose")}}
    params = {m: run["models"][m]["params"] for m in MODELS}
    run["verdicts"] = verdicts(run["scores"], params)
    print(f"seed {seed} template PA-MPJPE {run['scores']['template']['pa_mpjpe_mm']:.1f} mm; "
          f"{run['verdicts']}", flush=True)
    return run


def verdicts(scores: dict[str, dict[str, float]], params: dict[str, int]) -> dict[str, bool]:
    """Issue 19's targets on one set of ``{row: {"mpjpe_mm", "pa_mpjpe_mm"}}`` scores."""
    mamba, petr, template = scores["wifi-mamba"], scores["wifi-petr"], scores["template"]
    return {
        "wifi-mamba beats template on PA-MPJPE": mamba["pa_mpjpe_mm"] < template["pa_mpjpe_mm"],
        "wifi-petr beats template on PA-MPJPE": petr["pa_mpjpe_mm"] < template["pa_mpjpe_mm"],
        "wifi-mamba beats wifi-petr on MPJPE": mamba["mpjpe_mm"] < petr["mpjpe_mm"],
        "wifi-mamba beats wifi-petr on PA-MPJPE": mamba["pa_mpjpe_mm"] < petr["pa_mpjpe_mm"],
        "wifi-mamba has at most 10 % of wifi-petr's parameters":
            params["wifi-mamba"] <= 0.1 * params["wifi-petr"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3,
                        help="how many seeds (data and weights): K..K+N-1")
    parser.add_argument("--first-seed", type=int, default=0, help="K, the first seed")
    parser.add_argument("--steps", type=int, default=400, help="optimiser steps per model")
    parser.add_argument("--train-sequences", type=int, default=300)
    parser.add_argument("--test-sequences", type=int, default=60)
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument("--protocol", choices=("walk", "station"), default="walk",
                        help="1-3 people walking (the built-in dataset) or one acting on a mark")
    parser.add_argument("--validation", type=float, default=0.0,
                        help="hold out this fraction of the training sequences and keep each "
                             "model's weights that score best there (0: the last weights)")
    parser.add_argument("--validate-every", type=int, default=100,
                        help="steps between validations (with --validation)")
    parser.add_argument("--jobs", type=int, default=1, help="seeds trained in parallel processes")
    parser.add_argument("--result", default=None,
                        help="results/NAME.json (default wifi_pose, wifi_pose_station)")
    args = parser.parse_args()
    if args.first_seed < 0:
        parser.error("--first-seed must be at least 0")
    if not 0 <= args.validation < 1:
        parser.error("--validation must be a fraction in [0, 1)")
    for option in ("seeds", "steps", "train_sequences", "test_sequences", "validate_every",
                   "jobs"):
        if getattr(args, option) < 1:
            parser.error(f"--{option.replace('_', '-')} must be at least 1")
    if args.result is not None and not re.fullmatch(r"[A-Za-z0-9_-]+", args.result):
        parser.error(f"--result {args.result!r}: a name of letters, digits, '_' and '-' "
                     "(it becomes results/NAME.json)")
    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    if args.jobs == 1:
        runs = [run_seed(seed, args) for seed in seeds]
    else:  # seeds in parallel processes; each run depends on its seed only
        with ProcessPoolExecutor(args.jobs, mp_context=get_context("spawn")) as pool:
            runs = list(pool.map(run_seed, seeds, [args] * args.seeds))
    params = {m: runs[0]["models"][m]["params"] for m in MODELS}
    med = {row: {k: median([r["scores"][row][k] for r in runs])
                 for k in ("mpjpe_mm", "pa_mpjpe_mm")} for row in ROWS}
    on_medians = verdicts(med, params)
    every_seed = {k: all(r["verdicts"][k] for r in runs) for k in on_medians}
    rows = [[row, f"{params[row]:,}" if row in params else "-",
             f"{med[row]['mpjpe_mm']:.1f}", f"{med[row]['pa_mpjpe_mm']:.1f}",
             " / ".join(f"{r['scores'][row]['pa_mpjpe_mm']:.1f}" for r in runs)] for row in ROWS]
    table = markdown_table(["model", "params", "MPJPE mm (median)", "PA-MPJPE mm (median)",
                            "PA-MPJPE per seed"], rows)
    print(table)
    for k, v in every_seed.items():
        print(f"{'met' if v else 'NOT met'} on every seed: {k} (medians: {on_medians[k]})")
    default = "wifi_pose" if args.protocol == "walk" else "wifi_pose_station"
    write_result(args.result or default, {
        "settings": {**vars(args), "models": list(MODELS), "cpu_count": os.cpu_count(),
                     "torch_threads": torch.get_num_threads()},
        "machine_load": {"loadavg_after": os.getloadavg()},
        "seconds": round(time.perf_counter() - started, 1),
        "runs": runs, "median": med, "params": params,
        "verdicts": {"every_seed": every_seed, "medians": on_medians}, "table": table,
    })


if __name__ == "__main__":
    main()
