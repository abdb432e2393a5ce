"""Spik4lite at the paper's CIFAR size, trained (``benchmarks/spik4lite.py --part cifar``).

Issue 42's target: Spik4lite at keep 0.5 at least 1.6x faster on ONNX Runtime than the dense
Spikingformer-4-384 at CIFAR size, accuracy within 1 point. No CIFAR-10 here, so the data are
scikit-learn's digits upsampled to 32x32 with 3 channels (bilinear, the grey level repeated on
every channel; the registry's train/test split): "digits upsampled to 32x32 (not CIFAR)".

- dense: the registry's ``spikingformer`` entry built with the paper's config
  (``CIFAR_CONFIG``, 9.3M parameters) and trained by ``edgekit.training.train``;
- keep 0.5: ``train_spik4lite`` started from that trained dense net (``WarmStart``) and
  distilling from it in the fine-tune (``Distillation``), the schedule given in epochs;
- both written as edgekit checkpoints (safetensors; the record holds the config and every
  layer's width, so ``edgekit.checkpoint.load_checkpoint(path)`` rebuilds the narrow net);
- latency: batch 1, one thread, exported as ``edgekit export`` does, interleaved rounds.
"""
from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from common import export_as_edgekit, median, run_rounds

from edgekit.backends import make_session
from edgekit.checkpoint import load_checkpoint, save_checkpoint
from edgekit.data import Dataset, load_dataset, upsampled
from edgekit.flops import model_cost
from edgekit.methods.spik4lite.distill import Distillation
from edgekit.methods.spik4lite.spikingformer import CIFAR_CONFIG
from edgekit.methods.spik4lite.trainer import Schedule, Spik4liteConfig, train_spik4lite
from edgekit.methods.spik4lite.warm_start import WarmStart
from edgekit.registry import ModelEntry, get_entry
from edgekit.training import train

ENTRY = "spikingformer"
DATA_LABEL = "digits upsampled to 32x32 (not CIFAR)"
# the fine-tuned ones only after --cifar-stage finetune
NETS = ("dense", "dense-finetuned", "keep05", "keep05-finetuned")


def upsampled_digits(entry: ModelEntry) -> Dataset:
    """The entry's digits at the CIFAR config's input size and channels."""
    return upsampled(load_dataset(entry.task), CIFAR_CONFIG["input_size"],
                     CIFAR_CONFIG["in_channels"])


def cifar_entry(batch_size: int, lr: float) -> ModelEntry:
    """The registry's Spikingformer entry with training settings for the 9.3M net."""
    entry = get_entry(ENTRY)
    return dataclasses.replace(entry, train=dataclasses.replace(
        entry.train, batch_size=batch_size, lr=lr))


def train_both(out: Path, dense_epochs: int, schedule: Schedule, batch_size: int, lr: float,
               keep: float, seconds: float | None = None) -> dict[str, Any]:
    """Train the dense net, then Spik4lite from it; write ``out/{dense,keep05}.safetensors``."""
    entry = cifar_entry(batch_size, lr)
    dataset = upsampled_digits(entry)
    out.mkdir(parents=True, exist_ok=True)
    data = {"dataset": DATA_LABEL, "dataset_digest": dataset.digest}
    started = time.perf_counter()
    dense = train(entry, dataset, epochs=dense_epochs, model=entry.build(**CIFAR_CONFIG))
    print(f"dense: accuracy {dense.value:.4f}, {dense.epochs} epochs, {dense.seconds:.0f} s",
          flush=True)
    save_checkpoint(dense.model, out / "dense.safetensors", dense.metrics(), data)
    left = None if seconds is None else seconds - (time.perf_counter() - started)
    config = Spik4liteConfig(
        target_keep=keep, schedule=schedule,
        distillation=Distillation(dense.model, source="dense.safetensors"),
        init=WarmStart(dense.model, ENTRY, source="dense.safetensors"))
    pruned = train_spik4lite(entry, dataset, config, seconds=left)
    details = pruned.details["spik4lite"]
    print(f"keep {keep}: accuracy {pruned.value:.4f}, keep reached {details['keep']}, "
          f"{pruned.epochs} epochs, {pruned.seconds:.0f} s", flush=True)
    save_checkpoint(pruned.model, out / "keep05.safetensors",
                    {**pruned.metrics(), "keep": details["keep"]}, data)
    return {"dense": {**dense.metrics(), "planned_epochs": dense_epochs},
            "keep05": {**pruned.metrics(), "planned_epochs": schedule.total,
                       "spik4lite": details}}


