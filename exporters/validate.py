"""Export validation: compare an exported model's outputs with PyTorch's (after Polygraphy's
comparators).

Results are data: per output the shape check, max / median / p90 / p95 / p99 absolute and
relative error (nearest-rank percentiles, as trtexec and the profiler: always an observed value,
never an interpolation), and the verdict under ``|a - r| <= atol + rtol * |r|``
(numpy.allclose). All failures are collected before one verdict is given.

A default ``atol`` is an absolute figure chosen for outputs of order one: on an output whose
reference peaks at 1e-3 (``resformer-ann``'s logits), atol 1e-4 is 10 % of its scale, and a
graph off by that much passes. So, where the tolerance is the model's default rather than the
user's, the absolute term of an FP32 check is at most ``SCALE_SHARE`` of the output's largest
reference magnitude (``scaled_atol``, shown in the report). Reduced precisions keep their own
rule (``quantize.precision_tolerance`` widens it by the precision's grid instead).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from edgekit.errors import CheckFailed, UsageError

_REL_FLOOR = 1e-12  # relative error of an exact zero reference is measured against this floor
SCALE_SHARE = 1e-2  # a default atol is at most this share of an output's reference peak
PERCENTILE_METHOD = "nearest-rank"  # the same as edgekit.profiler.stats


@dataclass(frozen=True)
class OutputComparison:
    name: str
    shape: tuple[int, ...]
    reference_shape: tuple[int, ...]
    max_abs: float
    median_abs: float
    p90_abs: float
    p95_abs: float
    p99_abs: float
    max_rel: float
    median_rel: float
    p90_rel: float
    p95_rel: float
    p99_rel: float
    mismatched: int  # elements outside atol + rtol*|ref|
    elements: int
    atol: float
    rtol: float
    constant_reference: bool = False  # every reference element equal: the check proves nothing
    scaled_atol: float | None = None  # the atol applied, where SCALE_SHARE of a small output's
    # peak is less than ``atol``; None: ``atol`` itself
    peak: float | None = None  # the reference's largest magnitude, where scaled_atol is set

    @property
    def passed(self) -> bool:
        return (self.shape == self.reference_shape and self.mismatched == 0
                and not self.constant_reference)

    def line(self) -> str:
        mark = "[✓]" if self.passed else "[x]"
        if self.shape != self.reference_shape:
            return f"{mark} {self.name}: shape {self.shape} != reference {self.reference_shape}"
        if self.constant_reference:
            return (f"{mark} {self.name}: the reference is constant (all {self.elements} "
                    f"elements equal), so any graph returning that constant would pass; a silent "
                    f"or untrained net proves nothing")
        atol = (f"atol {self.atol:g}" if self.scaled_atol is None else
                f"atol {self.scaled_atol:.3g} = {SCALE_SHARE:.0%} of the output's peak "
                f"{self.peak:.3g}, not {self.atol:g}")
        return (f"{mark} {self.name}: max abs {self.max_abs:.3g}, max rel {self.max_rel:.3g} "
                f"({atol}, rtol {self.rtol:g}; {self.mismatched}/{self.elements} outside)")


@dataclass(frozen=True)
class ValidationReport:
    outputs: tuple[OutputComparison, ...]
    against: str  # what the reference was ("torch")
    inputs: str  # which inputs were used

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outputs)

    def to_dict(self) -> dict:
        return {"passed": self.passed, "against": self.against, "inputs": self.inputs,
                "percentile_method": PERCENTILE_METHOD,
                "outputs": [{**asdict(o), "passed": o.passed} for o in self.outputs]}

    def lines(self) -> list[str]:
        return [o.line() for o in self.outputs]


class ValidationFailed(CheckFailed):
    """Outputs beyond tolerance; carries the report so callers can show every output."""

    def __init__(self, report: ValidationReport, where: str) -> None:
        bad = [o.name for o in report.outputs if not o.passed and not o.constant_reference]
        constant = [o.name for o in report.outputs if o.constant_reference]
        parts = []
        if bad:
            parts.append(f"outputs {', '.join(bad)} differ from {report.against} beyond tolerance")
        if constant:
            parts.append(f"reference outputs {', '.join(constant)} are constant (every element "
                         f"equal), which proves nothing: any graph returning that constant "
                         f"passes (a spiking net that never fires?)")
        super().__init__(f"{where}: {'; '.join(parts)}")
        self.report = report


def _percentile(values: np.ndarray, q: float) -> float:
    """Nearest rank: the sample at 1-based rank ``ceil(q/100 * n)`` of the sorted values (rank 1
    for q = 0), as ``edgekit.profiler.stats.nearest_rank``; 0 for no values. NaN sorts last."""
    if not values.size:
        return 0.0
    rank = max(1, math.ceil(q / 100 * values.size))
    return float(np.partition(values, rank - 1)[rank - 1])


def is_constant(reference: np.ndarray) -> bool:
    """Whether an output of more than one element has every element equal (within float32 eps
    of its magnitude), NaN-free. Comparing against it cannot tell a correct export from a graph
    that returns the constant, so it fails validation. A one-element output is exempt (nothing
    to vary), and no output of edgekit's models (logits, regressions) is constant by design."""
    r = np.asarray(reference, dtype=np.float64)
    if r.size < 2 or not np.isfinite(r).all():
        return False
    spread = float(r.max() - r.min())
    return bool(spread <= float(np.finfo(np.float32).eps) * max(1.0, float(np.abs(r).max())))


