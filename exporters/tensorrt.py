"""ONNX -> TensorRT engine, built on the device that will run it (engines are not portable).

``EngineBuildConfig`` is plain data: precision, workspace, DLA core, the optimisation profile
(``--min-shape input:1x1x8x8`` in trtexec's syntax), the INT8 calibrator and the cache paths. It
is validated when it is made, so a bad flag is one clear UsageError before anything is built.
The same config turns into TensorRT builder calls (``configure_builder``) and into the matching
``trtexec`` command line (``trtexec_build_args``), so the two never disagree.

Precisions follow trtexec: ``fp32`` is true FP32 (TF32 off, as ``--noTF32``), ``fp16`` and
``int8`` set the builder flag and let TensorRT fall back to wider types per layer. INT8 is
calibrated from real samples (``calibration.py``) with a calibration cache, which is the legacy
"implicit quantization" path of TensorRT 8.5-10.x (JetPack 5.1 and 6). TensorRT 11 removed it
along with the fp16 flag; there ``--precision fp32`` still builds, and fp16/int8 say so.

The timing cache (``$EDGEKIT_HOME/tensorrt/timing.cache``) is shared by every build, so the second
build of a model, or of a similar one, skips most kernel timing.
"""
from __future__ import annotations

import platform
import shlex
import shutil
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgekit.backends.tensorrt_backend import (
    require_cuda_gpu,
    require_tensorrt,
    tensorrt_version_tuple,
)
from edgekit.errors import CheckFailed, UnknownNameError, UsageError
from edgekit.exporters.artifact import (
    MANIFEST_SCHEMA,
    Artifact,
    file_record,
    write_manifest,
)
from edgekit.exporters.calibration import (
    CALIBRATION_CACHE_FILE,
    CALIBRATORS,
    DEFAULT_BATCH,
    DEFAULT_SAMPLES,
    CalibrationBatcher,
    CalibrationSamples,
    default_cache_path,
    make_trt_calibrator,
)
from edgekit.exporters.reference import REFERENCE_FILE, default_tolerance, load_reference
from edgekit.exporters.validate import ValidationFailed, ValidationReport, compare_outputs
from edgekit.fileio import atomic_directory, atomic_write_bytes
from edgekit.paths import edgekit_home
from edgekit.precisions import get_precision, tensorrt_names
from edgekit.provenance import provenance

ENGINE_FILE = "model.engine"
ONNX_FILE = "model.onnx"
# A dynamic dimension that no --min/--opt/--max-shape names gets this range (trtexec would fix it
# at 1; a range keeps the engine usable at other batch sizes).
DEFAULT_DYNAMIC_RANGE = (1, 1, 32)
LAST_IMPLICIT_PRECISION_MAJOR = 10  # TensorRT 11 removed the fp16/int8 flags and calibrators


# -- shapes --------------------------------------------------------------------------------------


def _fmt_dims(dims: Sequence[int]) -> str:
    return "x".join(str(d) for d in dims)


def parse_shape(text: str, flag: str = "--opt-shape") -> tuple[str, tuple[int, ...]]:
    """``"input:1x1x8x8"`` -> ("input", (1, 1, 8, 8)); trtexec's syntax (name may be quoted)."""
    name, sep, dims = text.strip().rpartition(":")
    name = name.strip().strip("'\"")
    if not sep or not name or not dims:
        raise UsageError(f"{flag} '{text}': expected NAME:DIMS, for example input:1x1x8x8")
    from edgekit.inputs import parse_dims

    return name, parse_dims(dims, f"{flag} '{text}'", "input:1x1x8x8")


def parse_shapes(specs: Iterable[str], flag: str) -> dict[str, tuple[int, ...]]:
    """Repeated options and comma-separated lists (``a:1x3,b:1x5``) alike; names once each."""
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        for part in spec.split(","):
            if not part.strip():
                continue
            name, shape = parse_shape(part, flag)
            if name in shapes:
                raise UsageError(f"{flag} names input '{name}' twice")
            shapes[name] = shape
    return shapes


def _quote_name(name: str) -> str:
    return f"'{name}'" if any(c in name for c in ":, ") else name


