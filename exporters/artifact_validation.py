"""``edgekit validate`` on an artifact folder: run it on the reference input it carries and
compare its outputs with the saved FP32 outputs (``reference.py``), PyTorch run now, or, for an
engine, ONNX Runtime on its own ONNX model."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from edgekit.errors import UsageError
from edgekit.exporters.graph_form import graph_form
from edgekit.exporters.reference import (
    REFERENCE_FILE,
    default_tolerance,
    load_reference,
    reference_label,
    torch_outputs,
)
from edgekit.targets import ModelSource

AGAINST = ("reference", "torch", "onnxruntime")


def _run_artifact(artifact: Any, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    from edgekit.backends.onnxruntime_backend import OnnxRuntimeRunner
    from edgekit.backends.tensorrt_runner import TensorRTRunner

    if artifact.format == "onnx":
        with OnnxRuntimeRunner(artifact.model_path, threads=1) as runner:
            return runner.infer(inputs)
    if artifact.format == "tensorrt":
        with TensorRTRunner(artifact.model_path) as runner:
            return runner.infer(inputs)
    raise UsageError(f"{artifact.folder}: cannot run a '{artifact.format}' artifact")


def _torch_source(artifact: Any) -> ModelSource:
    """The model the artifact came from, rebuilt (a checkpoint, or the user's callable or
    ``.pt2`` loaded again) and checked to hold the same weights it was exported from."""
    from edgekit.targets import load_model_source

    source = artifact.manifest["source"]
    if "origin" in source:
        return _user_source_again(artifact, source)
    if "checkpoint" not in source:
        raise UsageError(f"{artifact.folder} was exported from untrained weights (random "
                         f"initialisation), which cannot be rebuilt",
                         hint="validate against the saved reference, the default")
    path = Path(source["checkpoint"])
    if not path.is_file():
        raise UsageError(f"the checkpoint {path} that {artifact.folder} came from is not here",
                         hint="validate against the saved reference, the default")
    rebuilt = load_model_source(str(path))
    if rebuilt.record().get("checkpoint_sha256") != source.get("checkpoint_sha256"):
        raise UsageError(f"checkpoint {path} has changed since {artifact.folder} was exported",
                         hint="export again, or validate against the saved reference, the default")
    return rebuilt


def _user_source_again(artifact: Any, source: dict[str, Any]) -> ModelSource:
    """A user's model loaded again from what it was exported from, with the recorded inputs."""
    from edgekit.inputs import InputOverride
    from edgekit.targets import load_model_source

    if source.get("kind") == "module":
        raise UsageError(f"{artifact.folder} was exported from a module object in Python, which "
                         f"cannot be loaded again here",
                         hint="validate against the saved reference, the default")
    overrides = tuple(InputOverride(r["name"], tuple(r["shape"]), r["dtype"],
                                    tuple(r.get("range", (0.0, 1.0))))
                      for r in source.get("inputs") or ())
    origin = source["origin"]
    where, _, attr = origin.rpartition(":")
    files = source.get("files") or []
    if files and (where.endswith(".py") or origin.endswith(".pt2")):  # from any folder
        origin = files[0]["path"] + (f":{attr}" if where.endswith(".py") else "")
    rebuilt = load_model_source(origin, inputs=overrides)
    if rebuilt.user is None or rebuilt.user.weights_sha256 != source.get("weights_sha256"):
        raise UsageError(f"{source['origin']} no longer gives the weights {artifact.folder} was "
                         f"exported from (SHA-256 differs)",
                         hint="export again, or validate against the saved reference, the default")
    return rebuilt


def validate_artifact(folder: str | Path, against: str = "reference", atol: float | None = None,
                      rtol: float | None = None) -> tuple[Any, Any, str]:
    """Run the artifact on its saved reference input and compare with ``against``:

    - ``reference``: the saved PyTorch FP32 outputs (the same numbers for every build);
    - ``torch``: PyTorch run now on the source checkpoint;
    - ``onnxruntime``: an engine's own ONNX model run by ONNX Runtime (CPU).

    Returns (artifact, ValidationReport, why the tolerance); raising nothing beyond tolerance.
    """
    from edgekit.exporters.artifact import load_artifact

    if against not in AGAINST:
        raise UsageError(f"unknown reference '{against}'", hint=f"valid: {', '.join(AGAINST)}")
    return validate_loaded(load_artifact(folder), against, atol, rtol)


