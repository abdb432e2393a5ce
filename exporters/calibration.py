"""INT8 calibration: deterministic batches of real samples, and the calibration cache on disk.

TensorRT's legacy INT8 path (TensorRT 8.5-10.x, the JetPack 5/6 versions) measures activation
ranges by running the network on representative inputs that a calibrator hands it batch by batch;
the resulting scales are saved as a *calibration cache*, so a rebuild (another precision mix,
another workspace, the same model on a second Jetson) skips the calibration run.

Everything here except ``make_trt_calibrator`` is plain Python and NumPy:

- ``select_samples`` draws N samples from the training split with a fixed seed (a random
  permutation, so every class is represented, and the same N samples on every run);
- ``CalibrationBatcher`` cuts them into full batches of the engine's calibration shape; the last
  partial batch is padded by cycling from the first sample (``last="pad"``, every sample used) or
  dropped (``last="drop"``);
- ``read_calibration_cache`` / ``write_calibration_cache`` round-trip the cache bytes, atomically.

``make_trt_calibrator`` builds the ``IInt8EntropyCalibrator2`` / ``IInt8MinMaxCalibrator``
subclass inside a function, from the ``tensorrt`` module it is given, and delegates to the batcher.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.errors import UnknownNameError, UsageError
from edgekit.exporters.reference import load_arrays, save_arrays
from edgekit.fileio import atomic_write_bytes
from edgekit.paths import edgekit_home

CALIBRATORS = ("entropy", "minmax")
CALIBRATION_FILE = "calibration.npz"
CALIBRATION_CACHE_FILE = "calibration.cache"
DEFAULT_SAMPLES = 512
DEFAULT_BATCH = 32
SAMPLE_SEED = 0
# The first line of a TensorRT calibration cache names the algorithm that wrote it.
_CACHE_TAGS = {"entropy": "EntropyCalibration2", "minmax": "MinMaxCalibration"}


@dataclass(frozen=True)
class CalibrationSamples:
    """Calibration inputs by input name (each (N, ...)) and where they came from."""

    arrays: dict[str, np.ndarray]
    origin: str  # "digits (train split, 512 of 1437 samples, seed 0)", "calibration.npz"

    @property
    def count(self) -> int:
        return int(next(iter(self.arrays.values())).shape[0])

    @property
    def digest(self) -> str:
        """Identifies the samples, so a calibration cache is never reused for other data."""
        h = hashlib.sha256()
        for name in sorted(self.arrays):
            a = np.ascontiguousarray(self.arrays[name])
            h.update(name.encode())
            h.update(str((a.shape, a.dtype.str)).encode())
            h.update(a.tobytes())
        return h.hexdigest()[:12]

    def record(self) -> dict[str, Any]:
        return {"origin": self.origin, "samples": self.count, "digest": self.digest,
                "shapes": {k: list(v.shape) for k, v in self.arrays.items()}}


def select_samples(x: np.ndarray, count: int, seed: int = SAMPLE_SEED) -> np.ndarray:
    """``count`` samples of ``x`` (all of them when it has fewer), the same ones on every run."""
    if count < 1:
        raise UsageError(f"--calib-samples must be at least 1, got {count}")
    order = np.random.default_rng(seed).permutation(len(x))[:count]
    return np.ascontiguousarray(x[np.sort(order)])


def samples_from_dataset(task: Any, data: str | Path | None = None,
                         count: int = DEFAULT_SAMPLES) -> CalibrationSamples:
    """Samples from the registry entry's dataset (or the user's ``.npz``), training split."""
    from edgekit.data import load_dataset

    dataset = load_dataset(task, data)
    x = select_samples(dataset.x_train, count).astype(task.input_dtype, copy=False)
    return CalibrationSamples({task.input_name: x},
                              f"{dataset.name} (train split, {len(x)} of {len(dataset.x_train)} "
                              f"samples, seed {SAMPLE_SEED})")


def save_samples(path: str | Path, samples: CalibrationSamples) -> Path:
    return save_arrays(path, samples.arrays)


def load_samples(path: str | Path, count: int | None = None) -> CalibrationSamples:
    """Samples saved by ``save_samples`` (a bundle's ``calibration.npz``); the first ``count``."""
    arrays, _ = load_arrays(path)
    lengths = {len(a) for a in arrays.values()}
    if len(lengths) != 1:
        raise UsageError(f"{path}: calibration inputs have different sample counts "
                         f"{sorted(lengths)}")
    if count is not None:
        arrays = {k: v[:count] for k, v in arrays.items()}
    n = len(next(iter(arrays.values())))
    return CalibrationSamples(arrays, f"{Path(path).name} ({n} samples)")


class CalibrationBatcher:
    """Full batches of ``batch_size`` samples, in order, deterministic; ``reset()`` starts over.

    TensorRT's calibrators take batches of one fixed size, so the last partial batch is either
    padded by cycling from the first sample (``last="pad"``, the default: every sample counts) or
    dropped (``last="drop"``).
    """

    def __init__(self, samples: CalibrationSamples, batch_size: int, last: str = "pad") -> None:
        if batch_size < 1:
            raise UsageError(f"--calib-batch must be at least 1, got {batch_size}")
        if last not in ("pad", "drop"):
            raise UnknownNameError("partial-batch policy", last, ("pad", "drop"))
        n = samples.count
        if last == "drop" and n < batch_size:
            raise UsageError(f"{n} calibration samples do not fill one batch of {batch_size}",
                             hint="lower --calib-batch or raise --calib-samples")
        self.samples = samples
        self.batch_size = batch_size
        self.last = last
        full, rest = divmod(n, batch_size)
        self.num_batches = full + (1 if rest and last == "pad" else 0)
        self.padded = (batch_size - rest) if rest and last == "pad" else 0
        self.dropped = rest if last == "drop" else 0
        self._next = 0

    def batch(self, index: int) -> dict[str, np.ndarray]:
        """Batch ``index``: sample rows ``index*B .. index*B+B-1``, cycling past the end."""
        if not 0 <= index < self.num_batches:
            raise IndexError(f"batch {index} of {self.num_batches}")
        rows = (np.arange(index * self.batch_size, (index + 1) * self.batch_size)
                % self.samples.count)
        return {k: np.ascontiguousarray(v[rows]) for k, v in self.samples.arrays.items()}

    def next_batch(self) -> dict[str, np.ndarray] | None:
        """The next batch, or None when the samples are used up (TensorRT's end signal)."""
        if self._next >= self.num_batches:
            return None
        self._next += 1
        return self.batch(self._next - 1)

    def reset(self) -> None:
        self._next = 0

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return (self.batch(i) for i in range(self.num_batches))

    def __len__(self) -> int:
        return self.num_batches

    def record(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size, "batches": self.num_batches, "last": self.last,
                "padded_samples": self.padded, "dropped_samples": self.dropped}


# -- the calibration cache ---------------------------------------------------------------------


def default_cache_path(onnx_sha256: str, calibrator: str, samples: CalibrationSamples,
                       batch_size: int) -> Path:
    """Under ``$EDGEKIT_HOME/tensorrt/calibration/``, keyed by model, algorithm, data, batch."""
    key = f"{onnx_sha256[:16]}-{calibrator}-{samples.digest}-b{batch_size}"
    return edgekit_home() / "tensorrt" / "calibration" / f"{key}.cache"


def read_calibration_cache(path: str | Path | None) -> bytes | None:
    """The cache's bytes, or None where there is none yet (TensorRT then calibrates)."""
    if path is None:
        return None
    path = Path(path)
    if not path.exists():
        return None
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read calibration cache {path}: {exc.strerror}") from exc
    return data or None


def write_calibration_cache(path: str | Path, data: bytes) -> Path:
    return atomic_write_bytes(path, bytes(data))


def cache_calibrator(data: bytes) -> str | None:
    """Which calibrator wrote a cache ("entropy", "minmax"), from its first line; None if
    unknown."""
    first = data.split(b"\n", 1)[0].decode("ascii", "replace")
    return next((k for k, tag in _CACHE_TAGS.items() if first.endswith(tag)), None)


# -- TensorRT ----------------------------------------------------------------------------------


def _torch_cuda(array: np.ndarray) -> Any:
    import torch

    return torch.from_numpy(array).to("cuda")


def make_trt_calibrator(trt: Any, kind: str, batcher: CalibrationBatcher,
                        cache_path: str | Path | None,
                        to_device: Callable[[np.ndarray], Any] = _torch_cuda) -> Any:
    """A TensorRT INT8 calibrator of ``kind`` that feeds ``batcher``'s batches.

    ``to_device`` copies a host batch to the GPU and returns an object with ``data_ptr()`` (a torch
    CUDA tensor); the calibrator keeps the current batch alive until TensorRT asks for the next.
    An existing cache at ``cache_path`` is handed to TensorRT, which then skips calibration; a new
    one is written there.
    """
    bases = {"entropy": "IInt8EntropyCalibrator2", "minmax": "IInt8MinMaxCalibrator"}
    if kind not in bases:
        raise UnknownNameError("calibrator", kind, CALIBRATORS)
    base = getattr(trt, bases[kind])

    class Calibrator(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            base.__init__(self)
            self.batcher = batcher
            self.cache_path = cache_path
            self.batches_served = 0
            self.cache_read = False
            self.cache_written = False
            self._held: list[Any] = []

        def get_batch_size(self) -> int:
            # Explicit-batch networks (all of edgekit's) take the batch from the calibration
            # shape; TensorRT, like Polygraphy's calibrator, expects 1 here then.
            return 1

        def get_batch(self, names: list[str], *_: Any) -> list[int] | None:
            batch = batcher.next_batch()
            if batch is None:
                return None
            missing = [n for n in names if n not in batch]
            if missing:
                raise UsageError(f"calibration data has no input {', '.join(missing)}",
                                 hint=f"it has {', '.join(batch)}")
            self._held = [to_device(batch[n]) for n in names]
            self.batches_served += 1
            return [int(t.data_ptr()) for t in self._held]

        def read_calibration_cache(self) -> bytes | None:
            data = read_calibration_cache(cache_path)
            self.cache_read = data is not None
            return data

        def write_calibration_cache(self, cache: Any) -> None:
            if cache_path is not None:
                write_calibration_cache(cache_path, bytes(cache))
                self.cache_written = True

    Calibrator.__name__ = f"Edgekit{base.__name__}"
    return Calibrator()


def artifact_input_spec(manifest: dict[str, Any]) -> Any:
    """The input spec an artifact was made with (``input_spec``), else the one its graph's
    inputs record (fixed shapes; a dynamic batch taken at 1)."""
    from edgekit.inputs import InputField, InputSpec

    if manifest.get("input_spec"):
        return InputSpec.from_records(manifest["input_spec"])
    return InputSpec(tuple(InputField(r["name"], tuple(d if isinstance(d, int) else 1
                                                       for d in r["shape"]), r["dtype"])
                           for r in manifest["inputs"]))


def samples_for_artifact(folder: str | Path, manifest: dict[str, Any], data: str | Path | None,
                         count: int) -> CalibrationSamples:
    """Calibration samples for an ONNX artifact: the user's ``--calib-data`` file (an array per
    model input, named after it; or a dataset's ``x``, ``y``), else the artifact's own
    ``calibration.npz`` (a Jetson bundle), else the entry's dataset."""
    from edgekit.registry import get_entry
    from edgekit.user_data import holds_inputs, load_named_data

    bundled = Path(folder) / CALIBRATION_FILE
    if data is None and bundled.is_file():
        return load_samples(bundled, count)
    spec = artifact_input_spec(manifest)
    if data is not None and holds_inputs(data, spec):
        named = load_named_data(data, spec)
        arrays = {k: select_samples(v, count) for k, v in named.arrays.items()}
        n = len(next(iter(arrays.values())))
        return CalibrationSamples(arrays, f"{Path(data).name} ({n} of {named.count} samples, "
                                          f"seed {SAMPLE_SEED})")
    entry_name = manifest.get("source", {}).get("entry")
    names = ", ".join(spec.names)
    if entry_name is None:
        raise UsageError(f"{manifest['source']['name']} has no built-in dataset to calibrate with",
                         hint=f"give --calib-data FILE.npz holding an array per input "
                              f"({names})")
    try:
        entry = get_entry(entry_name)
    except UsageError as exc:
        raise UsageError(f"{folder} came from model '{entry_name}', which this edgekit does not "
                         f"know, so it has no dataset to calibrate with",
                         hint=f"give --calib-data FILE.npz holding an array per input "
                              f"({names})") from exc
    return samples_from_dataset(entry.task, data, count)
