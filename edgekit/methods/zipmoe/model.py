"""A MoE decoder LM in plain PyTorch whose routed experts come from outside the model.

One forward for the four families of ``config.py``, following their Hugging Face modelling code:

    h = x + Attention(RMSNorm(x))                   Llama-style (Mixtral, Qwen: q/k/v biases,
                                                    OLMoE: q/k RMSNorm) or DeepSeek-V2's MLA
    h = h + MoE(RMSNorm(h))  or  + MLP(RMSNorm(h))  dense layers where the config says so
    MoE(x) = sum_{e in topk} w_e(x) * E_e(x)  [+ shared(x), Qwen: * sigmoid(g . x)]
    E_e(x) = down(silu(gate x) * up x)

Routing: softmax over all experts in fp32, top-k (DeepSeek's group-limited variant too), then
Mixtral renormalises, Qwen/OLMoE/DeepSeek when ``norm_topk_prob``, DeepSeek scales by
``routed_scaling_factor`` otherwise.

The routed experts are the only weights the model does not hold: each MoE layer asks an
``ExpertProvider`` for the experts its tokens chose and receives them in whatever order they
become ready. Contributions are summed in expert order afterwards (as Hugging Face's loop does),
so every provider (all in memory, naive offload, ZipMoE) produces bit-identical logits.
Computation is fp32; stored bf16 experts are widened at use.
"""
from __future__ import annotations

import math
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import torch
import torch.nn.functional as F

from edgekit.errors import UsageError
from edgekit.methods.zipmoe.config import MoEConfig

BYTE_VOCAB = 256


class ExpertWeights(NamedTuple):
    gate: torch.Tensor  # (I, H)
    up: torch.Tensor    # (I, H)
    down: torch.Tensor  # (H, I)


class ExpertProvider(Protocol):
    """Delivers a layer's routed experts; ``tokens`` maps expert id -> tokens routed to it.

    A provider may also have ``prefetch(layer, tokens, late)``: the model then calls it, right
    after ``fetch`` for the layer before, with the experts it predicts ``layer`` will route to,
    and again (``late``) once the layer before has finished, with a better guess.
    Weights from ``fetch`` may be lent: valid until the iterator is advanced or closed (the
    decode process hands out its arena's memory in place); copy what must outlive that.
    """

    def fetch(self, layer: int, tokens: dict[int, int]) -> Iterator[tuple[int, ExpertWeights]]:
        ...


def expert_ffn(x: torch.Tensor, w: ExpertWeights) -> torch.Tensor:
    """SwiGLU expert: down(silu(gate x) * up x); x (n, H) fp32 -> (n, H). Weights delivered in
    host memory are copied to x's device (the paper's arrangement: decode on CPU threads,
    compute on the GPU)."""
    gate, up, down = (t.to(x.device).float() for t in w)
    return F.linear(F.silu(F.linear(x, gate)) * F.linear(x, up), down)


# --------------------------------------------------------------------------------------------
# Byte-level tokenizer (the tiny models' vocabulary is the 256 byte values)
# --------------------------------------------------------------------------------------------

def encode_text(text: str, vocab_size: int) -> list[int]:
    if vocab_size < BYTE_VOCAB:
        raise UsageError(f"the byte-level tokenizer needs a vocabulary of at least {BYTE_VOCAB}, "
                         f"the model has {vocab_size}")
    ids = list(text.encode("utf-8"))
    if not ids:
        raise UsageError("the prompt is empty")
    return ids


def decode_tokens(ids: list[int]) -> str:
    return bytes(i for i in ids if i < BYTE_VOCAB).decode("utf-8", errors="replace")


# --------------------------------------------------------------------------------------------
# Building blocks
# --------------------------------------------------------------------------------------------

def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float,
         interleaved: bool = False) -> torch.Tensor:
    """Rotary embedding of x (heads, T, d) at ``positions`` (T,). ``interleaved``: DeepSeek-V2
    stores the rotary pairs interleaved and de-interleaves them first, as its HF code does."""
    d = x.shape[-1]
    if interleaved:
        x = x.reshape(*x.shape[:-1], d // 2, 2).transpose(-1, -2).reshape(x.shape)
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.int64,
                                             device=x.device).float() / d))
    freqs = positions.float()[:, None] * inv_freq[None, :]          # (T, d/2)
    emb = torch.cat((freqs, freqs), dim=-1)                           # (T, d)
    return x * emb.cos() + _rotate_half(x) * emb.sin()


