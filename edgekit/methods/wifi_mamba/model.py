"""WiFi-Mamba: dual-stream selective SSMs for WiFi CSI 3D multi-person pose.

Paper: Quang-Anh N. D. and Kok-Seng Wong, "WiFi-Mamba" (ICML 2026); no text or code was found, so
the three components follow the abstract with our concrete choices (docs/methods/wifi_mamba.md):

1. Dual-Stream Selective SSM: amplitude and phase ``(B, 270, T)`` are embedded per packet and
   scanned by parallel selective SSMs whose states are coupled (each state update takes a learned
   per-channel-and-state share of the other stream's previous state; ``ssm.dual_selective_scan``,
   a chunked scan), in pre-norm residual blocks.
2. Selective State Attention decoder: pose queries cross-attend to the fused sequence context
   *and* to the final SSM states (each of the N state columns of both streams becomes a token);
   a head regresses 14x3 keypoints and a person logit per query; trained with a Hungarian set loss.
3. Persistent SSM Memory: ``forward_stream(x, memory)`` starts every block's scan from
   σ(g) ⊙ (previous frame's final state), g learned per channel and state; σ(g) < 1 and the
   coupled transition's rows summing to below 1 in absolute value (``ssm``) keep the carried
   state bounded, and the memory is a fixed (layers x 2 x E x N)
   per person stream, whatever the number of frames.

Input ``(B, 2, 270, T)`` (``edgekit.methods.wifi_mamba.csi.preprocess``); outputs poses
``(B, Q, 14, 3)`` in metres and logits ``(B, Q)``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from edgekit.methods.wifi_mamba.blocks import DecoderLayer, InputNorm, PoseHead
from edgekit.methods.wifi_mamba.onnx_scan import scan_for_export
from edgekit.methods.wifi_mamba.ssm import SelectiveSSM, dual_selective_scan, fused_applies

PAPER = "Quang-Anh N. D. and Kok-Seng Wong, WiFi-Mamba (ICML 2026)"


@dataclass(frozen=True)
class WiFiMambaConfig:
    in_features: int = 270  # 3 receivers x 3 antennas x 30 subcarriers per packet
    d_model: int = 64  # width of each stream
    d_state: int = 16  # SSM state size N
    expand: int = 2  # inner width E = expand x d_model
    n_layers: int = 2  # dual-stream SSM blocks
    dec_dim: int = 64  # decoder width
    dec_layers: int = 2
    heads: int = 4
    queries: int = 10  # pose queries (at most this many persons)
    ffn_ratio: int = 2


class DualSSMBlock(nn.Module):
    """Pre-norm residual block holding both streams' SSMs and their coupling.

    ``chunk``: packets per chunk of the scan (None: picked from the length, ``ssm.chunk_size``;
    at least the length: the plain loop); ``fused``: whether inference runs the compiled scan
    kernel (None: wherever ``ssm.fused_applies``, i.e. eager inference on a CPU; never under
    autograd or an exporter's trace); ``onnx_scan``: whether an ONNX export writes the scan as
    one ``Scan`` operator (``onnx_scan.py``) rather than unrolled with ``chunk``. Only speed
    depends on them."""

    chunk: int | None = None
    fused: bool | None = None
    onnx_scan: bool = True

    def __init__(self, cfg: WiFiMambaConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.norm_a, self.norm_p = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ssm_a = SelectiveSSM(d, cfg.d_state, cfg.expand)
        self.ssm_p = SelectiveSSM(d, cfg.d_state, cfg.expand)
        e = self.ssm_a.d_inner
        self.coupling = nn.Parameter(torch.zeros(2, e, cfg.d_state))  # W: phase->amp, amp->phase
        self.memory_gate = nn.Parameter(torch.zeros(2, e, cfg.d_state))  # σ(0) = 0.5

    def forward(self, xa: torch.Tensor, xp: torch.Tensor, h: torch.Tensor | None):
        """xa, xp (B, L, d); h (B, 2, E, N) carried memory or None -> new xa, xp, final states."""
        pa, pp = self.ssm_a.prepare(self.norm_a(xa)), self.ssm_p.prepare(self.norm_p(xp))
        if h is None:
            h = pa[0].new_zeros(xa.shape[0], 2, self.ssm_a.d_inner, self.ssm_a.d_state)
        else:
            h = torch.sigmoid(self.memory_gate) * h  # (B, 2, E, N)
        fused = self.fused if self.fused is not None else fused_applies(h, self.coupling)
        y_a, y_p, h = dual_selective_scan(pa, pp, self.ssm_a, self.ssm_p, self.coupling, h,
                                          self.chunk, fused,
                                          scan_for_export if self.onnx_scan else None)
        y_a = y_a * torch.nn.functional.silu(pa[1])  # gate z, as in Mamba
        y_p = y_p * torch.nn.functional.silu(pp[1])
        return xa + self.ssm_a.out_proj(y_a), xp + self.ssm_p.out_proj(y_p), h


class WiFiMamba(nn.Module):
    def __init__(self, **config) -> None:
        super().__init__()
        cfg = self.cfg = WiFiMambaConfig(**config)
        self.input_norm = InputNorm(cfg.in_features)
        self.embed_a = nn.Sequential(nn.Linear(cfg.in_features, cfg.d_model),
                                     nn.LayerNorm(cfg.d_model))
        self.embed_p = nn.Sequential(nn.Linear(cfg.in_features, cfg.d_model),
                                     nn.LayerNorm(cfg.d_model))
        self.blocks = nn.ModuleList(DualSSMBlock(cfg) for _ in range(cfg.n_layers))
        e = cfg.expand * cfg.d_model
        self.fuse = nn.Sequential(nn.LayerNorm(2 * cfg.d_model),
                                  nn.Linear(2 * cfg.d_model, cfg.dec_dim))
        self.state_tokens = nn.Linear(e, cfg.dec_dim)  # each state column (E,) -> a token
        self.stream_embed = nn.Parameter(torch.zeros(3, cfg.dec_dim))  # sequence / amp / phase
        self.queries = nn.Parameter(torch.randn(cfg.queries, cfg.dec_dim) * 0.02)
        self.decoder = nn.ModuleList(
            DecoderLayer(cfg.dec_dim, cfg.heads, cfg.ffn_ratio * cfg.dec_dim)
            for _ in range(cfg.dec_layers))
        self.head = PoseHead(cfg.dec_dim)

    def forward_stream(self, x: torch.Tensor, memory: torch.Tensor | None = None):
        """x (B, 2, 270, T), memory (B, layers, 2, E, N) or None -> poses, logits, new memory."""
        x = self.input_norm(x)
        xa = self.embed_a(x[:, 0].transpose(1, 2))  # (B, T, d)
        xp = self.embed_p(x[:, 1].transpose(1, 2))
        states = []
        for i, block in enumerate(self.blocks):
            xa, xp, h = block(xa, xp, None if memory is None else memory[:, i])
            states.append(h)
        seq = self.fuse(torch.cat([xa, xp], -1)) + self.stream_embed[0]  # (B, T, D)
        h = states[-1]  # (B, 2, E, N)
        tok_a = self.state_tokens(h[:, 0].transpose(1, 2)) + self.stream_embed[1]  # (B, N, D)
        tok_p = self.state_tokens(h[:, 1].transpose(1, 2)) + self.stream_embed[2]
        mem = torch.cat([seq, tok_a, tok_p], 1)  # (B, T + 2N, D)
        q = self.queries.repeat(x.shape[0], 1, 1)  # not a view: module hooks see a fresh tensor
        for layer in self.decoder:
            q = layer(q, mem)
        poses, logits = self.head(q)
        return poses, logits, torch.stack(states, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One frame without memory (the exported form): poses (B, Q, 14, 3), logits (B, Q)."""
        poses, logits, _ = self.forward_stream(x)
        return poses, logits

    def config_dict(self) -> dict:
        return asdict(self.cfg)

    def initial_memory(self, batch: int) -> torch.Tensor:
        """The memory a fresh stream starts from, (B, layers, 2, E, N) zeros: the same frame as
        ``forward_stream(x, None)``."""
        e = self.cfg.expand * self.cfg.d_model
        return self.queries.new_zeros(batch, self.cfg.n_layers, 2, e, self.cfg.d_state)


class StreamStep(nn.Module):
    """WiFi-Mamba's streaming form: one frame with the persistent SSM memory as an input and the
    next memory as an output, ``(x, memory) -> poses, logits, memory_out``. Exported
    (``edgekit export wifi-mamba --stream``), a deployment feeds each frame's ``memory_out`` to
    the next frame, as ``forward_stream`` does in PyTorch and the evaluator does on held-out
    sequences; the memory is a fixed (B, layers, 2, E, N) however long the stream."""

    def __init__(self, model: WiFiMamba) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, memory: torch.Tensor):
        return self.model.forward_stream(x, memory)


# Configs: "full" is sized to the paper's 2.14M parameters (d_model 156: the state coupling has
# 2·E·N weights per block where the former output coupling had 2·E²); "cpu" trains in minutes on
# a CPU.
CONFIGS = {
    "cpu": {"d_model": 32, "dec_dim": 40, "heads": 4},  # 114,691 parameters
    "full": {"d_model": 156, "d_state": 16, "n_layers": 4, "dec_dim": 116, "dec_layers": 3,
             "heads": 4, "queries": 100},  # 2,117,227 parameters
}


def full_model_and_inputs() -> tuple[WiFiMamba, dict[str, torch.Tensor]]:
    """WiFi-Mamba at the paper's size (``CONFIGS["full"]``), one frame of CSI (amplitude and
    phase, 270 subcarrier-antenna pairs, 20 packets), random weights: the edge suite's member."""
    torch.manual_seed(0)
    return WiFiMamba(**CONFIGS["full"]).eval(), {"x": torch.randn(1, 2, 270, 20)}
