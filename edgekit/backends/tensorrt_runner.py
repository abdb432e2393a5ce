"""The TensorRT runner: run a serialized engine with CUDA-event timing of every phase (as trtexec).

Each ``run`` enqueues, on one CUDA stream, the host-to-device copies of the inputs (from pinned
host memory), the engine (``execute_async_v3``, or the replay of a CUDA graph captured from it),
and the device-to-host copies of the outputs, with a CUDA event between phases. ``synchronize``
waits for the stream and records the per-phase times, which ``phase_samples`` hands the profiler:
``h2d``, ``compute``, ``d2h`` and ``end_to_end`` (first event to last, on the GPU's clock), as
trtexec reports "H2D Latency", "GPU Compute Time", "D2H Latency" and "Latency".

Device memory comes from torch (CUDA tensors as buffers, CUDA events and graphs), so no second
CUDA binding is needed. ``tensorrt`` and CUDA are required only when a runner is activated; the
shape and binding logic (``IOSpec``, ``resolve_input_shapes``) is plain Python and is tested on
machines without either.
"""
from __future__ import annotations

import importlib
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.backends.base import Feed, Runner
from edgekit.errors import MissingDependencyError, UsageError

NO_GPU_HINT = ("build on the device with 'edgekit export ... --to tensorrt' there, "
               "or make a bundle for it here with --to jetson-bundle")
MIN_TENSORRT = (8, 5)  # num_io_tensors / execute_async_v3 (JetPack 5.1 ships 8.5)
PHASES = ("h2d", "compute", "d2h", "end_to_end")


def tensorrt_version_tuple(version: str) -> tuple[int, int]:
    parts = (version.split(".") + ["0", "0"])[:2]
    try:
        return int(parts[0]), int(parts[1])
    except ValueError:
        return 0, 0


def require_tensorrt() -> Any:
    """The ``tensorrt`` module, or a one-line MissingDependencyError saying what to do."""
    try:
        trt = importlib.import_module("tensorrt")
    except ImportError as exc:
        detail = "" if isinstance(exc, ModuleNotFoundError) else f" (import failed: {exc})"
        raise MissingDependencyError(f"TensorRT is not installed here{detail}",
                                     hint=NO_GPU_HINT) from None
    version = getattr(trt, "__version__", "0")
    if tensorrt_version_tuple(version) < MIN_TENSORRT:
        raise MissingDependencyError(
            f"TensorRT {version} is too old: edgekit needs 8.5 or newer (JetPack 5.1 or later)",
            hint="upgrade JetPack or TensorRT, or use trtexec with the commands of "
                 "--to jetson-bundle")
    return trt


def require_cuda_gpu(index: int = 0, hint: str = NO_GPU_HINT) -> dict[str, Any]:
    """Name, compute capability and CUDA version of GPU ``index``, or a one-line error."""
    import torch

    if torch.version.cuda is None:
        raise MissingDependencyError(
            f"no CUDA GPU here: torch {torch.__version__} is a CPU-only build",
            hint=f"{hint}; on a Jetson install NVIDIA's torch wheel for your JetPack")
    if not torch.cuda.is_available() or torch.cuda.device_count() <= index:
        raise MissingDependencyError("no CUDA GPU is visible here", hint=hint)
    major, minor = torch.cuda.get_device_capability(index)
    return {"gpu": torch.cuda.get_device_name(index), "compute_capability": f"{major}.{minor}",
            "cuda": torch.version.cuda, "index": index}


# -- bindings: plain Python, tested without a GPU ------------------------------------------------


@dataclass(frozen=True)
class IOSpec:
    """One engine tensor: -1 marks a dynamic dimension; ``min``/``max`` bound it (profile 0)."""

    name: str
    is_input: bool
    dtype: np.dtype
    shape: tuple[int, ...]
    min: tuple[int, ...] | None = None
    max: tuple[int, ...] | None = None

    def describe(self) -> str:
        dims = "x".join("?" if d < 0 else str(d) for d in self.shape)
        if self.min is not None and self.max is not None and self.min != self.max:
            lo, hi = "x".join(map(str, self.min)), "x".join(map(str, self.max))
            return f"{dims} ({lo} .. {hi})"
        return dims


