"""Numeric precisions, each defined once with what every layer needs to know about it.

Device profiles (peaks per precision), calibration (the dtype a GEMM runs in), the TensorRT
exporter (the engine precisions and their ``trtexec`` switch) and ``edgekit devices`` (the peak
columns) all read this table, so a precision cannot be known to one of them and missing from
another. Adding a precision is one ``register_precision`` line here (or in a plugin,
``edgekit.plugins``); the name lists below are functions, read when asked, so a precision
registered after import is in them.
"""
from __future__ import annotations

from dataclasses import dataclass

from edgekit.extensions import Registry


@dataclass(frozen=True, kw_only=True)
class Precision:
    name: str  # the name in profiles, reports and on the command line: "fp16"
    torch_dtype: str | None  # the dtype calibration's GEMM runs in; None: no torch GEMM to time
    integer: bool = False  # peaks count OP/s (TOPS), not FLOP/s
    gpu_only: bool = False  # a GPU tensor-core mode (TF32) with no CPU kernel to time
    calibrate: bool = False  # measured by ``edgekit devices --calibrate`` unless told otherwise
    trtexec_flag: str | None = None  # an engine precision edgekit builds, and trtexec's switch
    builder_flag: str | None = None  # the TensorRT BuilderFlag it sets; None: plain fp32, TF32 off
    column: bool = False  # a peak column of the ``edgekit devices`` table
    # The grid's resolution relative to a value's magnitude: the unit roundoff 2^-p of a float
    # with a p-bit significand, or one step of a symmetric 8-bit grid spanning +-max (2/255, about
    # 2^-7). Validation of a reduced-precision ONNX artifact scales its tolerance by it.
    roundoff: float
    onnx: bool = False  # edgekit makes an ONNX Runtime artifact of it (``export --precision``)
    bits: int | None = None  # storage width of one element (tf32 is stored as 32); None: unknown

    @property
    def element_bytes(self) -> float | None:
        """Bytes one weight or activation takes at this precision, for ``edgekit estimate``."""
        return self.bits / 8 if self.bits else None

    @property
    def unit(self) -> str:
        """``OP`` or ``FLOP``: what a peak of this precision counts per second."""
        return "OP" if self.integer else "FLOP"


_PRECISIONS: Registry[Precision] = Registry("precision")


def register_precision(precision: Precision) -> Precision:
    return _PRECISIONS.add(precision.name, precision)


def list_precisions() -> list[Precision]:
    """Every precision, narrowest mantissa last (the order tables show them in)."""
    return _PRECISIONS.entries()


def get_precision(name: str) -> Precision:
    return _PRECISIONS.get(name)


register_precision(Precision(name="fp64", torch_dtype="float64", roundoff=2.0**-53, bits=64))
register_precision(Precision(name="fp32", torch_dtype="float32", calibrate=True,
                             trtexec_flag="--noTF32", column=True, roundoff=2.0**-24, onnx=True,
                             bits=32))
register_precision(Precision(name="tf32", torch_dtype="float32", gpu_only=True, roundoff=2.0**-11,
                             bits=32))
register_precision(Precision(name="fp16", torch_dtype="float16", calibrate=True,
                             trtexec_flag="--fp16", builder_flag="FP16", column=True,
                             roundoff=2.0**-11, onnx=True, bits=16))
register_precision(Precision(name="bf16", torch_dtype="bfloat16", calibrate=True, roundoff=2.0**-8,
                             bits=16))
register_precision(Precision(name="int8", torch_dtype="int8", integer=True, calibrate=True,
                             trtexec_flag="--int8",
                             builder_flag="INT8", column=True, roundoff=2.0**-7, onnx=True,
                             bits=8))



def all_names() -> tuple[str, ...]:
    """What a device profile may give a peak for."""
    return tuple(p.name for p in list_precisions())


def tensorrt_names() -> tuple[str, ...]:
    """The engine precisions edgekit builds (``--to tensorrt --precision``)."""
    return tuple(p.name for p in list_precisions() if p.trtexec_flag)


def calibrated_names() -> tuple[str, ...]:
    """What ``edgekit devices --calibrate`` measures unless told otherwise."""
    return tuple(p.name for p in list_precisions() if p.calibrate)


def onnx_names() -> tuple[str, ...]:
    """The ONNX Runtime artifact precisions (``--to onnx --precision``)."""
    return tuple(p.name for p in list_precisions() if p.onnx)
