"""PyTorch -> ONNX: export, simplify (onnxslim), check (onnx.checker), validate (ONNX Runtime).

Every artifact also carries the FP32 reference (``reference.npz``: an input sample and PyTorch's
outputs on it) that later engines and bundles made from it are judged against.

Everything happens in a staging folder that replaces the output folder only when every step
passed, so a failed export leaves nothing half-made (and an older good artifact stays intact).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from edgekit.errors import CheckFailed, UsageError
from edgekit.exporters.artifact import (
    MANIFEST_SCHEMA,
    ArtifactOptions,
    ExportResult,
    file_record,
    io_records,
    task_record,
    write_manifest,
)
from edgekit.exporters.graph_form import STREAM_VALIDATION_FRAMES, GraphForm, graph_form
from edgekit.exporters.lowering import lower_custom_ops
from edgekit.exporters.reference import (
    DYNAMIC_VALIDATION_BATCHES,
    REFERENCE_FILE,
    VALIDATION_DRAWS,
    make_reference,
    make_spiking_net_fire,
    reference_record,
    save_reference,
    validation_seeds,
)
from edgekit.exporters.validate import ValidationFailed, ValidationReport, compare_outputs
from edgekit.fileio import atomic_directory
from edgekit.flops import model_cost
from edgekit.inputs import check_batch
from edgekit.provenance import provenance
from edgekit.quiet import quiet
from edgekit.spiking.lean_neurons import lean_neurons
from edgekit.targets import ModelSource

MODEL_FILE = "model.onnx"
MIN_OPSET, MAX_OPSET = 13, 23


@dataclass(frozen=True)
class OnnxOptions(ArtifactOptions):
    """How ``export_onnx`` exports a model (device, tolerances and ``force`` as every artifact);
    ``None`` means the entry's own setting.

    ``edgekit.export``'s ``ExportOptions`` extends it with what the other formats take, so the
    options reach ``export_onnx`` as they are, never unpacked and packed again."""

    opset: int | None = None
    batch: int | None = None  # fixed batch of the ONNX model; None: the input spec's (1 built in)
    dynamic_batch: bool = False  # a symbolic batch dimension instead
    stream: bool = False  # the entry's streaming step (state in, next state out): graph_form


# Over 8 parameters: the arguments of torch.onnx.export this wrapper passes on, keyword-only
def export_graph(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], path: Path, *,
                 opset: int, input_names: list[str], output_names: list[str], dynamo: bool,
                 dynamic_batch: bool = False, batch_axes: dict[str, int] | None = None) -> str:
    """Export with torch.onnx, simplify in place with onnxslim and run the full ONNX checker.

    The one way edgekit writes an ONNX graph, so that every graph it judges (an artifact, the
    spike-agreement probe) has had the same rewrites. ``batch_axes`` names the batch axis of an
    input or output where it is not 0 (time-major spikes). Returns the simplifier used.
    """
    axes = batch_axes or {}
    kwargs: dict[str, Any] = {"input_names": input_names, "output_names": output_names,
                              "opset_version": opset, "dynamo": dynamo, "verbose": False}
    if dynamic_batch and dynamo:
        batch = torch.export.Dim("batch", min=1, max=65536)
        shapes = tuple({axes.get(n, 0): batch} for n in input_names)
        # torch.export matches dynamic_shapes to forward's parameters: ``*inputs`` (a user's
        # model behind FlatModule) is one parameter holding them all
        kwargs["dynamic_shapes"] = (shapes,) if _takes_varargs(model) else shapes
    elif dynamic_batch:
        kwargs["dynamic_axes"] = {n: {axes.get(n, 0): "batch"} for n in input_names + output_names}
    if dynamo:
        kwargs["external_data"] = False
    # The exporter logs a warning per missing torchvision op and prints progress; neither
    # concerns the user of a model that uses no torchvision op.
    with quiet("torch.onnx._internal.exporter._registration"):
        try:
            with lean_neurons(model):
                torch.onnx.export(model, inputs, str(path), **kwargs)
        except Exception as exc:  # the exporters raise many types; one line is what the user needs
            raise CheckFailed(f"torch.onnx.export failed: {_cause(exc)}",
                              hint="run with --debug for the full trace") from exc
    return _simplify_and_check(path)


def _takes_varargs(model: torch.nn.Module) -> bool:
    import inspect

    params = list(inspect.signature(model.forward).parameters.values())
    return len(params) == 1 and params[0].kind == inspect.Parameter.VAR_POSITIONAL


def _cause(exc: BaseException) -> str:
    """The line of an exporter's error that says what went wrong: the dynamo exporter wraps the
    cause in pages of advice, whose 'Exception summary' names it."""
    text = str(exc).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if "## Exception summary" in lines:
        after = lines[lines.index("## Exception summary") + 1:]
        if after:
            return after[0][:400]
    return lines[0][:400] if lines else type(exc).__name__


def _simplify_and_check(path: Path) -> str:
    """Lower edgekit's own nodes into standard ONNX (``lowering.py``), simplify in place with
    onnxslim and run the full ONNX checker; returns the tool used."""
    import onnx
    import onnxslim

    model = onnx.load(str(path))
    lower_custom_ops(model)
    with quiet(warn=False):
        slim = onnxslim.slim(model)
    onnx.save(slim, str(path))
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except onnx.checker.ValidationError as exc:
        raise CheckFailed(f"onnx.checker rejected the exported graph: "
                          f"{str(exc).splitlines()[0]}") from exc
    return f"onnxslim {onnxslim.__version__}"


def validate_onnx(path: Path, form: GraphForm, batches: tuple[int, ...],
                  atol: float, rtol: float, scale_small: bool = False) -> ValidationReport:
    """Run ONNX Runtime and PyTorch on ``VALIDATION_DRAWS`` draws of the entry's example
    inputs at each batch size (``validation_seeds``); a stream on a chain of
    ``STREAM_VALIDATION_FRAMES`` frames from its initial state, each side fed its own state.
    ``scale_small``: ``atol`` is the model's default (``validate.scale_atol``)."""
    from edgekit.backends.onnxruntime_backend import OnnxRuntimeRunner

    actual: dict[str, list[np.ndarray]] = {}
    reference: dict[str, list[np.ndarray]] = {}
    with OnnxRuntimeRunner(path, threads=1) as runner:
        for size in batches:
            if form.stream is not None:
                got, want = form.chain(size, validation_seeds(size)[0],
                                       STREAM_VALIDATION_FRAMES, runner.infer)
            else:
                got, want = [], []
                for seed in validation_seeds(size):
                    inputs = form.frame(size, seed)
                    got.append(runner.infer(form.feed(inputs)))
                    want.append(form.run(inputs))
            for ort_out, torch_out in zip(got, want, strict=True):
                for name in form.output_names:
                    reference.setdefault(name, []).append(torch_out[name])
                    actual.setdefault(name, []).append(ort_out[name])
    flat_a = {n: np.concatenate([a.ravel() for a in v]) for n, v in actual.items()}
    flat_r = {n: np.concatenate([r.ravel() for r in v]) for n, v in reference.items()}
    shapes_ok = all(a.shape == r.shape
                    for n in actual for a, r in zip(actual[n], reference[n], strict=False))
    if not shapes_ok:
        first = next(n for n in actual
                     if any(a.shape != r.shape
                            for a, r in zip(actual[n], reference[n], strict=False)))
        raise CheckFailed(f"output '{first}' of the ONNX model has another shape than PyTorch's")
    sizes = ", ".join(map(str, batches))
    what = (f"a stream of {STREAM_VALIDATION_FRAMES} frames of example inputs from the "
            f"initial state, each runtime fed its own state, batch {sizes}"
            if form.stream is not None else
            f"example inputs ({form.source.inputs.describe()}), batch {sizes} "
            f"({VALIDATION_DRAWS} draws each)")
    return compare_outputs(flat_a, flat_r, atol, rtol, against="torch", inputs=what,
                           scale_small=scale_small)