def resolve_input_shapes(specs: list[IOSpec], feed: Feed) -> dict[str, tuple[int, ...]]:
    """The shape each input will run at, checked against the engine; one clear error otherwise."""
    inputs = [s for s in specs if s.is_input]
    names = [s.name for s in inputs]
    missing = [n for n in names if n not in feed]
    if missing:
        raise UsageError(f"engine input(s) {', '.join(missing)} not given",
                         hint=f"the engine takes {', '.join(names)}")
    extra = sorted(set(feed) - set(names))
    if extra:
        raise UsageError(f"the engine has no input(s) {', '.join(extra)}",
                         hint=f"it takes {', '.join(names)}")
    shapes = {}
    for spec in inputs:
        array = np.asarray(feed[spec.name])
        shape = tuple(int(d) for d in array.shape)
        if len(shape) != len(spec.shape):
            raise UsageError(f"input '{spec.name}' has shape {shape}; the engine takes "
                             f"{len(spec.shape)} dimensions ({spec.describe()})")
        for i, (got, want) in enumerate(zip(shape, spec.shape, strict=False)):
            lo = spec.min[i] if spec.min is not None else want
            hi = spec.max[i] if spec.max is not None else want
            if (want >= 0 and got != want) or (want < 0 and not lo <= got <= hi):
                raise UsageError(f"input '{spec.name}' has shape {shape}; the engine takes "
                                 f"{spec.describe()}",
                                 hint="rebuild the engine with --min-shape/--max-shape covering it")
        if not np.can_cast(array.dtype, spec.dtype, casting="same_kind"):
            raise UsageError(f"input '{spec.name}' is {array.dtype}; the engine takes {spec.dtype}")
        shapes[spec.name] = shape
    return shapes


def engine_io_specs(trt: Any, engine: Any) -> list[IOSpec]:
    """IOSpecs of a deserialized engine (TensorRT 8.5+ named-tensor API, profile 0)."""
    specs = []
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        is_input = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
        shape = tuple(int(d) for d in engine.get_tensor_shape(name))
        lo = hi = None
        if is_input and any(d < 0 for d in shape):
            lo_d, _, hi_d = engine.get_tensor_profile_shape(name, 0)
            lo, hi = tuple(int(d) for d in lo_d), tuple(int(d) for d in hi_d)
        specs.append(IOSpec(name, is_input, np.dtype(trt.nptype(engine.get_tensor_dtype(name))),
                            shape, lo, hi))
    return specs


# -- the runner ----------------------------------------------------------------------------------


@dataclass
class _Bound:
    """Buffers and events of one input shape, reused by every iteration."""

    host_in: dict[str, Any]
    device_in: dict[str, Any]
    device_out: dict[str, Any]
    host_out: dict[str, Any]
    events: list[Any]
    graph: Any = None
    buffer_bytes: int = 0
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)


