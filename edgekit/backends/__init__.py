"""Backends: load a model or artifact, run inputs, synchronise (one interface, see base.py)."""
from edgekit.backends.base import Feed, Runner
from edgekit.backends.onnxruntime_backend import OnnxRuntimeRunner, make_session
from edgekit.backends.torch_backend import TorchRunner

BACKEND_NAMES = ("torch", "onnxruntime")

__all__ = ["BACKEND_NAMES", "Feed", "OnnxRuntimeRunner", "Runner", "TorchRunner", "make_session"]
