"""fp16 and int8 ONNX artifacts, made from a validated FP32 artifact by ONNX Runtime's own tools.

- fp16: ``onnxruntime.transformers.float16.convert_float_to_float16`` with float32 inputs and
  outputs kept (Casts at the edges), so the same feed and reference serve every precision;
- int8, static: ``onnxruntime.quantization.quantize_static`` in the QDQ format (int8 weights per
  channel, uint8 activations) after ``quant_pre_process``, with activation ranges measured on
  calibration samples drawn from the entry's own training split (``calibration.py``, the samples
  the TensorRT path uses) and fed batch by batch through a ``CalibrationDataReader``;
- int8, dynamic: ``quantize_dynamic`` (int8 weights, activation ranges computed at run time; no
  calibration data).

Every result is validated against the FP32 artifact's saved reference (``reference.npz``, copied
unchanged) with a tolerance that follows from the precision (``precision_tolerance``), and scored
on the test split beside the FP32 model, so the manifest says what the precision costs in the task
metric. An int8 conversion in which ONNX Runtime quantizes none of the model's operators is
refused in one line naming them; an accuracy drop (a spiking net's thresholds) is reported.
"""
from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.errors import CheckFailed, UnknownNameError, UsageError
from edgekit.exporters.artifact import (
    Artifact,
    ArtifactOptions,
    ExportResult,
    file_record,
    write_manifest,
)
from edgekit.exporters.calibration import (
    CALIBRATORS,
    DEFAULT_SAMPLES,
    SAMPLE_SEED,
    CalibrationBatcher,
    CalibrationSamples,
)
from edgekit.exporters.reference import REFERENCE_FILE, Reference, load_reference
from edgekit.exporters.validate import (
    ValidationFailed,
    ValidationReport,
    check_tolerances,
    compare_output,
)
from edgekit.fileio import atomic_directory
from edgekit.optional import ONNXRUNTIME, require
from edgekit.precisions import get_precision, onnx_names
from edgekit.provenance import provenance
from edgekit.quiet import quiet
from edgekit.workdirs import owned_tempdir

QUANTIZATIONS = ("static", "dynamic")
# Which operators static int8 quantizes. "weights" (the default): the layers that carry weights
# (Conv, Gemm, MatMul with a constant operand) and the ReLU/Clip ONNX Runtime folds into them, as
# ONNX Runtime's own recipe for transformers does: Softmax, LayerNorm, GELU, the attention
# matmuls, the residual stream and a spiking net's neuron arithmetic stay float. "all": every
# operator ONNX Runtime can quantize. On the real-size edge suite "weights" was as fast or faster
# on six of seven models and far closer to fp32 on the transformers (benchmarks/README.md).
INT8_OPS = ("weights", "all")
WEIGHT_OPS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})
FOLDED_ACTIVATIONS = frozenset({"Relu", "Clip"})
MODEL_FILE = "model.onnx"
# Error allowed at an output, in grid units of the precision times the output's largest reference
# magnitude (a normwise bound |a - r| <= K * u * max|r|). One rounding at the output alone costs
# half a unit; each reduced-precision layer before it adds about as much again, and calibration
# clips the rare activations beyond the measured range. K = 16 covers the dozen-odd quantised
# layers of the built-in models with room; a wrong graph (a flipped weight, a missing layer) is off
# by a large fraction of max|r|, far beyond it.
TOLERANCE_HEADROOM = 16
# ONNX Runtime's quantizer logs advice on the root logger and warns; neither is the user's concern.
_CHATTY = ("", "onnxruntime")
_ORT_CALIBRATION = {"entropy": "Entropy", "minmax": "MinMax"}


class PrecisionRefused(UsageError):
    """ONNX Runtime cannot give this model this precision (exit 2, naming the operators)."""


