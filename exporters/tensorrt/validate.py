"""A built engine run on the FP32 reference its ONNX artifact carries, compared output by
output (``exporters/validate.py``)."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from edgekit.exporters.artifact import Artifact
from edgekit.exporters.reference import REFERENCE_FILE, load_reference
from edgekit.exporters.tensorrt.shapes import ShapeRange, fmt_dims
from edgekit.exporters.validate import ValidationReport, compare_outputs


def validate_engine(engine_path: Path, artifact: Artifact, ranges: Sequence[ShapeRange],
                     atol: float, rtol: float) -> tuple[ValidationReport | None, str | None]:
    from edgekit.backends.tensorrt_runner import TensorRTRunner

    ref_path = artifact.folder / REFERENCE_FILE
    if not ref_path.is_file():
        return None, f"{artifact.folder} has no {REFERENCE_FILE} (exported by an older edgekit)"
    reference = load_reference(ref_path)
    by_name = {r.name: r for r in ranges}
    outside = [n for n, a in reference.inputs.items()
               if n in by_name and not by_name[n].contains(a.shape)]
    if outside:
        return None, (f"the reference input ({fmt_dims(reference.inputs[outside[0]].shape)}) lies "
                      f"outside the engine's shape range")
    with TensorRTRunner(engine_path) as runner:
        actual = runner.infer(reference.inputs)
    return compare_outputs(actual, reference.outputs, atol, rtol, against="reference",
                           inputs=f"{REFERENCE_FILE} (batch {reference.batch})"), None
