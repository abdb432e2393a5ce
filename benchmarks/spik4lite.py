"""Spik4lite on digits: keep 1.0 / 0.75 / 0.5 / 0.35 for SpikingResformer-SSA and the
Spikingformer-style net: accuracy, parameters, FLOPs, SOPs, energy, latency on torch and ONNX
Runtime, and what compensation buys right after a removal.

- keep 1.0 is the dense net trained the entry's usual way for ``--epochs``; each other keep is
  trained from scratch with the Spik4lite schedule (``edgekit train ENTRY --spik4lite
  --target-keep K``) for the same number of epochs, once on the labels alone ("plain") and once
  distilling from that dense net ("taught": ``--teacher dense.safetensors``, distill.py)
  (``--teacher plain|taught|both``); ``--from-dense`` adds the same trainings started from the
  trained dense net itself ("from-dense", "from-dense+taught": ``--init dense.safetensors``,
  warm_start.py).
- SOPs and energy come from ``edgekit simulate``'s counters (SpikingJelly's op counters over the
  test split; energy: E_MAC x MACs of real-valued layers + E_AC x SOPs, Horowitz 45 nm).
- Latency: batch 1, one thread; every net exported to ONNX as ``edgekit export`` does
  (``export_graph``: node-lean neurons, onnxslim) and timed in ONNX Runtime and in torch,
  interleaved (a round times every case once, in an order that rotates); tables quote the
  median over rounds of each round's median, with the spread (min-max).
- Right after removal: the dense net is gated and trained for one cycle (one epoch), then its
  channels are removed to keep 0.5 on copies three ways: plain slicing, with the compensation
  fold, and with the fold plus BatchNorm recalibration on 4 batches.

- Where the time goes (``--part physics``, ``spik4lite_physics.py``): the digits nets and the
  paper's CIFAR Spikingformer-4-384, dense and pruned to keep 0.5 without training, with ONNX
  Runtime's per-operator profile: at digits size per-node costs dominate, so halving the widths
  cannot halve the latency; at CIFAR size the convolutions and matmuls do. Written to
  ``results/spik4lite_physics.json``.
- Trained at CIFAR size (``--part cifar``, ``spik4lite_cifar.py``; not part of ``all``: tens of
  minutes on two cores): the dense Spikingformer-4-384 and Spik4lite keep 0.5 started from it
  and distilling from it, on the digits upsampled to 32x32 (not CIFAR): accuracy, parameters,
  FLOPs, ONNX Runtime latency; checkpoints in ``--cifar-dir``. Written to
  ``results/spik4lite_cifar.json``.

Targets (issue 18) at keep 0.5: ONNX Runtime latency at least 1.6x lower than keep 1.0, at most
1.0 point of accuracy lost, and compensation recovering at least half of what plain removal
loses right after removal.

    python benchmarks/spik4lite.py [--part all|sweep|physics|cifar] [--rounds 5] [--epochs 30]
                                   [--cycles 3] [--models spikingresformer spikingformer]
                                   [--keeps 1.0 0.5 ...]
"""
from __future__ import annotations

import argparse
import copy
import os
import tempfile
from pathlib import Path
from typing import Any

import spik4lite_cifar
import spik4lite_physics
import torch
from common import export_as_edgekit, markdown_table, median, run_rounds, write_result

from edgekit.backends import make_session
from edgekit.data import load_dataset
from edgekit.flops import model_cost
from edgekit.methods.spik4lite import compensation, wrap
from edgekit.methods.spik4lite.distill import Distillation
from edgekit.methods.spik4lite.gates import gated_layers
from edgekit.methods.spik4lite.trainer import Schedule, Spik4liteConfig, train_spik4lite
from edgekit.methods.spik4lite.warm_start import WarmStart
from edgekit.registry import split_name
from edgekit.spiking.counting import count
from edgekit.spiking.energy import horowitz_45nm
from edgekit.training import evaluate, train

KEEPS = (1.0, 0.75, 0.5, 0.35)
MODELS = ("spikingresformer", "spikingformer")
TARGET_KEEP, TARGET_SPEEDUP, TARGET_LOSS_PTS, TARGET_RECOVERY = 0.5, 1.6, 1.0, 0.5


