"""Compare rows of a user's own model (a callable, a ``.pt2``, an ONNX file or an artifact made
from one): scored on the user's ``--data`` (an array per input and ``labels``: top-1 accuracy of
the first output) or by their ``--evaluate file.py:fn``, and profiled like any target. Without
either, a row carries the efficiency figures alone, and says so.

``--evaluate`` names a function ``fn(predict)`` that scores the model: ``predict`` maps a dict
of input arrays (named as the model's inputs) to a dict of output arrays, running whatever the
row measures (PyTorch, or the ONNX model at its precision); ``fn`` returns a float (reported as
``score``, higher is better) or a dict ``{"metric": NAME, "value": V, "higher_is_better": B}``.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from edgekit.errors import UsageError
from edgekit.inputs import InputSpec
from edgekit.targets import ArtifactTarget, ModelSource, OnnxFileTarget, Target

Predict = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]
PREDICT_CHUNK = 64  # samples per call where the model takes any batch


@dataclass
class Scorer:
    """How a user's rows are scored: the metric's name, its direction, what it is scored on.
    (An ``--evaluate`` function names its metric when it first runs, so these may change.)"""

    metric: str
    higher_is_better: bool
    dataset: str
    score: Callable[[Predict], float]


def _chunks(predict: Predict, arrays: dict[str, np.ndarray], step: int) -> dict[str, np.ndarray]:
    """``predict`` over every sample, ``step`` at a time (the last chunk padded by repeating its
    last sample, then trimmed: a fixed-batch graph takes only full batches)."""
    n = len(next(iter(arrays.values())))
    parts: dict[str, list[np.ndarray]] = {}
    for start in range(0, n, step):
        chunk = {k: v[start:start + step] for k, v in arrays.items()}
        pad = step - len(next(iter(chunk.values())))
        if pad:
            chunk = {k: np.concatenate([v, np.repeat(v[-1:], pad, axis=0)])
                     for k, v in chunk.items()}
        for name, out in predict(chunk).items():
            parts.setdefault(name, []).append(out[:step - pad])
    return {k: np.concatenate(v) for k, v in parts.items()}


def torch_predict(source: ModelSource) -> Predict:
    """PyTorch FP32 on the CPU, outputs named as the source names them."""
    def predict(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        tensors = [torch.from_numpy(np.ascontiguousarray(arrays[n])) for n in source.inputs.names]
        with torch.inference_mode():
            out = source.model.eval()(*tensors)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        return {n: o.float().numpy() for n, o in zip(source.output_names, outs, strict=False)}
    return predict


@contextlib.contextmanager
def onnx_predict(path: Path, batch: int | str | None) -> Iterator[Predict]:
    """ONNX Runtime on the CPU (1 thread), in chunks of the graph's fixed batch."""
    from edgekit.backends import OnnxRuntimeRunner

    step = batch if isinstance(batch, int) else PREDICT_CHUNK
    with OnnxRuntimeRunner(path, threads=1) as runner:
        yield lambda arrays: _chunks(runner.infer, arrays, step)


def make_scorer(data: str | Path | None, evaluate: str | None,
                spec: InputSpec) -> Scorer | None:
    """The scorer ``--data`` or ``--evaluate`` asks for; None when neither was given."""
    if data is not None and evaluate is not None:
        raise UsageError("--data and --evaluate exclude each other for your own models")
    if evaluate is not None:
        return _evaluate_scorer(evaluate)
    if data is None:
        return None
    from edgekit.user_data import load_named_data, top1_accuracy

    named = load_named_data(data, spec, need_labels=True)
    labels = named.labels
    assert labels is not None  # need_labels

    def score(predict: Predict) -> float:
        outputs = _chunks(predict, named.arrays, PREDICT_CHUNK)
        return top1_accuracy(next(iter(outputs.values())), labels)

    return Scorer("accuracy", True, named.origin, score)


def _evaluate_scorer(evaluate: str) -> Scorer:
    from edgekit.user_model import import_user_script

    where, sep, attr = evaluate.rpartition(":")
    if not sep or not where.endswith(".py") or not attr:
        raise UsageError(f"--evaluate {evaluate}: expected path/to/file.py:function")
    if not Path(where).is_file():
        raise UsageError(f"--evaluate: {where} does not exist")
    fn = getattr(import_user_script(Path(where)), attr, None)
    if fn is None or not callable(fn):
        raise UsageError(f"--evaluate: {where} has no function '{attr}'")
    scorer = Scorer("score", True, f"{Path(where).name}:{attr}", lambda predict: math.nan)

    def score(predict: Predict) -> float:
        try:
            result = fn(predict)
        except UsageError:
            raise
        except Exception as exc:
            raise UsageError(f"--evaluate {evaluate} raised {type(exc).__name__}: {exc}") from exc
        if isinstance(result, dict):
            scorer.metric = str(result.get("metric", "score"))
            scorer.higher_is_better = bool(result.get("higher_is_better", True))
            result = result.get("value")
        if isinstance(result, bool) or not isinstance(result, (int, float)) \
                or not math.isfinite(result):
            raise UsageError(f"--evaluate {evaluate} returned {result!r}, not a finite number")
        return float(result)

    scorer.score = score
    return scorer


