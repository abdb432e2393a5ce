"""Compare models: their task metric (accuracy, MPJPE) on their dataset beside the profiler's
efficiency figures.

Each NAME is what the CLI's TARGET is: a registry name, trained once per config and dataset (a
cached checkpoint); a checkpoint, used as it is; or an artifact folder, scored with the
checkpoint it was exported from and profiled itself. Each is evaluated on the test split, then
profiled with the same settings; rows on the accuracy-latency and accuracy-energy
Pareto frontiers are marked. With several ``backends`` each name is profiled on each (one row per
name and backend: a pruned net's latency in torch beside ONNX Runtime). A spiking net's row also
carries its synaptic operations and 45 nm energy as ``edgekit simulate`` counts them
(``compare/spiking.py``).
"""
from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from edgekit.checkpoint import load_checkpoint, read_checkpoint
from edgekit.compare.cache import cached_checkpoint
from edgekit.compare.pareto import pareto_mask
from edgekit.compare.rows import measured_fields
from edgekit.data import load_dataset
from edgekit.errors import UsageError
from edgekit.profiler.run import ProfileSettings, profile
from edgekit.profiles import load_profile
from edgekit.progress import Progress
from edgekit.registry import ModelEntry, split_name
from edgekit.targets import looks_like_path
from edgekit.training import evaluate_entry


def resolve_name(name: str) -> tuple[ModelEntry, str | None, Path | None]:
    """The entry, variant and trained checkpoint (None: train one) that ``name`` stands for."""
    if not looks_like_path(name):
        return (*split_name(name), None)
    if Path(name).is_dir():
        from edgekit.exporters import load_artifact

        source = load_artifact(name).manifest["source"]
        if "checkpoint" not in source:
            raise UsageError(f"{name} was exported from untrained weights, which have no score",
                             hint="export a checkpoint written by 'edgekit train'")
        name = source["checkpoint"]
    ckpt = read_checkpoint(name)
    return ckpt.entry, ckpt.variant, ckpt.path


def _score(name: str, entry: ModelEntry, model: Any, dataset: Any) -> float:
    """The test score; an fp16 / int8 artifact is scored by running it, not its checkpoint."""
    if Path(name).is_dir():
        from edgekit.backends import OnnxRuntimeRunner
        from edgekit.exporters import load_artifact
        from edgekit.exporters.quantize import score_onnx

        artifact = load_artifact(name)
        if artifact.manifest.get("precision", "fp32") != "fp32":
            with OnnxRuntimeRunner(artifact.model_path, threads=1) as runner:
                return score_onnx(runner, entry, dataset.x_test, dataset.y_test,
                                  artifact.manifest.get("batch", 1))
    return evaluate_entry(entry, model, dataset.x_test, dataset.y_test)


def _fields(name: str, entry: ModelEntry, dataset: Any, score: float, report: dict[str, Any],
            ckpt_path: Path, spiking: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "family": entry.family, "metric": entry.task.metric,
            entry.task.metric: score, "dataset": dataset.name, "checkpoint": str(ckpt_path),
            "backend": report["backend"]["backend"], **measured_fields(report), **spiking}


def _spiking(entry: ModelEntry, model: Any, dataset: Any) -> dict[str, Any]:
    if not entry.spiking:
        return {}
    from edgekit.compare.spiking import spiking_fields

    return spiking_fields(model, dataset.x_test)