def validate_loaded(artifact: Any, against: str = "reference", atol: float | None = None,
                    rtol: float | None = None) -> tuple[Any, Any, str]:
    """``validate_artifact`` on an artifact already loaded (and its files' digests checked)."""
    folder = artifact.folder
    if REFERENCE_FILE not in artifact.manifest["files"]:
        raise UsageError(f"{folder} has no saved reference ({REFERENCE_FILE})",
                         hint="export it again with this edgekit")
    if against == "onnxruntime" and artifact.format == "onnx":
        raise UsageError(f"{folder} is itself an ONNX model; --against onnxruntime compares an "
                         f"engine with its ONNX model",
                         hint="use --against reference or --against torch")
    if artifact.format == "tensorrt":  # fail at once where the engine cannot run
        from edgekit.backends.tensorrt_runner import require_cuda_gpu, require_tensorrt

        require_tensorrt()
        require_cuda_gpu()
    reference = load_reference(artifact.folder / REFERENCE_FILE)
    default_atol, default_rtol, why = default_tolerance(artifact.manifest)
    atol = default_atol if atol is None else atol
    rtol = default_rtol if rtol is None else rtol
    from edgekit.exporters.validate import check_tolerances

    check_tolerances(atol, rtol)
    why = why if (atol, rtol) == (default_atol, default_rtol) else "given"
    if against == "reference":
        expected = reference.outputs
        label = reference_label(artifact.manifest)
    elif against == "torch":
        form = graph_form(_torch_source(artifact), stream="stream" in artifact.manifest)
        expected = torch_outputs(form, reference.inputs)
        label = "PyTorch (FP32, run now)"
    else:
        from edgekit.backends.onnxruntime_backend import OnnxRuntimeRunner

        onnx_file = artifact.folder / artifact.manifest.get("onnx", {}).get("file", "model.onnx")
        with OnnxRuntimeRunner(onnx_file, threads=1) as runner:
            expected = runner.infer(reference.inputs)
        label = "ONNX Runtime (CPU) on the engine's ONNX model"
    from edgekit.exporters.validate import compare_outputs

    converted = artifact.manifest.get("precision", "fp32")
    if (artifact.format == "onnx" and converted != "fp32" and against == "reference"
            and why != "given"):
        from edgekit.exporters.quantize import open_session, validate_precision

        runner = open_session(artifact.model_path)  # per output, at the precision's tolerance
        try:
            report = validate_precision(runner, reference, converted, atol, rtol,
                                        label=reference_label(artifact.manifest))
        finally:
            runner.deactivate()
        return artifact, report, f"default for {converted}, per output"
    actual = _run_artifact(artifact, reference.inputs)
    report = compare_outputs(actual, expected, atol, rtol, against=label,
                             inputs=f"{REFERENCE_FILE} (batch {reference.batch})",
                             scale_small=(why == "the export's tolerance"
                                          and artifact.format == "onnx"))  # FP32 ONNX, default
    return artifact, report, why


def check_reproduces_reference(artifact: Any) -> None:
    """An ONNX artifact's graph gives its saved reference outputs, at the tolerance validate uses:
    the manifest's digests prove the files are the ones it lists, not that the graph is the model
    it names (a graph of the same interface from another model, rehashed into the manifest, passes
    them). One inference on one thread; engines are left to ``edgekit validate`` (a GPU)."""
    if artifact.format != "onnx":
        return
    if REFERENCE_FILE not in artifact.manifest["files"]:  # every ONNX export saves one
        raise UsageError(f"{artifact.folder}: its manifest lists no {REFERENCE_FILE}, so nothing "
                         f"shows that {artifact.manifest['model_file']} is the model it names",
                         hint="export it again with this edgekit")
    _, report, _ = validate_loaded(artifact)
    wrong = [o for o in report.outputs if o.shape != o.reference_shape or o.mismatched]
    if wrong:
        raise UsageError(f"{artifact.folder}: {artifact.manifest['model_file']} does not give the "
                         f"saved reference outputs ({wrong[0].line()[4:]}): it is not the model "
                         f"its manifest names", hint="export it again; 'edgekit validate' shows "
                                                     "every output")