@dataclass(frozen=True)
class ShapeRange:
    """One input's optimisation-profile range; min <= opt <= max in every dimension."""

    name: str
    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]

    def __post_init__(self) -> None:
        if not len(self.min) == len(self.opt) == len(self.max):
            raise UsageError(f"input '{self.name}': --min-shape, --opt-shape and --max-shape "
                             f"have different numbers of dimensions "
                             f"({_fmt_dims(self.min)}, {_fmt_dims(self.opt)}, "
                             f"{_fmt_dims(self.max)})")
        if not all(lo <= mid <= hi
                   for lo, mid, hi in zip(self.min, self.opt, self.max, strict=False)):
            raise UsageError(f"input '{self.name}': need min <= opt <= max in every dimension, got "
                             f"{_fmt_dims(self.min)}, {_fmt_dims(self.opt)}, {_fmt_dims(self.max)}")

    @property
    def fixed(self) -> bool:
        return self.min == self.opt == self.max

    def spec(self, which: str) -> str:
        """trtexec's ``name:dims`` for "min", "opt" or "max"."""
        return f"{_quote_name(self.name)}:{_fmt_dims(getattr(self, which))}"

    def contains(self, shape: Sequence[int]) -> bool:
        return len(shape) == len(self.min) and all(
            lo <= d <= hi for lo, d, hi in zip(self.min, shape, self.max, strict=False))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "min": list(self.min), "opt": list(self.opt),
                "max": list(self.max)}


def shape_ranges(min_shapes: Iterable[str] = (), opt_shapes: Iterable[str] = (),
                 max_shapes: Iterable[str] = ()) -> tuple[ShapeRange, ...]:
    """Ranges from the three options: all three for an input, or ``--opt-shape`` alone (then
    min = max = opt, as trtexec does)."""
    lo, mid, hi = (parse_shapes(min_shapes, "--min-shape"), parse_shapes(opt_shapes, "--opt-shape"),
                   parse_shapes(max_shapes, "--max-shape"))
    ranges = []
    for name in dict.fromkeys([*lo, *mid, *hi]):
        given = [name in lo, name in mid, name in hi]
        if given == [False, True, False]:
            ranges.append(ShapeRange(name, mid[name], mid[name], mid[name]))
        elif all(given):
            ranges.append(ShapeRange(name, lo[name], mid[name], hi[name]))
        else:
            raise UsageError(f"input '{name}': give --min-shape, --opt-shape and --max-shape "
                             f"together, or --opt-shape alone")
    return tuple(ranges)


def _dynamic(dim: Any) -> bool:
    return not isinstance(dim, int) or dim <= 0


def is_dynamic(inputs: Sequence[dict[str, Any]]) -> bool:
    """Whether any model input (manifest records: name, shape, dtype) has a dynamic dimension."""
    return any(_dynamic(d) for i in inputs for d in i["shape"])


def resolve_profile(ranges: Sequence[ShapeRange],
                    inputs: Sequence[dict[str, Any]]) -> tuple[ShapeRange, ...]:
    """One range per model input: the given ones checked against the ONNX model's shapes, the
    others fixed at their static shape (dynamic dimensions: ``DEFAULT_DYNAMIC_RANGE``)."""
    names = [i["name"] for i in inputs]
    given = {r.name: r for r in ranges}
    for name in given:
        if name not in names:
            raise UnknownNameError("model input", name, names)
    resolved = []
    for inp in inputs:
        dims = list(inp["shape"])
        r = given.get(inp["name"])
        if r is None:
            lo, mid, hi = (tuple(DEFAULT_DYNAMIC_RANGE[k] if _dynamic(d) else int(d) for d in dims)
                           for k in range(3))
            resolved.append(ShapeRange(inp["name"], lo, mid, hi))
            continue
        if len(r.min) != len(dims):
            raise UsageError(f"input '{r.name}' has {len(dims)} dimensions in the ONNX model; "
                             f"the shape range gives {len(r.min)} ({_fmt_dims(r.opt)})")
        for i, d in enumerate(dims):
            if not _dynamic(d) and not r.min[i] == r.opt[i] == r.max[i] == d:
                raise UsageError(
                    f"input '{r.name}' dimension {i} is fixed at {d} in the ONNX model, but the "
                    f"shape range asks for {r.min[i]}..{r.max[i]}",
                    hint="export the ONNX model with --dynamic-batch" if i == 0 else None)
        resolved.append(r)
    return tuple(resolved)


# -- the build config ----------------------------------------------------------------------------


def default_timing_cache() -> Path:
    return edgekit_home() / "tensorrt" / "timing.cache"