def trained(name: str, keep: float, epochs: int, cycles: int, dataset: Any,
            teacher: torch.nn.Module | None = None, start: torch.nn.Module | None = None,
            seed: int = 0) -> tuple[torch.nn.Module, dict]:
    entry, variant = split_name(name)
    if keep == 1.0:
        result = train(entry, dataset, variant, epochs=epochs, seed=seed)
        return result.model, {}
    config = Spik4liteConfig(
        target_keep=keep, schedule=Schedule.split(epochs, cycles),
        distillation=None if teacher is None else Distillation(teacher,
                                                               source=f"{name} keep 1.0"),
        init=None if start is None else WarmStart(start, name, source=f"{name} keep 1.0"))
    result = train_spik4lite(entry, dataset, config, variant=variant, seed=seed)
    return result.model, result.details["spik4lite"]


def counts(model: torch.nn.Module, dataset: Any) -> dict[str, float]:
    x = torch.from_numpy(dataset.x_test[:128])
    with torch.no_grad():
        c, _ = count(model, [x])
    energy = horowitz_45nm(c)
    return {"sops": c.totals["synop"] / c.samples, "energy_uj": energy.energy_j * 1e6}


def right_after_removal(name: str, dense: torch.nn.Module, dataset: Any) -> dict[str, float]:
    """One gated cycle on a copy of the dense net, then removal to keep 0.5 three ways."""
    entry, _ = split_name(name)
    model = copy.deepcopy(dense)
    x = torch.from_numpy(dataset.x_train)
    y = torch.from_numpy(dataset.y_train)
    wrap(model, x[:64])
    opt = torch.optim.AdamW(model.parameters(), lr=entry.train.lr / 10)
    for _, gate in gated_layers(model):
        gate.start_accumulating()
    model.train()
    for start in range(0, len(x), 64):
        loss = torch.nn.functional.cross_entropy(model(x[start:start + 64]), y[start:start + 64])
        opt.zero_grad()
        loss.backward()
        opt.step()
    batches = [x[i * 64:(i + 1) * 64] for i in range(4)]
    return compensation.removal_effect(model, batches, dataset.x_test, dataset.y_test,
                                       target_keep=TARGET_KEEP)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--cycles", type=int, default=3, help="removal cycles")
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--keeps", nargs="+", type=float, default=list(KEEPS),
                        help="must include 1.0 and 0.5 (the targets compare them)")
    parser.add_argument("--teacher", choices=("plain", "taught", "both"), default="both",
                        help="train each keep below 1.0 on the labels alone (plain), distilling "
                             "from the dense net (taught), or both")
    parser.add_argument("--from-dense", action="store_true",
                        help="also run each training of a keep below 1.0 from the trained dense "
                             "net (edgekit train --spik4lite --init)")
    parser.add_argument("--seed", type=int, default=0, help="training seed of every net")
    parser.add_argument("--name", help="results/NAME.json (default spik4lite, or "
                                       "spik4lite_seedN for --seed N)")
    parser.add_argument("--min-time", type=float, default=0.5)
    parser.add_argument("--part", choices=("all", "sweep", "physics", "cifar"), default="all",
                        help="sweep: the trained keep sweep; physics: where ONNX Runtime's time "
                             "goes, digits and CIFAR size, untrained (no training, minutes); "
                             "cifar: Spikingformer-4-384 dense and keep 0.5 trained on the "
                             "digits upsampled to 32x32 (not in all)")
    parser.add_argument("--cifar-stage", choices=("all", "train", "finetune", "measure"),
                        default="all",
                        help="cifar: train and write the checkpoints, time them, or both; "
                             "finetune: train the keep 0.5 checkpoint --cifar-finetune-epochs "
                             "more (then time all)")
    parser.add_argument("--cifar-finetune-epochs", type=int, default=2)
    parser.add_argument("--cifar-finetune", choices=("keep05", "dense"), default="keep05",
                        help="cifar finetune: which checkpoint to train further")
    parser.add_argument("--cifar-dir", type=Path, default=Path("/tmp/spik4cifar"),
                        help="cifar: where the checkpoints are written / read")
    parser.add_argument("--cifar-dense-epochs", type=int, default=2)
    parser.add_argument("--cifar-schedule", type=int, nargs=4, default=(0, 1, 1, 1),
                        metavar=("WARMUP", "CYCLES", "CYCLE_EPOCHS", "FINETUNE"),
                        help="cifar: the Spik4lite phases in epochs (started from the dense net)")
    parser.add_argument("--cifar-batch", type=int, default=32)
    parser.add_argument("--cifar-lr", type=float, default=1e-3)
    parser.add_argument("--cifar-budget", type=float,
                        help="cifar: seconds for all training; no epoch starts after them")
    parser.add_argument("--physics-nets", nargs="+", choices=list(spik4lite_physics.nets()),
                        help="physics: only these nets (default: all three)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.part in ("all", "physics"):
        physics(args)
    if args.part in ("all", "sweep"):
        sweep(args)
    if args.part == "cifar":
        cifar(args)


def physics(args: argparse.Namespace) -> None:
    result = spik4lite_physics.measure(args.rounds, args.min_time, only=args.physics_nets)
    print(markdown_table(spik4lite_physics.HEADER, spik4lite_physics.table_rows(result)))
    for label, v in result["speedups"].items():
        print(label, {k: round(x, 3) if isinstance(x, float) else x for k, x in v.items()})
    write_result("spik4lite_physics", {
        "settings": {"rounds": args.rounds, "threads": 1, "batch": 1, "min_time": args.min_time,
                     "profile_runs": spik4lite_physics.PROFILE_RUNS,
                     "load_average_1min": result.pop("load_average_1min"),
                     "cpus": os.cpu_count()},
        **result, "target_ort_speedup": TARGET_SPEEDUP})


def cifar(args: argparse.Namespace) -> None:
    trained_with = None
    if args.cifar_stage in ("all", "train"):
        torch.set_num_threads(2)
        trained_with = spik4lite_cifar.train_both(
            args.cifar_dir, args.cifar_dense_epochs, Schedule(*args.cifar_schedule),
            args.cifar_batch, args.cifar_lr, TARGET_KEEP, args.cifar_budget)
        torch.set_num_threads(1)
    if args.cifar_stage == "finetune":
        torch.set_num_threads(2)
        trained_with = spik4lite_cifar.finetune(args.cifar_dir, args.cifar_finetune,
                                                args.cifar_finetune_epochs, args.cifar_batch,
                                                args.cifar_lr)
        torch.set_num_threads(1)
    if args.cifar_stage == "train":
        return
    result = spik4lite_cifar.measure(args.cifar_dir, args.rounds, args.min_time)
    rows = result["rows"]
    print(markdown_table(spik4lite_cifar.HEADER, spik4lite_cifar.table_rows(rows)))
    verdict = spik4lite_cifar.verdict(rows, TARGET_SPEEDUP, TARGET_LOSS_PTS)
    print({k: round(v, 3) if isinstance(v, float) else v for k, v in verdict.items()})
    write_result("spik4lite_cifar", {
        "settings": {"data": spik4lite_cifar.DATA_LABEL, "rounds": args.rounds, "threads": 1,
                     "batch": 1, "min_time": args.min_time, "train_batch": args.cifar_batch,
                     "train_lr": args.cifar_lr, "dense_epochs": args.cifar_dense_epochs,
                     "schedule": vars(Schedule(*args.cifar_schedule)),
                     "train_threads": 2, "load_average_1min": result["load_average_1min"],
                     "cpus": os.cpu_count()},
        "training": trained_with, "results": rows, "verdict": verdict,
        "targets": {"keep": TARGET_KEEP, "ort_speedup": TARGET_SPEEDUP,
                    "accuracy_loss_pts": TARGET_LOSS_PTS}})


def sweep(args: argparse.Namespace) -> None:
    dataset = load_dataset(split_name(args.models[0])[0].task)
    workdir = Path(tempfile.mkdtemp(prefix="spik4lite-bench-"))
    rows: dict[tuple[str, float, str], dict[str, Any]] = {}
    cases: dict[tuple[str, float, str, str], Any] = {}
    effects = {}
    hows = ("plain", "taught") if args.teacher == "both" else (args.teacher,)
    if args.from_dense:  # the same trainings, started from the trained dense net
        hows += tuple("from-dense" + ("" if how == "plain" else "+taught") for how in hows)
    for name in args.models:
        dense = None
        for keep, how in [(k, h) for k in args.keeps for h in (("dense",) if k == 1.0
                                                                else hows)]:
            torch.manual_seed(args.seed)
            model, details = trained(name, keep, args.epochs, args.cycles, dataset,
                                     teacher=dense if how.endswith("taught") else None,
                                     start=dense if how.startswith("from-dense") else None,
                                     seed=args.seed)
            model.eval()
            if keep == 1.0:
                dense = model
            x1 = torch.from_numpy(dataset.x_test[:1])
            cost = model_cost(model, (x1,))
            row = {"accuracy": evaluate(model, dataset.x_test, dataset.y_test),
                   "params": cost.params, "flops": cost.flops, **counts(model, dataset),
                   "keep_measured": details.get("keep", 1.0),
                   # channels removed in all, and those the gates had not switched off
                   "removed": sum(r["channels_before"] - r["channels_after"]
                                  for r in details.get("removals", [])),
                   "forced": sum(r["forced"] for r in details.get("removals", []))}
            path = workdir / f"{name}-{keep}-{how}.onnx"
            export_as_edgekit(model, x1, path)
            session = make_session(path, threads=1)
            feed = {session.get_inputs()[0].name: x1.numpy()}
            cases[(name, keep, how, "torch")] = lambda m=model, x=x1: m(x)
            cases[(name, keep, how, "onnxruntime")] = lambda s=session, f=feed: s.run(None, f)
            rows[(name, keep, how)] = row
            if keep == 1.0:
                effects[name] = right_after_removal(name, model, dataset)
            print(name, keep, how, {k: round(v, 4) if isinstance(v, float) else v
                                    for k, v in row.items()}, flush=True)
    samples, loads = run_rounds(cases, args.rounds, args.min_time, 5)
    results, table = [], []
    for (name, keep, how), row in rows.items():
        for backend in ("torch", "onnxruntime"):
            s = samples[(name, keep, how, backend)]
            row[f"{backend}_ms"] = median(s) * 1e3
            row[f"{backend}_spread_ms"] = [min(s) * 1e3, max(s) * 1e3]
        results.append({"model": name, "keep": keep, "training": how, **row})
        table.append([name, keep, how, f"{row['accuracy'] * 100:.1f}",
                      f"{row['params'] / 1e3:.1f}k",
                      f"{row['flops'] / 1e6:.2f}M", f"{row['sops'] / 1e6:.3f}M",
                      f"{row['energy_uj']:.3f}",
                      f"{row['torch_ms']:.2f} ({row['torch_spread_ms'][0]:.2f}-"
                      f"{row['torch_spread_ms'][1]:.2f})",
                      f"{row['onnxruntime_ms']:.2f} ({row['onnxruntime_spread_ms'][0]:.2f}-"
                      f"{row['onnxruntime_spread_ms'][1]:.2f})",
                      row["removed"], row["forced"]])
    verdicts = {}
    for name in args.models:
        e = effects[name]
        lost = e["before"] - e["plain"]
        recovered = (e["folded_recalibrated"] - e["plain"]) / lost if lost > 0 else float("nan")
        dense = rows[(name, 1.0, "dense")]
        verdicts[name] = {"right_after_removal": e, "recovered_fraction": recovered,
                          "recovery_ok": bool(recovered >= TARGET_RECOVERY) if lost > 0
                          else None}
        for how in hows:
            half = rows[(name, TARGET_KEEP, how)]
            speedup = dense["onnxruntime_ms"] / half["onnxruntime_ms"]
            loss_pts = (dense["accuracy"] - half["accuracy"]) * 100
            verdicts[name][how] = {
                "ort_speedup": speedup, "ort_speedup_ok": speedup >= TARGET_SPEEDUP,
                "accuracy_loss_pts": loss_pts, "accuracy_ok": loss_pts <= TARGET_LOSS_PTS}
    print(markdown_table(["model", "keep", "training", "acc %", "params", "FLOPs", "SOPs",
                          "energy uJ", "torch ms", "ORT ms", "removed", "forced"], table))
    for name, v in verdicts.items():
        print(name, {k: (round(x, 4) if isinstance(x, float) else x) for k, x in v.items()})
    write_result(args.name or ("spik4lite" if args.seed == 0 else f"spik4lite_seed{args.seed}"), {
        "settings": {"epochs": args.epochs, "rounds": args.rounds, "threads": 1, "batch": 1,
                     "models": args.models, "keeps": args.keeps,
                     "cycles": args.cycles, "teacher": args.teacher,
                     "from_dense": args.from_dense, "seed": args.seed,
                     "load_average_1min": loads, "cpus": os.cpu_count()},
        "results": results, "verdicts": verdicts,
        "targets": {"keep": TARGET_KEEP, "ort_speedup": TARGET_SPEEDUP,
                    "accuracy_loss_pts": TARGET_LOSS_PTS, "recovery": TARGET_RECOVERY}})


if __name__ == "__main__":
    main()
