"""ZipMoE: lossless compressed MoE serving under a memory budget (arXiv 2601.21198, ICML 2026;
what edgekit measured and chose: docs/methods/zipmoe.md).

    config.py         the MoE architecture of a Hugging Face config.json (four families)
    hf_checkpoint.py  reading HF safetensors checkpoints (single file or shards)
    tiny.py           tiny random checkpoints in the real HF layout (tests, demo)
    train.py          a small MoE trained on numpy's documentation, cached under $EDGEKIT_HOME
    store.py          the store: one 4 KiB-aligned data file, a manifest, CRC-32 per stream
    store_writer.py   writing a store (``write_store``)
    compress.py       checkpoint -> store, with a routing trace for the planner
    model.py          the MoE decoder LM whose experts come from a provider
    cache.py          full and SM-only pools, rank admission, eviction policies
    planner.py        the Poisson-binomial / conditional-Poisson pool planner
    scheduler.py      the Type-I / Type-II job order
    providers/        experts all in memory, naive offload, or ZipMoE (one decoder a file)
    decode_process.py the serving side of ZipMoE's decode process: slot layout, arena, events
    engine.py         generation, metrics, and the three-way bench

The codec itself is ``edgekit.kernels.zipmoe_codec`` (its torch-free half
``zipmoe_planes``), the decode process ``edgekit.kernels.zipmoe_decoder``; storage reads
(O_DIRECT or buffered, optional bandwidth cap) are ``edgekit.storage``.
"""
from edgekit.methods.zipmoe.compress import compress_checkpoint
from edgekit.methods.zipmoe.config import FAMILIES, MoEConfig, parse_config
from edgekit.methods.zipmoe.engine import (
    MODES,
    Engine,
    EngineSettings,
    Generation,
    bench,
    parse_size,
)
from edgekit.methods.zipmoe.store import Store, StoreError
from edgekit.methods.zipmoe.store_writer import write_store
from edgekit.methods.zipmoe.tiny import make_tiny_checkpoint

__all__ = [
    "FAMILIES", "MODES", "Engine", "EngineSettings", "Generation", "MoEConfig", "Store",
    "StoreError", "bench", "compress_checkpoint", "make_tiny_checkpoint", "parse_config",
    "parse_size", "write_store",
]