@dataclass(frozen=True)
class PrecisionConfig:
    """What ``export --to onnx --precision`` asks for."""

    name: str = "fp32"  # the precision: fp32 | fp16 | int8
    quantization: str = "static"  # int8: static (calibrated QDQ) | dynamic
    calibrator: str = "entropy"  # int8 static: ONNX Runtime's Entropy or MinMax calibration
    calib_samples: int = DEFAULT_SAMPLES
    calib_batch: int | None = None  # None: the model's fixed batch, else 32
    int8_ops: str = "weights"  # int8 static: which operators (INT8_OPS)

    def __post_init__(self) -> None:
        if self.name not in onnx_names():
            raise UnknownNameError("ONNX precision", self.name, onnx_names())
        if self.quantization not in QUANTIZATIONS:
            raise UnknownNameError("quantization", self.quantization, QUANTIZATIONS)
        if self.calibrator not in CALIBRATORS:
            raise UnknownNameError("calibrator", self.calibrator, CALIBRATORS)
        if self.int8_ops not in INT8_OPS:
            raise UnknownNameError("int8 operator set", self.int8_ops, INT8_OPS)
        if self.calib_samples < 1:
            raise UsageError(f"--calib-samples must be at least 1, got {self.calib_samples}")

    @property
    def calibrated(self) -> bool:
        return self.name == "int8" and self.quantization == "static"


def precision_tolerance(precision: str, reference: np.ndarray, atol: float,
                        rtol: float) -> tuple[float, float]:
    """(atol, rtol) for one output at ``precision``: the FP32 export's own tolerance, widened to
    ``TOLERANCE_HEADROOM`` grid units of the output's largest reference magnitude."""
    if precision == "fp32":
        return atol, rtol
    scale = float(np.max(np.abs(reference))) if reference.size else 0.0
    return max(atol, TOLERANCE_HEADROOM * get_precision(precision).roundoff * scale), rtol


# -- conversion ------------------------------------------------------------------------------


def _calibration_reader(batcher: CalibrationBatcher) -> Any:
    """An ONNX Runtime ``CalibrationDataReader`` over the batcher's batches."""
    quantization = require("onnxruntime.quantization", ONNXRUNTIME, "int8 quantization")

    class Reader(quantization.CalibrationDataReader):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            self._batches = iter(batcher)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._batches, None)

    return Reader()


def _to_fp16(fp32: Path, out: Path) -> dict[str, Any]:
    import onnx

    float16 = require("onnxruntime.transformers.float16", ONNXRUNTIME, "fp16 conversion")
    with quiet(*_CHATTY):
        model = float16.convert_float_to_float16(onnx.load(str(fp32)), keep_io_types=True)
    onnx.save(model, str(out))
    return {"method": "fp16 conversion, float32 inputs and outputs kept",
            "tool": "onnxruntime.transformers.float16.convert_float_to_float16"}


def _to_int8_dynamic(fp32: Path, out: Path) -> dict[str, Any]:
    q = require("onnxruntime.quantization", ONNXRUNTIME, "int8 quantization")
    with quiet(*_CHATTY):
        q.quantize_dynamic(str(fp32), str(out), weight_type=q.QuantType.QInt8, per_channel=True)
    return {"method": "dynamic int8: int8 weights per channel, activation ranges at run time",
            "tool": "onnxruntime.quantization.quantize_dynamic", "calibration": None}


