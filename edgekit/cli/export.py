"""``edgekit export``: a model to a validated ONNX artifact, a TensorRT engine, a Jetson bundle,
a NIR graph, or a format a plugin registered (``edgekit.exporters.registry``)."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from edgekit.cli.choices import LazyHelpOption, RegistryChoice
from edgekit.cli.common import (
    BATCH,
    NON_NEGATIVE,
    SAMPLES,
    console,
    err_console,
    input_option,
)
from edgekit.errors import CheckFailed, UsageError
from edgekit.exporters import EngineBuildConfig
from edgekit.exporters.calibration import CALIBRATORS, DEFAULT_SAMPLES
from edgekit.exporters.quantize import INT8_OPS, QUANTIZATIONS, PrecisionConfig
from edgekit.exporters.registry import ExporterSpec, exporter_names, get_exporter, list_exporters
from edgekit.exporters.run import ExportOptions
from edgekit.exporters.run import export as run_export
from edgekit.inputs import parse_inputs
from edgekit.precisions import onnx_names, tensorrt_names
from edgekit.profiles import load_profile
from edgekit.profiles.claim import check_runnable
from edgekit.targets import ArtifactTarget, resolve_target

_ONNX_ONLY = ("opset", "batch", "dynamic_batch")
_INT8_OPTIONS = ("calibrator", "calib_samples", "calib_batch", "calib_data", "calib_cache",
                 "int8_ops")
_ONNX_INT8_OPTIONS = ("calibrator", "calib_samples", "calib_batch", "calib_data",
                      "int8_ops")  # static only
# The options a format honours or refuses (ExporterSpec.options), in the order of --help.
_FORMAT_OPTIONS = (*_ONNX_ONLY, "precision", "quantization", "workspace", "dla_core",
                   "min_shape", "opt_shape", "max_shape", *_INT8_OPTIONS, "timing_cache",
                   "cuda_graph")
# TensorRT workspace in MiB: 1 TiB is beyond any GPU's memory; the bytes must fit a 64-bit size.
WORKSPACE_MIB = click.IntRange(1, 2**20)
# DLA cores: Xavier and Orin have two (0 and 1); TensorRT takes a small int.
DLA_CORE = click.IntRange(0, 15)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _given(values: dict[str, Any], names: tuple[str, ...]) -> list[str]:
    return [_flag(n) for n in names if values[n] not in (None, False, ())]


def _takers(option: str) -> str:
    """The formats that honour ``option``: "--to onnx, --to tensorrt and --to jetson-bundle"."""
    names = [f"--to {s.name}" for s in list_exporters() if option in s.options]
    return " and ".join(filter(None, [", ".join(names[:-1]), *names[-1:]]))


def _check_options(spec: ExporterSpec, target_is_artifact: bool, values: dict[str, Any]) -> None:
    """Options that do not apply to this export are an error, not silently ignored."""
    if "quantization" in spec.options:
        _check_onnx_precision(values)
    if values["precision"] and "precision" not in spec.options:
        raise UsageError(f"--precision applies to {_takers('precision')}")
    if values["quantization"] and "quantization" not in spec.options:
        raise UsageError(f"--quantization applies to {_takers('quantization')} (TensorRT "
                         f"calibrates int8 itself)")
    refused = {n for names, _ in spec.refusals for n in names}
    extra = [n for n in _FORMAT_OPTIONS if n not in spec.options and n not in refused
             and values[n] not in (None, False, ())]
    if extra:
        same = [n for n in extra if _takers(n) == _takers(extra[0])]
        raise UsageError(f"{', '.join(map(_flag, same))} apply to {_takers(extra[0])}")
    if "precision" in spec.options and (values["precision"] or "fp32") != "int8":
        extra_int8 = _given(values, _INT8_OPTIONS)
        if extra_int8:
            raise UsageError(f"{', '.join(extra_int8)} apply to --precision int8")
    for names, why in spec.refusals:
        given = _given(values, names)
        if given:
            raise UsageError(f"{', '.join(given)} {why}")
    if target_is_artifact:
        given = _given(values, _ONNX_ONLY)
        if given:
            raise UsageError(f"{', '.join(given)} apply when exporting from a model or checkpoint; "
                             f"the target is already an ONNX artifact")
    if values["dynamic_batch"] and values["batch"] not in (None, 1):
        raise UsageError("--batch and --dynamic-batch exclude each other")


def _check_onnx_precision(values: dict[str, Any]) -> None:
    """ONNX precisions: fp16/int8 options only where they mean something."""
    precision = values["precision"] or "fp32"
    if values["quantization"] and precision != "int8":
        raise UsageError("--quantization applies to --precision int8")
    if values["quantization"] == "dynamic":
        extra = _given(values, _ONNX_INT8_OPTIONS)
        if extra:
            raise UsageError(f"{', '.join(extra)} apply to --quantization static; dynamic "
                             f"quantization needs no calibration data")


def _print_validation(result_lines: list[str], err: bool = False) -> None:
    for line in result_lines:
        (err_console if err else console).print(line, markup=False, highlight=False)


def _echo(line: str) -> None:
    console.print(line, markup=False, highlight=False)


def _precision_names() -> tuple[str, ...]:
    """Engine precisions, then ONNX Runtime ones (the format decides which it takes)."""
    engine = tensorrt_names()
    return (*engine, *(p for p in onnx_names() if p not in engine))


@click.command("export")
@click.argument("target")
@click.option("--to", "fmt", type=RegistryChoice(exporter_names, "format"), default="onnx",
              show_default=True, cls=LazyHelpOption,
              help_text=lambda: "; ".join(f"{s.name}: {s.description}" for s in list_exporters())
              + ".")
@click.option("--device", help="Target device profile (recorded in the manifest).")
@click.option("--opset", type=int, help="ONNX opset (default: the entry's).")
@click.option("--batch", type=BATCH, help="Fixed batch size of the ONNX model (default 1).")
@click.option("--dynamic-batch", is_flag=True, help="Export with a symbolic batch dimension.")
@click.option("--atol", type=NON_NEGATIVE,
              help="Absolute tolerance (default: the entry's; wider for fp16/int8 engines).")
@click.option("--rtol", type=NON_NEGATIVE, help="Relative tolerance (default: as --atol).")
@click.option("--precision", type=RegistryChoice(_precision_names, "precision"),
              help="fp32 (default; TensorRT: TF32 off), fp16 or int8 (calibrated on the entry's "
                   "training split unless --quantization dynamic).")
@click.option("--quantization", type=click.Choice(QUANTIZATIONS),
              help="--to onnx --precision int8: static (QDQ, calibrated; default) or dynamic.")
@click.option("--workspace", type=WORKSPACE_MIB, help="TensorRT builder workspace limit in MiB.")
@click.option("--dla-core", type=DLA_CORE,
              help="Build for this DLA core (Jetson Xavier/Orin), GPU fallback on.")
@click.option("--min-shape", multiple=True, help="Optimisation profile, trtexec syntax: "
                                                 "NAME:DIMS such as input:1x1x8x8 (repeatable).")
@click.option("--opt-shape", multiple=True, help="Shape TensorRT tunes for (alone: a fixed shape).")
@click.option("--max-shape", multiple=True, help="Largest shape the engine accepts.")
@click.option("--calibrator", type=click.Choice(CALIBRATORS),
              help="INT8 calibrator (default entropy).")
@click.option("--int8-ops", type=click.Choice(INT8_OPS),
              help="--to onnx --precision int8: quantize the layers with weights (and the ReLU "
                   "after them; the default), or every operator ONNX Runtime can (all).")
@click.option("--calib-samples", type=SAMPLES, help="INT8 calibration samples (default 512).")
@click.option("--calib-batch", type=BATCH, help="INT8 calibration batch size (default: the model's "
                                              "fixed batch, else 32).")
@click.option("--calib-data", type=click.Path(dir_okay=False),
              help="Your own .npz (arrays x, y) to calibrate with (default: the entry's dataset, "
                   "or a bundle's calibration.npz).")
@click.option("--calib-cache", type=click.Path(dir_okay=False),
              help="INT8 calibration cache: reused when it exists, written after calibrating "
                   "(default: under $EDGEKIT_HOME/tensorrt/calibration).")
@click.option("--timing-cache", type=click.Path(dir_okay=False),
              help="TensorRT timing cache (default $EDGEKIT_HOME/tensorrt/timing.cache).")
@click.option("--cuda-graph", is_flag=True,
              help="Jetson bundle: profile with CUDA graphs in the README's commands.")
@click.option("-o", "--output", type=click.Path(file_okay=False),
              help="Output folder (default ./MODEL-onnx, ./MODEL-tensorrt-PRECISION, "
                   "./MODEL-jetson, ./MODEL-nir, ./MODEL-loihi2).")
@click.option("--stream", is_flag=True,
              help="Export the model's streaming step: the state it carries between calls "
                   "(WiFi-Mamba's SSM memory) as an input, the next state as an output.")
@click.option("--force", is_flag=True,
              help="Replace the output folder even if edgekit did not write it.")
@input_option
def export(target: str, fmt: str, device: str | None, atol: float | None, rtol: float | None,
           output: str | None, inputs: tuple[str, ...], **values: Any) -> None:
    """Export TARGET and validate it against PyTorch.

    \b
    TARGET is a registry name, a checkpoint, an .onnx or .pt2 file, or your own model as
    path/to/file.py:callable or package.module:callable; for --to tensorrt and --to
    jetson-bundle (and --precision fp16/int8) also an ONNX artifact folder or a Jetson bundle.
    An ONNX file has no PyTorch source: it is checked against ONNX Runtime running the graph
    as written. TensorRT engines are built on the GPU that will run them; elsewhere make a
    Jetson bundle and build there.
    """
    spec = get_exporter(fmt)
    overrides = tuple(parse_inputs(inputs))
    resolved = resolve_target(target, inputs=overrides, batch=values["batch"] or 1)
    _check_options(spec, isinstance(resolved, ArtifactTarget), values)
    profile = None
    if device is not None:  # a target that 'profile' would refuse is not recorded either
        chosen = load_profile(device)
        check_runnable(chosen)
        profile = chosen.name
    engine = EngineBuildConfig()  # --precision of a format built from the ONNX artifact
    if spec.from_onnx:
        engine = EngineBuildConfig.from_options(
            precision=values["precision"], workspace=values["workspace"],
            dla_core=values["dla_core"], min_shapes=values["min_shape"],
            opt_shapes=values["opt_shape"], max_shapes=values["max_shape"],
            calibrator=values["calibrator"], calib_samples=values["calib_samples"],
            calib_batch=values["calib_batch"], calib_cache=values["calib_cache"],
            timing_cache=values["timing_cache"])
    precision = PrecisionConfig()  # --precision of a format made from the model: a conversion
    if not spec.from_onnx and values["precision"] not in (None, "fp32"):
        precision = PrecisionConfig(
            name=values["precision"], quantization=values["quantization"] or "static",
            calibrator=values["calibrator"] or "entropy",
            int8_ops=values["int8_ops"] or "weights",
            calib_samples=values["calib_samples"] or DEFAULT_SAMPLES,
            calib_batch=values["calib_batch"])
    elif not spec.from_onnx and values["calib_samples"] is not None:  # a model's own quantiser
        precision = PrecisionConfig(calib_samples=values["calib_samples"])
    options = ExportOptions(opset=values["opset"], batch=values["batch"],
                            dynamic_batch=values["dynamic_batch"], device=profile, atol=atol,
                            rtol=rtol, engine=engine, calib_data=values["calib_data"],
                            cuda_graph=values["cuda_graph"], force=values["force"],
                            precision=precision, stream=values["stream"], inputs=overrides)
    try:
        result = run_export(resolved, output, to=fmt, options=options, echo=_echo)
    except CheckFailed as exc:  # ValidationFailed, or a format's own check with its report
        report = getattr(exc, "report", None)
        if report is not None:
            _print_validation(report.lines(), err=True)
        raise
    _SHOW.get(fmt, _show_plugin)(spec, result, options)


def _show_onnx_format(spec: ExporterSpec, result: Any, options: ExportOptions) -> None:
    if "quantization" in result.manifest:
        _show_precision(result)
    elif result.manifest["source"].get("kind") == "onnx-file":
        _show_imported(result)
    else:
        _show_onnx(result)


def _show_plugin(spec: ExporterSpec, result: Any, options: ExportOptions) -> None:
    """A format without a view of its own here: its validation, its summary, its files."""
    validation = getattr(result, "validation", None)
    if validation is not None:
        _print_validation(validation.lines())
    for line in spec.summary(result) if spec.summary is not None else ():
        console.print(line, markup=False, highlight=False)
    folder = Path(result.folder)
    files = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    console.print(f"{spec.name}: {folder}/ ({', '.join(files)})", markup=False,
                  highlight=False)


def _show_imported(result: Any) -> None:
    m = result.manifest
    _print_validation(result.validation.lines())
    console.print(f"validated against {result.validation.against} on {result.validation.inputs}",
                  markup=False, highlight=False)
    size = sum(f["bytes"] for n, f in m["files"].items() if n.startswith("model.onnx"))
    console.print(f"opset {m['opset']}, batch {m['batch']}, {size / 1024:.1f} KiB"
                  + (" (with external data)" if m["source"]["external_data"] else "")
                  + f", {result.seconds:.1f} s")
    console.print(f"artifact: {result.folder}/ ({', '.join(m['files'])}, manifest.json)")


def _show_nir(result: Any) -> None:
    _print_validation(result.validation.lines())
    console.print(f"read back with nir, imported with SpikingJelly, compared on "
                  f"{result.validation.inputs}")
    console.print(f"artifact: {result.folder}/ ({result.manifest['model_file']}, manifest.json)")


def _show_onnx(result: Any) -> None:
    m = result.manifest
    _print_validation(result.validation.lines())
    console.print(f"validated against PyTorch on {result.validation.inputs}")
    if "stream" in m:
        console.print("streaming: " + m["stream"]["usage"], markup=False, highlight=False)
    console.print(f"opset {m['opset']}, batch {m['batch']}, {m['simplifier']}, "
                  f"{m['files'][m['model_file']]['bytes'] / 1024:.1f} KiB, "
                  f"{result.seconds:.1f} s")
    console.print(f"artifact: {result.folder}/ ({', '.join(m['files'])}, manifest.json)")


def _show_precision(result: Any) -> None:
    m = result.manifest
    _print_validation(result.validation.lines())
    _echo(f"{m['precision']}: {m['quantization']['method']}")
    _echo(f"validated against the FP32 reference on {result.validation.inputs}")
    acc = m["accuracy"]
    if acc.get("value") is not None:
        from edgekit.compare.table import format_score

        change = acc["change"] * (100 if acc["metric"] == "accuracy" else 1)
        unit = " points" if acc["metric"] == "accuracy" else ""
        console.print(f"{acc['metric']} on the {acc['dataset']} {acc['split']} split "
                      f"({acc['samples']} samples, {acc['weights']}): "
                      f"{format_score(acc['metric'], acc['value'])} vs "
                      f"{format_score(acc['metric'], acc['fp32_value'])} at fp32 "
                      f"({change:+.2f}{unit})", markup=False, highlight=False)
    else:
        console.print(f"no test score: {acc.get('note')}", markup=False, highlight=False)
    size = m["files"][m["model_file"]]["bytes"]
    console.print(f"{size / 1024:.1f} KiB ({size / m['fp32']['bytes']:.2f}x the FP32 model), "
                  f"{result.seconds:.1f} s")
    console.print(f"artifact: {result.folder}/ ({', '.join(m['files'])}, manifest.json)")


def _show_engine(result: Any) -> None:
    m = result.manifest
    trt, built = m["tensorrt"], m["built_on"]
    if result.validation is not None:
        _print_validation(result.validation.lines())
        console.print(f"validated against {result.validation.against} on "
                      f"{result.validation.inputs}")
    else:
        console.print(f"[yellow]not validated:[/yellow] {result.note}")
    cache = "reused" if trt["timing_cache"]["reused"] else "new"
    console.print(f"TensorRT {trt['version']} on {built['gpu']} "
                  f"(sm {built['compute_capability']}), "
                  f"built in {trt['build_s']:.1f} s, timing cache {cache}, "
                  f"{m['files'][m['model_file']]['bytes'] / 1024:.1f} KiB")
    console.print(f"artifact: {result.folder}/ ({', '.join(m['files'])}, manifest.json)")


def _show_bundle(result: Any, precision: str) -> None:
    console.print(f"Jetson bundle for {precision}: {result.folder}/ "
                  f"({', '.join(result.manifest['files'])}, manifest.json)")
    console.print("copy it to the Jetson and run, inside it:", highlight=False)
    for command in result.commands["edgekit"]:
        console.print(f"  {command}", markup=False, highlight=False, soft_wrap=True)
    console.print(f"or trtexec with matching flags: see {result.folder}/README.md")


# How the CLI shows each built-in format's result; any other format gets ``_show_plugin``.
_SHOW: dict[str, Callable[[ExporterSpec, Any, ExportOptions], None]] = {
    "onnx": _show_onnx_format,
    "tensorrt": lambda spec, result, options: _show_engine(result),
    "jetson-bundle": lambda spec, result, options: _show_bundle(result, options.engine.precision),
    "nir": lambda spec, result, options: _show_nir(result),
}
