"""edgekit: take PyTorch models to edge devices and measure what they cost there.

The Python API mirrors the CLI; names are imported lazily so ``import edgekit`` stays cheap.
``export``, ``validate``, ``profile`` and ``compare`` take what the CLI's TARGET takes (a registry
name, a ``.safetensors`` checkpoint, an artifact folder, an ``.onnx`` or ``.pt2`` file,
``file.py:callable``, ``package.module:callable``) and your own ``nn.Module``, alone or with its
example inputs::

    import edgekit
    result = edgekit.export((my_module, example_input), "my-model-onnx")
    report = edgekit.profile("my-model-onnx", edgekit.ProfileSettings(backend="onnxruntime"))
    result = edgekit.export("ds-cnn", "ds-cnn-onnx")
"""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_API = {
    "create_model": "edgekit.registry",
    "list_models": "edgekit.registry",
    "register_model": "edgekit.registry",
    "load_dataset": "edgekit.data",
    "train": "edgekit.training",
    "save_checkpoint": "edgekit.checkpoint",
    "load_checkpoint": "edgekit.checkpoint",
    "export": "edgekit.exporters.run",
    "ExportOptions": "edgekit.exporters.run",
    "validate": "edgekit.exporters.run",
    "export_onnx": "edgekit.exporters",
    "OnnxOptions": "edgekit.exporters",
    "load_artifact": "edgekit.exporters",
    "profile": "edgekit.profiler.run",
    "ProfileSettings": "edgekit.profiler.run",
    "TimingPlan": "edgekit.profiler.timing",
    "compare": "edgekit.compare",
    "resolve_target": "edgekit.targets",
    "load_profile": "edgekit.profiles",
    "detect_profile": "edgekit.profiles",
    "open_meter": "edgekit.energy",
}

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'edgekit' has no attribute '{name}'")
