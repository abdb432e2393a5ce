"""Spik4lite's energy-penalty weight λ on digits: do the gates switch channels off on their own?

For each model and λ, the net is trained with the Spik4lite schedule to keep 0.5 (as ``edgekit
train ENTRY --spik4lite --energy-lambda λ``) and the run records:

- the gradient of ``λ · penalty`` and of the task loss on the gates' keep-minus-drop biases, mean
  absolute value over the gated channels, on the first training batch of the freshly gated net
  (the penalty's share of what moves a gate);
- after every gated epoch, the mean soft keep probability over the gated channels at their
  running rates and the fraction under 0.5 (the gates' own decision to remove);
- the channels removed in all, those removed though their gates kept them ("forced" by the
  target), and the rest, removed by the gates' decision ("gated off");
- the test accuracy of the pruned, fine-tuned net.

No timing: one run per case (``--seeds`` repeats with other seeds).

    python benchmarks/spik4lite_lambda.py [--epochs 10] [--cycles 3] [--lambdas 0.01 1 3]
                                          [--models spikingformer spikingresformer] [--seeds 0]
"""
from __future__ import annotations

import argparse
import os
from typing import Any

import torch
import torch.nn.functional as F
from common import markdown_table, write_result

from edgekit.data import load_dataset
from edgekit.methods.spik4lite import wrap
from edgekit.methods.spik4lite.gates import energy_penalty, gated_layers
from edgekit.methods.spik4lite.trainer import (
    PAPER_LAMBDA,
    Schedule,
    Spik4liteConfig,
    train_spik4lite,
)
from edgekit.registry import split_name

MODELS = ("spikingformer", "spikingresformer")
LAMBDAS = (PAPER_LAMBDA, 1.0, 3.0)
KEEP = 0.5


def gradient_share(name: str, dataset: Any, lam: float) -> dict[str, float]:
    """Mean |∂/∂(b_keep - b_drop)| of the task loss and of λ·penalty on one batch of the freshly
    gated net (the bias difference is what decides a gate at any input)."""
    entry, variant = split_name(name)
    torch.manual_seed(0)
    model = entry.build(variant)
    x = torch.from_numpy(dataset.x_train[:entry.train.batch_size])
    y = torch.from_numpy(dataset.y_train[:entry.train.batch_size])
    wrap(model, x)
    model.train()
    task = F.cross_entropy(model(x), y)
    penalty = lam * energy_penalty(model)
    biases = [g.gate.bias for _, g in gated_layers(model)]

    def share(loss: torch.Tensor) -> float:
        grads = torch.autograd.grad(loss, biases, retain_graph=True)
        return float(torch.cat([(g[1::2] - g[0::2]).abs() for g in grads]).mean())
    task_grad, penalty_grad = share(task), share(penalty)
    return {"task": task_grad, "penalty": penalty_grad, "ratio": penalty_grad / task_grad}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--lambdas", nargs="+", type=float, default=list(LAMBDAS))
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    args = parser.parse_args()
    torch.set_num_threads(1)
    dataset = load_dataset(split_name(args.models[0])[0].task)
    results, table = [], []
    for name in args.models:
        entry, variant = split_name(name)
        for lam in args.lambdas:
            grads = gradient_share(name, dataset, lam)
            for seed in args.seeds:
                config = Spik4liteConfig(target_keep=KEEP, lam=lam,
                                         schedule=Schedule.split(args.epochs, args.cycles))
                result = train_spik4lite(entry, dataset, config, variant=variant, seed=seed)
                s4 = result.details["spik4lite"]
                removed = sum(r["channels_before"] - r["channels_after"] for r in s4["removals"])
                forced = sum(r["forced"] for r in s4["removals"])
                row = {"model": name, "lambda": lam, "seed": seed, "accuracy": result.value,
                       "keep": s4["keep"], "removed": removed, "forced": forced,
                       "gated_off": removed - forced, "gradient": grads, "gates": s4["gates"],
                       "removals": s4["removals"], "seconds": result.seconds}
                results.append(row)
                trace = " ".join(f"{g['mean_keep']:.2f}" for g in s4["gates"])
                table.append([name, lam, seed, f"{grads['ratio']:.3g}", trace,
                              f"{s4['gates'][-1]['below_half'] * 100:.0f}" if s4["gates"] else "",
                              removed, removed - forced, forced,
                              f"{result.value * 100:.1f}"])
                print(table[-1], flush=True)
    print(markdown_table(["model", "λ", "seed", "penalty/task grad", "mean p_keep per gated epoch",
                          "% gated < 0.5", "removed", "gated off", "forced", "acc %"], table))
    write_result("spik4lite_lambda", {
        "settings": {"epochs": args.epochs, "cycles": args.cycles, "keep": KEEP,
                     "lambdas": args.lambdas, "models": args.models, "seeds": args.seeds,
                     "load_average_1min": os.getloadavg()[0], "cpus": os.cpu_count()},
        "results": results})


if __name__ == "__main__":
    main()
