"""Datasets: scikit-learn's digits built in, a user's own ``.npz`` checked against the entry.

Real data first (design.md): ``load_digits`` ships 1,797 real 8x8 handwritten digits, enough to
train the small configs on a CPU in seconds. A user's file holds arrays ``x`` and ``y`` (and
optionally ``x_test``/``y_test``); it is loaded with ``allow_pickle=False``.
"""
from __future__ import annotations

import functools
import hashlib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgekit.errors import UnknownNameError, UsageError
from edgekit.registry import TaskSpec

TEST_FRACTION = 0.2
SPLIT_SEED = 0


@dataclass(frozen=True)
class Dataset:
    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    digest: str  # identifies the data, so cached checkpoints never mix datasets

    def __repr__(self) -> str:
        return f"Dataset({self.name}: {len(self.x_train)} train, {len(self.x_test)} test)"


def _split(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    from sklearn.model_selection import train_test_split

    stratify = y if np.bincount(y).min() >= 2 else None
    return tuple(train_test_split(x, y, test_size=TEST_FRACTION, random_state=SPLIT_SEED,
                                  stratify=stratify))


def _digest(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(str(a.shape).encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:12]


def _digits(task: TaskSpec) -> Dataset:
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]  # (N, 1, 8, 8) in [0, 1]
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = _split(x, y)
    _check_arrays(x, y, task, "digits")
    return Dataset("digits", x_train, y_train, x_test, y_test, _digest(x, y))


@functools.cache
def _wifi_pose(task: TaskSpec) -> Dataset:
    """Simulated once per process (about 20 s): compare loads it for every model it scores."""
    from edgekit.methods.wifi_mamba.dataset import load_wifi_pose  # the simulator loads only when asked for

    return load_wifi_pose(task)


_BUILTIN = {"digits": _digits, "wifi-pose-sim": _wifi_pose}


def _check_arrays(x: np.ndarray, y: np.ndarray, task: TaskSpec, where: str) -> None:
    if tuple(x.shape[1:]) != tuple(task.input_shape):
        raise UsageError(f"{where}: x has samples of shape {tuple(x.shape[1:])}, "
                         f"the model expects {tuple(task.input_shape)}")
    if not np.issubdtype(x.dtype, np.floating):
        raise UsageError(f"{where}: x has dtype {x.dtype}, expected a floating dtype "
                         f"({task.input_dtype})")
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise UsageError(f"{where}: y must be a 1-D integer array of labels, got "
                         f"shape {y.shape} dtype {y.dtype}")
    if len(x) != len(y):
        raise UsageError(f"{where}: x has {len(x)} samples but y has {len(y)}")
    if len(y) and (y.min() < 0 or y.max() >= task.num_classes):
        raise UsageError(f"{where}: labels must lie in [0, {task.num_classes - 1}], "
                         f"found {y.min()}..{y.max()}")


def load_npz(path: str | Path, task: TaskSpec) -> Dataset:
    """Load a user's ``.npz`` (``x``, ``y``, optional ``x_test``, ``y_test``) for ``task``."""
    path = Path(path)
    if task.num_classes == 0:
        raise UsageError(f"{path}: .npz data holds classification labels, but models of "
                         f"'{task.dataset}' are scored by {task.metric}",
                         hint="train and compare them on their built-in dataset (no --data)")
    if not path.is_file():
        raise UsageError(f"data file {path} does not exist")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise UsageError(f"{path}: not a readable .npz file ({exc})") from exc
    missing = {"x", "y"} - set(arrays)
    if missing:
        raise UsageError(f"{path}: missing array(s) {', '.join(sorted(missing))}",
                         hint="save with numpy.savez(path, x=..., y=...)")
    x, y = arrays["x"], arrays["y"]
    _check_arrays(x, y, task, str(path))
    x = x.astype(task.input_dtype, copy=False)
    y = y.astype(np.int64, copy=False)
    if "x_test" in arrays and "y_test" in arrays:
        x_test, y_test = arrays["x_test"], arrays["y_test"]
        _check_arrays(x_test, y_test, task, f"{path} (test split)")
        x_train, y_train = x, y
        x_test, y_test = x_test.astype(task.input_dtype, copy=False), y_test.astype(np.int64)
    else:
        if len(x) < 10:
            raise UsageError(f"{path}: {len(x)} samples are too few to split into train and test")
        x_train, x_test, y_train, y_test = _split(x, y)
    return Dataset(path.stem, x_train, y_train, x_test, y_test, _digest(x, y))


def load_dataset(task: TaskSpec, data: str | Path | None = None) -> Dataset:
    """The entry's built-in dataset, or the user's ``.npz`` when ``data`` is given."""
    if data is not None:
        return load_npz(data, task)
    if task.dataset not in _BUILTIN:
        raise UnknownNameError("dataset", task.dataset, _BUILTIN)
    return _BUILTIN[task.dataset](task)
