"""``edgekit.export`` and ``edgekit.validate``: the CLI's export and validate as functions.

Both take what the CLI's TARGET takes (``edgekit.targets.resolve_target``: a registry name, a
checkpoint, an artifact folder, an ``.onnx`` or ``.pt2`` file, ``file.py:callable``,
``package.module:callable``), an ``nn.Module``, or a target already resolved, so a script and a
shell session do the same thing. Progress lines reach the caller through ``echo`` (the CLI
prints them); nothing here prints.
"""
from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from edgekit.errors import UsageError
from edgekit.exporters.artifact import Artifact, ArtifactOptions, load_artifact
from edgekit.exporters.artifact_validation import validate_artifact
from edgekit.exporters.onnx import export_onnx
from edgekit.exporters.options import ExportOptions
from edgekit.exporters.registry import ExporterSpec, ExportJob, get_exporter, register_exporter
from edgekit.exporters.validate import ValidationReport, check_tolerances
from edgekit.inputs import InputOverride, check_batch
from edgekit.targets import ArtifactTarget, ModelSource, OnnxFileTarget, Target, resolve_target

Echo = Callable[[str], None]


def _silent(line: str) -> None:
    """The default ``echo``: a library call is quiet unless asked."""


def _stem(name: str) -> str:
    return name.replace(":", "-")


def _files(target: Target) -> list[Path]:
    """What ``target`` was read from, which no output may overwrite."""
    if isinstance(target, ModelSource):
        return target.files
    return [target.folder if isinstance(target, ArtifactTarget) else target.path]


def _import_onnx(target: OnnxFileTarget, out: str | Path, options: ArtifactOptions) -> Any:
    from edgekit.exporters.onnx_file import import_onnx

    return import_onnx(target, out, options)


@contextlib.contextmanager
def _onnx_artifact(target: Target, fmt: str, options: ExportOptions,
                   echo: Echo) -> Iterator[tuple[Artifact, str]]:
    """The ONNX artifact an engine, bundle or conversion starts from: TARGET itself when it is
    one, else a validated export (or an ONNX file's import) into a temporary folder."""
    if isinstance(target, ArtifactTarget):
        yield load_artifact(target.folder), str(target.folder)
        return
    with tempfile.TemporaryDirectory(prefix="edgekit-onnx-") as tmp:
        if isinstance(target, OnnxFileTarget):
            echo(f"importing {target.path} into an artifact first")
            result = _import_onnx(target, Path(tmp) / "onnx", options)
        else:
            echo(f"exporting {target.name} to onnx first")
            # --atol/--rtol judge what is built from this artifact; the ONNX export keeps the
            # entry's own tolerances, and a temporary folder needs no --force
            result = export_onnx(target, Path(tmp) / "onnx",
                                 replace(options, atol=None, rtol=None, force=False))
        for line in result.validation.lines():
            echo(line)
        yield load_artifact(result.folder), f"exported from {target.name} for this {fmt} export"