@dataclass(frozen=True)
class EngineBuildConfig:
    """Everything that decides how an engine is built; plain data, validated on creation."""

    precision: str = "fp32"  # fp32 (TF32 off) | fp16 | int8 (calibrated)
    workspace_mib: int | None = None  # builder workspace pool limit; None: TensorRT's default
    dla_core: int | None = None  # run on this DLA core (Jetson Xavier/Orin), GPU fallback on
    shapes: tuple[ShapeRange, ...] = ()  # optimisation-profile ranges given by the user
    calibrator: str = "entropy"  # int8: entropy (IInt8EntropyCalibrator2) | minmax
    calib_samples: int = DEFAULT_SAMPLES  # int8: how many calibration samples
    calib_batch: int | None = None  # int8: batch size; None: the model's fixed batch, else 32
    calib_cache: Path | None = None  # int8: cache file; None: keyed under $EDGEKIT_HOME
    timing_cache: Path | None = None  # None: $EDGEKIT_HOME/tensorrt/timing.cache

    def __post_init__(self) -> None:
        if self.precision not in tensorrt_names():
            raise UnknownNameError("precision", self.precision, tensorrt_names())
        if self.workspace_mib is not None and self.workspace_mib < 1:
            raise UsageError(f"--workspace must be at least 1 MiB, got {self.workspace_mib}")
        if self.dla_core is not None:
            if self.dla_core < 0:
                raise UsageError(f"--dla-core must be 0 or more, got {self.dla_core}")
            if self.precision == "fp32":
                raise UsageError("the DLA runs fp16 or int8 only", hint="add --precision fp16")
        if self.calibrator not in CALIBRATORS:
            raise UnknownNameError("calibrator", self.calibrator, CALIBRATORS)
        if self.calib_samples < 1:
            raise UsageError(f"--calib-samples must be at least 1, got {self.calib_samples}")
        if self.calib_batch is not None and self.calib_batch < 1:
            raise UsageError(f"--calib-batch must be at least 1, got {self.calib_batch}")
        names = [r.name for r in self.shapes]
        if len(set(names)) != len(names):
            raise UsageError("a shape range names the same input twice")

    @classmethod
    def from_options(cls, *, precision: str | None = None, workspace: int | None = None,
                     dla_core: int | None = None, min_shapes: Iterable[str] = (),
                     opt_shapes: Iterable[str] = (), max_shapes: Iterable[str] = (),
                     calibrator: str | None = None, calib_samples: int | None = None,
                     calib_batch: int | None = None, calib_cache: str | Path | None = None,
                     timing_cache: str | Path | None = None) -> EngineBuildConfig:
        """From CLI-style values (strings for shapes; None for "not given")."""
        return cls(precision=precision or "fp32", workspace_mib=workspace, dla_core=dla_core,
                   shapes=shape_ranges(min_shapes, opt_shapes, max_shapes),
                   calibrator=calibrator or "entropy",
                   calib_samples=DEFAULT_SAMPLES if calib_samples is None else calib_samples,
                   calib_batch=calib_batch,
                   calib_cache=Path(calib_cache) if calib_cache else None,
                   timing_cache=Path(timing_cache) if timing_cache else None)

    @property
    def timing_cache_path(self) -> Path:
        return self.timing_cache or default_timing_cache()

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"precision": self.precision, "workspace_mib": self.workspace_mib,
                               "dla_core": self.dla_core,
                               "shapes": [r.to_dict() for r in self.shapes],
                               "timing_cache": str(self.timing_cache_path)}
        if self.precision == "int8":
            doc.update({"calibrator": self.calibrator, "calib_samples": self.calib_samples,
                        "calib_batch": self.calib_batch,
                        "calib_cache": str(self.calib_cache) if self.calib_cache else None})
        return doc

    def cli_args(self, ranges: Sequence[ShapeRange] = ()) -> list[str]:
        """The ``edgekit export ... --to tensorrt`` options that rebuild with this config."""
        args = ["--precision", self.precision]
        if self.workspace_mib is not None:
            args += ["--workspace", str(self.workspace_mib)]
        if self.dla_core is not None:
            args += ["--dla-core", str(self.dla_core)]
        for r in ranges or self.shapes:
            args += ["--min-shape", r.spec("min"), "--opt-shape", r.spec("opt"),
                     "--max-shape", r.spec("max")]
        if self.precision == "int8":
            args += ["--calibrator", self.calibrator, "--calib-samples", str(self.calib_samples)]
            if self.calib_batch is not None:
                args += ["--calib-batch", str(self.calib_batch)]
            if self.calib_cache is not None:
                args += ["--calib-cache", str(self.calib_cache)]
        if self.timing_cache is not None:
            args += ["--timing-cache", str(self.timing_cache)]
        return args


