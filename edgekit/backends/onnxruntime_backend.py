"""ONNX Runtime backend: one InferenceSession with fixed thread counts."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.backends.base import Feed, Runner
from edgekit.errors import UsageError


def make_session(path: str | Path, threads: int | None = None,
                 providers: Sequence[str] = ("CPUExecutionProvider",)) -> Any:
    """A session with intra-op threads fixed (inter-op 1, sequential), so runs are comparable."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if threads is not None:
        opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    try:
        return ort.InferenceSession(str(path), sess_options=opts, providers=list(providers))
    except Exception as exc:  # ORT raises its own Fail/InvalidGraph/NoSuchFile types
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"ONNX Runtime cannot load {path}: {first}") from exc


class OnnxRuntimeRunner(Runner):
    name = "onnxruntime"

    def __init__(self, path: str | Path, threads: int | None = None,
                 providers: Sequence[str] = ("CPUExecutionProvider",)) -> None:
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
            raise UsageError(f"ONNX Runtime rejected the inputs for {self.path.name}: {first}") from exc

    def _to_host(self, out: list[np.ndarray]) -> Feed:
        return dict(zip(self.output_names, out))

    def describe(self) -> dict[str, Any]:
        import onnxruntime as ort

        return {"backend": self.name, "threads": self.threads, "inter_op_threads": 1,
                "providers": list(self.session.get_providers()) if self.session else list(self.providers),
                "onnxruntime": ort.__version__}
