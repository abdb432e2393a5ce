"""Backends: load a model or artifact, run inputs, synchronise (one interface, see base.py).

Every module of this package is imported here, so a backend's file registers itself
(``edgekit.backends.registry``) just by being in the folder."""
import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

from edgekit.backends.base import Feed, Runner  # noqa: E402
from edgekit.backends.onnxruntime_backend import (  # noqa: E402
    PROVIDERS,
    OnnxRuntimeRunner,
    execution_providers,
    make_session,
)
from edgekit.backends.registry import (  # noqa: E402
    BackendSpec,
    RunOptions,
    backend_names,
    get_backend,
    list_backends,
)
from edgekit.backends.tensorrt_runner import TensorRTRunner, require_cuda_gpu, require_tensorrt  # noqa: E402
from edgekit.backends.torch_backend import TorchRunner  # noqa: E402

__all__ = ["PROVIDERS", "BackendSpec", "Feed", "OnnxRuntimeRunner", "RunOptions", "Runner",
           "TensorRTRunner", "TorchRunner", "backend_names", "execution_providers",
           "get_backend", "list_backends", "make_session", "require_cuda_gpu", "require_tensorrt"]
