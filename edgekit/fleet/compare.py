"""Compare and profile on a fleet: export once on the client, measure on every device kind.

The client does what does not depend on the device: it trains (cached), scores the model on its
test split (the ONNX export is validated against PyTorch, so the score holds on every device),
and exports ONNX once. Each selected device kind then receives the artifact, builds there what
must be built there (a TensorRT engine on a Jetson with ``--backend tensorrt``) and profiles it
with its own meter; the client merges the reports.
"""
from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgekit.checkpoint import load_checkpoint
from edgekit.compare.cache import cached_checkpoint
from edgekit.compare.run import resolve_trained
from edgekit.data import load_dataset
from edgekit.errors import UsageError
from edgekit.exporters import OnnxOptions, export_onnx
from edgekit.fleet.jobs import Job, Limits, Outcome, run_jobs
from edgekit.fleet.merge import merged, profile_row
from edgekit.fleet.payload import Payload, pack
from edgekit.fleet.status import select_kinds
from edgekit.inputs import InputOverride
from edgekit.profiler.run import ProfileSettings
from edgekit.progress import Progress, ProgressUpdate
from edgekit.targets import (
    ArtifactTarget,
    OnnxFileTarget,
    Target,
    load_model_source,
    resolve_target,
)
from edgekit.training import evaluate_entry
from edgekit.workdirs import owned_tempdir


@dataclass(frozen=True)
class _Scored:
    """What the client knows of one model before any device measures it."""

    family: str
    metric: str
    higher_is_better: bool
    dataset: str
    score: float
    checkpoint: str | None
    payload: Payload


def _export(name: str, target: Target, settings: ProfileSettings, workdir: Path) -> Payload:
    """The payload of ``name``: an artifact folder as it is; an ONNX file made into an artifact
    (its external data and input spec travel with it); a model exported to ONNX (validated
    against PyTorch)."""
    if isinstance(target, ArtifactTarget):
        return pack(name, target.folder)
    folder = Path(tempfile.mkdtemp(prefix="export-", dir=workdir)) / "artifact"
    if isinstance(target, OnnxFileTarget):
        from edgekit.exporters.onnx_file import import_onnx

        return pack(name, import_onnx(target.at_batch(settings.batch), folder).folder)
    return pack(name, export_onnx(target, folder, OnnxOptions(batch=settings.batch)).folder)


def _scored(name: str, target: Target, settings: ProfileSettings, data: str | Path | None,
            workdir: Path, progress: Progress | None, scorer: Any) -> _Scored:
    """A built-in model trained (cached) and scored on its test split, or a user's scored by
    ``scorer`` (``compare/user.py``), and its payload; scores hold on every device, since the
    export is validated against the model it came from."""
    trained = resolve_trained(target)
    if trained is None:
        from edgekit.compare.user import user_score

        score = user_score(target, scorer)
        return _Scored("user", scorer.metric, scorer.higher_is_better, scorer.dataset, score,
                       None, _export(name, target, settings, workdir))
    entry, variant, ckpt_path = trained
    dataset = load_dataset(entry.task, data)
    if ckpt_path is None:
        ckpt_path = cached_checkpoint(entry, variant, dataset, progress=progress)
    model, _ = load_checkpoint(ckpt_path)
    score = evaluate_entry(entry, model, dataset.x_test, dataset.y_test)
    measured = target if isinstance(target, ArtifactTarget) else load_model_source(str(ckpt_path))
    return _Scored(entry.family, entry.task.metric, entry.task.higher_is_better, dataset.name,
                   score, str(ckpt_path), _export(name, measured, settings, workdir))


