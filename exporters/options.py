"""``ExportOptions``: how ``edgekit.export`` makes any format, in one frozen dataclass.

The ONNX export's own options (``OnnxOptions``) come first and reach ``export_onnx`` unchanged;
this adds what the formats built from the ONNX artifact (a TensorRT engine, a Jetson bundle) and
the ONNX precision conversions take.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from edgekit.exporters.onnx import OnnxOptions
from edgekit.exporters.quantize import PrecisionConfig
from edgekit.exporters.tensorrt.config import EngineBuildConfig
from edgekit.inputs import InputOverride


@dataclass(frozen=True)
class ExportOptions(OnnxOptions):
    """How to export; ``None`` means the entry's own setting (``OnnxOptions`` lists the rest)."""

    engine: EngineBuildConfig = field(default_factory=EngineBuildConfig)  # tensorrt, bundle
    calib_data: str | Path | None = None  # int8: an .npz (x, y) to calibrate with
    cuda_graph: bool = False  # bundle: profile with CUDA graphs in its README's commands
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)  # --to onnx: fp16, int8
    inputs: tuple[InputOverride | str, ...] = ()  # --input: a user model's or ONNX file's spec
