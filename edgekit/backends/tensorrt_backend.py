"""The TensorRT backend: ``TensorRTRunner`` (``tensorrt_runner.py``) on an engine artifact, which
``profile --backend tensorrt`` builds from an ONNX artifact on this machine's GPU first.

The runner lives in its own module so that the exporters, which validate engines with it, never
import this one, which builds engines with them.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from edgekit.backends.registry import BackendSpec, RunOptions, register_backend
from edgekit.backends.tensorrt_runner import TensorRTRunner, require_cuda_gpu, require_tensorrt


def _check(provider: str | None) -> None:
    require_tensorrt()
    require_cuda_gpu()


def _build(artifact: Any, out: Path, options: RunOptions) -> Path:
    """An engine of ``artifact`` (ONNX) for this run: its batch fixed at ``options.batch``."""
    from edgekit.exporters.tensorrt import EngineBuildConfig, ShapeRange, export_tensorrt
    from edgekit.exporters.tensorrt.shapes import dynamic_dim

    shapes = []
    for inp in artifact.manifest["inputs"]:
        dynamic = [dynamic_dim(d) for d in inp["shape"]]
        if any(dynamic):  # the batch dimension at --batch, any other dynamic one at 1
            shape = tuple((options.batch if i == 0 else 1) if dyn else int(d)
                          for i, (d, dyn) in enumerate(zip(inp["shape"], dynamic, strict=False)))
            shapes.append(ShapeRange(inp["name"], shape, shape, shape))
    config = EngineBuildConfig(precision=options.precision, shapes=tuple(shapes))
    return export_tensorrt(artifact, out, config).folder


register_backend(BackendSpec(
    name="tensorrt", providers=(), artifact_format="tensorrt", file_label="TensorRT engine",
    options=("cuda_graph",), check=_check, build=_build,
    open_file=lambda path, options: TensorRTRunner(path, cuda_graph=options.cuda_graph)))