def export(target: Any, output: str | Path | None = None, *, to: str = "onnx",
           options: ExportOptions | None = None, echo: Echo = _silent,
           inputs: Sequence[InputOverride | str] = ()) -> Any:
    """Export ``target`` to ``output`` (default ``./NAME-FORMAT``) and validate it.

    ``to`` names a registered format (``edgekit.exporters.registry``): onnx (from a model, or
    an ONNX file made into an artifact), nir (from a spiking model), tensorrt or jetson-bundle
    (from either, or from an ONNX artifact folder), or a plugin's. Returns the exporter's
    result (folder, manifest, validation); raises ``ValidationFailed`` beyond tolerance and
    leaves no half-made folder. ``options`` default to ``ExportOptions()`` (made per call: a
    default made at import would read the precision registry, and load plugins, mid-import);
    ``inputs`` (``--input``, as text or ``InputOverride``) add to ``options.inputs``.
    """
    options = options if options is not None else ExportOptions()
    if inputs:
        options = replace(options, inputs=(*options.inputs, *inputs))
    spec = get_exporter(to)
    check_tolerances(options.atol, options.rtol)  # before any work
    if options.batch is not None:
        check_batch(options.batch)
    resolved = resolve_target(target, inputs=options.inputs, batch=options.batch or 1)
    if options.batch is None:  # the batch the user's --input or example inputs gave
        own = resolved.inputs.batch if not isinstance(resolved, ArtifactTarget) else 1
        options = replace(options, batch=own)
    _check_target(resolved, to, options)
    if spec.check is not None:
        spec.check(options)  # fail at once, before any export work
    job = ExportJob(to=to, target=resolved, output=output, options=options, echo=echo,
                    protected=(*_files(resolved), *_calib_file(options)))
    if not spec.from_onnx:
        return spec.export(job)
    if output is not None:  # before any work; the default name is known only from the source
        job.check_output(output)
    with _onnx_artifact(resolved, to, options, echo) as (artifact, origin):
        if artifact.manifest.get("precision", "fp32") != "fp32":
            raise UsageError(f"{artifact.folder} is a {artifact.manifest['precision']} ONNX "
                             f"artifact", hint=f"build {to} from the FP32 artifact with "
                                               f"--precision")
        calibration = None
        if options.engine.precision == "int8":
            from edgekit.exporters.calibration import samples_for_artifact

            calibration = samples_for_artifact(artifact.folder, artifact.manifest,
                                               options.calib_data, options.engine.calib_samples)
            echo(f"calibrating with {calibration.count} samples from {calibration.origin}")
        return spec.export(replace(job, artifact=artifact, origin=origin,
                                   calibration=calibration))


def _onnx(job: ExportJob) -> Any:
    """A validated FP32 ONNX artifact of the model (or of an imported ONNX file), or, with
    ``--precision fp16/int8``, ONNX Runtime's conversion of the FP32 artifact."""
    if job.options.precision.name != "fp32":
        return _export_precision(job)
    out = job.folder()
    options = job.options
    if isinstance(job.target, OnnxFileTarget):
        job.echo(f"importing {job.target.path} -> {out}")
        return _import_onnx(job.target, out, options)
    source = job.model()
    job.echo(f"exporting {source.name} to onnx -> {out}")
    return export_onnx(source, out, options)


def _nir(job: ExportJob) -> Any:
    """A NIR graph of a spiking model, read back and checked against SpikingJelly."""
    from edgekit.exporters.nir import export_nir  # SpikingJelly and nir load only here

    out = job.folder()
    source = job.model()
    job.echo(f"exporting {source.name} to nir -> {out}")
    return export_nir(source, out, job.options)


def _loihi2(job: ExportJob) -> Any:
    """A spiking model in Loihi 2's fixed-point formats, checked against the float net by
    edgekit's bit-accurate simulation of the chip (``edgekit.neuromorphic``)."""
    from edgekit.neuromorphic.loihi2_export import export_loihi2  # SpikingJelly, nir, scipy

    out = job.folder()
    source = job.model()
    job.echo(f"exporting {source.name} to loihi2 -> {out}")
    return export_loihi2(source, out, calib_data=job.options.calib_data,
                         calib_samples=job.options.precision.calib_samples,
                         force=job.options.force, echo=job.echo)


def _loihi2_summary(result: Any) -> list[str]:
    m = result.manifest
    exps = ", ".join(str(layer["weight_exp"]) for layer in m["layers"])
    return [f"Loihi 2 fixed point: {len(m['layers'])} synapse layers (weight_exp {exps}), "
            f"8-bit graded input, T={m['timesteps']}; checked on {m['validation']['inputs']} "
            f"with edgekit's bit-accurate simulation, {result.seconds:.1f} s"]


def _check_tensorrt(options: ExportOptions) -> None:
    from edgekit.backends.tensorrt_runner import require_cuda_gpu, require_tensorrt
    from edgekit.exporters.tensorrt import check_precision_supported

    trt = require_tensorrt()
    require_cuda_gpu()
    check_precision_supported(trt.__version__, options.engine.precision)


