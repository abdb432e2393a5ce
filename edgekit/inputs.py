"""A model's inputs as data (optimum's ``OnnxConfig.inputs``, AI Hub's ``input_specs``).

An ``InputSpec`` lists a model's named inputs, each with its dtype, its shape (batch first) and
the range its example values are drawn from. It is the one place that makes inputs for export,
validation, calibration and profiling alike, whether the model came from the registry, a user's
callable, a ``.pt2`` file or an ONNX graph. On the command line an input is written as trtexec
writes shapes: ``--input NAME:DIMS[:DTYPE[:LOW..HIGH]]`` (``input_ids:1x128:int64:0..30522``).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from edgekit.errors import UsageError

# The dtypes an input may have, by the names numpy and torch share.
DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8",
          "uint8", "bool")
FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")
# A shape larger than this many elements per input is refused (a typo such as 1x3x2240x2240
# would otherwise allocate gigabytes before anything useful happens).
MAX_ELEMENTS = 2**31
INPUT_SYNTAX = "NAME:DIMS[:DTYPE[:LOW..HIGH]], for example input_ids:1x128:int64:0..30522"


@dataclass(frozen=True)
class InputField:
    """One named input. ``shape`` starts with the batch dimension; ``dynamic`` names the axes
    that may vary (axis -> symbolic name, the batch axis among them where it is dynamic).
    Example values are drawn uniformly from ``[low, high)`` (integers: ``low`` .. ``high - 1``).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    low: float = 0.0
    high: float = 1.0
    dynamic: tuple[tuple[int, str], ...] = ()

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise UsageError(f"input '{self.name}': unknown dtype '{self.dtype}'",
                             hint=f"valid: {', '.join(DTYPES)}")
        if not self.shape or any(d < 1 for d in self.shape):
            raise UsageError(f"input '{self.name}': every dimension must be at least 1, "
                             f"got {list(self.shape)}")
        if math.prod(self.shape) > MAX_ELEMENTS:
            raise UsageError(f"input '{self.name}': shape {'x'.join(map(str, self.shape))} has "
                             f"more than {MAX_ELEMENTS} elements")
        if not (math.isfinite(self.low) and math.isfinite(self.high) and self.low < self.high):
            raise UsageError(f"input '{self.name}': the value range {self.low}..{self.high} "
                             f"must be finite with LOW < HIGH")

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOAT_DTYPES

    def shape_at(self, batch: int) -> tuple[int, ...]:
        return (batch, *self.shape[1:])

    def generate(self, batch: int, generator: torch.Generator) -> torch.Tensor:
        """Example values of this input at ``batch``, drawn from ``generator``."""
        shape = self.shape_at(batch)
        dtype = getattr(torch, self.dtype)
        if self.dtype == "bool":
            return torch.randint(0, 2, shape, generator=generator).bool()
        if self.is_float:
            x = torch.rand(shape, generator=generator)
            if (self.low, self.high) != (0.0, 1.0):
                x = x * (self.high - self.low) + self.low
            return x.to(dtype)
        return torch.randint(int(self.low), max(int(self.high), int(self.low) + 1), shape,
                             generator=generator, dtype=dtype)

    def record(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype,
                "range": [self.low, self.high],
                **({"dynamic": {str(a): n for a, n in self.dynamic}} if self.dynamic else {})}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> InputField:
        low, high = record.get("range", (0.0, 1.0))
        dynamic = tuple((int(a), str(n)) for a, n in (record.get("dynamic") or {}).items())
        return cls(str(record["name"]), tuple(int(d) for d in record["shape"]),
                   str(record["dtype"]), float(low), float(high), dynamic)

    def describe(self) -> str:
        text = f"{self.name}:{'x'.join(map(str, self.shape))}:{self.dtype}"
        return text if self.is_float else f"{text} in [{self.low:g}, {self.high:g})"


