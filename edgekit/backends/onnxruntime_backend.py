"""ONNX Runtime backend: one InferenceSession with fixed thread counts, on the CPU, CUDA or
TensorRT execution provider (``--provider cpu|cuda|tensorrt``).

The TensorRT provider keeps its engines and timing cache on disk under
``$EDGEKIT_HOME/onnxruntime/tensorrt``, so only the first session of a model pays for the build.
ONNX Runtime silently falls back to the CPU when a provider's libraries fail to load; the runner
checks the session's providers and refuses to measure the CPU under a GPU provider's name.
"""
from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.backends.base import Feed, Runner
from edgekit.backends.registry import BackendSpec, RunOptions, register_backend
from edgekit.errors import UnknownNameError, UsageError
from edgekit.optional import ONNXRUNTIME, require
from edgekit.paths import edgekit_home

ProviderEntry = str | tuple[str, dict[str, Any]]
PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider",
             "tensorrt": "TensorrtExecutionProvider"}


def provider_cache_dir() -> Path:
    return edgekit_home() / "onnxruntime" / "tensorrt"


def execution_providers(provider: str = "cpu", available: Sequence[str] | None = None,
                        precision: str = "fp32") -> list[ProviderEntry]:
    """The provider list for ``--provider NAME``, checked against what this ONNX Runtime has.

    GPU providers come first with the ones below them as fallbacks for unsupported nodes (as ONNX
    Runtime recommends): tensorrt -> cuda -> cpu. A provider this build lacks is one UsageError
    that lists the available ones.
    """
    if provider not in PROVIDERS:
        raise UnknownNameError("execution provider", provider, PROVIDERS)
    if available is None:
        ort = require("onnxruntime", ONNXRUNTIME, "the onnxruntime backend")
        available = ort.get_available_providers()
    wanted = PROVIDERS[provider]
    if wanted not in available:
        raise UsageError(f"this ONNX Runtime has no {wanted} (--provider {provider})",
                         hint=f"available: {', '.join(available)}; GPU providers need "
                              f"onnxruntime-gpu (pip install 'edgekit[gpu]') and an NVIDIA GPU")
    if provider == "cpu":
        return [wanted]
    chain: list[ProviderEntry] = []
    if provider == "tensorrt":
        cache = str(provider_cache_dir())
        chain.append((wanted, {"trt_engine_cache_enable": True, "trt_engine_cache_path": cache,
                               "trt_timing_cache_enable": True, "trt_timing_cache_path": cache,
                               "trt_fp16_enable": precision == "fp16"}))
    if PROVIDERS["cuda"] in available:
        chain.append((PROVIDERS["cuda"], {"device_id": 0}))
    chain.append(PROVIDERS["cpu"])
    return chain


def _provider_name(entry: ProviderEntry) -> str:
    return entry if isinstance(entry, str) else entry[0]


def make_session(path: str | Path, threads: int | None = None,
                 providers: Sequence[ProviderEntry] = ("CPUExecutionProvider",),
                 optimize: bool = True) -> Any:
    """A session with intra-op threads fixed (inter-op 1, sequential), so runs are comparable.
    ``optimize=False`` turns every graph rewrite off: the graph as written, the reference an
    ONNX file's own export is judged against."""
    ort = require("onnxruntime", ONNXRUNTIME, "the onnxruntime backend")
    opts = ort.SessionOptions()
    if threads is not None:
        opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                     else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    opts.log_severity_level = 3
    names = {_provider_name(p) for p in providers}
    if PROVIDERS["tensorrt"] in names:
        provider_cache_dir().mkdir(parents=True, exist_ok=True)
    if names & {PROVIDERS["cuda"], PROVIDERS["tensorrt"]} and hasattr(ort, "preload_dlls"):
        # CUDA/cuDNN from the nvidia-* wheels are found only when preloaded (ORT >= 1.21); a
        # system-wide CUDA install needs no preloading, and the provider check below tells.
        with contextlib.suppress(Exception):
            ort.preload_dlls()
    try:
        session = ort.InferenceSession(str(path), sess_options=opts, providers=list(providers))
    except Exception as exc:  # ORT raises its own Fail/InvalidGraph/NoSuchFile types
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"ONNX Runtime cannot load {path}: {first}") from exc
    wanted = _provider_name(providers[0]) if providers else PROVIDERS["cpu"]
    if wanted not in session.get_providers():
        raise UsageError(f"ONNX Runtime could not start {wanted} for {Path(path).name} and fell "
                         f"back to {', '.join(session.get_providers())}",
                         hint="check that the CUDA, cuDNN (and TensorRT) libraries that "
                              "onnxruntime-gpu needs are installed and on the library path")
    return session


class OnnxRuntimeRunner(Runner):
    name = "onnxruntime"

    def __init__(self, path: str | Path, threads: int | None = None,
                 providers: Sequence[ProviderEntry] = ("CPUExecutionProvider",)) -> None:
        super().__init__()
        self.path = Path(path)
        self.threads = threads
        self.providers = tuple(providers)
        self.session: Any = None

    def _activate_impl(self) -> None:
        self.session = make_session(self.path, self.threads, self.providers)
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]

    def _deactivate_impl(self) -> None:
        self.session = None

    def _prepare_impl(self, feed: Feed) -> dict[str, np.ndarray]:
        missing = set(self.input_names) - set(feed)
        if missing:
            raise UsageError(f"{self.path}: missing input(s) {', '.join(sorted(missing))}")
        return {n: np.ascontiguousarray(feed[n]) for n in self.input_names}

    def _run_impl(self, prepared: dict[str, np.ndarray]) -> list[np.ndarray]:
        try:
            return self.session.run(self.output_names, prepared)
        except Exception as exc:  # shape / dtype mismatches surface here as ORT errors
            first = str(exc).strip().splitlines()[0]
            raise UsageError(f"ONNX Runtime rejected the inputs for {self.path.name}: "
                             f"{first}") from exc

    def _to_host(self, out: list[np.ndarray]) -> Feed:
        return dict(zip(self.output_names, out, strict=False))

    def describe(self) -> dict[str, Any]:
        ort = require("onnxruntime", ONNXRUNTIME, "the onnxruntime backend")
        return {"backend": self.name, "threads": self.threads, "inter_op_threads": 1,
                "providers": list(self.session.get_providers()) if self.session
                else [_provider_name(p) for p in self.providers],
                "onnxruntime": ort.__version__}


def _check(provider: str | None) -> None:
    execution_providers(provider or "cpu")  # raises where this ONNX Runtime lacks the provider


def _open_file(path: Path, options: RunOptions) -> OnnxRuntimeRunner:
    providers = execution_providers(options.provider or "cpu", precision=options.precision)
    return OnnxRuntimeRunner(path, options.threads, providers)


register_backend(BackendSpec(name="onnxruntime", providers=tuple(PROVIDERS), artifact_format="onnx",
                             file_label="ONNX file", check=_check, open_file=_open_file))