def _tensorrt(job: ExportJob) -> Any:
    """A TensorRT engine built here from the ONNX artifact, validated against its reference."""
    from edgekit.exporters.tensorrt import export_tensorrt

    assert job.artifact is not None  # a from_onnx format
    build, options = job.options.engine, job.options
    out = job.folder(f"tensorrt-{build.precision}")
    job.echo(f"building a TensorRT {build.precision} engine of {job.artifact.source_name} "
             f"-> {out}")
    return export_tensorrt(job.artifact, out, build, options, calibration=job.calibration,
                           onnx_origin=job.origin)


def _jetson_bundle(job: ExportJob) -> Any:
    """A folder to copy to a Jetson, which builds and profiles the engine there."""
    from edgekit.exporters.jetson_bundle import write_jetson_bundle

    assert job.artifact is not None  # a from_onnx format
    return write_jetson_bundle(job.artifact, job.folder("jetson"), job.options.engine,
                               calibration=job.calibration, cuda_graph=job.options.cuda_graph,
                               force=job.options.force)


def _calib_file(options: ExportOptions) -> list[Path]:
    return [Path(options.calib_data)] if options.calib_data is not None \
        and Path(options.calib_data).exists() else []


def _check_target(target: Target, to: str, options: ExportOptions) -> None:
    """What this target cannot be exported to, in one line before any work."""
    _check_stream(target, to, options)
    if isinstance(target, ArtifactTarget) and to in ("onnx", "nir", "loihi2") \
            and options.precision.name == "fp32":
        raise UsageError(f"{target.folder} is already an artifact; --to {to} exports a model",
                         hint="give the model or checkpoint it came from, or convert it with "
                              "--precision fp16/int8")
    if isinstance(target, OnnxFileTarget) and to in ("nir", "loihi2"):
        raise UsageError(f"--to {to} exports a spiking PyTorch model; an ONNX file has no neurons "
                         "to read", hint="give the spiking module (file.py:callable)")
    if isinstance(target, ModelSource) and to in ("nir", "loihi2") and not target.spiking:
        raise UsageError(f"{target.name} is not a spiking net; --to {to} takes spiking nets",
                         hint="export it with --to onnx")


def _check_stream(target: Target, to: str, options: ExportOptions) -> None:
    """Where a streaming export cannot be made, one line before any work."""
    if not options.stream:
        return
    if to in ("nir", "loihi2"):
        raise UsageError("--stream applies to ONNX, TensorRT and Jetson-bundle exports")
    if not isinstance(target, ModelSource):
        raise UsageError("--stream applies when exporting from a model or checkpoint; the "
                         "target is already an ONNX artifact",
                         hint="an artifact exported with --stream streams already")
    if to == "onnx" and options.precision.name != "fp32":
        raise UsageError(f"--stream exports FP32 ONNX; {options.precision.name} "
                         f"conversion of a streaming graph is not supported",
                         hint="build a TensorRT --precision fp16 engine from it instead")
    if options.engine.precision == "int8":
        raise UsageError("--stream with --precision int8: calibration data hold no state "
                         "inputs", hint="use --precision fp16 or fp32")


def _export_precision(job: ExportJob) -> Any:
    """An fp16 or int8 ONNX artifact: the FP32 artifact first (TARGET itself where it is one),
    then ONNX Runtime's conversion, validated against the FP32 reference and scored."""
    from edgekit.exporters.quantize import export_precision

    options, echo = job.options, job.echo
    config = options.precision
    if job.output is not None:  # before any work; the default name needs the artifact
        job.check_output(job.output)
    with _onnx_artifact(job.target, "onnx", options, echo) as (artifact, _):
        samples = None
        if config.calibrated:
            from edgekit.exporters.calibration import samples_for_artifact

            samples = samples_for_artifact(artifact.folder, artifact.manifest,
                                           options.calib_data, config.calib_samples)
            echo(f"calibrating with {samples.count} samples from {samples.origin}")
        out = replace(job, artifact=artifact).folder(f"onnx-{config.name}")
        echo(f"converting {artifact.source_name} to {config.name} -> {out}")
        inputs = tuple(p for p in (options.calib_data,) if p is not None)
        return export_precision(artifact, out, config, options, samples=samples, inputs=inputs)


