"""The coupled recurrence as one standard ONNX ``Scan`` operator in exported graphs.

Traced as it runs in torch, the scan unrolls into about six nodes per packet (or the chunked
scan's passes beyond ``ssm.SINGLE_CHUNK`` packets): ONNX Runtime's CPU provider then pays its
per-node cost some 1,200 times per block at 100 packets, plus splitting whole frames of terms
into packets and concatenating the states again. ``Scan`` runs the step as a subgraph over the
time axis instead: its inputs are sliced without splitting, each step writes its read-out
C · h (2 x E values, not the 2 x N x E state) straight into the output, and the graph has the
same ~290 nodes at every length. The terms are made time-major so that the scanned axis is the
outermost (ONNX Runtime transposes any other axis to the front first). Measured in
benchmarks/wifi_mamba.py against the unrolled graphs it replaces.

``scan_for_export`` is the ``export_scan`` that WiFi-Mamba's blocks (model.py) hand to
``ssm.dual_selective_scan``, which calls it under ``torch.onnx.export`` (the maths imports
nothing of the export): in torch it computes the scan with ``ssm.step_scan`` (the values the
trace carries on with), and the exporter sees one ``edgekit::CoupledScan`` node, which
``lower`` rewrites (``edgekit.exporters.lowering``).
"""
from __future__ import annotations

from typing import Any

import torch

from edgekit.exporters.lowering import register_lowering
from edgekit.methods.wifi_mamba import ssm

OP_TYPE = "CoupledScan"


class _CoupledScan(torch.autograd.Function):
    """Time-major terms ā, ΔBu (L, B, 2, N, E), tanh(W) (2, N, E), h (B, 2, N, E) and
    C (L, B, 2, N) -> read-out C_t · h_t (L, B, 2, E) and the final state (B, 2, N, E)."""

    @staticmethod
    def forward(ctx: Any, decay: torch.Tensor, share: torch.Tensor, drive: torch.Tensor,
                h: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        states, last = ssm.step_scan(decay.transpose(0, 1), share, drive.transpose(0, 1), h)
        return ssm.read_out(states, c.transpose(0, 1)).transpose(0, 1), last

    @staticmethod
    def symbolic(g: Any, decay: Any, share: Any, drive: Any, h: Any, c: Any) -> Any:
        y, last = g.op(f"edgekit::{OP_TYPE}", decay, share, drive, h, c, outputs=2)
        sizes = decay.type().varyingSizes()  # (L, B, 2, N, E), None where dynamic
        y.setType(decay.type().with_sizes([*sizes[:3], sizes[4]]))  # the trace's shape checks
        last.setType(h.type())
        return y, last


def scan_for_export(dt: torch.Tensor, u: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
                    A: torch.Tensor, share: torch.Tensor,
                    h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``ssm.chunked_scan``'s inputs and outputs, batch-major (B, L, ...): C · h (B, L, 2, E)
    and the final state (B, 2, N, E), traced as one Scan."""
    decay, drive = ssm.transitions(dt.transpose(0, 1), u.transpose(0, 1), b.transpose(0, 1), A)
    y, last = _CoupledScan.apply(decay, share, drive, h, c.transpose(0, 1))
    return y.transpose(0, 1), last


def lower(node: Any, prefix: str) -> tuple[list[Any], list[Any]]:
    """``edgekit::CoupledScan`` in standard ONNX: Unsqueeze C to (L, B, 2, 1, N), a Scan over
    axis 0 whose body is ``ssm.step_scan``'s step (h ← ā ⊙ (h - g) + g + ΔBu, g = tanh(W) ⊙
    flip(h)) and the read-out (1 x N) @ (N x E), then Squeeze the read-out back."""
    from onnx import TensorProto, helper

    decay, share, drive, h, c = node.input
    y, last = node.output

    def name(part: str) -> str:
        return prefix + part

    def ints(part: str, *values: int) -> Any:
        return helper.make_tensor(name(part), TensorProto.INT64, [len(values)], list(values))

    # flip(h): the streams swapped by a Gather, 6-7 % faster than a Slice with step -1 (measured)
    swap = ints("swap", 1, 0)
    body = helper.make_graph(
        [helper.make_node("Gather", [name("h"), swap.name], [name("flipped")], axis=-3),
         helper.make_node("Mul", [share, name("flipped")], [name("g")]),  # share: outer scope
         helper.make_node("Add", [name("g"), name("drive_t")], [name("g_plus_v")]),
         helper.make_node("Sub", [name("h"), name("g")], [name("h_minus_g")]),
         helper.make_node("Mul", [name("decay_t"), name("h_minus_g")], [name("decayed")]),
         helper.make_node("Add", [name("decayed"), name("g_plus_v")], [name("next")]),
         helper.make_node("MatMul", [name("c_t"), name("next")], [name("y_t")])],
        name("step"),
        [helper.make_tensor_value_info(name(n), TensorProto.FLOAT, None)
         for n in ("h", "decay_t", "drive_t", "c_t")],
        [helper.make_tensor_value_info(name(n), TensorProto.FLOAT, None) for n in ("next", "y_t")],
        initializer=[swap])
    axis = ints("readout_axis", 3)
    nodes = [
        helper.make_node("Unsqueeze", [c, axis.name], [name("c_rows")], name=name("Unsqueeze")),
        helper.make_node("Scan", [h, decay, drive, name("c_rows")], [last, name("y_rows")],
                         name=name("Scan"), body=body, num_scan_inputs=3,
                         scan_input_axes=[0, 0, 0], scan_output_axes=[0]),
        helper.make_node("Squeeze", [name("y_rows"), axis.name], [y], name=name("Squeeze"))]
    return nodes, [axis]


register_lowering(OP_TYPE, lower)