def calibration_shapes(ranges: Sequence[ShapeRange], inputs: Sequence[dict[str, Any]],
                       samples: CalibrationSamples,
                       calib_batch: int | None) -> tuple[int, dict[str, tuple[int, ...]]]:
    """The calibration batch size and each input's calibration shape.

    A model with a fixed batch calibrates at that batch; a dynamic one at ``calib_batch`` (32 by
    default), through a separate calibration profile, so it need not lie in the engine's range.
    """
    fixed = {int(i["shape"][0]) for i in inputs if i["shape"] and not _dynamic(i["shape"][0])}
    if len(fixed) > 1:
        raise UsageError(f"model inputs have different fixed batch sizes {sorted(fixed)}")
    if fixed:
        (batch,) = fixed
        if calib_batch is not None and calib_batch != batch:
            raise UsageError(f"--calib-batch {calib_batch}: the ONNX model has a fixed batch of "
                             f"{batch}", hint="drop --calib-batch or export with --dynamic-batch")
    else:
        batch = calib_batch or DEFAULT_BATCH
    shapes = {}
    for inp in inputs:
        if inp["name"] not in samples.arrays:
            raise UsageError(f"calibration data has no input '{inp['name']}'",
                             hint=f"it has {', '.join(samples.arrays)}")
        sample = tuple(samples.arrays[inp["name"]].shape[1:])
        dims = list(inp["shape"])[1:]
        if len(sample) != len(dims) or any(not _dynamic(d) and d != s
                                           for d, s in zip(dims, sample, strict=False)):
            raise UsageError(f"calibration samples of '{inp['name']}' have shape "
                             f"{_fmt_dims(sample)}; the model takes {_fmt_dims(inp['shape'])}")
        shapes[inp["name"]] = (batch, *sample)
    return batch, shapes


# -- trtexec -------------------------------------------------------------------------------------


def trtexec_build_args(config: EngineBuildConfig, ranges: Sequence[ShapeRange] = (),
                       dynamic: bool = False, *, onnx: str = ONNX_FILE, engine: str = ENGINE_FILE,
                       calib_cache: str | None = None,
                       timing_cache: str | None = None) -> list[str]:
    """The ``trtexec`` command that builds the same engine as ``build_engine`` with ``config``.

    trtexec cannot calibrate from data: for int8 it reads the cache (``--calib``) that an edgekit
    build wrote; without one it uses placeholder dynamic ranges (fine for speed, meaningless for
    accuracy). Pass ``calib_cache`` only for a file that exists: pointed at a missing one, trtexec
    calibrates on random input.
    """
    args = ["trtexec", f"--onnx={onnx}", f"--saveEngine={engine}"]
    args.append(get_precision(config.precision).trtexec_flag)
    if config.precision == "int8" and calib_cache:
        args.append(f"--calib={calib_cache}")
    if dynamic and ranges:
        for flag, which in (("--minShapes", "min"), ("--optShapes", "opt"), ("--maxShapes", "max")):
            args.append(f"{flag}=" + ",".join(r.spec(which) for r in ranges))
    if config.workspace_mib is not None:
        args.append(f"--memPoolSize=workspace:{config.workspace_mib}M")
    if config.dla_core is not None:
        args += [f"--useDLACore={config.dla_core}", "--allowGPUFallback"]
    if timing_cache:
        args.append(f"--timingCacheFile={timing_cache}")
    return args


def trtexec_run_args(engine: str = ENGINE_FILE, ranges: Sequence[ShapeRange] = (),
                     dynamic: bool = False, *, cuda_graph: bool = False,
                     dla_core: int | None = None, warmup_ms: int = 200,
                     duration_s: int = 3) -> list[str]:
    """The ``trtexec`` command that profiles an engine at each input's opt shape."""
    args = ["trtexec", f"--loadEngine={engine}"]
    if dynamic and ranges:
        args.append("--shapes=" + ",".join(r.spec("opt") for r in ranges))
    if dla_core is not None:
        args.append(f"--useDLACore={dla_core}")
    args += [f"--warmUp={warmup_ms}", f"--duration={duration_s}"]
    if cuda_graph:
        args.append("--useCudaGraph")
    return args


