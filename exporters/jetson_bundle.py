"""A Jetson bundle: one folder to copy to a Jetson and build, validate and profile there.

TensorRT engines are tied to the GPU and TensorRT version that built them, so a machine without
either (a laptop, CI) cannot make one for a Jetson. It can make everything else: the validated
ONNX model, the manifest, the FP32 reference (an input sample and PyTorch's outputs), INT8
calibration samples (and a calibration cache, where one exists) and a README with the exact
commands, edgekit's and trtexec's with matching flags, for the build that was asked for.

The bundle is itself an ONNX artifact (``format: onnx`` plus a ``jetson_bundle`` block in the
manifest), so ``edgekit export BUNDLE --to tensorrt`` on the device builds from it, calibrating
with its ``calibration.npz``, and ``edgekit validate`` / ``edgekit profile`` accept it as is.
"""
from __future__ import annotations

import datetime as _dt
import platform
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from edgekit.errors import UsageError
from edgekit.exporters.artifact import MANIFEST, Artifact, file_record, write_manifest
from edgekit.exporters.artifact_validation import check_reproduces_reference
from edgekit.exporters.calibration import (
    CALIBRATION_CACHE_FILE,
    CALIBRATION_FILE,
    CalibrationSamples,
    read_calibration_cache,
    save_samples,
)
from edgekit.exporters.reference import REFERENCE_FILE
from edgekit.exporters.tensorrt import (
    ENGINE_FILE,
    EngineBuildConfig,
    ShapeRange,
    is_dynamic,
    render_command,
    resolve_profile,
    trtexec_build_args,
    trtexec_run_args,
)
from edgekit.fileio import atomic_directory, atomic_write_text

README = "README.md"
ENGINE_DIR = "engine"
TRTEXEC_ENGINE = "trtexec.engine"
TIMING_CACHE = "timing.cache"


@dataclass(frozen=True)
class BundleResult:
    folder: Path
    manifest: dict[str, Any]
    readme: str
    commands: dict[str, list[str]]


def device_build_config(build: EngineBuildConfig) -> EngineBuildConfig:
    """The config the README's commands use: caches inside the bundle, shared with trtexec."""
    return replace(build,
                   calib_cache=Path(CALIBRATION_CACHE_FILE) if build.precision == "int8" else None,
                   timing_cache=Path(TIMING_CACHE))


def _profile_batch(ranges: tuple[ShapeRange, ...], manifest: dict[str, Any]) -> int:
    if ranges and ranges[0].opt:
        return int(ranges[0].opt[0])
    batch = manifest.get("batch")
    return batch if isinstance(batch, int) else 1


def bundle_commands(build: EngineBuildConfig, ranges: tuple[ShapeRange, ...], dynamic: bool,
                    batch: int, *, cuda_graph: bool = False,
                    has_cache: bool = False) -> dict[str, list[list[str]]]:
    """The commands, as argument lists, that build, validate and profile on the device.

    trtexec's ``--calib`` is given only where the bundle ships the cache (``has_cache``): pointed
    at a missing file, trtexec calibrates on random input, and its engine looks calibrated."""
    device = device_build_config(build)
    shape_ranges = ranges if dynamic else ()
    profile = ["edgekit", "profile", ENGINE_DIR, "--backend", "tensorrt", "--batch", str(batch)]
    if cuda_graph:
        profile.append("--cuda-graph")
    profile += ["--json", "profile.json"]
    return {
        "edgekit": [
            ["edgekit", "export", ".", "--to", "tensorrt", *device.cli_args(shape_ranges),
             "-o", ENGINE_DIR],
            ["edgekit", "validate", ENGINE_DIR, "--json", "validate.json"],
            ["edgekit", "validate", ENGINE_DIR, "--against", "onnxruntime"],
            profile,
        ],
        "trtexec": [
            trtexec_build_args(device, ranges, dynamic, onnx="model.onnx", engine=TRTEXEC_ENGINE,
                               calib_cache=(str(device.calib_cache)
                                            if device.calib_cache and has_cache else None),
                               timing_cache=str(device.timing_cache)),
            trtexec_run_args(TRTEXEC_ENGINE, ranges, dynamic, cuda_graph=cuda_graph,
                             dla_core=build.dla_core),
        ],
    }


def _describe_build(build: EngineBuildConfig, ranges: tuple[ShapeRange, ...], dynamic: bool,
                    samples: CalibrationSamples | None, batch_note: str) -> list[str]:
    lines = [f"- precision: **{build.precision}**"
             + (" (true FP32: TF32 off)" if build.precision == "fp32" else "")]
    if build.precision == "int8" and samples is not None:
        lines.append(f"- INT8 calibration: {build.calibrator} calibrator, {samples.count} samples "
                     f"from {samples.origin}, {batch_note}")
    for r in ranges:
        if dynamic:
            lines.append(f"- shape range of `{r.name}`: min {r.spec('min').split(':')[-1]}, "
                         f"opt {r.spec('opt').split(':')[-1]}, max {r.spec('max').split(':')[-1]}")
        else:
            lines.append(f"- `{r.name}`: fixed shape {r.spec('opt').split(':')[-1]}")
    if build.workspace_mib is not None:
        lines.append(f"- builder workspace: {build.workspace_mib} MiB")
    if build.dla_core is not None:
        lines.append(f"- DLA core {build.dla_core}, layers the DLA cannot run fall back to the GPU")
    return lines