class TensorRTRunner(Runner):
    name = "tensorrt"

    def __init__(self, engine_path: str | Path, cuda_graph: bool = False, device: int = 0) -> None:
        super().__init__()
        self.engine_path = Path(engine_path)
        self.cuda_graph = cuda_graph
        self.device_index = device
        self.graph_status = "off"
        self.specs: list[IOSpec] = []
        self._pending: _Bound | None = None
        self._memory: dict[str, Any] = {}

    def _activate_impl(self) -> None:
        self._trt = trt = require_tensorrt()
        self.gpu = require_cuda_gpu(self.device_index)
        import torch

        self._torch = torch
        self._device = torch.device("cuda", self.device_index)
        torch.cuda.set_device(self._device)
        free, total = torch.cuda.mem_get_info(self._device)
        self._used_before = total - free
        self._logger = trt.Logger(trt.Logger.ERROR)
        self._runtime = trt.Runtime(self._logger)
        self.engine = self._runtime.deserialize_cuda_engine(self.engine_path.read_bytes())
        if self.engine is None:
            raise UsageError(f"TensorRT {trt.__version__} cannot load {self.engine_path}",
                             hint="engines run only on the GPU model and TensorRT version that "
                                  "built them: rebuild it here with "
                                  "'edgekit export ... --to tensorrt'")
        self.context = self.engine.create_execution_context()
        self.specs = engine_io_specs(trt, self.engine)
        self.input_names = [s.name for s in self.specs if s.is_input]
        self.output_names = [s.name for s in self.specs if not s.is_input]
        self.stream = torch.cuda.Stream(self._device)

    def _deactivate_impl(self) -> None:
        self._pending = None
        self.context = self.engine = self._runtime = None

    def _prepare_impl(self, feed: Feed) -> _Bound:
        torch = self._torch
        shapes = resolve_input_shapes(self.specs, feed)
        specs = {s.name: s for s in self.specs}
        host_in, device_in, device_out, host_out = {}, {}, {}, {}
        for name, shape in shapes.items():
            array = np.ascontiguousarray(feed[name], dtype=specs[name].dtype)
            host_in[name] = torch.from_numpy(array).pin_memory()
            device_in[name] = torch.empty(shape, dtype=host_in[name].dtype, device=self._device)
            self.context.set_input_shape(name, shape)
            self.context.set_tensor_address(name, device_in[name].data_ptr())
        for name in self.output_names:
            shape = tuple(int(d) for d in self.context.get_tensor_shape(name))
            dtype = torch.from_numpy(np.empty(0, specs[name].dtype)).dtype
            device_out[name] = torch.empty(shape, dtype=dtype, device=self._device)
            host_out[name] = torch.empty(shape, dtype=dtype, pin_memory=True)
            self.context.set_tensor_address(name, device_out[name].data_ptr())
        events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        buffers = sum(t.numel() * t.element_size()
                      for t in (*device_in.values(), *device_out.values()))
        bound = _Bound(host_in, device_in, device_out, host_out, events, None, buffers, shapes)
        if self.cuda_graph:
            bound.graph = self._capture_graph()
        free, total = torch.cuda.mem_get_info(self._device)
        self._memory = {
            "engine_device_memory_bytes": int(getattr(self.engine, "device_memory_size_v2", 0)
                                              or getattr(self.engine, "device_memory_size", 0)),
            "io_buffers_bytes": int(buffers),
            "device_used_increase_bytes": int(total - free - self._used_before),
            "device_total_bytes": int(total),
            "method": "cudaMemGetInfo before loading and after binding (device-wide)",
        }
        return bound

    def _capture_graph(self) -> Any:
        """Capture the engine's enqueue in a CUDA graph (trtexec --useCudaGraph); on failure
        warn and run without one, saying so in ``describe``."""
        torch = self._torch
        try:
            # TensorRT allocates lazily on the first enqueue; keep that out of the graph
            self._enqueue()
            self.stream.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=self.stream):
                self._enqueue()
            self.graph_status = "on"
            return graph
        except Exception as exc:  # capture fails for engines with host-side work (some plugins)
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            self.graph_status = f"off (capture failed: {reason})"
            warnings.warn(f"CUDA graph capture failed, running without: {exc}", stacklevel=2)
            return None

    def _enqueue(self) -> None:
        if not self.context.execute_async_v3(self.stream.cuda_stream):
            raise UsageError(f"TensorRT failed to enqueue {self.engine_path.name}")

    def _run_impl(self, bound: _Bound) -> _Bound:
        torch = self._torch
        start, copied, computed, done = bound.events
        with torch.cuda.stream(self.stream):
            start.record(self.stream)
            for name, host in bound.host_in.items():
                bound.device_in[name].copy_(host, non_blocking=True)
            copied.record(self.stream)
            if bound.graph is not None:
                bound.graph.replay()
            else:
                self._enqueue()
            computed.record(self.stream)
            for name, dev in bound.device_out.items():
                bound.host_out[name].copy_(dev, non_blocking=True)
            done.record(self.stream)
        self._pending = bound
        return bound

    def synchronize(self) -> None:
        bound, self._pending = self._pending, None
        if bound is None:
            return
        self.stream.synchronize()
        start, copied, computed, done = bound.events
        for phase, (a, b) in zip(PHASES, ((start, copied), (copied, computed), (computed, done),
                                          (start, done)), strict=False):
            self.record_phase(phase, a.elapsed_time(b) / 1e3)  # elapsed_time is in ms

    def _to_host(self, bound: _Bound) -> Feed:
        return {n: t.numpy().copy() for n, t in bound.host_out.items()}

    def describe(self) -> dict[str, Any]:
        trt = getattr(self, "_trt", None)
        return {"backend": self.name, "engine": str(self.engine_path),
                "tensorrt": getattr(trt, "__version__", None), **getattr(self, "gpu", {}),
                "cuda_graph": self.graph_status if self.cuda_graph else "off",
                "timing": "CUDA events per phase (h2d, compute, d2h) on one stream, "
                          "pinned host memory",
                "gpu_memory": dict(self._memory)}
