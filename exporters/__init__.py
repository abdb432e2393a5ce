"""Exporters (PyTorch -> ONNX; TensorRT and NIR plug in beside it) and export validation."""
from edgekit.exporters.artifact import Artifact, is_artifact, load_artifact
from edgekit.exporters.onnx import ExportResult, export_onnx
from edgekit.exporters.validate import ValidationFailed, ValidationReport, compare_outputs

EXPORT_FORMATS = ("onnx",)

__all__ = ["EXPORT_FORMATS", "Artifact", "ExportResult", "ValidationFailed", "ValidationReport",
           "compare_outputs", "export_onnx", "is_artifact", "load_artifact"]