def _rows(name: str, settings: ProfileSettings, data: str | Path | None,
          progress: Progress | None, precisions: Sequence[str] | None,
          backends: Sequence[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows of one name (one per precision or backend) and the precisions refused for it."""
    entry, variant, ckpt_path = resolve_name(name)
    dataset = load_dataset(entry.task, data)
    if ckpt_path is None:
        ckpt_path = cached_checkpoint(entry, variant, dataset, progress=progress)
    model, _ = load_checkpoint(ckpt_path)
    spiking = _spiking(entry, model, dataset)
    if precisions is None:
        score = _score(name, entry, model, dataset)
        target = name if Path(name).is_dir() else str(ckpt_path)
        return [_fields(name, entry, dataset, score,
                        profile(target, replace(settings, backend=b), progress=progress),
                        ckpt_path, spiking) for b in backends], []
    from edgekit.compare.precision import precision_artifacts

    rows = []
    with tempfile.TemporaryDirectory(prefix="edgekit-compare-") as tmp:
        made, refused = precision_artifacts(ckpt_path, precisions, entry, dataset, settings,
                                            Path(tmp), data)
        for m in made:
            report = profile(str(m["folder"]), replace(settings, precision=m["precision"]),
                             progress=progress)
            rows.append({**_fields(name, entry, dataset, m["score"], report, ckpt_path,
                                   spiking), "validated": m["validated"]})
    return rows, refused


def compare(names: Sequence[str],
            settings: ProfileSettings = ProfileSettings(),  # noqa: B008  (frozen dataclass)
            data: str | Path | None = None, progress: Progress | None = None,
            precisions: Sequence[str] | None = None,
            backends: Sequence[str] | None = None) -> dict[str, Any]:
    """Rows for each name, checkpoint or artifact folder (in order) with ``pareto_latency`` /
    ``pareto_energy`` flags; with ``precisions``, one row per name and precision (ONNX Runtime
    artifacts of each); with ``backends`` (default: ``settings.backend`` alone), one row per
    name and backend. The fronts are drawn across all rows."""
    if not names:
        raise UsageError("compare needs at least one model name")
    backends = tuple(backends or (settings.backend,))
    twice = sorted({b for b in backends if backends.count(b) > 1})
    if twice:
        raise UsageError(f"--backend names {twice[0]} twice")
    if precisions is not None and len(backends) > 1:
        raise UsageError("--precision compares ONNX Runtime artifacts; give one --backend")
    if precisions is not None:
        from edgekit.compare.precision import check_backend, parse_precisions

        precisions = parse_precisions(precisions)
        check_backend(settings.backend)
        dirs = [n for n in names if Path(n).is_dir()]
        if dirs:
            raise UsageError(f"--precision converts trained models; {dirs[0]} is an artifact",
                             hint="give its model name or checkpoint")
    if len(set(names)) != len(names):
        raise UsageError("compare got the same name twice")
    tasks = {name: resolve_name(name)[0].task for name in names}  # bad names fail before training
    if settings.device is not None:
        load_profile(settings.device)  # so does a bad --device
    metrics = {(t.dataset, t.metric) for t in tasks.values()}
    if len(metrics) > 1:
        listed = "; ".join(f"{n}: {t.metric} on {t.dataset}" for n, t in tasks.items())
        raise UsageError(f"compare needs models scored on one dataset and metric, got {listed}",
                         hint="compare the models of each task separately")
    task = next(iter(tasks.values()))
    rows, refused = [], []
    for n in names:
        made, skipped = _rows(n, settings, data, progress, precisions, backends)
        rows += made
        refused += skipped
    if not rows:
        raise UsageError(f"every precision was refused: {'; '.join(refused)}")
    sign = 1.0 if task.higher_is_better else -1.0
    quality = [sign * r[task.metric] for r in rows]
    for flag, key in (("pareto_latency", "latency_p50_ms"),
                      ("pareto_energy", "energy_per_inference_j")):
        for row, on_front in zip(rows, pareto_mask(quality, [r[key] for r in rows]), strict=False):
            row[flag] = on_front
    sources = sorted({r["energy_source"] for r in rows})
    return {"rows": rows, "device": rows[0]["profile"]["device"], "backend": ", ".join(backends),
            "backends": list(backends),
            "metric": task.metric, "higher_is_better": task.higher_is_better,
            "energy_sources": sources, "precisions": list(precisions or []),
            "refused": refused}
