"""Retrain the shipped demo checkpoints (``python -m edgekit.demo_weights``).

Each recipe is one ``edgekit train`` command, run as its own process so the manifest records
exactly what a user would type. A checkpoint is stored in fp16 when that halves its size without
changing its test score (accuracy to the sample, MPJPE to 0.1 mm, the precision the report
shows); otherwise in fp32. Only the files the recipes name and the manifest are written.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgekit.demo_weights import FOLDER, MANIFEST
from edgekit.errors import CheckFailed
from edgekit.fileio import atomic_write_bytes, atomic_write_text, check_output

WIFI_DATA = "wifi-pose-sim:station"  # the station protocol: one person on a mark


@dataclass(frozen=True)
class Recipe:
    """``edgekit train MODEL *args``; ``{other}`` in an argument is another recipe's file."""

    name: str
    model: str
    args: tuple[str, ...]


# Paired models train with the same schedule, so each pair differs only in the method.
RECIPES: tuple[Recipe, ...] = (
    Recipe("mlp", "mlp", ("--epochs=30",)),
    Recipe("ds-cnn", "ds-cnn", ("--epochs=25",)),
    Recipe("wbmm", "wbmm", ("--epochs=6",)),
    Recipe("wbmm-dw13", "wbmm-dw13", ("--epochs=6",)),
    Recipe("spikingresformer", "spikingresformer", ("--epochs=4",)),
    Recipe("resformer-ann", "resformer-ann", ("--epochs=4",)),
    Recipe("spikingformer", "spikingformer", ("--epochs=4",)),
    Recipe("spikingformer-spik4lite", "spikingformer",
           ("--spik4lite", "--target-keep=0.5", "--epochs=6", "--cycles=2",
            "--init={spikingformer}", "--teacher={spikingformer}")),
    Recipe("wifi-mamba", "wifi-mamba", (f"--data={WIFI_DATA}", "--epochs=6")),
    Recipe("wifi-petr", "wifi-petr", (f"--data={WIFI_DATA}", "--epochs=6")),
)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _score(path: Path) -> tuple[str, float]:
    from edgekit.checkpoint import load_checkpoint
    from edgekit.data import load_dataset
    from edgekit.training import evaluate_entry

    model, ckpt = load_checkpoint(path)
    data = ckpt.info.get("dataset")
    dataset = load_dataset(ckpt.entry.task, data if data and ":" in data else None)
    return ckpt.entry.task.metric, evaluate_entry(ckpt.entry, model, dataset.x_test,
                                                  dataset.y_test)


def _same(metric: str, a: float, b: float) -> bool:
    return round(a, 4) == round(b, 4) if metric == "accuracy" else abs(a - b) < 0.05


def _halved(fp32: Path, fp16: Path) -> tuple[Path, str, float]:
    """The fp16 copy when its score equals the fp32 one, else the fp32 file; with the score."""
    from edgekit.checkpoint import load_checkpoint, save_checkpoint

    metric, score = _score(fp32)
    model, ckpt = load_checkpoint(fp32)
    extra = {k: v for k, v in ckpt.info.items()
             if k not in ("format", "entry", "variant", "config", "metrics", "weights_sha256",
                          "shapes")}
    save_checkpoint(model.half(), fp16, metrics=ckpt.metrics, extra={**extra, "stored": "fp16"})
    metric, half_score = _score(fp16)
    return (fp16, "fp16", half_score) if _same(metric, score, half_score) else (fp32, "fp32",
                                                                                score)


def _train(recipe: Recipe, work: Path, made: dict[str, Path]) -> tuple[str, Path]:
    """Run the recipe; returns the command as the manifest shows it (files by name) and the
    checkpoint it wrote."""
    out = work / f"{recipe.name}.safetensors"
    args = [a.format(**{k: str(v) for k, v in made.items()}) for a in recipe.args]
    proc = subprocess.run([sys.executable, "-m", "edgekit", "train", recipe.model, *args, "-o",
                           str(out)], check=False)
    shown = " ".join(["edgekit", "train", recipe.model,
                      *(a.format(**{k: f"{k}.safetensors" for k in made}) for a in recipe.args),
                      "-o", out.name])
    if proc.returncode != 0:
        raise CheckFailed(f"'{shown}' failed with exit code {proc.returncode}")
    return shown, out


def build(folder: Path = FOLDER, names: list[str] | None = None) -> dict[str, Any]:
    """Train every recipe (or ``names``), store each in ``folder`` and rewrite its manifest."""
    from edgekit.checkpoint import read_checkpoint

    path = folder / MANIFEST.name
    weights = json.loads(path.read_text())["weights"] if path.is_file() else {}
    made: dict[str, Path] = {}
    with tempfile.TemporaryDirectory(prefix="edgekit-demo-weights-") as tmp:
        work = Path(tmp)
        for recipe in RECIPES:
            if names and recipe.name not in names:
                if recipe.name in weights:  # a later recipe may start from it
                    made[recipe.name] = folder / weights[recipe.name]["file"]
                continue
            command, fp32 = _train(recipe, work, made)
            made[recipe.name] = fp32
            chosen, stored, score = _halved(fp32, work / f"{recipe.name}-fp16.safetensors")
            info = read_checkpoint(chosen).info
            dest = folder / f"{recipe.name}.safetensors"
            check_output(dest)  # a file of that name that edgekit did not write stays
            atomic_write_bytes(dest, chosen.read_bytes())
            weights[recipe.name] = {
                "file": dest.name, "sha256": _sha256(dest), "bytes": dest.stat().st_size,
                "model": recipe.model, "command": command, "stored": stored,
                "dataset": info.get("dataset"), "dataset_digest": info.get("dataset_digest"),
                "seed": info.get("seed"), "metric": read_checkpoint(chosen).entry.task.metric,
                "score": score, "train_seconds": info["metrics"].get("train_seconds")}
            atomic_write_text(path, json.dumps({"weights": weights}, indent=1) + "\n")
    return weights