def render_command(args: Sequence[str]) -> str:
    return shlex.join(args)


# -- TensorRT builder calls ----------------------------------------------------------------------


def check_precision_supported(tensorrt_version: str, precision: str) -> None:
    if (precision != "fp32"
            and tensorrt_version_tuple(tensorrt_version)[0] > LAST_IMPLICIT_PRECISION_MAJOR):
        raise UsageError(
            f"TensorRT {tensorrt_version} builds strongly typed networks only: --precision "
            f"{precision} needs the builder flags and INT8 calibrators that TensorRT 11 removed",
            hint="use TensorRT 10 (pip install 'tensorrt>=10,<11'; JetPack 6 ships 10.3) "
                 "or --precision fp32")


def network_flags(trt: Any) -> int:
    """Explicit batch: a flag before TensorRT 10, the only mode (flags 0) from 10 on."""
    if tensorrt_version_tuple(trt.__version__)[0] >= 10:
        return 0
    return 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)


def configure_builder(trt: Any, builder: Any, config: Any, build: EngineBuildConfig,
                      ranges: Sequence[ShapeRange], dynamic: bool, *,
                      calibrator: Any = None,
                      calib_shapes: dict[str, tuple[int, ...]] | None = None,
                      timing_cache: bytes = b"") -> dict[str, Any]:
    """Apply ``build`` to a TensorRT builder config; returns what was applied, for the manifest.

    ``trt`` is the tensorrt module (a stand-in in tests), so this mapping is tested without one.
    """
    check_precision_supported(trt.__version__, build.precision)
    applied: dict[str, Any] = {"precision": build.precision}
    if build.workspace_mib is not None:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, build.workspace_mib << 20)
        applied["workspace_bytes"] = build.workspace_mib << 20
    flag = get_precision(build.precision).builder_flag
    if flag is not None:
        config.set_flag(getattr(trt.BuilderFlag, flag))
    elif hasattr(trt.BuilderFlag, "TF32"):
        config.clear_flag(trt.BuilderFlag.TF32)  # TF32 is on by default on Ampere and newer
        applied["tf32"] = False
    if build.dla_core is not None:
        cores = int(builder.num_DLA_cores)
        if build.dla_core >= cores:
            raise UsageError(f"--dla-core {build.dla_core}: this device has {cores} DLA core"
                             f"{'' if cores == 1 else 's'}",
                             hint="DLA cores exist on Jetson Xavier and Orin (AGX, NX), not on "
                                  "the Orin Nano or discrete GPUs" if cores == 0 else None)
        config.default_device_type = trt.DeviceType.DLA
        config.DLA_core = build.dla_core
        config.set_flag(trt.BuilderFlag.GPU_FALLBACK)
        applied["dla"] = {"core": build.dla_core, "gpu_fallback": True}
    if dynamic:
        profile = builder.create_optimization_profile()
        for r in ranges:
            profile.set_shape(r.name, r.min, r.opt, r.max)
        config.add_optimization_profile(profile)
        applied["profile"] = [r.to_dict() for r in ranges]
    if calibrator is not None:
        config.int8_calibrator = calibrator
        applied["calibrator"] = build.calibrator
        if dynamic and calib_shapes:
            cal_profile = builder.create_optimization_profile()
            for name, shape in calib_shapes.items():
                cal_profile.set_shape(name, shape, shape, shape)
            config.set_calibration_profile(cal_profile)
            applied["calibration_profile"] = {k: list(v) for k, v in calib_shapes.items()}
    cache = config.create_timing_cache(timing_cache)
    config.set_timing_cache(cache, ignore_mismatch=False)
    applied["timing_cache_loaded_bytes"] = len(timing_cache)
    return applied


def _collecting_logger(trt: Any) -> Any:
    """A TensorRT logger that keeps warnings and errors, so a failure is one line, not a log."""

    class Logger(trt.ILogger):
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.messages: list[tuple[Any, str]] = []

        def log(self, severity: Any, msg: str) -> None:
            if int(severity) <= int(trt.ILogger.Severity.WARNING):
                self.messages.append((int(severity), msg))

        def errors(self) -> list[str]:
            return [m for s, m in self.messages if s <= int(trt.ILogger.Severity.ERROR)]

    return Logger()


@dataclass
class BuiltEngine:
    engine: bytes
    seconds: float
    tensorrt_version: str
    gpu: dict[str, Any]
    applied: dict[str, Any]
    timing_cache: dict[str, Any]
    calibration: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)