def export_onnx(source: ModelSource, out_dir: str | Path,
                options: OnnxOptions | None = None) -> ExportResult:
    """Export ``source`` to an artifact folder; raises ValidationFailed beyond tolerance.

    ``options.stream``: export the entry's streaming step (``graph_form``: the state in, the next
    state out) rather than one call from a fresh state. An existing ``out_dir`` that edgekit did
    not write is replaced only with ``options.force``."""
    options = options if options is not None else OnnxOptions()
    settings = source.export_settings
    opset = settings.opset if options.opset is None else options.opset
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise UsageError(f"opset {opset} is outside the supported range {MIN_OPSET}..{MAX_OPSET}")
    batch = source.inputs.batch if options.batch is None else check_batch(options.batch)
    dynamic_batch = options.dynamic_batch
    # a default atol is held to a small output's scale; a given one not
    default_atol = options.atol is None
    atol = settings.atol if options.atol is None else options.atol
    rtol = settings.rtol if options.rtol is None else options.rtol
    form = graph_form(source, options.stream)
    started = time.perf_counter()
    spiking = make_spiking_net_fire(source)
    inputs = form.example_inputs(2 if dynamic_batch else batch, seed=0)
    cost = model_cost(source.model, source.example_inputs(batch=1))
    with atomic_directory(out_dir, inputs=source.files, force=options.force) as staging:
        model_path = staging / MODEL_FILE
        simplifier = export_graph(form.module.eval(), inputs, model_path, opset=opset,
                                  input_names=form.input_names, output_names=form.output_names,
                                  dynamo=settings.dynamo, dynamic_batch=dynamic_batch)
        batches = DYNAMIC_VALIDATION_BATCHES if dynamic_batch else (batch,)
        report = validate_onnx(model_path, form, batches, atol, rtol, default_atol)
        if not report.passed:
            raise ValidationFailed(report, f"export of {source.name}")
        in_rec, out_rec = io_records(model_path)
        reference = make_reference(form, max(batches))
        save_reference(staging / REFERENCE_FILE, reference)
        if spiking is not None:
            from edgekit.spiking.layers import mean_firing_rate

            x = torch.from_numpy(reference.inputs[source.inputs.names[0]])
            spiking["firing_rate"] = mean_firing_rate(source.model, x)
            spiking["firing_rate_of"] = f"every spiking neuron on {REFERENCE_FILE}'s inputs"
        manifest = {
            "schema_version": MANIFEST_SCHEMA,
            "format": "onnx",
            "model_file": MODEL_FILE,
            "source": source.record(),
            "task": task_record(source.task) if source.task is not None else None,
            "input_spec": source.inputs.records(),
            "inputs": in_rec,
            "outputs": out_rec,
            "opset": opset,
            "batch": "dynamic" if dynamic_batch else batch,
            "params": cost.params,
            "flops_per_sample": cost.flops_per_sample,
            "simplifier": simplifier,
            "validation": report.to_dict(),
            "reference": reference_record(reference, form),
            **({"stream": form.record()} if form.stream is not None else {}),
            **({"spiking": spiking} if spiking is not None else {}),
            "target_device": options.device,
            "files": {MODEL_FILE: file_record(model_path),
                      REFERENCE_FILE: file_record(staging / REFERENCE_FILE)},
            "export_seconds": round(time.perf_counter() - started, 3),
            "provenance": provenance(),
        }
        write_manifest(staging, manifest)
    return ExportResult(Path(out_dir), manifest, report, time.perf_counter() - started)
