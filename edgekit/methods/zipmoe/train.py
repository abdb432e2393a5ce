"""A small MoE language model trained for real, so ZipMoE is measured on learned routing.

``make-tiny`` checkpoints have random weights: their routing is close to uniform and their
residual stream barely changes between layers, which flatters the next-layer prefetch. This
module trains a Mixtral-layout model (byte vocabulary, every layer sparse, top-k renormalised)
on real text and caches the result as an ordinary Hugging Face checkpoint folder, which
``compress_checkpoint`` and the serving engine take like any downloaded one.

Text [ours]: the documentation of numpy's public API (the docstrings of ``numpy`` and its
``linalg``, ``fft``, ``random``, ``polynomial``, ``ma``, ``lib``, ``char`` and ``strings``
namespaces, about 1.5 MB of English prose, signatures and doctest examples), which ships in the
numpy wheel from PyPI, a core dependency: nothing is downloaded. The last 5 % of it is held out.

Training: AdamW, linear warm-up then cosine decay, random windows drawn with a seeded generator,
next-byte cross-entropy plus Switch/Mixtral's load-balancing loss (``aux_coef`` x E x sum of
token share x mean router probability per expert), as trained MoEs are. The forward here is a
batched, differentiable copy of ``model.py``'s for this family (same RMSNorm, RoPE and routing);
the cached model is checked by serving its held-out loss through ``model.py`` itself.

Cache: ``$EDGEKIT_HOME/zipmoe/trained/<key>``, ``key`` a SHA-256 of the config, the training
settings and the text, written atomically (config.json, model.safetensors in bf16, training.json
with the loss curve and the expert load), so a run trains once and later runs load it.
"""
from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file

from edgekit.errors import UsageError
from edgekit.fileio import atomic_directory, register_output_kind
from edgekit.methods.zipmoe.config import PROJECTIONS, MoEConfig, parse_config
from edgekit.methods.zipmoe.model import (
    ExpertWeights,
    KVCache,
    MoEModel,
    expert_ffn,
    rms_norm,
    rope,
)
from edgekit.methods.zipmoe.tiny import tiny_config, tiny_weights
from edgekit.paths import edgekit_home
from edgekit.progress import Progress, ProgressUpdate
from edgekit.schema import NUMBER, STR, ListOf, MapOf, Object, check

DOC_MODULES = ("numpy", "numpy.linalg", "numpy.fft", "numpy.random", "numpy.polynomial",
               "numpy.ma", "numpy.lib", "numpy.char", "numpy.strings")
HELD_OUT = 0.05
TRAINED_MARK = {"edgekit": "zipmoe-trained"}
FORMAT = 1  # bump when the training code changes what a key's settings produce


@dataclass(frozen=True)
class TrainSettings:
    size: str = "small"       # tiny.py's dimensions (hidden, layers, experts, top-k, width)
    steps: int = 100
    batch: int = 8
    seq_len: int = 128
    lr: float = 3e-3
    warmup: int = 12
    aux_coef: float = 0.01    # load-balancing loss weight (Mixtral's router_aux_loss_coef: 0.02)
    seed: int = 0
    eval_windows: int = 16    # held-out windows of ``seq_len`` for the final loss

    def check(self) -> None:
        for name in ("steps", "batch", "seq_len", "eval_windows"):
            if getattr(self, name) < 1:
                raise UsageError(f"training {name} must be at least 1, got {getattr(self, name)}")
        if not self.lr > 0 or self.aux_coef < 0 or self.warmup < 0:
            raise UsageError("training needs lr > 0, aux_coef >= 0 and warmup >= 0")


def corpus_text() -> tuple[str, str]:
    """The training text and a one-line description of where it comes from."""
    import numpy

    seen: set[int] = set()
    parts: list[str] = []
    for module_name in DOC_MODULES:
        module = importlib.import_module(module_name)
        for name in sorted(dir(module)):
            if name.startswith("_"):
                continue
            obj = getattr(module, name, None)
            doc = inspect.getdoc(obj) if obj is not None else None
            if doc and id(obj) not in seen:
                seen.add(id(obj))
                parts.append(doc)
    text = "\n\n".join(parts)
    return text, (f"numpy {numpy.__version__} API documentation ({len(parts)} docstrings, "
                  f"{len(text.encode()):,} bytes)")


