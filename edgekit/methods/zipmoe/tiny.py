"""Tiny random MoE checkpoints in the real Hugging Face layout, for tests and the demo.

``make_tiny_checkpoint`` writes ``config.json`` (the family's real keys) and ``model.safetensors``
(bf16, every tensor under its Hugging Face name), so the loader, ``edgekit moe compress`` and the
serving engine run on exactly what a downloaded checkpoint would give them.

Matrices are N(0, 0.02) like Hugging Face's initialisation, norms ones, biases zeros. Embeddings
are N(0, 1), PyTorch's ``nn.Embedding`` default [ours]: with 0.02 the embeddings of a random model
are much smaller than its attention outputs, which average over the prefix and are nearly the same
for every token, so every router picks the same handful of experts. At N(0, 1) the token decides
the routing and the load per expert is uneven the way trained routers' is (the most used expert
of a layer gets about 2-4x the mean load on the calibration text).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from edgekit.errors import UnknownNameError
from edgekit.fileio import atomic_directory, register_output_kind
from edgekit.methods.zipmoe.config import ALIASES, parse_config

SIZES = ("tiny", "small")
# (hidden, layers, heads, kv_heads, experts, top_k, expert width) per size.
_DIMS = {"tiny": (64, 2, 4, 2, 8, 2, 32), "small": (512, 4, 8, 4, 32, 4, 256)}


def tiny_config(family: str, size: str = "tiny") -> dict[str, Any]:
    """A Hugging Face ``config.json`` dict of the family, at a size a CPU serves in seconds."""
    family = ALIASES.get(family, family)
    if family not in ALIASES.values():
        raise UnknownNameError("MoE family", family, ALIASES)
    if size not in _DIMS:
        raise UnknownNameError("tiny checkpoint size", size, SIZES)
    hidden, layers, heads, kv_heads, experts, top_k, width = _DIMS[size]
    base: dict[str, Any] = {
        "model_type": family, "vocab_size": 256, "hidden_size": hidden,
        "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "tie_word_embeddings": False, "hidden_act": "silu", "initializer_range": 0.02,
        "torch_dtype": "bfloat16", "bos_token_id": None, "eos_token_id": None,
    }
    if family == "mixtral":
        base.update(architectures=["MixtralForCausalLM"], num_local_experts=experts,
                    num_experts_per_tok=top_k, intermediate_size=width, sliding_window=None,
                    router_aux_loss_coef=0.02, output_router_logits=False)
    elif family == "qwen2_moe":
        base.update(architectures=["Qwen2MoeForCausalLM"], num_experts=experts,
                    num_experts_per_tok=top_k, moe_intermediate_size=width,
                    shared_expert_intermediate_size=2 * width, intermediate_size=4 * width,
                    decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=False,
                    use_sliding_window=False, qkv_bias=True)
    elif family == "olmoe":
        base.update(architectures=["OlmoeForCausalLM"], num_experts=experts,
                    num_experts_per_tok=top_k, intermediate_size=width, norm_topk_prob=False,
                    clip_qkv=None, attention_bias=False)
    else:  # deepseek_v2: the first layer dense, MLA attention, shared experts
        base.update(architectures=["DeepseekV2ForCausalLM"], num_hidden_layers=layers + 1,
                    n_routed_experts=experts, num_experts_per_tok=top_k,
                    moe_intermediate_size=width, n_shared_experts=2, intermediate_size=4 * width,
                    first_k_dense_replace=1, moe_layer_freq=1, topk_method="greedy", n_group=1,
                    topk_group=1, scoring_func="softmax", norm_topk_prob=False,
                    routed_scaling_factor=1.0, q_lora_rank=None, kv_lora_rank=hidden // 2,
                    qk_nope_head_dim=hidden // heads, qk_rope_head_dim=hidden // (2 * heads),
                    v_head_dim=hidden // heads, num_key_value_heads=heads, rope_scaling=None)
    return base


def tiny_weights(config: dict[str, Any], seed: int = 0) -> dict[str, torch.Tensor]:
    """Random bf16 weights for every tensor the config implies, by Hugging Face name."""
    cfg = parse_config(config)
    gen = torch.Generator().manual_seed(seed)
    std = float(config.get("initializer_range", 0.02))
    out: dict[str, torch.Tensor] = {}
    for name, shape in cfg.tensor_shapes().items():
        if name.endswith("norm.weight") or "layernorm" in name:
            out[name] = torch.ones(shape)
        elif name.endswith(".bias"):
            out[name] = torch.zeros(shape)
        elif name == "model.embed_tokens.weight":
            out[name] = torch.randn(shape, generator=gen)
        else:
            out[name] = torch.randn(shape, generator=gen) * std
    return {name: t.to(torch.bfloat16).contiguous() for name, t in out.items()}


# The weights' safetensors metadata carries this mark beside Hugging Face's {"format": "pt"}, so
# a later make-tiny knows the folder as its own and replaces it without --force.
TINY_MARK = {"edgekit": "zipmoe-tiny"}


def make_tiny_checkpoint(folder: str | Path, family: str, size: str = "tiny",
                         seed: int = 0, force: bool = False) -> Path:
    """Write ``config.json`` and ``model.safetensors`` into ``folder`` (atomically); an existing
    folder that edgekit did not write is replaced only with ``force``."""
    config = tiny_config(family, size)
    weights = tiny_weights(config, seed)
    with atomic_directory(folder, force=force) as staging:
        (staging / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        save_file(weights, str(staging / "model.safetensors"),
                  metadata={"format": "pt", **TINY_MARK})
    return Path(folder)


def _tiny_checkpoint_files(folder: Path) -> list[str] | None:
    """A make-tiny folder: config.json beside weights whose metadata carries ``TINY_MARK``."""
    from safetensors import safe_open

    if not (folder / "config.json").is_file():
        return None
    with safe_open(str(folder / "model.safetensors"), framework="pt") as handle:
        metadata = handle.metadata() or {}
    if all(metadata.get(k) == v for k, v in TINY_MARK.items()):
        return ["config.json", "model.safetensors"]
    return None


register_output_kind("zipmoe-tiny", _tiny_checkpoint_files)
