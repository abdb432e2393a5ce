"""An analytic latency model of each mode: compute from FLOPs, communication from bytes.

Per rank and forward pass::

    latency = compute(mode, N)  +  sum over its messages of link.message_time(bytes)

* FLOPs: the matmuls of each block as the mode splits them (projections 2*n*D*D', attention
  4*n_q*n_kv*D', MLP 4*n*D*M', VQ search 2*n*D*K); layer norms, softmax and GELU are left out,
  and the rate absorbs them. The busiest rank counts (the one with the most tokens).
* or, better, compute measured: rank 0's work at world size N timed in one process with no
  network (``calibrate.measure_compute``); FLOPs then only scale a measurement to a world size
  the model cannot be split for.
* rate: FLOP/s measured on this machine from the single-device run (``calibrate_rate``), or
  a device profile's fp32 peak.
* messages: the mode's exchange pattern with the same ring step sizes ``collectives`` counts,
  at the expected packet loss; compute and communication do not overlap in the runtime.

It is checked against the emulated runs (predicted vs measured median latency) and then
projects 4 and 8 devices, each as fast as one rank here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgekit.errors import UnknownNameError
from edgekit.methods.astra import token_shards
from edgekit.methods.astra.runtime.bitpack import index_bits, packed_bytes
from edgekit.methods.astra.runtime.collectives import (
    all_gather_steps,
    all_reduce_steps,
    all_to_all_steps,
)
from edgekit.methods.astra.runtime.link import LinkSpec, message_time

FP32 = 4


@dataclass(frozen=True)
class Workload:
    """What one forward pass computes: the model's shape, the tokens and the batch."""

    tokens: int  # patch tokens T (the class token is extra)
    dim: int
    depth: int
    heads: int
    mlp_ratio: float = 4.0
    groups: int = 32
    codes: int = 1024
    batch: int = 1
    bp_blocks: int = 4

    @classmethod
    def from_result(cls, result: dict[str, Any], mlp_ratio: float = 4.0) -> Workload:
        return cls(result["tokens"], result["dim"], result["depth"], result["heads"], mlp_ratio,
                   result["groups"], result["codes"], result["batch"], result["bp_blocks"])


def block_flops(queries: int, keys: int, kv_rows: int, width: int, dim: int, hidden: int
                ) -> float:
    """One block's matmul FLOPs: ``queries`` rows through Q, proj and MLP, ``kv_rows`` through
    K and V, attention of ``queries`` over ``keys``; ``width`` = the attention width held."""
    return (2 * queries * dim * width + 2 * kv_rows * dim * 2 * width  # Q, K, V
            + 4 * queries * keys * width  # scores and weighted sum
            + 2 * queries * width * dim + 4 * queries * dim * hidden)  # proj, MLP


def _largest_shard(total: int, n: int) -> int:
    return max(s.stop - s.start for s in token_shards(total, n))


def flops_per_rank(mode: str, w: Workload, n: int) -> float:
    """Matmul FLOPs of the busiest rank in one forward pass."""
    T, D, M = w.tokens, w.dim, int(w.dim * w.mlp_ratio)
    full = T + 1  # patch tokens + class token
    if mode == "single":
        per_block = block_flops(full, full, full, D, D, M)
        return w.batch * w.depth * per_block
    if mode in ("sp", "astra"):
        local = _largest_shard(T, n) + 1  # + its class-token copy
        per_block = block_flops(local, full, full, D, D, M)
        if mode == "astra":
            per_block += 2 * (local - 1) * D * w.codes  # nearest-code search
        return w.batch * w.depth * per_block
    if mode == "tp":
        return w.batch * w.depth * block_flops(full, full, full, D // n, D, M // n)
    if mode in ("bp-allgather", "bp-sp"):
        narrow = block_flops(full, full, full, D // n, D // n, M // n)
        if mode == "bp-allgather":
            wide = block_flops(full, full, full, D, D, M)
        else:
            rows = _largest_shard(full, n)
            wide = block_flops(rows, full, full, D, D, M)
        per_bp = (w.depth // w.bp_blocks - 1) * narrow + wide
        return w.batch * w.bp_blocks * per_bp
    raise UnknownNameError("mode", mode, ("single", "sp", "tp", "bp-allgather", "bp-sp", "astra"))


def messages(mode: str, w: Workload, n: int, rank: int = 0) -> list[int]:
    """The message sizes (bytes) ``rank`` sends in one forward pass, step by step."""
    if mode == "single":
        return []
    B, T, D = w.batch, w.tokens, w.dim
    shards = [s.stop - s.start for s in token_shards(T, n)]
    cls_reduce = all_reduce_steps(B * D * FP32, n)
    if mode == "sp":
        per_block = all_gather_steps([B * s * D * FP32 for s in shards], rank)
        return per_block * w.depth + cls_reduce
    if mode == "astra":
        bits = index_bits(w.codes)
        per_block = all_gather_steps([packed_bytes(B * s * w.groups, bits) for s in shards], rank)
        return per_block * w.depth + cls_reduce
    if mode == "tp":
        return all_reduce_steps(B * (T + 1) * D * FP32, n) * (2 * w.depth)
    gather = all_gather_steps([B * (T + 1) * (D // n) * FP32] * n, rank)
    if mode == "bp-allgather":
        return gather * w.bp_blocks
    rows = [s.stop - s.start for s in token_shards(T + 1, n)]
    to_features = all_to_all_steps([B * rows[rank] * (D // n) * FP32] * n, rank)
    return gather * w.bp_blocks + to_features * (w.bp_blocks - 1)


def predict(mode: str, w: Workload, n: int, link: LinkSpec, compute_s: float
            ) -> dict[str, float]:
    """Predicted seconds (compute, communication, total) and bytes one rank sends, for a rank
    compute time measured (``compute_at``) or from FLOPs (``flops_per_rank`` / rate)."""
    sizes = messages(mode, w, n)
    comm = sum(message_time(link, b) for b in sizes)
    return {"compute_s": compute_s, "comm_s": comm, "latency_s": compute_s + comm,
            "bytes_per_rank": float(sum(sizes))}


def compute_at(mode: str, w: Workload, n: int, measured: dict[int, float]) -> tuple[float, str]:
    """Rank compute at ``n`` ranks: measured there, else the nearest measured world size scaled
    by the FLOP ratio (for splits the model does not allow, e.g. 6 heads over 4 ranks)."""
    if n in measured:
        return measured[n], "measured"
    base = min(measured, key=lambda m: abs(m - n))
    scale = flops_per_rank(mode, w, n) / flops_per_rank(mode, w, base)
    return measured[base] * scale, f"measured at N={base}, FLOP-scaled"


def calibrate_rate(w: Workload, single_latency_s: float) -> float:
    """FLOP/s this machine achieved on the single-device forward pass."""
    return flops_per_rank("single", w, 1) / single_latency_s