@dataclass(frozen=True)
class InputOverride:
    """What ``--input`` says of one input; what it leaves out (dtype, range) comes from the
    model where the model says it."""

    name: str
    shape: tuple[int, ...]
    dtype: str | None = None
    value_range: tuple[float, float] | None = None

    def apply(self, base: InputField | None = None,
              dynamic: tuple[tuple[int, str], ...] = ()) -> InputField:
        """The field this override makes of ``base`` (or, with none, of the defaults)."""
        dtype = self.dtype or (base.dtype if base is not None else "float32")
        if self.value_range is not None:
            low, high = self.value_range
        elif base is not None and base.dtype == dtype:
            low, high = base.low, base.high
        else:
            low, high = (0.0, 1.0) if dtype in FLOAT_DTYPES else (0.0, 2.0)
        if base is not None and len(self.shape) != len(base.shape):
            raise UsageError(f"--input {self.name}: {len(self.shape)} dimensions, but the "
                             f"model's input has {len(base.shape)} "
                             f"({'x'.join(map(str, base.shape))})")
        try:
            return InputField(self.name, self.shape, dtype, low, high,
                              dynamic or (base.dynamic if base is not None else ()))
        except UsageError as exc:
            raise UsageError(f"--input {self.name}: {exc.message}", hint=exc.hint) from None


@dataclass(frozen=True)
class InputSpec:
    """A model's named inputs, in the order its ``forward`` takes them."""

    fields: tuple[InputField, ...]

    def __post_init__(self) -> None:
        if not self.fields:
            raise UsageError("a model needs at least one input")
        names = [f.name for f in self.fields]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise UsageError(f"input '{twice[0]}' is named twice")

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    @property
    def batch(self) -> int:
        return self.fields[0].shape[0]

    def __getitem__(self, name: str) -> InputField:
        for f in self.fields:
            if f.name == name:
                return f
        raise UsageError(f"the model has no input '{name}'", hint=f"its inputs: "
                                                                  f"{', '.join(self.names)}")

    def example(self, batch: int = 1, seed: int = 0) -> tuple[torch.Tensor, ...]:
        """Deterministic example inputs at ``batch`` (one generator, inputs in order)."""
        gen = torch.Generator().manual_seed(seed)
        return tuple(f.generate(batch, gen) for f in self.fields)

    def feed(self, batch: int = 1, seed: int = 0) -> dict[str, np.ndarray]:
        return {f.name: t.numpy() for f, t in zip(self.fields, self.example(batch, seed),
                                                  strict=True)}

    def records(self) -> list[dict[str, Any]]:
        return [f.record() for f in self.fields]

    @classmethod
    def from_records(cls, records: Iterable[Mapping[str, Any]]) -> InputSpec:
        return cls(tuple(InputField.from_record(r) for r in records))

    def describe(self) -> str:
        return ", ".join(f.describe() for f in self.fields)

    def with_overrides(self, overrides: Sequence[InputOverride]) -> InputSpec:
        """This spec with each ``--input`` applied to the input of its name; an override that
        names no input, or changes an input's rank, is an error."""
        by_name = {o.name: o for o in overrides}
        unknown = [n for n in by_name if n not in self.names]
        if unknown:
            raise UsageError(f"--input names '{unknown[0]}', which the model does not take",
                             hint=f"its inputs: {self.describe()}")
        return InputSpec(tuple(by_name[f.name].apply(f) if f.name in by_name else f
                               for f in self.fields))

    def check_arrays(self, arrays: Mapping[str, np.ndarray], where: str) -> None:
        """``arrays`` hold every input with its dtype and (past the batch axis) its shape."""
        missing = [n for n in self.names if n not in arrays]
        if missing:
            raise UsageError(f"{where} has no array '{missing[0]}'",
                             hint=f"the model's inputs: {self.describe()}")
        counts = set()
        for f in self.fields:
            a = arrays[f.name]
            fixed = [(i, d) for i, d in enumerate(f.shape)
                     if i > 0 and i not in dict(f.dynamic)]
            if a.ndim != len(f.shape) or any(a.shape[i] != d for i, d in fixed):
                raise UsageError(f"{where}: array '{f.name}' has shape {list(a.shape)}, the "
                                 f"model takes {['N', *f.shape[1:]]}")
            if not _same_kind(a.dtype, f.dtype):
                raise UsageError(f"{where}: array '{f.name}' is {a.dtype}, the model takes "
                                 f"{f.dtype}")
            if a.dtype.kind == "f" and not np.isfinite(a).all():
                raise UsageError(f"{where}: array '{f.name}' holds NaN or infinity")
            counts.add(a.shape[0])
        if len(counts) > 1:
            raise UsageError(f"{where}: the inputs have different sample counts "
                             f"{sorted(counts)}")


