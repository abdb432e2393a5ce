"""Exporters (PyTorch -> ONNX -> TensorRT engine or Jetson bundle; NIR plugs in beside them) and
export validation against one saved FP32 reference."""
from edgekit.exporters.artifact import Artifact, is_artifact, load_artifact
from edgekit.exporters.calibration import CalibrationBatcher, CalibrationSamples
from edgekit.exporters.jetson_bundle import BundleResult, write_jetson_bundle
from edgekit.exporters.onnx import ExportResult, export_onnx
from edgekit.exporters.reference import Reference, load_reference, validate_artifact
from edgekit.exporters.tensorrt import (
                                        EngineBuildConfig,
                                        EngineExportResult,
                                        ShapeRange,
                                        export_tensorrt,
                                        trtexec_build_args,
)
from edgekit.exporters.validate import ValidationFailed, ValidationReport, compare_outputs

EXPORT_FORMATS = ("onnx", "tensorrt", "jetson-bundle", "nir")

__all__ = ["EXPORT_FORMATS", "Artifact", "BundleResult", "CalibrationBatcher",
           "CalibrationSamples", "EngineBuildConfig", "EngineExportResult", "ExportResult",
           "Reference", "ShapeRange", "ValidationFailed", "ValidationReport", "compare_outputs",
           "export_onnx", "export_tensorrt", "is_artifact", "load_artifact", "load_reference",
           "trtexec_build_args", "validate_artifact", "write_jetson_bundle"]