def _stream_note(manifest: dict[str, Any]) -> str:
    """A streaming model's contract, where the artifact is one (``export --stream``)."""
    stream = manifest.get("stream")
    if not stream:
        return ""
    return (f"\nThis is a **streaming** model: {stream['usage']} "
            f"({stream['description']}). `{REFERENCE_FILE}` holds a carried state, so the "
            f"checks below exercise it.\n")


# Over 8 parameters: every fact the bundle's README states, each computed once by the caller
def render_readme(name: str, manifest: dict[str, Any], build: EngineBuildConfig,
                  ranges: tuple[ShapeRange, ...], dynamic: bool,
                  samples: CalibrationSamples | None, has_cache: bool,
                  commands: dict[str, list[list[str]]], batch_note: str) -> str:
    from edgekit import __version__

    validation = manifest.get("validation", {})
    max_abs = max((o.get("max_abs", 0.0) for o in validation.get("outputs", [])), default=0.0)
    ref = manifest.get("reference", {})
    files = [
        ("model.onnx", f"the ONNX model (opset {manifest.get('opset')}, batch "
                       f"{manifest.get('batch')}), validated against PyTorch "
                       f"(max abs error {max_abs:.2g})"),
        (MANIFEST, "source model and config, inputs and outputs, SHA-256 of every file"),
        (REFERENCE_FILE, f"an input sample (batch {ref.get('batch', '?')}) and PyTorch's FP32 "
                         f"outputs on it: every engine, fp32, fp16 or int8, is judged against it"),
    ]
    if samples is not None:
        files.append((CALIBRATION_FILE, f"{samples.count} INT8 calibration samples from "
                                        f"{samples.origin}"))
    if has_cache:
        files.append((CALIBRATION_CACHE_FILE, "an INT8 calibration cache: the build reuses it "
                                              "instead of calibrating"))
    table = ["| file | what |", "|---|---|"] + [f"| `{f}` | {w} |" for f, w in files]
    edgekit_cmds = "\n".join(render_command(c) for c in commands["edgekit"])
    trtexec_cmds = "\n".join(render_command(c) for c in commands["trtexec"])
    int8_note = ""
    if build.precision == "int8" and has_cache:
        int8_note = (
            "\ntrtexec cannot calibrate from data: its `--calib` reads the calibration cache "
            f"bundled here (`{CALIBRATION_CACHE_FILE}`), so its engine has the same INT8 scales "
            "as edgekit's. Both need TensorRT 8.5-10.x (JetPack 5.1 or 6): TensorRT 11 removed "
            "calibrated INT8 and the fp16 flag.\n")
    elif build.precision == "int8":
        int8_note = (
            "\n**This bundle has no calibration cache, and trtexec cannot calibrate from data.** "
            "The trtexec build above is therefore not calibrated: TensorRT gives every tensor a "
            "dummy (placeholder) dynamic range, so the engine's speed is representative but its "
            "outputs are meaningless; do not judge its accuracy. For a calibrated INT8 engine, "
            "build with edgekit (section 2), which calibrates on the entry's data in "
            f"`{CALIBRATION_FILE}` and writes `{CALIBRATION_CACHE_FILE}`; after that, trtexec "
            f"can reuse those scales if you add `--calib` pointing at `{CALIBRATION_CACHE_FILE}`. "
            "Never point `--calib` at a file that does not exist: trtexec then calibrates on "
            "random input. Or make the bundle with `--calib-cache` so that it ships a cache. "
            "Both need TensorRT 8.5-10.x (JetPack 5.1 or 6): TensorRT 11 removed calibrated INT8 "
            "and the fp16 flag.\n")
    elif build.precision == "fp16":
        int8_note = ("\n`--fp16` needs TensorRT 8.5-10.x (JetPack 5.1 or 6); TensorRT 11 builds "
                     "strongly typed networks only.\n")
    created = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"""# {name}: Jetson bundle

Everything needed to build, validate and profile a TensorRT engine of **{name}** on a Jetson.
Made by edgekit {__version__} on {platform.node()} ({platform.machine()}), {created}. A TensorRT
engine runs only on the GPU model and TensorRT version that built it, so it is built there, from
`model.onnx`.

{chr(10).join(table)}

The build asked for:

{chr(10).join(_describe_build(build, ranges, dynamic, samples, batch_note))}
{_stream_note(manifest)}
## 1. Install on the Jetson (once)

JetPack ships TensorRT with its Python bindings (`python3 -c "import tensorrt"`). edgekit drives
the GPU through torch, so install NVIDIA's CUDA build of torch for your JetPack first, then
edgekit (Python 3.10 or newer) with `pip install "edgekit[gpu]"` (or `pip install -e ".[gpu]"` in
a checkout). Copy this folder to the Jetson and run the commands below inside it.

## 2. Build, validate and profile with edgekit

```sh
{edgekit_cmds}
```

The build writes the engine artifact to `{ENGINE_DIR}/` (`{ENGINE_FILE}`, its ONNX model, the
reference and a manifest that records the TensorRT version, GPU and build time) and checks it
against `{REFERENCE_FILE}`; `edgekit validate` prints max, median, p90, p95 and p99 errors
(nearest-rank percentiles) per output and exits 1 beyond tolerance. `edgekit profile` times the
host-to-device copy, the engine and the device-to-host copy apart with CUDA events and reads the
INA3221 power rails for energy.

## 3. Or with trtexec

trtexec lives in `/usr/src/tensorrt/bin/` on JetPack.

```sh
{trtexec_cmds}
```
{int8_note}"""