def _same_kind(actual: np.dtype, declared: str) -> bool:
    """An array of ``actual`` dtype may feed an input of ``declared`` dtype (floats to floats,
    integers to integers of any width, bools to bools)."""
    if declared == "bool":
        return actual.kind == "b"
    if declared in FLOAT_DTYPES:
        return actual.kind == "f"
    return actual.kind in "iu"


def check_batch(batch: int, flag: str = "--batch") -> int:
    """``batch`` when it is at least 1, else one UsageError naming ``flag`` (the option that set
    it), before any work."""
    if batch < 1:
        raise UsageError(f"{flag} must be at least 1, got {batch}")
    return batch


def parse_dims(dims: str, where: str, example: str) -> tuple[int, ...]:
    """``"1x3x224x224"`` -> (1, 3, 224, 224), trtexec's DIMS; ``where`` and ``example`` word
    the one-line error."""
    try:
        shape = tuple(int(d) for d in dims.lower().split("x"))
    except ValueError:
        raise UsageError(f"{where}: dimensions must be integers separated by 'x', for example "
                         f"{example}") from None
    if any(d < 1 for d in shape):
        raise UsageError(f"{where}: every dimension must be at least 1")
    return shape


def parse_input(text: str) -> InputOverride:
    """``input_ids:1x128:int64:0..30522`` -> an ``InputOverride`` (trtexec's NAME:DIMS, with an
    optional dtype and value range)."""
    parts = text.strip().split(":")
    if not 2 <= len(parts) <= 4 or not parts[0].strip() or not parts[1].strip():
        raise UsageError(f"--input '{text}': expected {INPUT_SYNTAX}")
    name, dims = parts[0].strip().strip("'\""), parts[1].strip()
    dtype = parts[2].strip() if len(parts) > 2 and parts[2].strip() else None
    if dtype is not None and dtype not in DTYPES:
        raise UsageError(f"--input '{text}': unknown dtype '{dtype}'",
                         hint=f"valid: {', '.join(DTYPES)}")
    shape = parse_dims(dims, f"--input '{text}'", "input_ids:1x128")
    value_range = None
    if len(parts) == 4:
        lo, sep, hi = parts[3].partition("..")
        try:
            value_range = (float(lo), float(hi))
        except ValueError:
            raise UsageError(f"--input '{text}': the range must be LOW..HIGH, for example "
                             f"0..30522") from None
        if not sep or not all(math.isfinite(v) for v in value_range) \
                or value_range[0] >= value_range[1]:
            raise UsageError(f"--input '{text}': the range must be LOW..HIGH, finite, with "
                             f"LOW < HIGH")
    override = InputOverride(name, shape, dtype, value_range)
    override.apply()  # every check a field makes (size), now
    return override


def parse_inputs(texts: Iterable[str]) -> list[InputOverride]:
    overrides = [parse_input(t) for t in texts]
    names = [o.name for o in overrides]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UsageError(f"--input names '{twice[0]}' twice")
    return overrides


