"""PyTorch eager backend (CPU here; a CUDA device where one is present).

On CUDA, ``cuda_graph`` captures the forward pass once into a CUDA graph and replays it
(PyTorch's "whole network capture": static input tensors, warm-up on a side stream first so the
caching allocator's first allocations stay out of the graph). A small net on a GPU is bound by
its kernel launches, one per operator, which a replay submits as one; a model whose forward
synchronises with the host (``.item()``, data-dependent shapes) cannot be captured and runs
eagerly, saying so in ``describe``.
"""
from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from edgekit.backends.base import Feed, Runner
from edgekit.backends.registry import BackendSpec, RunOptions, register_backend
from edgekit.errors import UsageError


class TorchRunner(Runner):
    name = "torch"

    def __init__(self, model: nn.Module, input_names: Sequence[str], output_names: Sequence[str],
                 threads: int | None = None, device: str = "cpu",
                 cuda_graph: bool = False) -> None:
        super().__init__()
        self.model = model
        self.input_names = list(input_names)
        self.output_names = list(output_names)
        self.threads = threads
        self.device = torch.device(device)
        self.cuda_graph = cuda_graph
        self.graph_status = "off"
        self._graph: Any = None  # (torch.cuda.CUDAGraph, its output) once captured
        self._previous_threads: int | None = None
        self._allocated_before = 0

    def _activate_impl(self) -> None:
        if self.threads is not None:
            self._previous_threads = torch.get_num_threads()
            torch.set_num_threads(self.threads)
        if self.device.type == "cuda":  # the peak below is this model's, not earlier work's
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._allocated_before = torch.cuda.memory_allocated(self.device)
        self.model = self.model.to(self.device).eval()

    def _deactivate_impl(self) -> None:
        if self._previous_threads is not None:
            torch.set_num_threads(self._previous_threads)

    def _prepare_impl(self, feed: Feed) -> tuple[torch.Tensor, ...]:
        prepared = tuple(torch.from_numpy(np.ascontiguousarray(feed[n])).to(self.device)
                         for n in self.input_names)
        if self.cuda_graph:
            self._graph = self._capture(prepared)
        return prepared

    def _run_impl(self, prepared: tuple[torch.Tensor, ...]) -> Any:
        if self._graph is not None:
            graph, out = self._graph
            graph.replay()  # reads the static inputs ``prepared`` holds, writes ``out``
            return out
        with torch.inference_mode():
            return self.model(*prepared)

    def _capture(self, prepared: tuple[torch.Tensor, ...]) -> Any:
        """The forward on ``prepared`` as a CUDA graph, or None (warned) where capture fails."""
        try:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side), torch.inference_mode():
                for _ in range(3):  # lazy initialisation and allocator warm-up, not captured
                    self.model(*prepared)
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph), torch.inference_mode():
                out = self.model(*prepared)
            self.graph_status = "on"
            return graph, out
        except Exception as exc:  # a forward that syncs with the host cannot be captured
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            self.graph_status = f"off (capture failed: {reason})"
            warnings.warn(f"CUDA graph capture failed, running without: {exc}", stacklevel=2)
            return None

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _to_host(self, out: Any) -> Feed:
        outs = out if isinstance(out, (tuple, list)) else (out,)
        return {n: o.detach().cpu().numpy() for n, o in zip(self.output_names, outs, strict=False)}

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "backend": self.name, "device": str(self.device),
            "threads": torch.get_num_threads() if self.threads is None else self.threads}
        if self.device.type == "cuda":
            info["cuda_graph"] = self.graph_status
            info["gpu_memory"] = self._gpu_memory()
        return info

    def _gpu_memory(self) -> dict[str, Any]:
        free, total = torch.cuda.mem_get_info(self.device)
        return gpu_memory_figures(torch.cuda.memory_stats(self.device),
                                  allocated=torch.cuda.memory_allocated(self.device),
                                  allocated_before=self._allocated_before, free=free, total=total)


def gpu_memory_figures(stats: dict[str, Any], *, allocated: int, allocated_before: int,
                       free: int, total: int) -> dict[str, Any]:
    """The report's ``gpu_memory``: PyTorch's caching-allocator figures since activation (this
    process's tensors only, unlike the device-wide cudaMemGetInfo, which also counts the CUDA
    context). A function of the readings, so a report can be rendered without a GPU."""
    return {
        "weights_and_buffers_bytes": int(allocated - allocated_before),
        "peak_allocated_bytes": int(stats.get("allocated_bytes.all.peak", 0)),
        "peak_reserved_bytes": int(stats.get("reserved_bytes.all.peak", 0)),
        "device_used_bytes": int(total - free),
        "device_total_bytes": int(total),
        "method": "torch.cuda.memory_stats peaks since activation (caching allocator); "
                  "device-wide use from cudaMemGetInfo",
    }


def _check(provider: str | None) -> None:
    if provider == "cuda":
        from edgekit.backends.tensorrt_runner import require_cuda_gpu

        require_cuda_gpu(hint="profile on a machine with an NVIDIA GPU and a CUDA build of torch")


def _open_module(model: nn.Module, input_names: Sequence[str], output_names: Sequence[str],
                 options: RunOptions) -> TorchRunner:
    if options.cuda_graph and options.provider != "cuda":
        raise UsageError("--cuda-graph with --backend torch needs --provider cuda",
                         hint="CUDA graphs replay GPU work; on the CPU leave the flag out")
    return TorchRunner(model, input_names, output_names, options.threads,
                       device=options.provider or "cpu", cuda_graph=options.cuda_graph)


register_backend(BackendSpec(name="torch", providers=("cpu", "cuda"), artifact_format=None,
                             options=("cuda_graph",), check=_check, open_module=_open_module))