def target_input_spec(target: Target) -> InputSpec:
    """The inputs a user's target takes (an artifact's from its manifest)."""
    if isinstance(target, ArtifactTarget):
        from edgekit.exporters import load_artifact
        from edgekit.exporters.calibration import artifact_input_spec

        return artifact_input_spec(load_artifact(target.folder).manifest)
    return target.inputs


def user_score(target: Target, scorer: Scorer | None) -> float | None:
    """The user's metric of ``target`` as it is (PyTorch for a module, ONNX Runtime else)."""
    if scorer is None:
        return None
    if isinstance(target, ModelSource):
        return scorer.score(torch_predict(target))
    if isinstance(target, OnnxFileTarget):
        dynamic = any(axis == 0 for f in target.inputs.fields for axis, _ in f.dynamic)
        path, batch = target.path, (None if dynamic else target.inputs.batch)
    else:
        from edgekit.exporters import load_artifact

        artifact = load_artifact(target.folder)
        path, batch = artifact.model_path, artifact.manifest.get("batch", 1)
    with onnx_predict(path, batch) as predict:
        return scorer.score(predict)


def _fields(name: str, scorer: Scorer | None, score: float | None,
            report: dict[str, Any]) -> dict[str, Any]:
    from edgekit.compare.rows import measured_fields

    metric = scorer.metric if scorer is not None else None
    return {"name": name, "family": "user", "metric": metric,
            **({metric: score} if metric is not None else {}),
            "higher_is_better": scorer.higher_is_better if scorer is not None else True,
            "dataset": scorer.dataset if scorer is not None else None, "checkpoint": None,
            "backend": report["backend"]["backend"], **measured_fields(report)}


def user_rows(name: str, target: Target, settings: Any, scorer: Scorer | None,
              progress: Any, precisions: Any, backends: Any,
              calib_data: str | Path | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows of a user's model: one per backend, or one per precision (ONNX Runtime
    artifacts made as ``export --precision`` makes them; int8 calibrated on ``calib_data``)."""
    import tempfile
    from dataclasses import replace

    from edgekit.profiler.run import profile

    if precisions is None:
        score = user_score(target, scorer)
        return [_fields(name, scorer, score,
                        profile(target, replace(settings, backend=b), progress=progress))
                for b in backends], []
    from edgekit.exporters.calibration import DEFAULT_SAMPLES, samples_for_artifact
    from edgekit.exporters.quantize import PrecisionConfig, PrecisionRefused, export_precision

    rows, refused = [], []
    with tempfile.TemporaryDirectory(prefix="edgekit-compare-") as tmp:
        work = Path(tmp)
        fp32 = _fp32_artifact(target, settings.batch, work)
        for precision in precisions:
            folder, passed = fp32.folder, True
            if precision != "fp32":
                try:
                    samples = (samples_for_artifact(fp32.folder, fp32.manifest, calib_data,
                                                    DEFAULT_SAMPLES)
                               if precision == "int8" else None)
                    result = export_precision(fp32, work / precision,
                                              PrecisionConfig(name=precision),
                                              samples=samples, check=False, score=False)
                except (PrecisionRefused, UsageError) as exc:
                    refused.append(f"{name} at {precision}: {exc}")
                    continue
                folder, passed = result.folder, result.validation.passed
            made = ArtifactTarget(folder)
            report = profile(made, replace(settings, precision=precision), progress=progress)
            rows.append({**_fields(name, scorer, user_score(made, scorer), report),
                         "validated": passed})
    return rows, refused


def _fp32_artifact(target: Target, batch: int, work: Path) -> Any:
    """The FP32 ONNX artifact precisions are made from, at the compare's batch."""
    from edgekit.exporters import OnnxOptions, export_onnx, load_artifact
    from edgekit.exporters.onnx_file import import_onnx

    if isinstance(target, ArtifactTarget):
        return load_artifact(target.folder)
    if isinstance(target, OnnxFileTarget):
        return load_artifact(import_onnx(target.at_batch(batch), work / "fp32").folder)
    return load_artifact(export_onnx(target, work / "fp32", OnnxOptions(batch=batch)).folder)