def _tensor_field(name: str, tensor: torch.Tensor) -> InputField:
    """An input field shaped and typed like ``tensor``; integer values are drawn below one
    past the largest example value (token ids stay inside the vocabulary the example used)."""
    dtype = str(tensor.dtype).removeprefix("torch.")
    if dtype not in DTYPES:
        raise UsageError(f"input '{name}' is a {dtype} tensor; edgekit takes {', '.join(DTYPES)}")
    if tensor.dim() == 0:
        raise UsageError(f"input '{name}' is a scalar; edgekit needs a batch dimension first")
    if dtype in FLOAT_DTYPES or dtype == "bool" or tensor.numel() == 0:
        return InputField(name, tuple(tensor.shape), dtype)
    low, high = int(tensor.min()), int(tensor.max()) + 1
    return InputField(name, tuple(tensor.shape), dtype, float(min(low, 0)),
                      float(max(high, 2)))


def spec_from_tensors(names: Sequence[str], tensors: Sequence[torch.Tensor]) -> InputSpec:
    return InputSpec(tuple(_tensor_field(n, t) for n, t in zip(names, tensors, strict=True)))


def spec_from_onnx(path: str | Path, overrides: Sequence[InputOverride] = (),
                   batch: int | None = None) -> InputSpec:
    """The inputs an ONNX graph declares (initialisers excluded). A symbolic dimension takes
    ``batch`` on axis 0 where given; any other needs a value from ``overrides`` (``--input``),
    else this fails naming it."""
    import onnx
    from onnx import helper

    try:
        graph = onnx.load(str(path), load_external_data=False).graph
    except Exception as exc:  # protobuf's DecodeError and friends
        raise UsageError(f"{path} is not a valid ONNX model ({type(exc).__name__}: "
                         f"{str(exc)[:200]})") from exc
    given = {o.name: o for o in overrides}
    declared = [n for n in (v.name for v in graph.input)
                if n not in {i.name for i in graph.initializer}]
    unknown = [n for n in given if n not in declared]
    if unknown:
        raise UsageError(f"--input names '{unknown[0]}', which {Path(path).name} does not take",
                         hint=f"its inputs: {', '.join(declared)}")
    fields = []
    for value in graph.input:
        if value.name not in declared:
            continue
        t = value.type.tensor_type
        dtype = str(helper.tensor_dtype_to_np_dtype(t.elem_type))
        dims = [(d.dim_param or None, d.dim_value) for d in t.shape.dim]
        dynamic = tuple((i, p) for i, (p, v) in enumerate(dims) if p or v <= 0)
        if value.name in given:
            o = given[value.name]
            if len(o.shape) != len(dims):
                raise UsageError(f"--input {o.name}: {len(o.shape)} dimensions, but "
                                 f"{Path(path).name} declares {len(dims)}")
            clash = [i for i, (p, v) in enumerate(dims) if not p and v > 0 and o.shape[i] != v]
            if clash:
                i = clash[0]
                raise UsageError(f"--input {o.name}: dimension {i} is {o.shape[i]}, but "
                                 f"{Path(path).name} fixes it at {dims[i][1]}")
            if o.dtype is not None and o.dtype != dtype:
                raise UsageError(f"--input {o.name}: dtype {o.dtype}, but {Path(path).name} "
                                 f"declares {dtype}")
            fields.append(replace(o, dtype=dtype).apply(dynamic=dynamic))
            continue
        shape = []
        for i, (param, v) in enumerate(dims):
            if not param and v > 0:
                shape.append(v)
            elif i == 0 and batch is not None:
                shape.append(batch)
            else:
                raise UsageError(f"input '{value.name}' of {Path(path).name} has a symbolic "
                                 f"dimension {i} ('{param or '?'}')",
                                 hint=f"give its size: --input {value.name}:"
                                      + "x".join(str(v) if not p and v > 0 else "N"
                                                 for p, v in dims))
        if dtype not in DTYPES:
            raise UsageError(f"input '{value.name}' of {Path(path).name} is {dtype}; edgekit "
                             f"takes {', '.join(DTYPES)}")
        low, high = (0.0, 1.0) if dtype in FLOAT_DTYPES else (0.0, 2.0)
        fields.append(InputField(value.name, tuple(shape), dtype, low, high, dynamic))
    return InputSpec(tuple(fields))