def scale_atol(reference: np.ndarray, atol: float) -> tuple[float, float] | None:
    """``(atol to apply, reference peak)`` where ``SCALE_SHARE`` of the output's largest finite
    reference magnitude is below ``atol`` (a small output); None where ``atol`` stands."""
    r = np.abs(np.asarray(reference, dtype=np.float64))
    r = r[np.isfinite(r)]
    peak = float(r.max()) if r.size else 0.0
    if peak == 0.0 or SCALE_SHARE * peak >= atol:  # all zero: the constant check refuses it
        return None
    return SCALE_SHARE * peak, peak


def compare_output(name: str, actual: np.ndarray, reference: np.ndarray,
                   atol: float, rtol: float, *, scale_small: bool = False) -> OutputComparison:
    """One output's statistics and verdict; ``scale_small``: ``atol`` is a default, to be
    held to ``SCALE_SHARE`` of a small output's scale (module docstring)."""
    a = np.asarray(actual, dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    if a.shape != r.shape:
        nan = float("nan")
        return OutputComparison(name, a.shape, r.shape, *([nan] * 10), int(r.size), int(r.size),
                                atol, rtol)
    scaled = scale_atol(r, atol) if scale_small else None
    applied = atol if scaled is None else scaled[0]
    diff = np.abs(a - r).ravel()
    rel = diff / np.maximum(np.abs(r).ravel(), _REL_FLOOR)
    bad = int(np.count_nonzero(~(diff <= applied + rtol * np.abs(r).ravel())))  # NaN is bad
    return OutputComparison(
        name, a.shape, r.shape,
        float(diff.max(initial=0.0)), _percentile(diff, 50), _percentile(diff, 90),
        _percentile(diff, 95), _percentile(diff, 99),
        float(rel.max(initial=0.0)), _percentile(rel, 50), _percentile(rel, 90),
        _percentile(rel, 95), _percentile(rel, 99),
        bad, int(r.size), atol, rtol, is_constant(r),
        None if scaled is None else scaled[0], None if scaled is None else scaled[1],
    )


def check_tolerances(atol: float | None, rtol: float | None) -> None:
    """Refuse a tolerance that is not a finite number >= 0: an infinite one (or nan, where every
    comparison is false) would pass any output and switch validation off unseen."""
    for name, value in (("--atol", atol), ("--rtol", rtol)):
        if value is not None and not 0 <= value < float("inf"):
            raise UsageError(f"{name} must be a finite number >= 0, got {value}")


def compare_outputs(actual: dict[str, np.ndarray], reference: dict[str, np.ndarray],
                    atol: float, rtol: float, against: str = "torch",
                    inputs: str = "example inputs", *,
                    scale_small: bool = False) -> ValidationReport:
    """Every output of ``reference`` against ``actual``; ``scale_small``: ``atol`` is a default
    FP32 tolerance, held to ``SCALE_SHARE`` of each small output's scale."""
    check_tolerances(atol, rtol)
    missing = set(reference) - set(actual)
    if missing:
        raise CheckFailed(f"exported model lacks output(s) {', '.join(sorted(missing))}")
    return ValidationReport(
        tuple(compare_output(n, actual[n], reference[n], atol, rtol, scale_small=scale_small)
              for n in reference),
        against, inputs,
    )
