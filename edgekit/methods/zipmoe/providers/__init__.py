"""Where the serving engine's experts come from: all in memory, naive offload, or ZipMoE.

All three hand the model the same bf16 tensors (the store's round trip is bit-exact), so they
give bit-identical logits; they differ only in what is held in memory and what is read when.

    memory.py    MemoryExperts    every expert decoded once at start-up and kept (upper bound)
    naive.py     NaiveOffload     bf16 experts read on demand into one LRU cache of the budget
    zipmoe.py    ZipMoEExperts    ZipMoE's pools, plan, job order and prefetch over a decoder
                                  (decoder.py: process.py, workers.py, io_thread.py,
                                  compute_thread.py), each expert one ExpertJob (jobs.py)

What was tried and measured for each choice: docs/methods/zipmoe.md. The tunable constants are
re-exported here for reading; each is read where it is defined (process.ARENA_SLOTS_PER_TOP_K,
reads.READ_AHEAD_S, ...), so a test that patches one patches it in that module.
"""
from edgekit.methods.zipmoe.providers.decoder import (
    PREFETCH_MIN_PRECISION,
    PREFETCH_MIN_PRECISION_PROCESS,
    ExpertDecoder,
)
from edgekit.methods.zipmoe.providers.jobs import ExpertJob
from edgekit.methods.zipmoe.providers.memory import MemoryExperts
from edgekit.methods.zipmoe.providers.naive import NaiveOffload
from edgekit.methods.zipmoe.providers.process import ARENA_MAX_BYTES, ARENA_SLOTS_PER_TOP_K
from edgekit.methods.zipmoe.providers.reads import READ_AHEAD_S
from edgekit.methods.zipmoe.providers.stats import ExpertStats, Key
from edgekit.methods.zipmoe.providers.zipmoe import (
    CALIBRATION_TOKENS,
    ZipMoEExperts,
    make_decoder,
)

__all__ = ["ARENA_MAX_BYTES", "ARENA_SLOTS_PER_TOP_K", "CALIBRATION_TOKENS",
           "PREFETCH_MIN_PRECISION", "PREFETCH_MIN_PRECISION_PROCESS", "READ_AHEAD_S",
           "ExpertDecoder", "ExpertJob", "ExpertStats", "Key", "MemoryExperts", "NaiveOffload",
           "ZipMoEExperts", "make_decoder"]