@dataclass
class KVCache:
    """Keys and values of every layer so far (batch 1): lists of (heads, S, d) tensors."""

    keys: list[torch.Tensor | None] = field(default_factory=list)
    values: list[torch.Tensor | None] = field(default_factory=list)

    def length(self) -> int:
        return 0 if not self.keys or self.keys[0] is None else self.keys[0].shape[1]

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
        while len(self.keys) <= layer:
            self.keys.append(None)
            self.values.append(None)
        if self.keys[layer] is not None:
            k = torch.cat((self.keys[layer], k), dim=1)
            v = torch.cat((self.values[layer], v), dim=1)
        self.keys[layer], self.values[layer] = k, v
        return k, v


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int,
            scale: float) -> torch.Tensor:
    """Causal attention; q (nh, T, d), k (nh, S, d), v (nh, S, dv) -> (T, nh * dv)."""
    t, s = q.shape[1], k.shape[1]
    scores = torch.matmul(q, k.transpose(1, 2)) * scale                 # (nh, T, S)
    future = (torch.arange(s, device=q.device)[None, :]
              > (start + torch.arange(t, device=q.device))[:, None])
    scores = scores.masked_fill(future, float("-inf"))
    out = torch.matmul(torch.softmax(scores, dim=-1), v)                # (nh, T, dv)
    return out.transpose(0, 1).reshape(t, -1)


@dataclass
class Speculation:
    """The first MoE layer's input computed ahead for a guessed next token (``_speculate``).
    It holds only what it computed, and the cache it is for weakly, so a generation that has
    ended keeps nothing alive through it."""

    token: int
    cache: weakref.ref[KVCache]
    start: int
    keys: list[torch.Tensor]    # layers 0 .. the first MoE layer, with the token's keys
    values: list[torch.Tensor]
    x: torch.Tensor             # the stream after the first MoE layer's attention

    @property
    def layer(self) -> int:
        """The first MoE layer: everything up to its attention is done."""
        return len(self.keys) - 1

    def holds(self, ids: list[int], cache: KVCache, start: int) -> bool:
        return ids == [self.token] and cache is self.cache() and start == self.start

    def adopt(self, cache: KVCache) -> torch.Tensor:
        """Put the guessed token's keys and values into ``cache``; the stream to resume from."""
        cache.keys[:len(self.keys)] = self.keys
        cache.values[:len(self.values)] = self.values
        return self.x


# --------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------

