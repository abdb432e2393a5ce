"""Bounds of the numbers users give, and the click types that enforce them.

Every numeric option of every command has a type from here (``edgekit.cli.common`` re-exports
them), so nan, an infinity or a value the machine cannot hold is one usage line and exit code 2
before any work. The ASTRA worker's options use them too, which is why they live outside the CLI.
"""
from __future__ import annotations

import math
from typing import Any

import click


class FiniteFloatRange(click.FloatRange):
    """``click.FloatRange`` that also refuses nan and +-inf.

    nan compares false with every bound, so ``FloatRange`` lets it through, and an infinite
    ``--duration`` or ``--warmup`` makes a timing loop that never ends.
    """

    name = "finite float range"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return super().convert(number, param, ctx)


# Option types for bounded numbers: click rejects a value outside with exit code 2 and one line,
# before any work. Every type has an upper bound, so no value the machine cannot hold (a seed
# numpy refuses, a thread count torch overflows on, 10^12 samples) gets past the parser.

# The largest C int: what torch's, onnxruntime's and TensorRT's C/C++ APIs take for a count.
MAX_COUNT = 2**31 - 1
# A week in seconds: longer timed phases, budgets and time limits are typos (and a float much
# larger than this makes a deadline that never comes).
MAX_SECONDS = 7 * 24 * 3600.0

COUNT = click.IntRange(1, MAX_COUNT)
NON_NEGATIVE = FiniteFloatRange(min=0)
POSITIVE = FiniteFloatRange(min=0, min_open=True)
# Seconds: a timed phase, a time budget (> 0), a warm-up (>= 0).
SECONDS = FiniteFloatRange(min=0, max=MAX_SECONDS, min_open=True)
NON_NEGATIVE_SECONDS = FiniteFloatRange(min=0, max=MAX_SECONDS)
# Samples per batch: 2^20 samples of even an 8x8 image fill 256 MiB per input; a larger batch
# fits no edge device, and 10^12 would overflow the input tensor's allocation.
BATCH = click.IntRange(1, 2**20)
# Samples to simulate or calibrate on: the same bound as a batch.
SAMPLES = click.IntRange(1, 2**20)
# Threads: no machine edgekit targets has more than 4096 cores; torch.set_num_threads takes a
# C int and 2^40 overflows it.
MAX_THREADS = 4096
THREADS = click.IntRange(1, MAX_THREADS)
# Seeds: numpy's legacy seeding (np.random.seed, RandomState, sklearn's random_state) takes
# 0..2^32-1; torch.manual_seed takes more, so numpy's range is the one both accept.
SEED = click.IntRange(0, 2**32 - 1)
# A fraction of something kept (Spik4lite's --target-keep): none kept is no model at all.
KEEP_FRACTION = FiniteFloatRange(min=0, max=1, min_open=True)
OPEN_FRACTION = FiniteFloatRange(min=0, max=1, min_open=True, max_open=True)  # a part, not all
# Time steps of a spiking net: the papers use 1..16; 10^4 already takes hours on a CPU, and the
# membrane state for 10^9 steps would not fit in memory.
TIMESTEPS = click.IntRange(1, 10_000)