def check_onnx_model(path: Path) -> None:
    """Refuse a model file that is not a valid ONNX model, before it is copied to the device.

    The artifact's SHA-256 catches a file changed after export; this catches one whose manifest
    was rewritten with it (and saves a failed engine build on the Jetson).
    """
    if not path.is_file():
        raise UsageError(f"{path.parent} has no {path.name}", hint="export it again")
    import onnx

    try:
        onnx.checker.check_model(str(path))
    except Exception as exc:  # noqa: BLE001 - onnx raises protobuf and checker errors alike
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"{path} is not a valid ONNX model ({first})",
                         hint="export it again") from exc


def write_jetson_bundle(artifact: Artifact, out_dir: str | Path, build: EngineBuildConfig, *,
                        calibration: CalibrationSamples | None = None,
                        cuda_graph: bool = False, force: bool = False) -> BundleResult:
    """Write the bundle for ``artifact`` (an ONNX artifact) and the requested ``build``."""
    if artifact.format != "onnx":
        raise UsageError(f"{artifact.folder} is a {artifact.format} artifact; a Jetson bundle is "
                         f"made from a model, a checkpoint or an ONNX artifact")
    if build.precision == "int8" and calibration is None:
        raise UsageError("an int8 bundle needs calibration samples")
    m = artifact.manifest
    dynamic = is_dynamic(m["inputs"])
    ranges = resolve_profile(build.shapes, m["inputs"])
    batch_note = ""
    if build.precision == "int8":
        from edgekit.exporters.tensorrt import calibration_shapes

        batch, _ = calibration_shapes(ranges, m["inputs"], calibration, build.calib_batch)
        batch_note = f"batches of {batch}"
    cache_data = read_calibration_cache(build.calib_cache) if build.precision == "int8" else None
    if build.calib_cache is not None and build.precision == "int8" and cache_data is None:
        raise UsageError(f"calibration cache {build.calib_cache} does not exist",
                         hint="drop --calib-cache: the device writes one when it calibrates")
    commands = bundle_commands(build, ranges, dynamic, _profile_batch(ranges, m),
                               cuda_graph=cuda_graph, has_cache=cache_data is not None)
    check_onnx_model(artifact.folder / "model.onnx")
    check_reproduces_reference(artifact)  # the graph is the model the bundle's README names
    name = artifact.source_name
    with atomic_directory(out_dir, inputs=[artifact.folder], force=force) as staging:
        files: dict[str, Any] = {}
        for fname in ("model.onnx", REFERENCE_FILE):
            if not (artifact.folder / fname).is_file():
                raise UsageError(f"{artifact.folder} has no {fname}",
                                 hint="export it again with this edgekit")
            shutil.copy2(artifact.folder / fname, staging / fname)
            files[fname] = file_record(staging / fname)
        data_file = "model.onnx.data"  # an imported ONNX file's external weights travel too
        if data_file in artifact.manifest["files"]:
            shutil.copy2(artifact.folder / data_file, staging / data_file)
            files[data_file] = file_record(staging / data_file)
        if build.precision == "int8":
            save_samples(staging / CALIBRATION_FILE, calibration)
            files[CALIBRATION_FILE] = file_record(staging / CALIBRATION_FILE)
        if cache_data is not None:
            (staging / CALIBRATION_CACHE_FILE).write_bytes(cache_data)
            files[CALIBRATION_CACHE_FILE] = file_record(staging / CALIBRATION_CACHE_FILE)
        readme = render_readme(name, m, build, ranges, dynamic,
                               calibration if build.precision == "int8" else None,
                               cache_data is not None, commands, batch_note)
        atomic_write_text(staging / README, readme)
        files[README] = file_record(staging / README)
        manifest = {
            **m,
            "files": files,
            "jetson_bundle": {
                "build": device_build_config(build).to_dict(),
                "dynamic": dynamic,
                "profile": [r.to_dict() for r in ranges],
                "calibration": (calibration.record()
                                if calibration is not None and build.precision == "int8" else None),
                "calibration_cache": CALIBRATION_CACHE_FILE if cache_data is not None else None,
                "cuda_graph": cuda_graph,
                "commands": {k: [render_command(c) for c in v] for k, v in commands.items()},
                "from": str(artifact.folder),
            },
        }
        write_manifest(staging, manifest)
    return BundleResult(Path(out_dir), manifest, readme,
                        {k: [render_command(c) for c in v] for k, v in commands.items()})