class MoEModel:
    """Inference-only MoE decoder LM (batch 1) over fp32 dense weights and provided experts.

    ``device``: where the dense weights live and every matmul runs (``cuda`` on a GPU); experts
    arrive from the provider in host memory and are copied there per use."""

    def __init__(self, config: MoEConfig, weights: Mapping[str, torch.Tensor],
                 experts: ExpertProvider, device: str | torch.device = "cpu") -> None:
        if config.rope_scaling is not None:
            raise UsageError(f"rope_scaling '{config.rope_scaling}' is not implemented by "
                             "edgekit's MoE model", hint="serve a config without rope_scaling")
        self.config = config
        self.experts = experts
        expected = {n for n in config.tensor_shapes() if ".experts." not in n}
        missing = sorted(expected - set(weights))
        if missing:
            raise UsageError(f"dense weight '{missing[0]}' is missing"
                             + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
        self.device = torch.device(device)
        self.w = {name: weights[name].to(self.device).float() for name in expected}
        self.lm_head = self.w.get("lm_head.weight", self.w["model.embed_tokens.weight"])
        self._step: tuple[KVCache, int] | None = None  # in a forward: its cache, next position
        self._speculation: Speculation | None = None

    # -- attention ------------------------------------------------------------------------
    def _attention(self, layer: int, x: torch.Tensor, cache: KVCache, start: int) -> torch.Tensor:
        cfg, p = self.config, f"model.layers.{layer}.self_attn."
        t = x.shape[0]
        positions = torch.arange(start, start + t, device=x.device)
        if cfg.family == "deepseek_v2":
            return self._mla(layer, x, cache, start, positions)
        w = self.w
        q = F.linear(x, w[p + "q_proj.weight"], w.get(p + "q_proj.bias"))
        k = F.linear(x, w[p + "k_proj.weight"], w.get(p + "k_proj.bias"))
        v = F.linear(x, w[p + "v_proj.weight"], w.get(p + "v_proj.bias"))
        if cfg.qk_norm:
            q = rms_norm(q, w[p + "q_norm.weight"], cfg.rms_norm_eps)
            k = rms_norm(k, w[p + "k_norm.weight"], cfg.rms_norm_eps)
        if cfg.clip_qkv is not None:
            q, k, v = (z.clamp(-cfg.clip_qkv, cfg.clip_qkv) for z in (q, k, v))
        hd, nh, nkv = cfg.head_dim, cfg.num_heads, cfg.num_kv_heads
        q = q.view(t, nh, hd).transpose(0, 1)                             # (nh, T, hd)
        k = k.view(t, nkv, hd).transpose(0, 1)                            # (nkv, T, hd)
        v = v.view(t, nkv, hd).transpose(0, 1)
        q, k = rope(q, positions, cfg.rope_theta), rope(k, positions, cfg.rope_theta)
        k, v = cache.update(layer, k, v)                                  # (nkv, S, hd)
        if nkv != nh:
            k = k.repeat_interleave(nh // nkv, dim=0)                     # (nh, S, hd)
            v = v.repeat_interleave(nh // nkv, dim=0)
        out = _attend(q, k, v, start, 1.0 / math.sqrt(hd))
        return F.linear(out, w[p + "o_proj.weight"])

    def _mla(self, layer: int, x: torch.Tensor, cache: KVCache, start: int,
             positions: torch.Tensor) -> torch.Tensor:
        """DeepSeek-V2 multi-head latent attention (keys/values cached after expansion)."""
        cfg, w, p = self.config, self.w, f"model.layers.{layer}.self_attn."
        t, nh = x.shape[0], cfg.num_heads
        nope, rot, dv = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
        if cfg.q_lora_rank is None:
            q = F.linear(x, w[p + "q_proj.weight"])
        else:
            q = F.linear(rms_norm(F.linear(x, w[p + "q_a_proj.weight"]),
                                  w[p + "q_a_layernorm.weight"], cfg.rms_norm_eps),
                         w[p + "q_b_proj.weight"])
        q = q.view(t, nh, nope + rot).transpose(0, 1)                     # (nh, T, nope+rot)
        q_nope, q_pe = q.split((nope, rot), dim=-1)
        ckv = F.linear(x, w[p + "kv_a_proj_with_mqa.weight"])            # (T, rank + rot)
        compressed, k_pe = ckv.split((cfg.kv_lora_rank, rot), dim=-1)
        k_pe = k_pe.view(t, 1, rot).transpose(0, 1)                       # (1, T, rot)
        kv = F.linear(rms_norm(compressed, w[p + "kv_a_layernorm.weight"], cfg.rms_norm_eps),
                      w[p + "kv_b_proj.weight"])
        kv = kv.view(t, nh, nope + dv).transpose(0, 1)                    # (nh, T, nope+dv)
        k_nope, v = kv.split((nope, dv), dim=-1)
        q_pe = rope(q_pe, positions, cfg.rope_theta, interleaved=True)
        k_pe = rope(k_pe, positions, cfg.rope_theta, interleaved=True)
        q = torch.cat((q_nope, q_pe), dim=-1)
        k = torch.cat((k_nope, k_pe.expand(nh, t, rot)), dim=-1)          # (nh, T, nope+rot)
        k, v = cache.update(layer, k, v)
        out = _attend(q, k, v, start, (nope + rot) ** -0.5)
        return F.linear(out, w[p + "o_proj.weight"])

    # -- feed-forward -----------------------------------------------------------------------
    def route(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Router logits (N, E) -> (weights (N, k) fp32, expert ids (N, k))."""
        cfg = self.config
        scores = torch.softmax(logits, dim=-1, dtype=torch.float32)
        if cfg.topk_method == "group_limited_greedy":
            n = scores.shape[0]
            group_scores = scores.view(n, cfg.n_group, -1).max(dim=-1).values   # (N, groups)
            keep = torch.topk(group_scores, cfg.topk_group, dim=-1).indices
            mask = torch.zeros_like(group_scores).scatter_(1, keep, 1.0)
            mask = mask.repeat_interleave(cfg.num_experts // cfg.n_group, dim=1)
            scores = scores.masked_fill(mask == 0, 0.0)
        weights, ids = torch.topk(scores, cfg.top_k, dim=-1)
        if cfg.family == "deepseek_v2":
            if cfg.top_k > 1 and cfg.norm_topk_prob:
                weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
            else:
                weights = weights * cfg.routed_scaling_factor
        elif cfg.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights, ids

    def _gate(self, layer: int) -> torch.Tensor:
        block = "block_sparse_moe" if self.config.family == "mixtral" else "mlp"
        return self.w[f"model.layers.{layer}.{block}.gate.weight"]

    def _counts(self, ids: torch.Tensor) -> list[int]:
        return torch.bincount(ids.reshape(-1), minlength=self.config.num_experts).tolist()

    def _next_moe_layer(self, layer: int) -> int | None:
        return next((m for m in self.config.moe_layers if m > layer), None)

    def _prefetch_next(self, layer: int, residual: torch.Tensor, late: bool = False) -> None:
        """Lookahead routing [ours]: the next MoE layer's router, applied to the residual stream
        as it enters this layer's MoE (normed with the next layer's norm), predicts the next
        layer's experts; for one token the ``top_k`` likeliest are prefetched, for a prompt
        every expert one of its tokens is predicted to use (a prefill reads most experts and is
        bound by the channel, which a guess of only ``top_k`` left idle between layers: TTFT
        112 against 121 ms on the trained benchmark model, 5 interleaved rounds). The stream
        changes little over one MoE and one attention, so the guess is mostly right. After the
        last MoE layer the guess is for the next token's first MoE layer, from that layer's
        input as ``_speculate`` computes it for the greedy next token the LM head guesses.
        (The authors' engine also prefetches the next layer, wrapping from the last to the
        first, but predicts from routing frequencies.)

        ``late``: the guess again, from the stream once this layer's MoE output is added,
        which the provider takes in place of the early one. It comes one attention before the
        next router, so it has less time to read but is right more often where a layer
        changes the stream most (trained benchmark model, 585 decode steps: the next layer's
        third guess right 91 % of the time for layer 1, against 30 % for the early guess).
        Not made after the last MoE layer, where the early guess already had the stream."""
        prefetch = getattr(self.experts, "prefetch", None)
        if prefetch is None:
            return
        cfg, w = self.config, self.w
        nxt = self._next_moe_layer(layer)
        if nxt is None and late:
            return
        if nxt is None:
            residual, nxt = self._speculate(residual), cfg.moe_layers[0]
        h = rms_norm(residual, w[f"model.layers.{nxt}.post_attention_layernorm.weight"],
                     cfg.rms_norm_eps)
        weights, ids = self.route(F.linear(h, self._gate(nxt)))
        if len(ids) == 1:  # one token: its experts, most router weight first (topk's order)
            prefetch(nxt, dict.fromkeys(ids[0].tolist(), 1), late=late)
            return
        counts = self._counts(ids)
        mass = torch.zeros(cfg.num_experts, device=weights.device).index_add_(
            0, ids.reshape(-1), weights.reshape(-1)).tolist()
        # Most predicted tokens first, then the most router weight: the scheduler keeps this
        # order among equals, so the likeliest experts are read first and the doubtful ones
        # are still unread, and cancelled cheaply, when the guess proves wrong.
        top = sorted((e for e, n in enumerate(counts) if n), key=lambda e: (-counts[e], -mass[e]))
        prefetch(nxt, {e: counts[e] for e in top}, late=late)

    def _moe(self, layer: int, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """x: the normed MoE input; residual: the stream it was normed from (for lookahead)."""
        cfg, w = self.config, self.w
        weights, ids = self.route(F.linear(x, self._gate(layer)))
        flat = ids.reshape(-1)
        order = torch.argsort(flat, stable=True)
        counts = self._counts(ids)
        assignment: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        begin = 0
        for expert, count in enumerate(counts):
            if count:
                pos = order[begin:begin + count]
                assignment[expert] = (pos // cfg.top_k, pos % cfg.top_k)  # token rows, top-k slot
                begin += count
        contributions: dict[int, torch.Tensor] = {}
        deliveries = self.experts.fetch(layer, {e: counts[e] for e in assignment})
        self._prefetch_next(layer, residual)  # queued behind this layer's own reads
        for expert, ew in deliveries:
            rows, slots = assignment[expert]
            contributions[expert] = expert_ffn(x[rows], ew) * weights[rows, slots, None]
        if set(contributions) != set(assignment):
            raise RuntimeError(f"layer {layer}: the expert provider did not deliver every expert")
        out = torch.zeros_like(x)
        for expert in sorted(contributions):                             # fixed summation order
            out.index_add_(0, assignment[expert][0], contributions[expert])
        if cfg.shared_intermediate:
            name = "shared_expert" if cfg.family == "qwen2_moe" else "shared_experts"
            shared = self._mlp(f"model.layers.{layer}.mlp.{name}.", x)
            if cfg.shared_expert_gate:
                gate = torch.sigmoid(F.linear(x, w[f"model.layers.{layer}.mlp.shared_expert_gate"
                                                   ".weight"]))
                shared = gate * shared
            out = out + shared
        self._prefetch_next(layer, residual + out, late=True)
        return out

    def _mlp(self, prefix: str, x: torch.Tensor) -> torch.Tensor:
        w = self.w
        return expert_ffn(x, ExpertWeights(w[prefix + "gate_proj.weight"],
                                           w[prefix + "up_proj.weight"],
                                           w[prefix + "down_proj.weight"]))

    # -- whole model ------------------------------------------------------------------------
    @torch.inference_mode()
    def forward(self, ids: list[int], cache: KVCache) -> torch.Tensor:
        """Logits (T, vocab) of the new tokens ``ids``, appended after what ``cache`` holds."""
        cfg, w = self.config, self.w
        if max(ids) >= cfg.vocab_size:
            raise UsageError(f"token id {max(ids)} is outside the vocabulary ({cfg.vocab_size})")
        start = cache.length()
        speculation, self._speculation = self._speculation, None
        if speculation is not None and speculation.holds(ids, cache, start):
            x, begin = speculation.adopt(cache), speculation.layer  # its attention is done
        else:
            x, begin = self._embed(ids), None
        self._step = (cache, start + len(ids))  # for _speculate, during this forward only
        try:
            for layer in range(begin or 0, cfg.num_layers):
                if layer != begin:
                    x = self._attention_block(layer, x, cache, start)
                x = self._ffn_block(layer, x)
        finally:
            self._step = None
        x = rms_norm(x, w["model.norm.weight"], cfg.rms_norm_eps)
        return F.linear(x, self.lm_head)

    def _embed(self, ids: list[int]) -> torch.Tensor:
        return self.w["model.embed_tokens.weight"][torch.tensor(ids, device=self.device)]

    def _attention_block(self, layer: int, x: torch.Tensor, cache: KVCache,
                         start: int) -> torch.Tensor:
        norm = self.w[f"model.layers.{layer}.input_layernorm.weight"]
        return x + self._attention(layer, rms_norm(x, norm, self.config.rms_norm_eps), cache,
                                   start)

    def _ffn_block(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        cfg, p = self.config, f"model.layers.{layer}."
        h = rms_norm(x, self.w[p + "post_attention_layernorm.weight"], cfg.rms_norm_eps)
        return x + (self._moe(layer, h, x) if layer in cfg.moe_layers
                    else self._mlp(p + "mlp.", h))

    def _speculate(self, residual: torch.Tensor) -> torch.Tensor:
        """The stream entering the first MoE layer's MoE for the next token as the LM head
        guesses it from ``residual`` (the last MoE layer's input): the layers before it and its
        attention, run now on a copy of the cache's lists [ours]. The next ``forward`` adopts
        the result when its token is the guess (98 % of decode steps on the trained benchmark
        model), so nothing is computed twice; the guess of the first MoE layer's experts is
        then its router's own choice, with the whole last MoE layer as lead."""
        cfg, w = self.config, self.w
        cache, start = self._step
        last = rms_norm(residual[-1:], w["model.norm.weight"], cfg.rms_norm_eps)
        token = int(F.linear(last, self.lm_head).argmax())
        scratch = KVCache(list(cache.keys), list(cache.values))
        first = cfg.moe_layers[0]
        x = self._embed([token])
        for layer in range(first):
            x = self._ffn_block(layer, self._attention_block(layer, x, scratch, start))
        x = self._attention_block(first, x, scratch, start)
        self._speculation = Speculation(token, weakref.ref(cache), start,
                                        scratch.keys[:first + 1], scratch.values[:first + 1], x)
        return x
