"""The ``trtexec`` command lines that build and profile the engine ``build.py`` builds, from the
same ``EngineBuildConfig``, so the two never disagree."""
from __future__ import annotations

import shlex
from collections.abc import Sequence

from edgekit.exporters.tensorrt.config import ENGINE_FILE, ONNX_FILE, EngineBuildConfig
from edgekit.exporters.tensorrt.shapes import ShapeRange
from edgekit.precisions import get_precision


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
