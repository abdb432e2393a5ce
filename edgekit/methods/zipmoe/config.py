"""The MoE architecture of a Hugging Face ``config.json``, for the four families edgekit serves.

One frozen ``MoEConfig`` describes Qwen1.5-MoE (``qwen2_moe``), DeepSeek-V2(-Lite)
(``deepseek_v2``), Mixtral (``mixtral``) and OLMoE (``olmoe``) checkpoints: the attention variant,
which layers are sparse, the router's normalisation and the shared experts. ``tensor_shapes`` lists
every weight the family's checkpoint holds, by its Hugging Face name, so the loader, the tiny
checkpoint builder and the store all agree on one source of truth.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from edgekit.errors import UnknownNameError, UsageError
from edgekit.schema import BOOL, INT, NUMBER, STR, ListOf, Object, Optional, check

FAMILIES = ("qwen2_moe", "deepseek_v2", "mixtral", "olmoe")
# Short names for the CLI (``--family qwen``) and the model types they stand for.
ALIASES = {"qwen": "qwen2_moe", "deepseek": "deepseek_v2", "mixtral": "mixtral", "olmoe": "olmoe"}
PROJECTIONS = ("gate", "up", "down")
# Hugging Face names of an expert's three matrices, per family (gate, up, down).
_EXPERT_LEAF = {
    "mixtral": ("w1", "w3", "w2"),
    "qwen2_moe": ("gate_proj", "up_proj", "down_proj"),
    "deepseek_v2": ("gate_proj", "up_proj", "down_proj"),
    "olmoe": ("gate_proj", "up_proj", "down_proj"),
}


_OPTIONAL_INTS = (
    "num_key_value_heads", "head_dim", "num_local_experts", "num_experts", "num_experts_per_tok",
    "intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size",
    "decoder_sparse_step", "n_routed_experts", "first_k_dense_replace", "moe_layer_freq",
    "n_group", "topk_group", "n_shared_experts", "q_lora_rank", "kv_lora_rank",
    "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
# The types of every config.json field edgekit reads (which ones a family requires is checked by
# ``parse_config``); Hugging Face's other fields are left alone.
CONFIG_FIELDS = Object({
    "model_type": STR,
    **{k: INT for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads")},
    **{k: Optional(INT) for k in _OPTIONAL_INTS},
    **{k: Optional(NUMBER) for k in ("rms_norm_eps", "rope_theta", "routed_scaling_factor",
                                     "clip_qkv")},
    **{k: Optional(BOOL) for k in ("tie_word_embeddings", "norm_topk_prob")},
    **{k: Optional(STR) for k in ("scoring_func", "topk_method", "torch_dtype")},
    "mlp_only_layers": Optional(ListOf(INT)),
})


def family_of(config: dict[str, Any], where: str = "config.json") -> str:
    model_type = config.get("model_type")
    if model_type in FAMILIES:
        return model_type
    raise UnknownNameError(f"MoE model_type in {where}", str(model_type), FAMILIES)


@dataclass(frozen=True)
class MoEConfig:
    family: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: str | None   # kind of rope_scaling; the model serves only None [ours]
    tie_word_embeddings: bool
    attention_bias: bool       # q/k/v biases (Qwen); absent elsewhere
    qk_norm: bool              # RMSNorm on the q and k projections (OLMoE)
    clip_qkv: float | None     # clamp of q, k, v (OLMoE option)
    # Multi-head latent attention (DeepSeek-V2); unused by the other families.
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    # Mixture of experts.
    num_experts: int
    top_k: int
    expert_intermediate: int   # each routed expert's hidden width
    norm_topk_prob: bool       # renormalise the top-k weights to sum to one
    routed_scaling_factor: float
    topk_method: str           # "greedy" | "group_limited_greedy" (DeepSeek)
    n_group: int
    topk_group: int
    shared_intermediate: int   # width of the shared expert MLP; 0 = none
    shared_expert_gate: bool   # Qwen's sigmoid gate on the shared expert
    dense_intermediate: int    # width of dense (non-MoE) MLP layers
    moe_layers: tuple[int, ...]

    @property
    def expert_params(self) -> int:
        return 3 * self.hidden_size * self.expert_intermediate

    def expert_tensor_name(self, layer: int, expert: int, proj: str) -> str:
        leaf = _EXPERT_LEAF[self.family][PROJECTIONS.index(proj)]
        block = "block_sparse_moe" if self.family == "mixtral" else "mlp"
        return f"model.layers.{layer}.{block}.experts.{expert}.{leaf}.weight"

    def expert_tensor_shape(self, proj: str) -> tuple[int, int]:
        h, i = self.hidden_size, self.expert_intermediate
        return (h, i) if proj == "down" else (i, h)

    def router_name(self, layer: int) -> str:
        block = "block_sparse_moe" if self.family == "mixtral" else "mlp"
        return f"model.layers.{layer}.{block}.gate.weight"

    def tensor_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every weight of the checkpoint by its Hugging Face name (attention biases included
        when ``attention_bias``)."""
        h = self.hidden_size
        shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (self.vocab_size, h)}
        for layer in range(self.num_layers):
            p = f"model.layers.{layer}."
            shapes[p + "input_layernorm.weight"] = (h,)
            shapes[p + "post_attention_layernorm.weight"] = (h,)
            shapes.update({p + "self_attn." + k: v for k, v in self._attention_shapes().items()})
            if layer in self.moe_layers:
                shapes[self.router_name(layer)] = (self.num_experts, h)
                for e in range(self.num_experts):
                    for proj in PROJECTIONS:
                        shapes[self.expert_tensor_name(layer, e, proj)] = \
                            self.expert_tensor_shape(proj)
                if self.shared_intermediate:
                    name = "shared_expert" if self.family == "qwen2_moe" else "shared_experts"
                    shapes.update(_mlp_shapes(f"{p}mlp.{name}.", h, self.shared_intermediate))
                if self.shared_expert_gate:
                    shapes[p + "mlp.shared_expert_gate.weight"] = (1, h)
            else:
                shapes.update(_mlp_shapes(p + "mlp.", h, self.dense_intermediate))
        shapes["model.norm.weight"] = (h,)
        if not self.tie_word_embeddings:
            shapes["lm_head.weight"] = (self.vocab_size, h)
        return shapes

    def _attention_shapes(self) -> dict[str, tuple[int, ...]]:
        h, nh = self.hidden_size, self.num_heads
        if self.family == "deepseek_v2":
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            out: dict[str, tuple[int, ...]] = {}
            if self.q_lora_rank is None:
                out["q_proj.weight"] = (nh * qk, h)
            else:
                out["q_a_proj.weight"] = (self.q_lora_rank, h)
                out["q_a_layernorm.weight"] = (self.q_lora_rank,)
                out["q_b_proj.weight"] = (nh * qk, self.q_lora_rank)
            out["kv_a_proj_with_mqa.weight"] = (self.kv_lora_rank + self.qk_rope_head_dim, h)
            out["kv_a_layernorm.weight"] = (self.kv_lora_rank,)
            out["kv_b_proj.weight"] = (nh * (self.qk_nope_head_dim + self.v_head_dim),
                                       self.kv_lora_rank)
            out["o_proj.weight"] = (h, nh * self.v_head_dim)
            return out
        q, kv = nh * self.head_dim, self.num_kv_heads * self.head_dim
        out = {"q_proj.weight": (q, h), "k_proj.weight": (kv, h), "v_proj.weight": (kv, h),
               "o_proj.weight": (h, q)}
        if self.attention_bias:
            out.update({"q_proj.bias": (q,), "k_proj.bias": (kv,), "v_proj.bias": (kv,)})
        if self.qk_norm:
            out.update({"q_norm.weight": (q,), "k_norm.weight": (kv,)})
        return out


