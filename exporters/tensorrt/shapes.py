"""Optimisation-profile shapes in trtexec's syntax (``input:1x1x8x8``), checked against the
ONNX model's inputs, and the shapes INT8 calibration runs at."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from edgekit.errors import UnknownNameError, UsageError
from edgekit.exporters.calibration import DEFAULT_BATCH, CalibrationSamples

# A dynamic dimension that no --min/--opt/--max-shape names gets this range (trtexec would fix it
# at 1; a range keeps the engine usable at other batch sizes).
DEFAULT_DYNAMIC_RANGE = (1, 1, 32)


def fmt_dims(dims: Sequence[int]) -> str:
    return "x".join(str(d) for d in dims)


def parse_shape(text: str, flag: str = "--opt-shape") -> tuple[str, tuple[int, ...]]:
    """``"input:1x1x8x8"`` -> ("input", (1, 1, 8, 8)); trtexec's syntax (name may be quoted)."""
    name, sep, dims = text.strip().rpartition(":")
    name = name.strip().strip("'\"")
    if not sep or not name or not dims:
        raise UsageError(f"{flag} '{text}': expected NAME:DIMS, for example input:1x1x8x8")
    from edgekit.inputs import parse_dims

    return name, parse_dims(dims, f"{flag} '{text}'", "input:1x1x8x8")


def parse_shapes(specs: Iterable[str], flag: str) -> dict[str, tuple[int, ...]]:
    """Repeated options and comma-separated lists (``a:1x3,b:1x5``) alike; names once each."""
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        for part in spec.split(","):
            if not part.strip():
                continue
            name, shape = parse_shape(part, flag)
            if name in shapes:
                raise UsageError(f"{flag} names input '{name}' twice")
            shapes[name] = shape
    return shapes


def _quote_name(name: str) -> str:
    return f"'{name}'" if any(c in name for c in ":, ") else name


@dataclass(frozen=True)
class ShapeRange:
    """One input's optimisation-profile range; min <= opt <= max in every dimension."""

    name: str
    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]

    def __post_init__(self) -> None:
        if not len(self.min) == len(self.opt) == len(self.max):
            raise UsageError(f"input '{self.name}': --min-shape, --opt-shape and --max-shape "
                             f"have different numbers of dimensions "
                             f"({fmt_dims(self.min)}, {fmt_dims(self.opt)}, "
                             f"{fmt_dims(self.max)})")
        if not all(lo <= mid <= hi
                   for lo, mid, hi in zip(self.min, self.opt, self.max, strict=False)):
            raise UsageError(f"input '{self.name}': need min <= opt <= max in every dimension, got "
                             f"{fmt_dims(self.min)}, {fmt_dims(self.opt)}, {fmt_dims(self.max)}")

    @property
    def fixed(self) -> bool:
        return self.min == self.opt == self.max

    def spec(self, which: str) -> str:
        """trtexec's ``name:dims`` for "min", "opt" or "max"."""
        return f"{_quote_name(self.name)}:{fmt_dims(getattr(self, which))}"

    def contains(self, shape: Sequence[int]) -> bool:
        return len(shape) == len(self.min) and all(
            lo <= d <= hi for lo, d, hi in zip(self.min, shape, self.max, strict=False))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "min": list(self.min), "opt": list(self.opt),
                "max": list(self.max)}


def shape_ranges(min_shapes: Iterable[str] = (), opt_shapes: Iterable[str] = (),
                 max_shapes: Iterable[str] = ()) -> tuple[ShapeRange, ...]:
    """Ranges from the three options: all three for an input, or ``--opt-shape`` alone (then
    min = max = opt, as trtexec does)."""
    lo, mid, hi = (parse_shapes(min_shapes, "--min-shape"), parse_shapes(opt_shapes, "--opt-shape"),
                   parse_shapes(max_shapes, "--max-shape"))
    ranges = []
    for name in dict.fromkeys([*lo, *mid, *hi]):
        given = [name in lo, name in mid, name in hi]
        if given == [False, True, False]:
            ranges.append(ShapeRange(name, mid[name], mid[name], mid[name]))
        elif all(given):
            ranges.append(ShapeRange(name, lo[name], mid[name], hi[name]))
        else:
            raise UsageError(f"input '{name}': give --min-shape, --opt-shape and --max-shape "
                             f"together, or --opt-shape alone")
    return tuple(ranges)