# Over 8 parameters: the keywords of edgekit fleet compare, those of edgekit.compare's
def fleet_compare(names: Sequence[str], client: Any,
                  settings: ProfileSettings = ProfileSettings(),  # noqa: B008 (frozen)
                  *, devices: Sequence[str] | None = None, data: str | Path | None = None,
                  limits: Limits = Limits(),  # noqa: B008 (frozen)
                  progress: Progress | None = None, evaluate: str | None = None,
                  inputs: tuple[InputOverride, ...] = ()) -> dict[str, Any]:
    """``edgekit compare`` on every selected device kind of the fleet ``client`` reaches: one
    merged report with a device column, Pareto fronts per device, and the failed jobs. A user's
    model is scored here on ``data`` (an array per input and ``labels``) or by ``evaluate``."""
    if not names:
        raise UsageError("compare needs at least one model name")
    if len(set(names)) != len(names):
        raise UsageError("compare got the same name twice")
    targets = {name: resolve_target(name, inputs=inputs, batch=settings.batch) for name in names}
    trained = {name: resolve_trained(t) for name, t in targets.items()}
    tasks = {name: tr[0].task for name, tr in trained.items() if tr is not None}
    mixed = bool(tasks) and len(tasks) < len(names)  # built-in and own models: two metrics
    if len({(t.dataset, t.metric) for t in tasks.values()}) > 1 or mixed:
        listed = "; ".join([f"{n}: {t.metric} on {t.dataset}" for n, t in tasks.items()]
                           + [f"{n}: your own model" for n in names if trained[n] is None])
        raise UsageError(f"compare needs models scored on one dataset and metric, got {listed}",
                         hint="compare the models of each task separately")
    scorer = None
    if not tasks:
        from edgekit.compare.user import make_scorer, target_input_spec

        scorer = make_scorer(data, evaluate, target_input_spec(targets[names[0]]))
        if scorer is None:
            raise UsageError("compare --fleet scores your own models on --data FILE.npz (an "
                             "array per input and labels) or --evaluate file.py:fn",
                             hint="or measure them alone with 'edgekit profile --fleet'")
    kinds = select_kinds(client, devices)  # a kind with no worker fails before any work
    with owned_tempdir("edgekit-fleet-") as tmp:
        scored = {}
        for i, name in enumerate(names):
            if progress is not None:
                progress(ProgressUpdate("scoring and exporting", i, len(names), note=name))
            scored[name] = _scored(name, targets[name], settings, data, tmp, progress,
                                   scorer)
        if progress is not None:
            progress(ProgressUpdate("scoring and exporting", len(names), len(names)))
    jobs = [Job(name, kind) for name in names for kind in kinds]
    outcomes = run_jobs(client, jobs, {n: s.payload for n, s in scored.items()}, settings,
                        limits=limits, progress=progress)
    rows = []
    for outcome in outcomes:
        if outcome.report is None:
            continue
        s = scored[outcome.job.name]
        rows.append(profile_row(outcome.job.name, outcome.report, family=s.family,
                                metric=s.metric, dataset=s.dataset, score=s.score,
                                checkpoint=s.checkpoint, worker=outcome.worker))
    first = next(iter(scored.values()))
    return merged(rows, metric=first.metric, higher_is_better=first.higher_is_better,
                  backend=settings.backend, failures=_failures(outcomes))


def _failures(outcomes: Sequence[Outcome]) -> list[dict[str, Any]]:
    return [o.to_failure() for o in outcomes if o.error is not None]


def fleet_profile(target: Any, client: Any,
                  settings: ProfileSettings = ProfileSettings(),  # noqa: B008 (frozen)
                  *, devices: Sequence[str] | None = None,
                  limits: Limits = Limits(),  # noqa: B008 (frozen)
                  progress: Progress | None = None,
                  inputs: tuple[InputOverride, ...] = ()) -> dict[str, Any]:
    """``edgekit profile TARGET`` on every selected device kind: one report per device, and the
    failed jobs. TARGET (anything ``resolve_target`` takes) is exported to ONNX once on the
    client; an artifact is shipped as it is."""
    kinds = select_kinds(client, devices)
    resolved = resolve_target(target, inputs=inputs, batch=settings.batch)
    name = resolved.name if not isinstance(target, (str, Path)) else str(target)
    with owned_tempdir("edgekit-fleet-") as tmp:
        payload = _export(name, resolved, settings, tmp)
    outcomes = run_jobs(client, [Job(name, kind) for kind in kinds], {name: payload},
                        settings, limits=limits, progress=progress)
    return {"reports": [o.report for o in outcomes if o.report is not None],
            "failures": _failures(outcomes)}
