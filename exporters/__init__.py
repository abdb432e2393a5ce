"""Exporters (PyTorch -> ONNX -> TensorRT engine or Jetson bundle; NIR plugs in beside them) and
export validation against one saved FP32 reference. The formats ``export --to`` makes are in
``edgekit.exporters.registry``."""
from edgekit.exporters.artifact import Artifact, is_artifact, load_artifact
from edgekit.exporters.artifact_validation import validate_artifact
from edgekit.exporters.calibration import CalibrationBatcher, CalibrationSamples
from edgekit.exporters.jetson_bundle import BundleResult, write_jetson_bundle
from edgekit.exporters.onnx import ExportResult, OnnxOptions, export_onnx
from edgekit.exporters.reference import Reference, load_reference
from edgekit.exporters.tensorrt import (
                                        EngineBuildConfig,
                                        EngineExportResult,
                                        ShapeRange,
                                        export_tensorrt,
                                        trtexec_build_args,
)
from edgekit.exporters.validate import ValidationFailed, ValidationReport, compare_outputs

__all__ = ["Artifact", "BundleResult", "CalibrationBatcher", "CalibrationSamples",
           "EngineBuildConfig", "EngineExportResult", "ExportResult", "OnnxOptions", "Reference",
           "ShapeRange",
           "ValidationFailed", "ValidationReport", "compare_outputs", "export_onnx",
           "export_tensorrt", "is_artifact", "load_artifact", "load_reference",
           "trtexec_build_args", "validate_artifact", "write_jetson_bundle"]
