"""TensorRT builder calls: the ``EngineBuildConfig`` applied to a builder config, and the build
of a serialized engine on this machine's GPU."""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgekit.backends.tensorrt_runner import (
    require_cuda_gpu,
    require_tensorrt,
    tensorrt_version_tuple,
)
from edgekit.errors import CheckFailed, UsageError
from edgekit.exporters.calibration import CalibrationBatcher, make_trt_calibrator
from edgekit.exporters.tensorrt.config import EngineBuildConfig
from edgekit.exporters.tensorrt.shapes import ShapeRange
from edgekit.fileio import atomic_write_bytes
from edgekit.precisions import get_precision

LAST_IMPLICIT_PRECISION_MAJOR = 10  # TensorRT 11 removed the fp16/int8 flags and calibrators


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


# Over 8 parameters: TensorRT's builder, config and module objects with the build's settings, as
# TensorRT's API takes them
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
