"""Measured per-rank compute for the latency model: one rank's work, in this process, no network.

A ``LoopbackComm`` stands in for the group: its collectives return tensors of the shapes the
peers would send (zeros) without sending anything, so a mode's ``forward`` on it does exactly the
computation of rank 0 at world size N, and nothing else. Timing that (one thread, after a
warm-up) gives the compute term of the analytic model at any N, including 4 and 8 ranks that
this machine cannot run side by side; it captures what FLOP counts miss (the memory-bound
nearest-code search, layer norms, softmax).
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import torch

from edgekit.errors import UsageError
from edgekit.methods.astra.runtime.all_modes import make_mode
from edgekit.methods.astra.runtime.collectives import Comm
from edgekit.methods.astra.runtime.link import LinkSpec
from edgekit.methods.astra.runtime.models import build_model, example_images


class _Done:
    """A loopback gather is complete as soon as it starts."""

    def __init__(self, parts: list[torch.Tensor]) -> None:
        self.parts = parts

    def wait(self) -> list[torch.Tensor]:
        return self.parts


class LoopbackComm(Comm):
    """Rank 0 of ``world_size`` ranks with nobody else: collectives return zeros, send nothing."""

    def __init__(self, world_size: int) -> None:
        super().__init__(LinkSpec(None), 0, world_size)

    def all_gather(self, local: torch.Tensor, counts: Sequence[int]) -> list[torch.Tensor]:
        return [local[:c] if r == 0 else local.new_zeros((c, *local.shape[1:]))
                for r, c in enumerate(counts)]

    def start_all_gather(self, local: torch.Tensor, counts: Sequence[int]) -> _Done:
        return _Done(self.all_gather(local, counts))

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def all_to_all(self, chunks: list[torch.Tensor],
                   sent_bytes: Sequence[int] | None = None) -> list[torch.Tensor]:
        return [torch.zeros_like(c) for c in chunks]


def measure_compute(model: str, tokens: int | None, modes: dict[str, int | None],
                    world_sizes: Sequence[int], reps: int = 2, bp_blocks: int = 4,
                    threads: int = 1, echo: Callable[[str], None] | None = None
                    ) -> dict[str, dict[int, float]]:
    """Median seconds of rank 0's compute per forward: ``modes`` maps a label (the mode name,
    or ``astra-gG``) to its VQ groups override; ``single`` is measured at N=1. A world size the
    mode cannot split the model for (heads not divisible by N) is left out."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    out: dict[str, dict[int, float]] = {}
    try:
        with torch.inference_mode():
            for label, groups in modes.items():
                net = build_model(model, 0, tokens, groups)
                x = net.embed(example_images(net, 1))
                name = "astra" if label.startswith("astra") else label
                sizes = (1,) if name == "single" else world_sizes
                out[label] = {}
                for n in sizes:
                    try:
                        mode = make_mode(name, net, LoopbackComm(n), bp_blocks)
                    except UsageError:
                        continue
                    mode.forward(x)  # warm-up
                    times = []
                    for _ in range(reps):
                        start = time.perf_counter()
                        mode.forward(x)
                        times.append(time.perf_counter() - start)
                    out[label][n] = statistics.median(times)
                    if echo is not None:
                        echo(f"compute {label} N={n}: {out[label][n]:.3f} s")
    finally:
        torch.set_num_threads(previous)
    return out