def _mlp_shapes(prefix: str, hidden: int, width: int) -> dict[str, tuple[int, ...]]:
    return {prefix + "gate_proj.weight": (width, hidden),
            prefix + "up_proj.weight": (width, hidden),
            prefix + "down_proj.weight": (hidden, width)}


def _get(config: dict[str, Any], key: str, where: str, default: Any = ..., kind: type = int) -> Any:
    value = config.get(key, default)
    if value is ...:
        raise UsageError(f"{where}: field '{key}' is required for a {config.get('model_type')} "
                         "model")
    if value is None or kind is object:
        return value
    if kind is int and (not isinstance(value, int) or isinstance(value, bool)):
        raise UsageError(f"{where}: field '{key}' must be an integer, got {value!r}")
    if kind is float and (not isinstance(value, (int, float)) or isinstance(value, bool)
                          or not math.isfinite(value)):  # JSON's NaN/Infinity would serve garbage
        raise UsageError(f"{where}: field '{key}' must be a finite number, got {value!r}")
    return kind(value)


def parse_config(config: dict[str, Any], where: str = "config.json",
                 attention_bias: bool | None = None) -> MoEConfig:
    """A ``MoEConfig`` from a Hugging Face config dict; one-line errors name the field.

    ``attention_bias``: whether the checkpoint holds q/k/v biases (the checkpoint is the authority;
    when None the family's default is used: Qwen has them, the others do not).
    """
    family = family_of(config, where)
    check(config, CONFIG_FIELDS, where)
    g = lambda key, default=..., kind=int: _get(config, key, where, default, kind)  # noqa: E731
    hidden, layers = g("hidden_size"), g("num_hidden_layers")
    heads = g("num_attention_heads")
    kv_heads = g("num_key_value_heads", heads)
    head_dim = g("head_dim", None) or hidden // heads
    common = dict(
        family=family, vocab_size=g("vocab_size"), hidden_size=hidden, num_layers=layers,
        num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
        rms_norm_eps=g("rms_norm_eps", 1e-6, float), rope_theta=g("rope_theta", 10000.0, float),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        attention_bias=False, qk_norm=False, clip_qkv=None, q_lora_rank=None, kv_lora_rank=0,
        qk_nope_head_dim=0, qk_rope_head_dim=0, v_head_dim=0, routed_scaling_factor=1.0,
        topk_method="greedy", n_group=1, topk_group=1, shared_intermediate=0,
        shared_expert_gate=False, dense_intermediate=0,
    )
    rope_scaling = config.get("rope_scaling")
    scaling_kind = ((rope_scaling.get("type") or rope_scaling.get("rope_type"))
                    if isinstance(rope_scaling, dict) else rope_scaling)
    common["rope_scaling"] = None if scaling_kind in (None, "default") else str(scaling_kind)
    if family == "mixtral":
        experts, inter = g("num_local_experts"), g("intermediate_size")
        cfg = dict(num_experts=experts, top_k=g("num_experts_per_tok"), expert_intermediate=inter,
                   norm_topk_prob=True, moe_layers=tuple(range(layers)))
    elif family == "olmoe":
        cfg = dict(num_experts=g("num_experts"), top_k=g("num_experts_per_tok"),
                   expert_intermediate=g("intermediate_size"),
                   norm_topk_prob=bool(config.get("norm_topk_prob", False)), qk_norm=True,
                   clip_qkv=g("clip_qkv", None, float), moe_layers=tuple(range(layers)))
    elif family == "qwen2_moe":
        step = g("decoder_sparse_step", 1)
        mlp_only = set(config.get("mlp_only_layers") or [])
        experts = g("num_experts")
        moe = tuple(i for i in range(layers)
                    if i not in mlp_only and experts > 0 and (i + 1) % step == 0)
        shared = g("shared_expert_intermediate_size", 0)
        cfg = dict(num_experts=experts, top_k=g("num_experts_per_tok"),
                   expert_intermediate=g("moe_intermediate_size"),
                   norm_topk_prob=bool(config.get("norm_topk_prob", False)),
                   attention_bias=True, shared_intermediate=shared,
                   shared_expert_gate=shared > 0,
                   dense_intermediate=g("intermediate_size", 0), moe_layers=moe)
    else:  # deepseek_v2
        scoring = config.get("scoring_func", "softmax")
        if scoring != "softmax":
            raise UsageError(f"{where}: scoring_func '{scoring}' is not implemented",
                             hint="edgekit serves DeepSeek-V2's softmax router")
        method = config.get("topk_method", "greedy")
        if method not in ("greedy", "group_limited_greedy"):
            raise UnknownNameError(f"topk_method in {where}", str(method),
                                   ("greedy", "group_limited_greedy"))
        experts = g("n_routed_experts")
        first_dense, freq = g("first_k_dense_replace", 0), g("moe_layer_freq", 1)
        moe = tuple(i for i in range(layers)
                    if experts and i >= first_dense and i % freq == 0)
        inter = g("moe_intermediate_size")
        cfg = dict(num_experts=experts, top_k=g("num_experts_per_tok"), expert_intermediate=inter,
                   norm_topk_prob=bool(config.get("norm_topk_prob", False)),
                   routed_scaling_factor=g("routed_scaling_factor", 1.0, float),
                   topk_method=method, n_group=g("n_group", 1) or 1,
                   topk_group=g("topk_group", 1) or 1,
                   shared_intermediate=inter * (g("n_shared_experts", 0) or 0),
                   dense_intermediate=g("intermediate_size", 0), moe_layers=moe,
                   q_lora_rank=g("q_lora_rank", None), kv_lora_rank=g("kv_lora_rank"),
                   qk_nope_head_dim=g("qk_nope_head_dim"), qk_rope_head_dim=g("qk_rope_head_dim"),
                   v_head_dim=g("v_head_dim"), num_kv_heads=heads)
    common.update(cfg)
    if attention_bias is not None and family != "deepseek_v2":
        common["attention_bias"] = attention_bias
    result = MoEConfig(**common)
    if not result.moe_layers:
        raise UsageError(f"{where}: the config has no MoE layers")
    if result.rope_theta <= 0 or result.rms_norm_eps < 0:
        raise UsageError(f"{where}: field 'rope_theta' must be positive and 'rms_norm_eps' not "
                         f"negative, got {result.rope_theta!r} and {result.rms_norm_eps!r}")
    if not 0 < result.top_k <= result.num_experts:
        raise UsageError(f"{where}: num_experts_per_tok {result.top_k} must be in "
                         f"1..{result.num_experts}")
    if result.topk_method == "group_limited_greedy" and result.num_experts % result.n_group:
        raise UsageError(f"{where}: n_routed_experts {experts} is not a multiple of n_group "
                         f"{result.n_group}")
    return result
