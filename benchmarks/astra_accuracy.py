"""ASTRA accuracy on digits: the unpartitioned ViT against ASTRA fine-tuned for each (G, lambda).

One plain ViT (``astra-vit:plain``) is pre-trained once; for every VQ group count G and NAVQ
lambda a copy is fine-tuned with the VQ exchange at 2 ranks (loss = CE + beta * commitment) and
scored on the digits test split through ``partitioned_forward``: "astra" at 2 and 4 ranks, and
"sp" (full-precision sequence parallel, equal to the unpartitioned model) of the same fine-tuned
weights, which separates the quantisation loss from what fine-tuning changed. Bytes per token
compare the G * 10-bit codes (K = 1024) with a D-wide fp32 embedding.

Target (issue 7): ASTRA within 1 accuracy point of the unpartitioned model.

    python benchmarks/astra_accuracy.py [--groups 1 4 16 32] [--lambdas 0 1] [--ranks 2 4]
        [--pretrain-epochs E] [--finetune-epochs E] [--seed S]
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch
from common import markdown_table, write_result

from edgekit.cli.common import progress_bars
from edgekit.data import load_dataset
from edgekit.methods.astra import finetune, partitioned_forward, pretrain, with_config
from edgekit.registry import get_entry

TARGET_POINTS = 1.0


def accuracy(model: torch.nn.Module, x: np.ndarray, y: np.ndarray, world_size: int,
             mode: str) -> float:
    model.eval()
    with torch.no_grad():
        pred = partitioned_forward(model, torch.from_numpy(x), world_size, mode).argmax(-1)
    return float((pred.numpy() == y).mean())


def main() -> None:
    entry = get_entry("astra-vit")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, nargs="+", default=[1, 4, 16, 32])
    parser.add_argument("--lambdas", type=float, nargs="+", default=[0.0, 1.0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--pretrain-epochs", type=int, default=entry.train.epochs)
    parser.add_argument("--finetune-epochs", type=int, default=entry.config["finetune_epochs"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    data = load_dataset(entry.task)
    x, y = data.x_test, data.y_test

    torch.manual_seed(args.seed)
    plain = entry.build("plain")
    started = time.perf_counter()
    with progress_bars(transient=False) as progress:
        pretrain(plain, data, args.pretrain_epochs, entry.train, args.seed, progress=progress)
    pre_s = time.perf_counter() - started
    plain_acc = accuracy(plain, x, y, 1, "single")
    print(f"plain ViT: {100 * plain_acc:.2f} % after {args.pretrain_epochs} epochs ({pre_s:.0f} s)")

    dim, train_ranks = entry.config["dim"], entry.config["partitions"]
    rows, runs = [], []
    for groups in args.groups:
        for lam in args.lambdas:
            model = with_config(plain, groups=groups, noise_scale=lam)
            started = time.perf_counter()
            with progress_bars(transient=False) as progress:
                finetune(model, data, args.finetune_epochs, entry.train, args.seed,
                         progress=progress, label=f"fine-tuning G={groups} lambda={lam:g}")
            seconds = time.perf_counter() - started
            bits = model.blocks[0].vq.bits_per_token
            astra = {n: accuracy(model, x, y, n, "astra") for n in args.ranks}
            sp = accuracy(model, x, y, train_ranks, "sp")
            run = {"groups": groups, "noise_scale": lam, "bits_per_token": bits,
                   "bytes_per_token": bits / 8, "fp32_bytes_per_token": dim * 4,
                   "compression": dim * 32 / bits, "finetune_seconds": round(seconds, 1),
                   "astra_accuracy": {str(n): a for n, a in astra.items()},
                   "sp_accuracy_finetuned": sp,
                   "points_below_plain": {str(n): round(100 * (plain_acc - a), 2)
                                          for n, a in astra.items()}}
            runs.append(run)
            delta = 100 * (astra[train_ranks] - plain_acc) if train_ranks in astra else math.nan
            rows.append([groups, f"{lam:g}", bits, f"{bits / 8:g}", f"{dim * 32 / bits:.1f}x",
                         f"{100 * plain_acc:.2f}",
                         *(f"{100 * astra[n]:.2f}" for n in args.ranks),
                         f"{100 * sp:.2f}", f"{delta:+.2f}",
                         "yes" if delta >= -TARGET_POINTS else "**no**"])
            print(f"G={groups} lambda={lam:g}: ASTRA {astra}, SP {sp:.4f} ({seconds:.0f} s)",
                  flush=True)

    header = ["G", "λ", "bits/token", "bytes/token", "vs fp32", "plain %",
              *(f"ASTRA {n} ranks %" for n in args.ranks), f"SP {train_ranks} ranks %",
              f"Δ at {train_ranks} ranks (points)", "within 1 pt"]
    print()
    print(markdown_table(header, rows))
    write_result("astra_accuracy" if args.seed == 0 else f"astra_accuracy_seed{args.seed}", {
        "dataset": f"digits ({len(data.x_train)} train, {len(x)} test)",
        "model": {k: v for k, v in entry.config.items()},
        "fine_tuned_at_ranks": train_ranks,
        "pretrain_epochs": args.pretrain_epochs, "finetune_epochs": args.finetune_epochs,
        "pretrain_seconds": round(pre_s, 1), "seed": args.seed, "threads": args.threads,
        "plain_accuracy": plain_acc, "target_points": TARGET_POINTS, "runs": runs,
        "table_markdown": markdown_table(header, rows),
    })


if __name__ == "__main__":
    main()