def build_engine(onnx_path: Path, build: EngineBuildConfig, ranges: Sequence[ShapeRange],
                 dynamic: bool, *, batcher: CalibrationBatcher | None = None,
                 calib_shapes: dict[str, tuple[int, ...]] | None = None,
                 calib_cache: Path | None = None) -> BuiltEngine:
    """Parse ``onnx_path`` and build a serialized engine on this machine's GPU."""
    trt = require_tensorrt()
    gpu = require_cuda_gpu()
    check_precision_supported(trt.__version__, build.precision)
    logger = _collecting_logger(trt)
    builder = trt.Builder(logger)
    network = builder.create_network(network_flags(trt))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        first = errors[0].splitlines()[0] if errors else "unknown error"
        raise CheckFailed(f"TensorRT's ONNX parser rejected {onnx_path.name}: {first}")
    config = builder.create_builder_config()
    timing_path = build.timing_cache_path
    cached = timing_path.read_bytes() if timing_path.is_file() else b""
    calibrator = None
    if build.precision == "int8":
        if batcher is None:
            raise UsageError("--precision int8 needs calibration samples")
        calibrator = make_trt_calibrator(trt, build.calibrator, batcher, calib_cache)
    applied = configure_builder(trt, builder, config, build, ranges, dynamic,
                                calibrator=calibrator, calib_shapes=calib_shapes,
                                timing_cache=cached)
    started = time.perf_counter()
    serialized = builder.build_serialized_network(network, config)
    seconds = time.perf_counter() - started
    if serialized is None:
        errors = logger.errors()
        raise CheckFailed(f"TensorRT could not build a {build.precision} engine from "
                          f"{onnx_path.name}: "
                          f"{errors[-1].splitlines()[0] if errors else 'no reason given'}")
    saved = bytes(config.get_timing_cache().serialize())
    atomic_write_bytes(timing_path, saved)
    calibration = None
    if calibrator is not None:
        calibration = {"calibrator": build.calibrator, "cache": str(calib_cache),
                       "cache_reused": calibrator.cache_read,
                       "batches_run": calibrator.batches_served, **batcher.record()}
    return BuiltEngine(bytes(serialized), seconds, trt.__version__, gpu, applied,
                       {"path": str(timing_path), "loaded_bytes": len(cached),
                        "saved_bytes": len(saved), "reused": bool(cached)},
                       calibration, [m for _, m in logger.messages][:20])


# -- the engine artifact -------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineExportResult:
    folder: Path
    manifest: dict[str, Any]
    validation: ValidationReport | None
    seconds: float
    note: str | None = None  # why validation was skipped


def _validate_engine(engine_path: Path, artifact: Artifact, ranges: Sequence[ShapeRange],
                     atol: float, rtol: float) -> tuple[ValidationReport | None, str | None]:
    from edgekit.backends.tensorrt_backend import TensorRTRunner

    ref_path = artifact.folder / REFERENCE_FILE
    if not ref_path.is_file():
        return None, f"{artifact.folder} has no {REFERENCE_FILE} (exported by an older edgekit)"
    reference = load_reference(ref_path)
    by_name = {r.name: r for r in ranges}
    outside = [n for n, a in reference.inputs.items()
               if n in by_name and not by_name[n].contains(a.shape)]
    if outside:
        return None, (f"the reference input ({_fmt_dims(reference.inputs[outside[0]].shape)}) lies "
                      f"outside the engine's shape range")
    with TensorRTRunner(engine_path) as runner:
        actual = runner.infer(reference.inputs)
    return compare_outputs(actual, reference.outputs, atol, rtol, against="reference",
                           inputs=f"{REFERENCE_FILE} (batch {reference.batch})"), None


