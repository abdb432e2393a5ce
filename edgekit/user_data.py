"""A user's data for a model of their own: an ``.npz`` holding one array per model input, named
after it, and (to score) ``labels``.

This is what ``--calib-data`` (int8 calibration) and ``compare --data`` read for a model that
has no built-in dataset: the arrays are checked against the model's input spec (names, dtypes,
shapes past the batch axis, finite values, one sample count) before any work.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.data import read_npz
from edgekit.errors import UsageError
from edgekit.inputs import InputSpec

LABELS = "labels"


@dataclass(frozen=True)
class NamedData:
    """Samples by input name (each (N, ...)), their labels if any, and where they came from."""

    arrays: dict[str, np.ndarray]
    labels: np.ndarray | None
    origin: str

    @property
    def count(self) -> int:
        return int(next(iter(self.arrays.values())).shape[0])


def _hint(spec: InputSpec, labels: bool) -> str:
    names = ", ".join(f"{n}=..." for n in spec.names) + (f", {LABELS}=..." if labels else "")
    return f"save with numpy.savez(path, {names})"


def holds_inputs(path: str | Path, spec: InputSpec) -> bool:
    """Whether the ``.npz`` at ``path`` names every input of ``spec`` (else it is read as a
    dataset's ``x``, ``y`` file)."""
    try:
        arrays = read_npz(path, "")
    except UsageError:
        return False
    return all(n in arrays for n in spec.names)


def load_named_data(path: str | Path, spec: InputSpec, need_labels: bool = False) -> NamedData:
    """The arrays of ``path`` for ``spec``, cast to the inputs' dtypes; ``need_labels``: a
    1-D integer ``labels`` array of the same length must be there too."""
    arrays = read_npz(path, _hint(spec, need_labels))
    where = str(path)
    missing = [n for n in spec.names if n not in arrays]
    if missing:
        raise UsageError(f"{where} has no array '{missing[0]}' (the model's inputs: "
                         f"{', '.join(spec.names)})", hint=_hint(spec, need_labels))
    spec.check_arrays(arrays, where)
    inputs = {f.name: np.ascontiguousarray(arrays[f.name].astype(f.dtype, copy=False))
              for f in spec.fields}
    n = len(next(iter(inputs.values())))
    if n == 0:
        raise UsageError(f"{where}: the arrays hold no samples")
    labels = arrays.get(LABELS)
    if need_labels and labels is None:
        raise UsageError(f"{where} has no array '{LABELS}' to score against",
                         hint=_hint(spec, True))
    if labels is not None:
        if labels.ndim != 1 or labels.dtype.kind not in "iu" or len(labels) != n:
            raise UsageError(f"{where}: '{LABELS}' must be a 1-D integer array of {n} labels, "
                             f"got shape {list(labels.shape)} dtype {labels.dtype}")
        labels = labels.astype(np.int64)
    return NamedData(inputs, labels, f"{Path(path).name} ({n} samples)")


def top1_accuracy(logits: np.ndarray, labels: np.ndarray) -> float:
    """The share of samples whose largest score is at their label (logits (N, classes))."""
    if logits.ndim != 2:
        raise UsageError(f"accuracy needs a (samples, classes) output, the model's first output "
                         f"has shape {list(logits.shape)}",
                         hint="score it with --evaluate file.py:fn instead")
    if len(labels) and int(labels.max()) >= logits.shape[1]:
        raise UsageError(f"labels reach {int(labels.max())}, but the model scores "
                         f"{logits.shape[1]} classes")
    return float((logits.argmax(axis=1) == labels).mean())


def record(data: NamedData) -> dict[str, Any]:
    return {"origin": data.origin, "samples": data.count,
            "labels": data.labels is not None}