def split_corpus(text: str) -> tuple[torch.Tensor, torch.Tensor]:
    data = torch.frombuffer(bytearray(text.encode("utf-8")), dtype=torch.uint8).long()
    cut = int(len(data) * (1 - HELD_OUT))
    return data[:cut], data[cut:]


def held_out_text(text: str) -> str:
    """The held-out part of the corpus, as text (prompts and routing traces come from it)."""
    raw = text.encode("utf-8")
    return raw[int(len(raw) * (1 - HELD_OUT)):].decode("utf-8", errors="ignore")


def cache_key(config: dict[str, Any], settings: TrainSettings, text: str) -> str:
    blob = json.dumps({"format": FORMAT, "config": config, "settings": asdict(settings),
                       "text": hashlib.sha256(text.encode()).hexdigest()}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------------------------
# The differentiable forward (Mixtral layout)
# --------------------------------------------------------------------------------------------

def _forward(p: dict[str, torch.Tensor], cfg: MoEConfig, ids: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """Logits (B, T, V), the load-balancing loss and each layer's expert ids (N, k)."""
    b, t = ids.shape
    eps, h_dim = cfg.rms_norm_eps, cfg.hidden_size
    nh, nkv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    positions = torch.arange(t, device=ids.device)
    x = p["model.embed_tokens.weight"][ids]
    aux = x.new_zeros(())
    routed = []
    for layer in range(cfg.num_layers):
        pre = f"model.layers.{layer}."
        h = rms_norm(x, p[pre + "input_layernorm.weight"], eps)
        q = F.linear(h, p[pre + "self_attn.q_proj.weight"]).view(b, t, nh, hd).transpose(1, 2)
        k = F.linear(h, p[pre + "self_attn.k_proj.weight"]).view(b, t, nkv, hd).transpose(1, 2)
        v = F.linear(h, p[pre + "self_attn.v_proj.weight"]).view(b, t, nkv, hd).transpose(1, 2)
        q, k = rope(q, positions, cfg.rope_theta), rope(k, positions, cfg.rope_theta)
        k, v = k.repeat_interleave(nh // nkv, dim=1), v.repeat_interleave(nh // nkv, dim=1)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + F.linear(att.transpose(1, 2).reshape(b, t, nh * hd),
                         p[pre + "self_attn.o_proj.weight"])
        flat = rms_norm(x, p[pre + "post_attention_layernorm.weight"], eps).reshape(-1, h_dim)
        probs = torch.softmax(F.linear(flat, p[cfg.router_name(layer)]), dim=-1,
                              dtype=torch.float32)
        weights, ids_k = torch.topk(probs, cfg.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(flat)
        for e in range(cfg.num_experts):
            rows, slots = (ids_k == e).nonzero(as_tuple=True)
            if rows.numel():
                ew = ExpertWeights(*(p[cfg.expert_tensor_name(layer, e, proj)]
                                     for proj in PROJECTIONS))
                out = out.index_add(0, rows, expert_ffn(flat[rows], ew)
                                    * weights[rows, slots, None])
        share = torch.bincount(ids_k.reshape(-1), minlength=cfg.num_experts).float()
        share = share / share.sum()
        aux = aux + cfg.num_experts * (share * probs.mean(dim=0)).sum()
        routed.append(ids_k.detach())
        x = x + out.view(b, t, h_dim)
    x = rms_norm(x, p["model.norm.weight"], eps)
    return F.linear(x, p["lm_head.weight"]), aux / cfg.num_layers, routed


def expert_load(counts: torch.Tensor) -> dict[str, float]:
    """Skew of one layer's token counts per expert: max / mean, and the normalised entropy
    (1.0 = uniform)."""
    share = counts.float() / counts.sum().clamp(min=1)
    nonzero = share[share > 0]
    entropy = float(-(nonzero * nonzero.log()).sum()) / math.log(len(counts))
    return {"max_over_mean": float(share.max() * len(counts)), "entropy": entropy,
            "min_over_mean": float(share.min() * len(counts))}


def _windows(data: torch.Tensor, starts: torch.Tensor, seq_len: int) -> torch.Tensor:
    return torch.stack([data[s:s + seq_len + 1] for s in starts.tolist()])


def train(config: dict[str, Any], text: str, settings: TrainSettings,
          progress: Progress | None = None) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Trained bf16 weights by Hugging Face name, and the training record. Runs on one thread:
    the result then does not depend on the machine's core count, and a shared machine's other
    work does not stall the threads of every matmul."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train(config, text, settings, progress)
    finally:
        torch.set_num_threads(threads)


def _train(config: dict[str, Any], text: str, settings: TrainSettings,
           progress: Progress | None) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    settings.check()
    cfg = parse_config(config)
    if cfg.family != "mixtral":
        raise UsageError(f"training implements the mixtral layout, not {cfg.family}")
    train_data, eval_data = split_corpus(text)
    if len(eval_data) <= settings.seq_len + 1 or len(train_data) <= settings.seq_len + 1:
        raise UsageError(f"the text is too short to train on windows of {settings.seq_len}")
    torch.manual_seed(settings.seed)
    gen = torch.Generator().manual_seed(settings.seed)
    params = {n: t.float().requires_grad_() for n, t in tiny_weights(config, settings.seed).items()}
    decay = [t for n, t in params.items() if t.ndim == 2]
    no_decay = [t for n, t in params.items() if t.ndim != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}], lr=settings.lr,
                            betas=(0.9, 0.95))
    curve: list[list[float]] = []
    counts = torch.zeros(cfg.num_layers, cfg.num_experts, dtype=torch.long)
    t0 = time.perf_counter()
    for step in range(settings.steps):
        lr = settings.lr * (min(1.0, (step + 1) / max(1, settings.warmup)) * 0.5
                            * (1 + math.cos(math.pi * step / settings.steps)) * 0.9 + 0.1)
        for group in opt.param_groups:
            group["lr"] = lr
        starts = torch.randint(0, len(train_data) - settings.seq_len - 1, (settings.batch,),
                               generator=gen)
        batch = _windows(train_data, starts, settings.seq_len)
        logits, aux, routed = _forward(params, cfg, batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, cfg.vocab_size), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        (loss + settings.aux_coef * aux).backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
        curve.append([step + 1, loss.item(), aux.item()])
        if step >= settings.steps - max(1, settings.steps // 4):  # the load as trained
            for layer, ids_k in enumerate(routed):
                counts[layer] += torch.bincount(ids_k.reshape(-1), minlength=cfg.num_experts)
        if progress:
            progress(ProgressUpdate("training MoE", step + 1, settings.steps,
                                    f"loss {curve[-1][1]:.3f}"))
    weights = {n: t.detach().to(torch.bfloat16).contiguous() for n, t in params.items()}
    record = {
        "settings": asdict(settings), "train_s": time.perf_counter() - t0,
        "tokens_seen": settings.steps * settings.batch * settings.seq_len,
        "loss_first": curve[0][1], "loss_last": _mean_tail(curve, 10),  # last 10 steps' mean
        "curve": curve,
        "expert_load": {str(layer): counts[layer].tolist() for layer in range(cfg.num_layers)},
        "held_out_loss": held_out_loss(config, weights, eval_data, settings),
        "uniform_loss": math.log(cfg.vocab_size),
    }
    return weights, record


def _mean_tail(curve: list[list[float]], n: int) -> float:
    tail = curve[-n:]
    return sum(row[1] for row in tail) / len(tail)


class _Held:
    """An ExpertProvider over experts held in a dict (the held-out check serves them as-is)."""

    def __init__(self, config: MoEConfig, weights: dict[str, torch.Tensor]) -> None:
        self.config, self.weights = config, weights

    def fetch(self, layer: int, tokens: dict[int, int]):  # noqa: ANN201 - ExpertProvider
        for e in sorted(tokens):
            yield e, ExpertWeights(*(self.weights[self.config.expert_tensor_name(layer, e, p)]
                                     for p in PROJECTIONS))


def held_out_loss(config: dict[str, Any], weights: dict[str, torch.Tensor],
                  eval_data: torch.Tensor, settings: TrainSettings) -> float:
    """Mean next-byte cross-entropy of the bf16 model on held-out windows, served by
    ``model.py`` (the serving engine's forward), so training and serving agree."""
    cfg = parse_config(config)
    model = MoEModel(cfg, weights, _Held(cfg, weights))
    span = len(eval_data) - settings.seq_len - 1
    losses = []
    for i in range(settings.eval_windows):
        start = i * span // settings.eval_windows
        window = eval_data[start:start + settings.seq_len + 1]
        logits = model.forward(window[:-1].tolist(), KVCache())
        losses.append(float(F.cross_entropy(logits, window[1:])))
    return sum(losses) / len(losses)


# --------------------------------------------------------------------------------------------
# The cache
# --------------------------------------------------------------------------------------------

RECORD_FIELDS = Object({"key": STR, "corpus": STR, "loss_first": NUMBER, "loss_last": NUMBER,
                        "held_out_loss": NUMBER, "curve": ListOf(ListOf(NUMBER)),
                        "expert_load": MapOf(ListOf(NUMBER))})


def trained_config(size: str = "small") -> dict[str, Any]:
    return tiny_config("mixtral", size)


def trained_checkpoint(settings: TrainSettings | None = None, home: Path | None = None,
                       progress: Progress | None = None, text: str | None = None
                       ) -> tuple[Path, dict[str, Any]]:
    """The trained checkpoint's folder and its training record, training it on the first call.

    ``text`` replaces the numpy documentation (tests train on a short text)."""
    settings = settings or TrainSettings()
    config = trained_config(settings.size)
    if text is None:
        text, source = corpus_text()
    else:
        source = f"given text ({len(text.encode()):,} bytes)"
    key = cache_key(config, settings, text)
    folder = (home or edgekit_home()) / "zipmoe" / "trained" / f"mixtral-{settings.size}-{key}"
    record = _read_record(folder, key)
    if record is not None:
        return folder, record
    weights, record = train(config, text, settings, progress)
    record = {"key": key, "corpus": source, **record}
    folder.parent.mkdir(parents=True, exist_ok=True)
    with atomic_directory(folder) as staging:
        (staging / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        save_file(weights, str(staging / "model.safetensors"),
                  metadata={"format": "pt", **TRAINED_MARK, "key": key})
        (staging / "training.json").write_text(json.dumps(record, indent=1) + "\n")
    return folder, record


def _read_record(folder: Path, key: str) -> dict[str, Any] | None:
    """The cached record when the folder is complete and made for ``key``, else None."""
    try:
        record = json.loads((folder / "training.json").read_text())
        check(record, RECORD_FIELDS, str(folder / "training.json"))
        with safe_open(str(folder / "model.safetensors"), framework="pt") as handle:
            metadata = handle.metadata() or {}
    except Exception:  # noqa: BLE001 - missing, unreadable or damaged: train again
        return None
    if record["key"] != key or metadata.get("key") != key or not (folder / "config.json").is_file():
        return None
    return record


def _trained_checkpoint_files(folder: Path) -> list[str] | None:
    with safe_open(str(folder / "model.safetensors"), framework="pt") as handle:
        metadata = handle.metadata() or {}
    if all(metadata.get(k) == v for k, v in TRAINED_MARK.items()):
        return ["config.json", "model.safetensors", "training.json"]
    return None


register_output_kind("zipmoe-trained", _trained_checkpoint_files)
