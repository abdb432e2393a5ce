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

One module per step: ``shapes`` (trtexec's shape syntax, the optimisation profile), ``config``
(``EngineBuildConfig``), ``trtexec`` (the matching command lines), ``build`` (the builder calls),
``validate`` (the engine against the artifact's reference) and ``export`` (the artifact folder).
"""
from edgekit.exporters.tensorrt.build import (
    LAST_IMPLICIT_PRECISION_MAJOR,
    BuiltEngine,
    build_engine,
    check_precision_supported,
    configure_builder,
    network_flags,
)
from edgekit.exporters.tensorrt.config import (
    ENGINE_FILE,
    ONNX_FILE,
    EngineBuildConfig,
    default_timing_cache,
)
from edgekit.exporters.tensorrt.export import EngineExportResult, export_tensorrt
from edgekit.exporters.tensorrt.shapes import (
    DEFAULT_DYNAMIC_RANGE,
    ShapeRange,
    calibration_shapes,
    is_dynamic,
    parse_shape,
    parse_shapes,
    resolve_profile,
    shape_ranges,
)
from edgekit.exporters.tensorrt.trtexec import render_command, trtexec_build_args, trtexec_run_args

__all__ = ["DEFAULT_DYNAMIC_RANGE", "ENGINE_FILE", "LAST_IMPLICIT_PRECISION_MAJOR", "ONNX_FILE",
           "BuiltEngine", "EngineBuildConfig", "EngineExportResult", "ShapeRange", "build_engine",
           "calibration_shapes", "check_precision_supported", "configure_builder",
           "default_timing_cache", "export_tensorrt", "is_dynamic", "network_flags",
           "parse_shape", "parse_shapes", "render_command", "resolve_profile", "shape_ranges",
           "trtexec_build_args", "trtexec_run_args"]