def export_tensorrt(artifact: Artifact, out_dir: str | Path, build: EngineBuildConfig, *,
                    calibration: CalibrationSamples | None = None, atol: float | None = None,
                    rtol: float | None = None, device: str | None = None,
                    onnx_origin: str | None = None, force: bool = False) -> EngineExportResult:
    """Build an engine from an ONNX artifact into ``out_dir`` and validate it against the FP32
    reference the artifact carries; raises ValidationFailed beyond tolerance (nothing is left)."""
    if artifact.format != "onnx":
        raise UsageError(f"{artifact.folder} is a {artifact.format} artifact; TensorRT engines "
                         f"are built from an ONNX artifact or a Jetson bundle")
    trt = require_tensorrt()
    require_cuda_gpu()
    check_precision_supported(trt.__version__, build.precision)
    started = time.perf_counter()
    m = artifact.manifest
    inputs = m["inputs"]
    dynamic = is_dynamic(inputs)
    ranges = resolve_profile(build.shapes, inputs)
    onnx_sha = m["files"][m["model_file"]]["sha256"]
    batcher = calib_shapes = calib_cache = None
    if build.precision == "int8":
        if calibration is None:
            raise UsageError("--precision int8 needs calibration samples")
        batch, calib_shapes = calibration_shapes(ranges, inputs, calibration, build.calib_batch)
        batcher = CalibrationBatcher(calibration, batch)
        calib_cache = build.calib_cache or default_cache_path(onnx_sha, build.calibrator,
                                                               calibration, batch)
    default_atol, default_rtol, _ = default_tolerance(m, build.precision)
    atol = default_atol if atol is None else atol
    rtol = default_rtol if rtol is None else rtol
    with atomic_directory(out_dir, inputs=[artifact.folder], force=force) as staging:
        shutil.copy2(artifact.model_path, staging / ONNX_FILE)
        files = {ONNX_FILE: file_record(staging / ONNX_FILE)}
        if (artifact.folder / REFERENCE_FILE).is_file():
            shutil.copy2(artifact.folder / REFERENCE_FILE, staging / REFERENCE_FILE)
            files[REFERENCE_FILE] = file_record(staging / REFERENCE_FILE)
        built = build_engine(staging / ONNX_FILE, build, ranges, dynamic, batcher=batcher,
                             calib_shapes=calib_shapes, calib_cache=calib_cache)
        atomic_write_bytes(staging / ENGINE_FILE, built.engine)
        files[ENGINE_FILE] = file_record(staging / ENGINE_FILE)
        if calib_cache is not None and calib_cache.is_file():
            shutil.copy2(calib_cache, staging / CALIBRATION_CACHE_FILE)
            files[CALIBRATION_CACHE_FILE] = file_record(staging / CALIBRATION_CACHE_FILE)
        report, note = _validate_engine(staging / ENGINE_FILE, artifact, ranges, atol, rtol)
        if report is not None and not report.passed:
            raise ValidationFailed(report, f"TensorRT {build.precision} engine of "
                                           f"{artifact.source_name}")
        manifest = {
            "schema_version": MANIFEST_SCHEMA,
            "format": "tensorrt",
            "model_file": ENGINE_FILE,
            "source": m["source"],
            "task": m.get("task"),
            "inputs": inputs,
            "outputs": m["outputs"],
            "batch": m.get("batch"),
            "params": m.get("params"),
            "flops_per_sample": m.get("flops_per_sample"),
            "onnx": {"file": ONNX_FILE, "sha256": onnx_sha, "opset": m.get("opset"),
                     "from": onnx_origin or str(artifact.folder),
                     "validation": m.get("validation")},
            "tensorrt": {
                "version": built.tensorrt_version,
                "precision": build.precision,
                "build_config": build.to_dict(),
                "applied": built.applied,
                "dynamic": dynamic,
                "profile": [r.to_dict() for r in ranges],
                "calibration": ({**built.calibration, "samples": calibration.record()}
                                if built.calibration and calibration else None),
                "timing_cache": built.timing_cache,
                "build_s": round(built.seconds, 3),
                "trtexec": render_command(trtexec_build_args(
                    build, ranges, dynamic,
                    calib_cache=CALIBRATION_CACHE_FILE if CALIBRATION_CACHE_FILE in files else None,
                    timing_cache=str(build.timing_cache_path))),
                "warnings": built.warnings,
            },
            "built_on": {**built.gpu, "hostname": platform.node(), "machine": platform.machine(),
                         "portable": False,
                         "note": "a TensorRT engine runs only on the GPU model and TensorRT "
                                 "version that built it"},
            "validation": report.to_dict() if report else {"skipped": note},
            "reference": m.get("reference"),
            **({"stream": m["stream"]} if "stream" in m else {}),
            "target_device": device or m.get("target_device"),
            "files": files,
            "export_seconds": round(time.perf_counter() - started, 3),
            "provenance": provenance(),
        }
        write_manifest(staging, manifest)
    return EngineExportResult(Path(out_dir), manifest, report, time.perf_counter() - started, note)
