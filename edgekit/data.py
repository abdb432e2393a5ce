"""Datasets: a registry of named datasets, each owning its ``TaskSpec``; digits built in, a
user's own ``.npz`` checked against the entry.

A dataset is one ``register_dataset`` call in the module that loads it: digits here, a method's
data in its own folder (``edgekit/methods/<method>/``), so generic code never names a method. Model
entries take their ``task`` from the dataset they train on (``DIGITS.task``).

Real data first: ``load_digits`` ships 1,797 real 8x8 handwritten digits, enough to
train the small configs on a CPU in seconds. A user's file holds arrays ``x`` and ``y`` (and
optionally ``x_test``/``y_test``); it is loaded with ``allow_pickle=False``.
"""
from __future__ import annotations

import hashlib
import zipfile
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgekit.errors import UsageError
from edgekit.extensions import Registry
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

    # A stratified split needs two samples of every class present, and at least one place per
    # class in both parts; a small user file gets a plain (seeded) split instead.
    counts = np.unique(y, return_counts=True)[1]
    n_test = int(np.ceil(TEST_FRACTION * len(y)))
    stratified = counts.min() >= 2 and len(counts) <= min(n_test, len(y) - n_test)
    stratify = y if stratified else None
    return tuple(train_test_split(x, y, test_size=TEST_FRACTION, random_state=SPLIT_SEED,
                                  stratify=stratify))


def _digest(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(str(a.shape).encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:12]


def upsampled(dataset: Dataset, size: int, channels: int = 1) -> Dataset:
    """``dataset``'s single-channel images resized to ``size`` x ``size`` (bilinear, torch's
    ``interpolate``), the channel repeated ``channels`` times; labels and split unchanged. Lets
    a net built for larger inputs (the papers' CIFAR configs) train on small real images."""
    import torch
    import torch.nn.functional as F

    def grow(x: np.ndarray) -> np.ndarray:
        if x.ndim != 4 or x.shape[1] != 1:
            raise UsageError(f"upsampling needs single-channel images [N, 1, H, W], got "
                             f"{tuple(x.shape)}")
        t = F.interpolate(torch.from_numpy(x).float(), size=(size, size), mode="bilinear",
                          align_corners=False)
        return t.repeat(1, channels, 1, 1).contiguous().numpy()

    if size < 1 or channels < 1:
        raise UsageError(f"upsampling needs a positive size and channel count, got {size}, "
                         f"{channels}")
    digest = hashlib.sha256(f"{dataset.digest}:bilinear:{channels}x{size}x{size}".encode())
    return Dataset(f"{dataset.name} upsampled to {size}x{size}x{channels}",
                   grow(dataset.x_train), dataset.y_train, grow(dataset.x_test), dataset.y_test,
                   digest.hexdigest()[:16])


@dataclass(frozen=True, kw_only=True)
class DatasetVariant:
    """Another way to record a dataset's task (the same inputs, labels and metric), so models of
    the task train and compare on it unchanged."""

    loader: Callable[[], Dataset]
    description: str


@dataclass(frozen=True, kw_only=True)
class DatasetEntry:
    """A named dataset and the task it defines; ``loader()`` builds it (cache it if it is slow).
    ``variants``: other recordings of the same task, chosen as ``--data NAME:VARIANT``."""

    name: str
    task: TaskSpec
    loader: Callable[[], Dataset]
    description: str
    variants: Mapping[str, DatasetVariant] = field(default_factory=dict)


# The methods register their own datasets.
_DATASETS: Registry[DatasetEntry] = Registry("dataset", builtins=("edgekit.methods",))


def register_dataset(entry: DatasetEntry) -> DatasetEntry:
    if entry.task.dataset != entry.name:
        raise ValueError(f"dataset '{entry.name}' owns a task of dataset '{entry.task.dataset}'")
    for variant in entry.variants:
        if not variant or ":" in variant:
            raise ValueError(f"dataset '{entry.name}': variant name {variant!r} must be "
                             "non-empty and hold no ':'")
    return _DATASETS.add(entry.name, entry)


def list_datasets() -> list[DatasetEntry]:
    return _DATASETS.entries(sort=True)


def get_dataset(name: str) -> DatasetEntry:
    return _DATASETS.get(name)


def _digits() -> Dataset:
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]  # (N, 1, 8, 8) in [0, 1]
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = _split(x, y)
    _check_arrays(x, y, DIGITS.task, "digits")
    return Dataset("digits", x_train, y_train, x_test, y_test, _digest(x, y))


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


def _check_finite(x: np.ndarray, where: str) -> None:
    """nan or inf in the inputs trains to a nan loss and still writes a checkpoint: refuse them.
    Checked after the cast to the model's dtype, where a float64 beyond float32's range is inf."""
    bad = int(np.count_nonzero(~np.isfinite(x)))
    if bad:
        raise UsageError(f"{where} holds {bad} non-finite value(s) (nan or inf)",
                         hint="clean or drop those samples")


