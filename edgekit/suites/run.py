"""``compare`` over a suite: each member through the bring-your-own-model path at every precision,
scored by top-1 agreement with its own FP32 outputs (the members have random weights, so there is
no accuracy to measure), with the Pareto fronts drawn within each member's rows.

A member's inputs and their FP32 labels are written to an ``.npz`` the way a user gives
``--data``, so the rows go through exactly what ``edgekit compare MODEL --data FILE.npz
--precision ...`` runs; the same inputs calibrate int8. A member whose first output is not a
(batch, classes) score (WiFi-Mamba's poses) is compared on its costs alone, and int8 is refused
for it (no calibration data that mean anything: say so in the notes).
"""
from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from edgekit.profiler.run import ProfileSettings
from edgekit.progress import Progress
from edgekit.suites import Suite, SuiteModel
from edgekit.targets import ModelSource, resolve_target

AGREEMENT = "agreement"
DEFAULT_SAMPLES = 32  # per member: enough to catch a broken conversion, light enough to run
DEFAULT_PRECISIONS = ("fp32", "fp16", "int8")
SAMPLE_SEED = 1  # not the example's seed 0, so scoring never reuses the validation input


def agreement_data(source: ModelSource, samples: int, path: Path) -> Path:
    """``samples`` generated inputs and, as ``labels``, the FP32 PyTorch top-1 class of each."""
    feeds = [source.inputs.example(batch=1, seed=SAMPLE_SEED + i) for i in range(samples)]
    arrays = {name: np.concatenate([f[k].numpy() for f in feeds])
              for k, name in enumerate(source.inputs.names)}
    labels = []
    with torch.inference_mode():
        for feed in feeds:
            out = source.model(*feed)
            first = out[0] if isinstance(out, (tuple, list)) else out
            labels.append(int(first.float().argmax(dim=-1).reshape(-1)[0]))
    np.savez(path, **arrays, labels=np.asarray(labels, dtype=np.int64))
    return path


def _member_rows(member: SuiteModel, settings: ProfileSettings, precisions: Sequence[str],
                 samples: int, progress: Progress | None) -> tuple[list[dict[str, Any]],
                                                                  list[str]]:
    from edgekit.compare import compare

    source = resolve_target(member.target, inputs=member.inputs)
    assert isinstance(source, ModelSource)  # a suite names callables
    with tempfile.TemporaryDirectory(prefix="edgekit-suite-") as tmp:
        data = (agreement_data(source, samples, Path(tmp) / f"{member.name}.npz")
                if member.classifier else None)
        wanted = [p for p in precisions if member.classifier or p != "int8"]
        result = compare([source], settings, data=data, precisions=wanted, progress=progress)
    refused = list(result["refused"])
    if "int8" in precisions and "int8" not in wanted:
        refused.append(f"{member.name} at int8: its first output is not a class score, so the "
                       f"suite has no calibration data for it")
    rows = []
    for row in result["rows"]:
        score = row.pop(row["metric"], None) if row["metric"] else None
        rows.append({**row, "name": member.name, "kind": member.kind, "metric": AGREEMENT,
                     AGREEMENT: score,
                     "dataset": (f"top-1 agreement with FP32 on {samples} random inputs "
                                 f"(random weights: agreement, not accuracy)"
                                 if member.classifier else "not scored (pose outputs)"),
                     "weights": "random"})
    return rows, refused


def compare_suite(suite: Suite, settings: ProfileSettings, *, models: list[str] | None = None,
                  precisions: Sequence[str] = DEFAULT_PRECISIONS, samples: int = DEFAULT_SAMPLES,
                  progress: Progress | None = None) -> dict[str, Any]:
    """The compare result of ``suite`` (or its members named in ``models``): one row per member
    and precision, ``pareto_latency`` / ``pareto_energy`` marking each member's own fronts."""
    members = suite.select(models)
    rows: list[dict[str, Any]] = []
    refused: list[str] = []
    for member in members:
        made, skipped = _member_rows(member, settings, precisions, samples, progress)
        rows += made
        refused += skipped
    return {"suite": suite.name, "suite_description": suite.description, "rows": rows,
            "device": rows[0]["profile"]["device"], "backend": settings.backend,
            "backends": [settings.backend], "metric": AGREEMENT, "higher_is_better": True,
            "scored": True, "energy_sources": sorted({r["energy_source"] for r in rows}),
            "precisions": list(precisions), "refused": refused, "samples": samples,
            "fronts": "within each model's rows"}
