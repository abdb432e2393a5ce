"""``compress_checkpoint``: a Hugging Face MoE checkpoint into a ZipMoE store.

Besides the tensors, the store records a routing trace: the model (dense weights in memory,
experts read from the checkpoint as needed) runs a short calibration text and counts the tokens
each layer sends to each expert. The planner turns it into popularity by rank, as the authors do
with their offline traces. The trace is skipped, and says why, when the model cannot run here
(an unsupported option, or dense weights too large for this machine's memory).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import torch

from edgekit.errors import UsageError
from edgekit.fileio import check_output
from edgekit.kernels import zipmoe_codec as codec
from edgekit.methods.zipmoe.hf_checkpoint import Checkpoint
from edgekit.methods.zipmoe.model import ExpertWeights, KVCache, MoEModel, encode_text
from edgekit.methods.zipmoe.store_writer import write_store

CALIBRATION_TEXT = (
    "The quick brown fox jumps over the lazy dog. Mixture-of-experts language models route each "
    "token to a few experts out of many, so most of their weights sit idle at any moment. On an "
    "edge device with little memory the idle experts can live on storage, if they can be brought "
    "back quickly: compressed, cached by popularity and decoded while the rest of the layer runs. "
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
    "Numbers: 3.14159, 2.71828, 1.41421; dates: 2026-01-29; a list: apples, pears, plums.\n"
)


class _CountingExperts:
    def __init__(self, checkpoint: Checkpoint) -> None:
        self.checkpoint = checkpoint
        self.counts: dict[int, list[int]] = {}

    def fetch(self, layer: int, tokens: dict[int, int]) -> Iterator[tuple[int, ExpertWeights]]:
        cfg = self.checkpoint.config
        row = self.counts.setdefault(layer, [0] * cfg.num_experts)
        for expert in sorted(tokens):
            row[expert] += tokens[expert]
            yield expert, ExpertWeights(*(self.checkpoint.get(cfg.expert_tensor_name(layer, expert,
                                                                                     p))
                                          for p in ("gate", "up", "down")))


def routing_trace(checkpoint: Checkpoint, text: str = CALIBRATION_TEXT,
                  source: str = "built-in calibration text") -> dict[str, Any]:
    """Tokens per expert per MoE layer on ``text`` (prefill), or why there is no trace."""
    cfg = checkpoint.config
    dense_names = [n for n in cfg.tensor_shapes() if ".experts." not in n]
    dense_bytes = 4 * sum(torch.Size(cfg.tensor_shapes()[n]).numel() for n in dense_names)
    available = psutil.virtual_memory().available
    if dense_bytes > available // 4:
        return {"skipped": f"dense weights need {dense_bytes / 2**30:.1f} GiB in fp32, more than "
                           f"a quarter of the {available / 2**30:.1f} GiB available"}
    experts = _CountingExperts(checkpoint)
    try:
        model = MoEModel(cfg, {n: checkpoint.get(n) for n in dense_names}, experts)
        ids = encode_text(text, cfg.vocab_size)
        model.forward(ids, KVCache())
    except UsageError as exc:
        return {"skipped": str(exc)}
    return {"text": source, "tokens": len(ids),
            "counts": {str(layer): row for layer, row in sorted(experts.counts.items())}}


# Over 8 parameters: keyword-only codec and trace choices, each a 'moe compress' option, with
# defaults
def compress_checkpoint(checkpoint_dir: str | Path, out: str | Path, *,
                        codec_name: str = codec.DEFAULT_CODEC, level: int | None = None,
                        chunks: int = codec.DEFAULT_CHUNKS, workers: int = 2, trace: bool = True,
                        trace_text: tuple[str, str] | None = None,
                        progress: Callable[[str, int, int], None] | None = None,
                        force: bool = False) -> dict[str, Any]:
    """Compress every tensor of the checkpoint into a store; returns the manifest.

    ``progress(name, done, total)`` is called after each tensor is written (counts of tensors).
    ``out`` never overlaps the checkpoint; a folder edgekit did not write is replaced only with
    ``force``. ``trace_text``: (text, description) to trace instead of the built-in
    calibration text (text like the model's own, for a trained model)."""
    check_output(out, inputs=[checkpoint_dir], force=force)  # before any work
    with Checkpoint(checkpoint_dir) as checkpoint:
        checkpoint.check_complete()
        names = list(checkpoint.config.tensor_shapes())
        extra_names = [n for n in checkpoint.names() if n not in set(names)]
        names += extra_names  # keep whatever else the checkpoint holds
        trace_doc = (routing_trace(checkpoint, *(trace_text or (CALIBRATION_TEXT,
                                                                "built-in calibration text")))
                     if trace else {"skipped": "not requested"})
        done = [0]

        def callback(name: str) -> None:
            done[0] += 1
            if progress:
                progress(name, done[0], len(names))

        source = {"checkpoint": str(Path(checkpoint_dir).resolve()),
                  "family": checkpoint.config.family}
        return write_store(
            out, ((n, (lambda n=n: checkpoint.get(n))) for n in names), checkpoint.config_dict,
            codec_name=codec_name, level=level, chunks=chunks, workers=workers,
            extra={"source": source, "trace": trace_doc}, progress=callback,
            inputs=[checkpoint_dir], force=force)