def read_npz(path: str | Path, hint: str) -> dict[str, np.ndarray]:
    """Every array of a user's ``.npz`` (never unpickled); one line on anything else."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"data file {path} does not exist")
    try:
        loaded = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        # numpy takes any unrecognised content for a pickle, which allow_pickle=False refuses
        why = "unrecognised content" if "pickle" in str(exc) else str(exc) or type(exc).__name__
        raise UsageError(f"{path}: not a readable .npz file ({why})", hint=hint) from exc
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise UsageError(f"{path}: holds a single array (.npy), not an .npz archive", hint=hint)
    try:
        with loaded as npz:
            return {k: npz[k] for k in npz.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error) as exc:
        raise UsageError(f"{path}: not a readable .npz file ({exc or type(exc).__name__})",
                         hint=hint) from exc


def load_npz(path: str | Path, task: TaskSpec) -> Dataset:
    """Load a user's ``.npz`` (``x``, ``y``, optional ``x_test``, ``y_test``) for ``task``."""
    path = Path(path)
    if task.num_classes == 0:
        raise UsageError(f"{path}: .npz data holds classification labels, but models of "
                         f"'{task.dataset}' are scored by {task.metric}",
                         hint="train and compare them on their built-in dataset: no --data"
                              + _variants_hint(task))
    if not path.is_file():
        raise UsageError(f"data file {path} does not exist")
    hint = "save with numpy.savez(path, x=..., y=...)"
    arrays = read_npz(path, hint)
    missing = {"x", "y"} - set(arrays)
    if missing:
        raise UsageError(f"{path}: missing array(s) {', '.join(sorted(missing))}", hint=hint)
    x, y = arrays["x"], arrays["y"]
    _check_arrays(x, y, task, str(path))
    with np.errstate(over="ignore"):
        x = x.astype(task.input_dtype, copy=False)
    _check_finite(x, f"{path}: array x")
    y = y.astype(np.int64, copy=False)
    if "x_test" in arrays and "y_test" in arrays:
        x_test, y_test = arrays["x_test"], arrays["y_test"]
        _check_arrays(x_test, y_test, task, f"{path} (test split)")
        x_train, y_train = x, y
        with np.errstate(over="ignore"):  # too large for the dtype: inf, refused just below
            x_test = x_test.astype(task.input_dtype, copy=False)
        y_test = y_test.astype(np.int64)
        _check_finite(x_test, f"{path}: array x_test")
        for split, n in (("training split (x, y)", len(x_train)),
                         ("test split (x_test, y_test)", len(x_test))):
            if n == 0:
                raise UsageError(f"{path}: the {split} is empty",
                                 hint="give at least one sample in each")
    else:
        if len(x) < 10:
            raise UsageError(f"{path}: {len(x)} samples are too few to split into train and test")
        x_train, x_test, y_train, y_test = _split(x, y)
    return Dataset(path.stem, x_train, y_train, x_test, y_test, _digest(x, y))


def load_dataset(task: TaskSpec, data: str | Path | None = None) -> Dataset:
    """The entry's built-in dataset; with ``data``, one of its variants (``NAME:VARIANT``) or
    the user's ``.npz``."""
    if data is None:
        return get_dataset(task.dataset).loader()
    variant = _named_variant(task, str(data))
    return variant.loader() if variant is not None else load_npz(data, task)


def _named_variant(task: TaskSpec, data: str) -> DatasetVariant | None:
    """The variant that ``data`` names as ``DATASET:VARIANT`` of the task's own dataset; None
    for anything else (a file). A file of that very name is still read as the file."""
    name, sep, variant = data.partition(":")
    if not sep or name != task.dataset or Path(data).exists():
        return None
    variants = get_dataset(task.dataset).variants
    if variant not in variants:
        known = "; ".join(f"{name}:{v} ({spec.description})"
                          for v, spec in variants.items()) or "none"
        raise UsageError(f"--data {data}: dataset '{name}' has no variant '{variant}' "
                         f"(variants: {known})", hint="edgekit datasets lists them all")
    return variants[variant]


def _variants_hint(task: TaskSpec) -> str:
    return "".join(f", or --data {task.dataset}:{v}" for v in get_dataset(task.dataset).variants)


DIGITS = register_dataset(DatasetEntry(
    name="digits",
    task=TaskSpec(dataset="digits", metric="accuracy", input_shape=(1, 8, 8), num_classes=10),
    loader=_digits,
    description="scikit-learn's 1,797 real 8x8 handwritten digits, 10 classes"))