def weight_layer_nodes(graph: Any) -> list[str]:
    """Names of the nodes int8 of the weight layers quantizes: Conv, Gemm and MatMul nodes with
    a constant operand (an attention matmul multiplies two activations), and a ReLU or Clip
    right after one (ONNX Runtime folds it into the layer's output range)."""
    constants = {t.name for t in graph.initializer}
    constants |= {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    layers = [n for n in graph.node
              if n.op_type in WEIGHT_OPS and any(i in constants for i in n.input[1:])]
    layer_outputs = {o for n in layers for o in n.output}
    folded = [n for n in graph.node
              if n.op_type in FOLDED_ACTIVATIONS and n.input and n.input[0] in layer_outputs]
    return [n.name for n in (*layers, *folded)]


def _unshare_weights(graph: Any) -> int:
    """Give each weight layer its own copy of a weight other nodes read too (returns how many
    copies): ONNX Runtime's quantizer quantizes a weight once per reader, writing duplicate
    names ("Duplicate definition of name"), or refuses ("shared mode is not supported for
    weight"); ASTRA's blocks share their codebooks this way."""
    from onnx import numpy_helper

    initializers = {t.name: t for t in graph.initializer}
    readers: dict[str, int] = {}
    for node in graph.node:
        for name in set(node.input):
            if name in initializers:
                readers[name] = readers.get(name, 0) + 1
    copies = 0
    for node in graph.node:
        if node.op_type not in WEIGHT_OPS:
            continue
        for k, name in enumerate(node.input):
            if name in initializers and readers[name] > 1:
                readers[name] -= 1  # the last reader keeps the original
                copy = numpy_helper.from_array(numpy_helper.to_array(initializers[name]),
                                               f"{name}__{node.name}")
                graph.initializer.append(copy)
                node.input[k] = copy.name
                copies += 1
    return copies


def _named_nodes(prepared: Path) -> Any:
    """The prepared model with every node named (``nodes_to_quantize`` selects by name) and no
    weight shared between a weight layer and another node (``_unshare_weights``)."""
    import onnx

    model = onnx.load(str(prepared))
    taken = {n.name for n in model.graph.node if n.name}
    for i, node in enumerate(model.graph.node):
        if not node.name:
            name = f"edgekit_node_{i}"
            while name in taken:
                name += "_"
            node.name = name
            taken.add(name)
    _unshare_weights(model.graph)
    onnx.save(model, str(prepared))
    return model.graph


def _to_int8_static(fp32: Path, out: Path, config: PrecisionConfig, samples: CalibrationSamples,
                    inputs: list[dict[str, Any]], work: Path) -> dict[str, Any]:
    from edgekit.exporters.tensorrt import calibration_shapes

    q = require("onnxruntime.quantization", ONNXRUNTIME, "int8 quantization")
    from onnxruntime.quantization.shape_inference import quant_pre_process

    batch, _ = calibration_shapes((), inputs, samples, config.calib_batch)  # checks the shapes
    batcher = CalibrationBatcher(samples, batch)
    prepared = work / "preprocessed.onnx"
    with quiet(*_CHATTY):
        quant_pre_process(str(fp32), str(prepared), skip_symbolic_shape=True)
        graph = _named_nodes(prepared)
        ops = config.int8_ops
        selection: dict[str, Any] = {}
        if ops == "weights":
            nodes = weight_layer_nodes(graph)
            if not nodes:  # ONNX Runtime reads an empty list as "every node"
                raise PrecisionRefused("the model has no weight layer (Conv, Gemm or MatMul "
                                       "with a constant operand) to quantize",
                                       hint="--int8-ops all quantizes its other operators")
            selection = {"op_types_to_quantize": sorted(WEIGHT_OPS | FOLDED_ACTIVATIONS),
                         "nodes_to_quantize": nodes}
        q.quantize_static(str(prepared), str(out), _calibration_reader(batcher), **selection,
                          quant_format=q.QuantFormat.QDQ, per_channel=True,
                          activation_type=q.QuantType.QUInt8, weight_type=q.QuantType.QInt8,
                          calibrate_method=getattr(q.CalibrationMethod,
                                                   _ORT_CALIBRATION[config.calibrator]),
                          calibration_providers=["CPUExecutionProvider"])
    scope = "the weight layers" if ops == "weights" else "every operator"
    return {"method": f"static int8, QDQ, {scope}: int8 weights per channel, uint8 activations "
                      f"with ranges from {config.calibrator} calibration",
            "int8_ops": ops,
            "tool": "onnxruntime.quantization.quantize_static",
            "calibration": {**samples.record(), "calibrator": config.calibrator,
                            "seed": SAMPLE_SEED, **batcher.record()}}


def _inlined(fp32: Path, work: Path) -> Path:
    """``fp32`` as one self-contained file: ONNX Runtime's quantizer rewrites the model in
    folders of its own, where an external data file it was given is not found."""
    import onnx

    if not fp32.with_name(fp32.name + ".data").is_file():
        return fp32
    model = onnx.load(str(fp32), load_external_data=True)
    inlined = work / "fp32-inlined.onnx"
    onnx.save_model(model, str(inlined))
    return inlined


def convert(fp32: Path, out: Path, config: PrecisionConfig, inputs: list[dict[str, Any]],
            samples: CalibrationSamples | None = None) -> dict[str, Any]:
    """Write ``fp32`` at ``config.name`` (fp16, int8) to ``out``; returns the manifest's
    record of how."""
    if config.name == "fp32":
        raise UsageError("fp32 is the FP32 artifact itself; nothing to convert")
    if config.name == "int8" and config.quantization == "static" and samples is None:
        raise UsageError("--precision int8 --quantization static needs calibration samples",
                         hint="give --calib-data FILE.npz, or --quantization dynamic")
    # marked with this process's pid: a conversion killed mid-way (out of memory while
    # calibrating a large model) leaves a folder the next one removes
    with owned_tempdir("edgekit-quantize-") as work:
        model = _inlined(fp32, work)
        if config.name == "fp16":
            return _to_fp16(model, out)
        if config.quantization == "dynamic":
            return _to_int8_dynamic(model, out)
        assert samples is not None  # checked above
        return _to_int8_static(model, out, config, samples, inputs, work)


def open_session(path: Path) -> Any:
    """An active ONNX Runtime CPU runner of the converted model, 1 thread. (ONNX Runtime runs
    an operator it has no fp16 or int8 kernel for in float32, inserting the casts itself, so a
    conversion never fails to load; coverage shows in ``quantized_operators``.)"""
    from edgekit.backends.onnxruntime_backend import OnnxRuntimeRunner

    runner = OnnxRuntimeRunner(path, threads=1)
    runner.activate()
    return runner


def quantized_operators(path: Path) -> dict[str, int]:
    """Node counts by operator type of a converted graph (the manifest's coverage record)."""
    import onnx

    counts: dict[str, int] = {}
    for node in onnx.load(str(path), load_external_data=False).graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return dict(sorted(counts.items()))


def refuse_if_nothing_quantized(ops: dict[str, int], fp32_ops: dict[str, int], model: str,
                                 precision: str) -> None:
    """An int8 graph without one quantised operator is fp32 in disguise: refuse it, naming the
    model's operators, none of which ONNX Runtime's quantizer covers."""
    if precision != "int8" or any(k in ops for k in ("DequantizeLinear", "DynamicQuantizeLinear",
                                                     "MatMulInteger", "ConvInteger")):
        return
    names = ", ".join(sorted(fp32_ops)) or "none"
    raise PrecisionRefused(f"{model} has no operator ONNX Runtime quantizes to int8 (its "
                           f"operators: {names})", hint="keep this model at fp32 or fp16")


# -- validation and scoring ------------------------------------------------------------------


def validate_precision(runner: Any, reference: Reference, precision: str, atol: float,
                       rtol: float, label: str = "saved PyTorch FP32 reference"
                       ) -> ValidationReport:
    """Every output against the saved FP32 reference, at this precision's tolerance."""
    check_tolerances(atol, rtol)
    actual = runner.infer(reference.inputs)
    missing = set(reference.outputs) - set(actual)
    if missing:
        raise CheckFailed(f"the {precision} model lacks output(s) {', '.join(sorted(missing))}")
    comparisons = []
    for name, expected in reference.outputs.items():
        a_tol, r_tol = precision_tolerance(precision, expected, atol, rtol)
        comparisons.append(compare_output(name, actual[name], expected, a_tol, r_tol))
    return ValidationReport(tuple(comparisons), label,
                            f"{REFERENCE_FILE} (batch {reference.batch})")


def score_onnx(runner: Any, entry: Any, x: np.ndarray, y: np.ndarray,
               batch: int | str) -> float:
    """The entry's own metric of an ONNX model on (x, y): its evaluator gets a module that runs
    the session, in chunks of the model's fixed batch (the last one padded and trimmed)."""
    import torch

    from edgekit.training import evaluate_entry

    task = entry.task
    fixed = batch if isinstance(batch, int) else None

    class OnnxModule(torch.nn.Module):
        def forward(self, inputs: torch.Tensor) -> Any:
            arr = inputs.detach().cpu().numpy().astype(task.input_dtype, copy=False)
            step = fixed or len(arr)
            parts: dict[str, list[np.ndarray]] = {n: [] for n in task.output_names}
            for start in range(0, len(arr), step):
                chunk = arr[start:start + step]
                pad = step - len(chunk)
                if pad:
                    chunk = np.concatenate([chunk, np.repeat(chunk[-1:], pad, axis=0)])
                out = runner.infer({task.input_name: chunk})
                for n in task.output_names:
                    parts[n].append(out[n][:step - pad])
            outs = tuple(torch.from_numpy(np.concatenate(parts[n])) for n in task.output_names)
            return outs if len(outs) > 1 else outs[0]

    return float(evaluate_entry(entry, OnnxModule(), x, y))


def _accuracy(fp32_path: Path, runner: Any, artifact: Artifact) -> dict[str, Any]:
    """The task metric of the FP32 and the converted model on the entry's test split."""
    from edgekit.backends.onnxruntime_backend import OnnxRuntimeRunner
    from edgekit.data import load_dataset
    from edgekit.registry import get_entry

    entry_name = artifact.manifest["source"].get("entry")
    if entry_name is None:
        return {"value": None, "note": "your own model has no built-in test split; score both "
                                       "with 'edgekit compare --data FILE.npz'"}
    try:
        entry = get_entry(entry_name)
    except UsageError:
        return {"value": None, "note": f"model '{entry_name}' is unknown here: no test split"}
    dataset = load_dataset(entry.task)
    batch = artifact.manifest.get("batch", 1)
    with OnnxRuntimeRunner(fp32_path, threads=1) as fp32_runner:
        fp32 = score_onnx(fp32_runner, entry, dataset.x_test, dataset.y_test, batch)
    value = score_onnx(runner, entry, dataset.x_test, dataset.y_test, batch)
    trained = "checkpoint" in artifact.manifest["source"]
    return {"metric": entry.task.metric, "higher_is_better": entry.task.higher_is_better,
            "dataset": dataset.name, "split": "test", "samples": int(len(dataset.x_test)),
            "value": value, "fp32_value": fp32, "change": value - fp32,
            "weights": "trained (checkpoint)" if trained else "untrained (random initialisation)"}


# -- the artifact ------------------------------------------------------------------------------


def export_precision(artifact: Artifact, out_dir: str | Path, config: PrecisionConfig,
                     options: ArtifactOptions | None = None, *,
                     samples: CalibrationSamples | None = None, inputs: tuple[str | Path, ...] = (),
                     check: bool = True, score: bool = True) -> ExportResult:
    """``artifact`` (a validated FP32 ONNX artifact) converted to ``config.name`` in a new
    artifact folder with the same reference; raises ValidationFailed beyond tolerance (with
    ``check``; else the verdict is only recorded). ``score``: the test-split metric of both.
    ``inputs``: further files it is made from (``--calib-data``), which it may not overwrite."""
    options = options if options is not None else ArtifactOptions()
    from edgekit.exporters.reference import default_tolerance, reference_label

    started = time.perf_counter()
    if artifact.format != "onnx" or artifact.manifest.get("precision", "fp32") != "fp32":
        raise UsageError(f"{artifact.folder} is not an FP32 ONNX artifact",
                         hint="convert the FP32 export, never an already converted one")
    base_atol, base_rtol, _ = default_tolerance(artifact.manifest, "fp32")
    atol = base_atol if options.atol is None else options.atol
    rtol = base_rtol if options.rtol is None else options.rtol
    check_tolerances(atol, rtol)
    model = artifact.source_name
    reference = load_reference(artifact.folder / REFERENCE_FILE)
    with atomic_directory(out_dir, inputs=(artifact.folder, *inputs),
                          force=options.force) as staging:
        path = staging / MODEL_FILE
        how = convert(artifact.model_path, path, config, artifact.manifest["inputs"], samples)
        ops = quantized_operators(path)
        refuse_if_nothing_quantized(ops, quantized_operators(artifact.model_path), model,
                                     config.name)
        runner = open_session(path)
        try:
            report = validate_precision(runner, reference, config.name, atol, rtol,
                                        label=reference_label(artifact.manifest))
            if check and not report.passed:
                raise ValidationFailed(report, f"{config.name} export of {model}")
            accuracy = (_accuracy(artifact.model_path, runner, artifact) if score
                        else {"value": None, "note": "not scored here"})
        finally:
            runner.deactivate()
        shutil.copyfile(artifact.folder / REFERENCE_FILE, staging / REFERENCE_FILE)
        fp32_manifest = artifact.manifest
        manifest = {
            **{k: v for k, v in fp32_manifest.items() if k not in ("files", "provenance")},
            "precision": config.name,
            "quantization": {**how, "operators": ops,
                             "tolerance": f"max(FP32 export's atol, {TOLERANCE_HEADROOM} x "
                                          f"{get_precision(config.name).roundoff:g} x "
                                          f"max|reference|) per output"},
            "accuracy": accuracy,
            "fp32": {"file": artifact.manifest["model_file"],
                     "sha256": fp32_manifest["files"][fp32_manifest["model_file"]]["sha256"],
                     "bytes": artifact.size_bytes, "validation": fp32_manifest.get("validation")},
            "validation": report.to_dict(),
            "target_device": options.device or fp32_manifest.get("target_device"),
            "files": {MODEL_FILE: file_record(path),
                      REFERENCE_FILE: file_record(staging / REFERENCE_FILE)},
            "export_seconds": round(time.perf_counter() - started, 3),
            "provenance": provenance(),
        }
        manifest["model_file"] = MODEL_FILE
        write_manifest(staging, manifest)
    return ExportResult(Path(out_dir), manifest, report, time.perf_counter() - started)