def dynamic_dim(dim: Any) -> bool:
    """A named (``"batch"``) or unset (0, -1) ONNX dimension."""
    return not isinstance(dim, int) or dim <= 0


def is_dynamic(inputs: Sequence[dict[str, Any]]) -> bool:
    """Whether any model input (manifest records: name, shape, dtype) has a dynamic dimension."""
    return any(dynamic_dim(d) for i in inputs for d in i["shape"])


def resolve_profile(ranges: Sequence[ShapeRange],
                    inputs: Sequence[dict[str, Any]]) -> tuple[ShapeRange, ...]:
    """One range per model input: the given ones checked against the ONNX model's shapes, the
    others fixed at their static shape (dynamic dimensions: ``DEFAULT_DYNAMIC_RANGE``)."""
    names = [i["name"] for i in inputs]
    given = {r.name: r for r in ranges}
    for name in given:
        if name not in names:
            raise UnknownNameError("model input", name, names)
    resolved = []
    for inp in inputs:
        dims = list(inp["shape"])
        r = given.get(inp["name"])
        if r is None:
            lo, mid, hi = (tuple(DEFAULT_DYNAMIC_RANGE[k] if dynamic_dim(d) else int(d)
                                 for d in dims) for k in range(3))
            resolved.append(ShapeRange(inp["name"], lo, mid, hi))
            continue
        if len(r.min) != len(dims):
            raise UsageError(f"input '{r.name}' has {len(dims)} dimensions in the ONNX model; "
                             f"the shape range gives {len(r.min)} ({fmt_dims(r.opt)})")
        for i, d in enumerate(dims):
            if not dynamic_dim(d) and not r.min[i] == r.opt[i] == r.max[i] == d:
                raise UsageError(
                    f"input '{r.name}' dimension {i} is fixed at {d} in the ONNX model, but the "
                    f"shape range asks for {r.min[i]}..{r.max[i]}",
                    hint="export the ONNX model with --dynamic-batch" if i == 0 else None)
        resolved.append(r)
    return tuple(resolved)



def calibration_shapes(ranges: Sequence[ShapeRange], inputs: Sequence[dict[str, Any]],
                       samples: CalibrationSamples,
                       calib_batch: int | None) -> tuple[int, dict[str, tuple[int, ...]]]:
    """The calibration batch size and each input's calibration shape.

    A model with a fixed batch calibrates at that batch; a dynamic one at ``calib_batch`` (32 by
    default), through a separate calibration profile, so it need not lie in the engine's range.
    """
    fixed = {int(i["shape"][0]) for i in inputs if i["shape"] and not dynamic_dim(i["shape"][0])}
    if len(fixed) > 1:
        raise UsageError(f"model inputs have different fixed batch sizes {sorted(fixed)}")
    if fixed:
        (batch,) = fixed
        if calib_batch is not None and calib_batch != batch:
            raise UsageError(f"--calib-batch {calib_batch}: the ONNX model has a fixed batch of "
                             f"{batch}", hint="drop --calib-batch or export with --dynamic-batch")
    else:
        batch = calib_batch or DEFAULT_BATCH
    shapes = {}
    for inp in inputs:
        if inp["name"] not in samples.arrays:
            raise UsageError(f"calibration data has no input '{inp['name']}'",
                             hint=f"it has {', '.join(samples.arrays)}")
        sample = tuple(samples.arrays[inp["name"]].shape[1:])
        dims = list(inp["shape"])[1:]
        if len(sample) != len(dims) or any(not dynamic_dim(d) and d != s
                                           for d, s in zip(dims, sample, strict=False)):
            raise UsageError(f"calibration samples of '{inp['name']}' have shape "
                             f"{fmt_dims(sample)}; the model takes {fmt_dims(inp['shape'])}")
        shapes[inp["name"]] = (batch, *sample)
    return batch, shapes
