"""``EngineBuildConfig``: everything that decides how an engine is built, plain data validated
on creation, so a bad flag is one clear UsageError before anything is built."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgekit.errors import UnknownNameError, UsageError
from edgekit.exporters.calibration import CALIBRATORS, DEFAULT_SAMPLES
from edgekit.exporters.tensorrt.shapes import ShapeRange, shape_ranges
from edgekit.paths import edgekit_home
from edgekit.precisions import tensorrt_names

ENGINE_FILE = "model.engine"
ONNX_FILE = "model.onnx"


def default_timing_cache() -> Path:
    return edgekit_home() / "tensorrt" / "timing.cache"


@dataclass(frozen=True)
class EngineBuildConfig:
    """Everything that decides how an engine is built; plain data, validated on creation."""

    precision: str = "fp32"  # fp32 (TF32 off) | fp16 | int8 (calibrated)
    workspace_mib: int | None = None  # builder workspace pool limit; None: TensorRT's default
    dla_core: int | None = None  # run on this DLA core (Jetson Xavier/Orin), GPU fallback on
    shapes: tuple[ShapeRange, ...] = ()  # optimisation-profile ranges given by the user
    calibrator: str = "entropy"  # int8: entropy (IInt8EntropyCalibrator2) | minmax
    calib_samples: int = DEFAULT_SAMPLES  # int8: how many calibration samples
    calib_batch: int | None = None  # int8: batch size; None: the model's fixed batch, else 32
    calib_cache: Path | None = None  # int8: cache file; None: keyed under $EDGEKIT_HOME
    timing_cache: Path | None = None  # None: $EDGEKIT_HOME/tensorrt/timing.cache

    def __post_init__(self) -> None:
        if self.precision not in tensorrt_names():
            raise UnknownNameError("precision", self.precision, tensorrt_names())
        if self.workspace_mib is not None and self.workspace_mib < 1:
            raise UsageError(f"--workspace must be at least 1 MiB, got {self.workspace_mib}")
        if self.dla_core is not None:
            if self.dla_core < 0:
                raise UsageError(f"--dla-core must be 0 or more, got {self.dla_core}")
            if self.precision == "fp32":
                raise UsageError("the DLA runs fp16 or int8 only", hint="add --precision fp16")
        if self.calibrator not in CALIBRATORS:
            raise UnknownNameError("calibrator", self.calibrator, CALIBRATORS)
        if self.calib_samples < 1:
            raise UsageError(f"--calib-samples must be at least 1, got {self.calib_samples}")
        if self.calib_batch is not None and self.calib_batch < 1:
            raise UsageError(f"--calib-batch must be at least 1, got {self.calib_batch}")
        names = [r.name for r in self.shapes]
        if len(set(names)) != len(names):
            raise UsageError("a shape range names the same input twice")

    # Over 8 parameters: a keyword-only factory from the export command's TensorRT options, each
    # checked here
    @classmethod
    def from_options(cls, *, precision: str | None = None, workspace: int | None = None,
                     dla_core: int | None = None, min_shapes: Iterable[str] = (),
                     opt_shapes: Iterable[str] = (), max_shapes: Iterable[str] = (),
                     calibrator: str | None = None, calib_samples: int | None = None,
                     calib_batch: int | None = None, calib_cache: str | Path | None = None,
                     timing_cache: str | Path | None = None) -> EngineBuildConfig:
        """From CLI-style values (strings for shapes; None for "not given")."""
        return cls(precision=precision or "fp32", workspace_mib=workspace, dla_core=dla_core,
                   shapes=shape_ranges(min_shapes, opt_shapes, max_shapes),
                   calibrator=calibrator or "entropy",
                   calib_samples=DEFAULT_SAMPLES if calib_samples is None else calib_samples,
                   calib_batch=calib_batch,
                   calib_cache=Path(calib_cache) if calib_cache else None,
                   timing_cache=Path(timing_cache) if timing_cache else None)

    @property
    def timing_cache_path(self) -> Path:
        return self.timing_cache or default_timing_cache()

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"precision": self.precision, "workspace_mib": self.workspace_mib,
                               "dla_core": self.dla_core,
                               "shapes": [r.to_dict() for r in self.shapes],
                               "timing_cache": str(self.timing_cache_path)}
        if self.precision == "int8":
            doc.update({"calibrator": self.calibrator, "calib_samples": self.calib_samples,
                        "calib_batch": self.calib_batch,
                        "calib_cache": str(self.calib_cache) if self.calib_cache else None})
        return doc

    def cli_args(self, ranges: Sequence[ShapeRange] = ()) -> list[str]:
        """The ``edgekit export ... --to tensorrt`` options that rebuild with this config."""
        args = ["--precision", self.precision]
        if self.workspace_mib is not None:
            args += ["--workspace", str(self.workspace_mib)]
        if self.dla_core is not None:
            args += ["--dla-core", str(self.dla_core)]
        for r in ranges or self.shapes:
            args += ["--min-shape", r.spec("min"), "--opt-shape", r.spec("opt"),
                     "--max-shape", r.spec("max")]
        if self.precision == "int8":
            args += ["--calibrator", self.calibrator, "--calib-samples", str(self.calib_samples)]
            if self.calib_batch is not None:
                args += ["--calib-batch", str(self.calib_batch)]
            if self.calib_cache is not None:
                args += ["--calib-cache", str(self.calib_cache)]
        if self.timing_cache is not None:
            args += ["--timing-cache", str(self.timing_cache)]
        return args
