"""Backends: load a model or artifact, run inputs, synchronise (one interface, see base.py)."""
from edgekit.backends.base import Feed, Runner
from edgekit.backends.onnxruntime_backend import (PROVIDERS, OnnxRuntimeRunner, execution_providers,
                                                  make_session)
from edgekit.backends.tensorrt_backend import TensorRTRunner, require_cuda_gpu, require_tensorrt
from edgekit.backends.torch_backend import TorchRunner

BACKEND_NAMES = ("torch", "onnxruntime", "tensorrt")

__all__ = ["BACKEND_NAMES", "PROVIDERS", "Feed", "OnnxRuntimeRunner", "Runner", "TensorRTRunner",
           "TorchRunner", "execution_providers", "make_session", "require_cuda_gpu",
           "require_tensorrt"]
