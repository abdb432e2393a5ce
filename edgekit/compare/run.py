"""Compare models: their task metric (accuracy, MPJPE) on their dataset beside the profiler's
efficiency figures.

Each NAME is what the CLI's TARGET is: a registry name, trained once per config and dataset (a
cached checkpoint); a checkpoint, used as it is; an artifact folder, scored with the
checkpoint it was exported from and profiled itself; or a user's own model (``file.py:callable``,
``.pt2``, ``.onnx``, an artifact made from one), scored on ``--data`` or by ``--evaluate``
(``compare/user.py``), else shown with its efficiency figures alone. Each is evaluated on the
test split, then profiled with the same settings; rows on the accuracy-latency and
accuracy-energy Pareto frontiers are marked. With several ``backends`` each name is profiled on
each (one row per name and backend: a pruned net's latency in torch beside ONNX Runtime). A
spiking net's row also carries its synaptic operations and 45 nm energy as ``edgekit simulate``
counts them (``compare/spiking.py``).
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
from edgekit.inputs import InputOverride
from edgekit.profiler.run import ProfileSettings, profile, resolve_device
from edgekit.progress import Progress
from edgekit.registry import ModelEntry
from edgekit.targets import ArtifactTarget, OnnxFileTarget, Target, resolve_target
from edgekit.training import evaluate_entry


def resolve_trained(target: Target) -> tuple[ModelEntry, str | None, Path | None] | None:
    """The registry entry, variant and trained checkpoint (None: train one) that a resolved
    target stands for; None for a user's own model, which is scored on the user's data."""
    if isinstance(target, OnnxFileTarget):
        return None
    if isinstance(target, ArtifactTarget):
        from edgekit.exporters import load_artifact

        source = load_artifact(target.folder).manifest["source"]
        if not source.get("entry"):
            return None
        if "checkpoint" not in source:
            raise UsageError(f"{target.folder} was exported from untrained weights, which have "
                             f"no score", hint="export a checkpoint written by 'edgekit train'")
        ckpt = read_checkpoint(source["checkpoint"])
        return ckpt.entry, ckpt.variant, ckpt.path
    if target.entry is None:
        return None
    return target.entry, target.variant, (target.checkpoint.path if target.checkpoint else None)


def resolve_name(name: str) -> tuple[ModelEntry, str | None, Path | None]:
    """``resolve_trained`` of a registry name, checkpoint or artifact of one (the fleet's and
    the tour's callers, which take built-in models only)."""
    found = resolve_trained(resolve_target(name))
    if found is None:
        raise UsageError(f"{name} is your own model; this takes built-in models and their "
                         f"checkpoints")
    return found


def _score(target: Target, entry: ModelEntry, model: Any, dataset: Any) -> float:
    """The test score; an fp16 / int8 artifact is scored by running it, not its checkpoint."""
    if isinstance(target, ArtifactTarget):
        from edgekit.backends import OnnxRuntimeRunner
        from edgekit.exporters import load_artifact
        from edgekit.exporters.quantize import score_onnx

        artifact = load_artifact(target.folder)
        if artifact.manifest.get("precision", "fp32") != "fp32":
            with OnnxRuntimeRunner(artifact.model_path, threads=1) as runner:
                return score_onnx(runner, entry, dataset.x_test, dataset.y_test,
                                  artifact.manifest.get("batch", 1))
    return evaluate_entry(entry, model, dataset.x_test, dataset.y_test)


def _fields(name: str, entry: ModelEntry, dataset: Any, score: float, report: dict[str, Any],
            ckpt_path: Path, spiking: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "model": entry.name, "family": entry.family,
            "metric": entry.task.metric,
            "higher_is_better": entry.task.higher_is_better,
            entry.task.metric: score, "dataset": dataset.name, "checkpoint": str(ckpt_path),
            "backend": report["backend"]["backend"], **measured_fields(report), **spiking}


def _spiking(entry: ModelEntry, model: Any, dataset: Any) -> dict[str, Any]:
    """SOPs and 45 nm energy of a spiking net, and of the non-spiking twin of one (a model of
    the spiking family that does not spike: every operation a MAC), so the two compare."""
    if not entry.spiking and entry.family != "spiking":
        return {}
    from edgekit.compare.spiking import spiking_fields

    return spiking_fields(model, dataset.x_test)


def _rows(name: str, target: Target, settings: ProfileSettings, data: str | Path | None,
          progress: Progress | None, precisions: Sequence[str] | None,
          backends: Sequence[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows of one name (one per precision or backend) and the precisions refused for it."""
    trained = resolve_trained(target)
    assert trained is not None  # a user's model goes to compare/user.py
    entry, variant, ckpt_path = trained
    dataset = load_dataset(entry.task, data)
    if ckpt_path is None:
        ckpt_path = cached_checkpoint(entry, variant, dataset, progress=progress)
    model, _ = load_checkpoint(ckpt_path)
    spiking = _spiking(entry, model, dataset)
    if precisions is None:
        score = _score(target, entry, model, dataset)
        measured = target if isinstance(target, ArtifactTarget) else str(ckpt_path)
        return [_fields(name, entry, dataset, score,
                        profile(measured, replace(settings, backend=b), progress=progress),
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


# Over 8 parameters: edgekit.compare's public keywords, one per option of edgekit compare
def compare(names: Sequence[Any],
            settings: ProfileSettings = ProfileSettings(),  # noqa: B008  (frozen dataclass)
            data: str | Path | None = None, progress: Progress | None = None,
            precisions: Sequence[str] | None = None,
            backends: Sequence[str] | None = None, evaluate: str | None = None,
            inputs: tuple[InputOverride, ...] = (),
            estimate_devices: Sequence[str] = ()) -> dict[str, Any]:
    """Rows for each name, checkpoint, artifact folder or user's model (in order) with
    ``pareto_latency`` / ``pareto_energy`` flags; with ``precisions``, one row per name and
    precision (ONNX Runtime artifacts of each); with ``backends`` (default: ``settings.backend``
    alone), one row per name and backend. The fronts are drawn across all rows. A user's model
    is scored on ``data`` (an array per input and ``labels``) or by ``evaluate``
    (``compare/user.py``); with neither its rows carry the efficiency figures alone. Each
    profile of ``estimate_devices`` adds an estimated twin of every row, off the fronts
    (``compare/estimated.py``)."""
    if not names:
        raise UsageError("compare needs at least one model name")
    backends = tuple(backends or (settings.backend,))
    twice = sorted({b for b in backends if backends.count(b) > 1})
    if twice:
        raise UsageError(f"--backend names {twice[0]} twice")
    if precisions is not None and len(backends) > 1:
        raise UsageError("--precision compares ONNX Runtime artifacts; give one --backend")
    labels = [str(n) if isinstance(n, (str, Path)) else None for n in names]
    if len({label for label in labels if label is not None}) != sum(x is not None for x in labels):
        raise UsageError("compare got the same name twice")
    targets = [resolve_target(n, inputs=inputs, batch=settings.batch) for n in names]
    labels = [label or t.name for label, t in zip(labels, targets, strict=True)]
    if precisions is not None:
        from edgekit.compare.precision import check_backend, parse_precisions

        precisions = parse_precisions(precisions)
        check_backend(settings.backend)
        trained_dirs = [label for label, t in zip(labels, targets, strict=True)
                        if isinstance(t, ArtifactTarget) and resolve_trained(t) is not None]
        if trained_dirs:
            raise UsageError(f"--precision converts trained models; {trained_dirs[0]} is an "
                             f"artifact", hint="give its model name or checkpoint")
    trained = [resolve_trained(t) for t in targets]  # bad names fail before training
    tasks = {label: tr[0].task for label, tr in zip(labels, trained, strict=True)
             if tr is not None}
    if len({(t.dataset, t.metric) for t in tasks.values()}) > 1:  # before any training
        listed = "; ".join(f"{n}: {t.metric} on {t.dataset}" for n, t in tasks.items())
        raise UsageError(f"compare needs models scored on one dataset and metric, got {listed}",
                         hint="compare the models of each task separately")
    if settings.device is not None:  # so does a bad --device, or one this machine is not
        resolve_device(settings.device, as_device=settings.as_device, sysfs=settings.sysfs_root)
    if estimate_devices:
        from edgekit.estimate import device_profiles

        device_profiles(estimate_devices)  # and a bad --estimate-device
    if evaluate is not None and any(t is not None for t in trained):
        raise UsageError("--evaluate scores your own models; the built-in ones are scored on "
                         "their datasets")
    scorer = None
    if any(tr is None for tr in trained):
        from edgekit.compare.user import make_scorer, target_input_spec

        first = next(t for t, tr in zip(targets, trained, strict=True) if tr is None)
        scorer = make_scorer(data if all(t is None for t in trained) else None, evaluate,
                             target_input_spec(first))
    rows, refused = [], []
    for label, target, tr in zip(labels, targets, trained, strict=True):
        if tr is None:
            from edgekit.compare.user import user_rows

            made, skipped = user_rows(label, target, settings, scorer, progress, precisions,
                                      backends, calib_data=data)
        else:
            made, skipped = _rows(label, target, settings, data, progress, precisions, backends)
        rows += made
        refused += skipped
    if not rows:
        raise UsageError(f"every precision was refused: {'; '.join(refused)}")
    result = _with_fronts(rows, refused, backends, precisions, scorer)
    if estimate_devices:
        from edgekit.compare.estimated import ENERGY_SOURCE, estimated_rows

        result["rows"] += estimated_rows(rows, dict(zip(labels, targets, strict=True)),
                                         estimate_devices, settings.batch)
        result["estimated_devices"] = sorted({r["estimate_device"] for r in result["rows"]
                                              if r.get("estimated")})
        result["energy_sources"].append(ENERGY_SOURCE)
    return result


def _with_fronts(rows: list[dict[str, Any]], refused: list[str], backends: Sequence[str],
                 precisions: Sequence[str] | None, scorer: Any) -> dict[str, Any]:
    """The compare result: rows of one metric and dataset, with the Pareto fronts marked (over
    the costs alone where no row has a score)."""
    tasks = {(r["dataset"], r["metric"]) for r in rows if r["metric"] is not None}
    if len(tasks) > 1:
        listed = "; ".join(sorted({f"{r['name']}: {r['metric']} on {r['dataset']}"
                                   for r in rows if r["metric"] is not None}))
        raise UsageError(f"compare needs models scored on one dataset and metric, got {listed}",
                         hint="compare the models of each task separately")
    metric = next(iter(tasks))[1] if tasks else "score"
    higher = (rows[0].get("higher_is_better", True) if scorer is None
              else scorer.higher_is_better)
    sign = 1.0 if higher else -1.0
    quality = [sign * r[metric] if r.get(metric) is not None else 0.0 for r in rows]
    for flag, key in (("pareto_latency", "latency_p50_ms"),
                      ("pareto_energy", "energy_per_inference_j")):
        for row, on_front in zip(rows, pareto_mask(quality, [r[key] for r in rows]), strict=False):
            row[flag] = on_front
    for row in rows:
        row.setdefault(metric, None)
    sources = sorted({r["energy_source"] for r in rows})
    return {"rows": rows, "device": rows[0]["profile"]["device"], "backend": ", ".join(backends),
            "backends": list(backends), "metric": metric, "higher_is_better": higher,
            "scored": bool(tasks), "energy_sources": sources,
            "precisions": list(precisions or []), "refused": refused}