def finetune(out: Path, name: str, epochs: int, batch_size: int, lr: float) -> dict[str, Any]:
    """``name``.safetensors trained ``epochs`` more on the labels alone, written as
    ``name-finetuned.safetensors``. For ``keep05`` (removed to keep 0.5, folded and
    BatchNorm-recalibrated, never trained at its width) it is the fine-tune a time box skipped
    (Spik4lite's "plain" fine-tune); for ``dense`` it gives the baseline as many more epochs."""
    entry = cifar_entry(batch_size, lr)
    dataset = upsampled_digits(entry)
    model, ckpt = load_checkpoint(out / f"{name}.safetensors", expect_entry=ENTRY)
    before = ckpt.info["metrics"]
    result = train(entry, dataset, epochs=epochs, model=model)
    print(f"{name} fine-tuned: accuracy {result.value:.4f} (was {before['accuracy']:.4f}), "
          f"{result.epochs} epochs, {result.seconds:.0f} s", flush=True)
    metrics = {**result.metrics(), "keep": before.get("keep", 1.0),
               "epochs": before["epochs"] + result.epochs,
               "train_seconds": before["train_seconds"] + round(result.seconds, 2)}
    save_checkpoint(result.model, out / f"{name}-finetuned.safetensors", metrics,
                    {"dataset": DATA_LABEL, "dataset_digest": dataset.digest})
    return {f"{name}-finetuned": {**metrics, "finetune_epochs": result.epochs,
                                  "finetune_lr": lr, "finetune_seconds": result.seconds}}


def measure(out: Path, rounds: int, min_time: float) -> dict[str, Any]:
    """Accuracy (as trained, from the checkpoints), parameters, FLOPs and ONNX Runtime latency
    (batch 1, one thread, interleaved rounds) of both checkpoints in ``out``."""
    workdir = Path(tempfile.mkdtemp(prefix="spik4lite-cifar-"))
    x1 = torch.rand(1, CIFAR_CONFIG["in_channels"], CIFAR_CONFIG["input_size"],
                    CIFAR_CONFIG["input_size"], generator=torch.Generator().manual_seed(0))
    rows, cases = {}, {}
    for name in (n for n in NETS if (out / f"{n}.safetensors").is_file()):
        model, ckpt = load_checkpoint(out / f"{name}.safetensors", expect_entry=ENTRY)
        cost = model_cost(model, (x1,))
        metrics = ckpt.info["metrics"]
        rows[name] = {"accuracy": metrics["accuracy"], "epochs": metrics["epochs"],
                      "train_seconds": metrics["train_seconds"],
                      "keep_measured": metrics.get("keep", 1.0),
                      "params": cost.params, "flops": cost.flops,
                      "checkpoint": str(out / f"{name}.safetensors")}
        path = workdir / f"{name}.onnx"
        export_as_edgekit(model, x1, path)
        session = make_session(path, threads=1)
        feed = {session.get_inputs()[0].name: x1.numpy()}
        cases[name] = lambda s=session, f=feed: s.run(None, f)
    samples, loads = run_rounds(cases, rounds, min_time, 5)
    for name, row in rows.items():
        row["onnxruntime_ms"] = median(samples[name]) * 1e3
        row["onnxruntime_spread_ms"] = [min(samples[name]) * 1e3, max(samples[name]) * 1e3]
    return {"rows": rows, "load_average_1min": loads}


HEADER = ["net", "data", "epochs", "keep", "acc %", "params", "FLOPs", "ORT ms (spread)"]


def table_rows(rows: dict[str, dict[str, Any]]) -> list[list[Any]]:
    return [[name, DATA_LABEL, r["epochs"], r["keep_measured"], f"{r['accuracy'] * 100:.1f}",
             f"{r['params'] / 1e6:.2f}M", f"{r['flops'] / 1e9:.2f}G",
             f"{r['onnxruntime_ms']:.1f} ({r['onnxruntime_spread_ms'][0]:.1f}-"
             f"{r['onnxruntime_spread_ms'][1]:.1f})"] for name, r in rows.items()]


def verdict(rows: dict[str, dict[str, Any]], speedup_target: float,
            loss_target_pts: float) -> dict[str, Any]:
    dense = rows.get("dense-finetuned", rows["dense"])
    half = rows.get("keep05-finetuned", rows["keep05"])
    speedup = dense["onnxruntime_ms"] / half["onnxruntime_ms"]
    loss = (dense["accuracy"] - half["accuracy"]) * 100
    return {"dense_net": "dense-finetuned" if "dense-finetuned" in rows else "dense",
            "pruned_net": "keep05-finetuned" if "keep05-finetuned" in rows else "keep05",
            "ort_speedup": speedup, "ort_speedup_ok": speedup >= speedup_target,
            "accuracy_loss_pts": loss, "accuracy_ok": loss <= loss_target_pts}