@dataclass(frozen=True)
class Validation:
    """An artifact's outputs compared with a reference; ``report.passed`` is the verdict."""

    artifact: Artifact
    report: ValidationReport
    tolerance_basis: str  # why these tolerances: the export's, the precision's, or "given"


def validate(target: Any, against: str = "reference", atol: float | None = None,
             rtol: float | None = None, inputs: tuple[InputOverride, ...] = ()) -> Validation:
    """Run an artifact on its saved reference input and compare its outputs with ``against``.

    A model (registry name, checkpoint, user callable, ``.pt2``) is first exported to ONNX, an
    ONNX file imported, in a temporary folder (gone when this returns), so the answer is whether
    that model exports (or that file runs) faithfully. Beyond tolerance this returns a failed
    report; it does not raise.
    """
    resolved = resolve_target(target, inputs=inputs)
    if isinstance(resolved, ArtifactTarget):
        return Validation(*validate_artifact(resolved.folder, against, atol, rtol))
    with tempfile.TemporaryDirectory(prefix="edgekit-validate-") as tmp:
        folder = Path(tmp) / f"{_stem(resolved.name)}-onnx"
        if isinstance(resolved, OnnxFileTarget):
            _import_onnx(resolved, folder, ArtifactOptions(atol=atol, rtol=rtol))
        else:
            export_onnx(resolved, folder)
        return Validation(*validate_artifact(folder, against, atol, rtol))


# The built-in formats. Options by CLI parameter name: shaping the ONNX export, and building
# an engine (TensorRT here, or on the Jetson from a bundle) with its int8 calibration.
_ONNX_EXPORT = frozenset({"opset", "batch", "dynamic_batch"})
_ENGINE_BUILD = frozenset({"precision", "workspace", "dla_core", "min_shape", "opt_shape",
                           "max_shape", "calibrator", "calib_samples", "calib_batch",
                           "calib_data", "calib_cache"})

register_exporter(ExporterSpec(
    name="onnx", description="a validated ONNX artifact (fp32, or fp16/int8 by ONNX Runtime)",
    from_onnx=False, export=_onnx,
    options=_ONNX_EXPORT | {"precision", "quantization", "calibrator", "calib_samples",
                            "calib_batch", "calib_data", "int8_ops"}))
register_exporter(ExporterSpec(
    name="tensorrt", description="a TensorRT engine built on this machine's GPU",
    from_onnx=True, export=_tensorrt, check=_check_tensorrt,
    options=_ONNX_EXPORT | _ENGINE_BUILD | {"timing_cache"},
    refusals=((("cuda_graph",), "applies to --to jetson-bundle (its profiling commands); for an "
                                "engine use 'edgekit profile ENGINE --backend tensorrt "
                                "--cuda-graph'"),)))
register_exporter(ExporterSpec(
    name="jetson-bundle", description="a folder that builds and profiles the engine on a Jetson",
    from_onnx=True, export=_jetson_bundle,
    options=_ONNX_EXPORT | _ENGINE_BUILD | {"cuda_graph"},
    refusals=((("timing_cache",), "applies to --to tensorrt; a bundle keeps its timing cache "
                                  "beside the model on the device"),)))
register_exporter(ExporterSpec(
    name="nir", description="a NIR graph of a spiking model, for neuromorphic chips",
    from_onnx=False, export=_nir,
    refusals=((tuple(sorted(_ONNX_EXPORT)), "apply to ONNX exports; a NIR graph has no batch "
                                            "dimension or opset"),)))
register_exporter(ExporterSpec(
    name="loihi2", description="a spiking model in Loihi 2's fixed-point formats (NIR and a "
                               "manifest), checked by a bit-accurate simulation",
    from_onnx=False, export=_loihi2, options=frozenset({"calib_data", "calib_samples"}),
    summary=_loihi2_summary,
    refusals=((tuple(sorted(_ONNX_EXPORT)), "apply to ONNX exports; a Loihi 2 net has no batch "
                                            "dimension or opset"),)))
