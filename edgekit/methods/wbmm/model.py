"""WBMM backbone: UniRepLKNet with the large-kernel operator replaced by WBMM (arXiv 2607.02097).

Paper: "WBMM: Windowed Batch Matrix Multiplication for Efficient Large Receptive Field
Convolution", arXiv 2607.02097 (ICML 2026); code ``wansong-s/WBMM`` (``wbmm.py``,
``wbmm_reparam.py``). The macro design is UniRepLKNet's (Ding et al., CVPR 2024): a two-conv stem
(stride 4), four stages joined by stride-2 3x3 convs, LayerNorm + linear head. Each block is

    x + DropPath(γ · BN(Linear(GRN(GELU(Linear(SE(BN(op(x)))))))))        FFN ratio 4, SE ratio 1/4

with ``op`` one of ``"W"`` (WBMM), ``"D"`` (3x3 depthwise conv) or an odd int k (a k x k depthwise
conv, the authors' ablation token; ``13`` gives the UniRepLKNet-sized twin). Windows do not shift:
W and D blocks alternate so information crosses window borders.

``reparameterize(form)`` turns a trained model into its deploy form: every BN folds into the
preceding op or linear, the layer scale γ and GRN's bias fold into the last linear, and WBMM
operators become ``compact`` (table indexed on every call) or ``cached`` (dense M).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from edgekit.data import DIGITS
from edgekit.errors import UsageError
from edgekit.kernels.wbmm import DEPLOY_FORMS, WBMM, as_window, bn_scale_shift
from edgekit.registry import ModelEntry, TrainSettings, register_model

PAPER = "Wang et al., WBMM: Windowed Batch Matrix Multiplication, arXiv 2607.02097 (ICML 2026)"

Token = str | int  # "W", "D" or an odd depthwise kernel size


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of [B, C, H, W] (UniRepLKNet's channels_first LayerNorm)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 2, 3, 1)  # [B, H, W, C]
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)  # [B, C, H, W]


class GRN(nn.Module):
    """Global Response Normalization (ConvNeXt V2) on [B, H, W, C]."""

    def __init__(self, dim: int, use_bias: bool = True) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.zeros(dim))
        self.beta = nn.Parameter(torch.zeros(dim)) if use_bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gx = torch.linalg.vector_norm(x, ord=2, dim=(1, 2), keepdim=True)  # [B, 1, 1, C]
        nx = gx / (gx.mean(dim=-1, keepdim=True) + 1e-6)  # [B, 1, 1, C]
        y = (self.gamma * nx + 1) * x
        return y + self.beta if self.beta is not None else y


class SE(nn.Module):
    """Squeeze-and-excitation with 1x1 convs, reduction 4 (UniRepLKNet's SEBlock)."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.down = nn.Conv2d(dim, hidden, 1)
        self.up = nn.Conv2d(hidden, dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.adaptive_avg_pool2d(x, 1)  # [B, C, 1, 1]
        return x * torch.sigmoid(self.up(F.relu(self.down(s))))


class DropPath(nn.Module):
    """Stochastic depth per sample (training only)."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        keep = x.new_empty(x.shape[0], 1, 1, 1).bernoulli_(1 - self.p)  # [B, 1, 1, 1]
        return x * keep / (1 - self.p)


def _make_op(token: Token, dim: int, window: tuple[int, int], small_kernels: bool,
             deploy: str | None) -> nn.Module:
    if token == "W":
        return WBMM(dim, window, small_kernels=small_kernels, deploy=deploy)
    k = 3 if token == "D" else token
    if not isinstance(k, int) or k < 1 or k % 2 == 0:
        raise UsageError(f"unknown block token {token!r}",
                         hint="use 'W' (WBMM), 'D' (3x3 depthwise) or an odd kernel size")
    return nn.Conv2d(dim, dim, k, padding=k // 2, groups=dim, bias=deploy is not None)


class Block(nn.Module):
    """``x + DropPath(γ·BN(Linear(GRN(GELU(Linear(SE(BN(op(x)))))))))`` (UniRepLKNetBlock)."""

    def __init__(self, dim: int, token: Token, window: tuple[int, int] = (7, 7),
                 small_kernels: bool = False, drop_path: float = 0.0,
                 layer_scale_init: float = 1e-6, ffn_ratio: int = 4,
                 deploy: str | None = None) -> None:
        super().__init__()
        self.token, self.deploy = token, deploy
        self.op = _make_op(token, dim, window, small_kernels and token == "W", deploy)
        self.norm = nn.BatchNorm2d(dim) if deploy is None else nn.Identity()
        self.se = SE(dim, dim // 4)
        self.pw1 = nn.Linear(dim, ffn_ratio * dim)
        self.act = nn.GELU()
        self.grn = GRN(ffn_ratio * dim, use_bias=deploy is None)
        self.pw2 = nn.Linear(ffn_ratio * dim, dim, bias=deploy is not None)
        self.norm2 = nn.BatchNorm2d(dim) if deploy is None else nn.Identity()
        self.gamma = (nn.Parameter(torch.full((dim,), layer_scale_init))
                      if deploy is None and layer_scale_init > 0 else None)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, C, H, W]
        y = self.se(self.norm(self.op(x)))  # [B, C, H, W]
        y = y.permute(0, 2, 3, 1)  # [B, H, W, C]
        y = self.pw2(self.grn(self.act(self.pw1(y))))  # [B, H, W, 4C] -> [B, H, W, C]
        y = self.norm2(y.permute(0, 3, 1, 2))  # [B, C, H, W]
        if self.gamma is not None:
            y = self.gamma.view(1, -1, 1, 1) * y
        return x + self.drop_path(y)

    @torch.no_grad()
    def reparameterize(self, form: str = "compact") -> None:
        """Fold every BN, γ and GRN's bias; WBMM ops become deploy form ``form`` (in place)."""
        if self.deploy is not None:
            if isinstance(self.op, WBMM) and form != self.deploy:
                self.op = self.op.to_deploy(form)
                self.deploy = form
            return
        s, t = bn_scale_shift(self.norm)
        if isinstance(self.op, WBMM):
            self.op = self.op.to_deploy(form, scale=s, shift=t)
        else:  # depthwise conv + BN -> conv with bias
            conv = nn.Conv2d(self.op.in_channels, self.op.out_channels, self.op.kernel_size,
                             padding=self.op.padding, groups=self.op.groups, bias=True).to(s)
            conv.weight.copy_(self.op.weight * s.view(-1, 1, 1, 1))
            conv.bias.copy_(t)
            self.op = conv
        self.norm = nn.Identity()
        # γ·BN2(W (z + β)) = (γ s2 W) z + γ (s2 W β + t2), z: GRN output without its bias
        s2, t2 = bn_scale_shift(self.norm2)
        g = self.gamma.detach() if self.gamma is not None else torch.ones_like(s2)
        w = self.pw2.weight.detach()
        linear = nn.Linear(w.shape[1], w.shape[0], bias=True).to(w)
        linear.weight.copy_(w * (g * s2)[:, None])
        linear.bias.copy_(g * (s2 * (w @ self.grn.beta) + t2))
        self.pw2, self.grn.beta = linear, None
        self.norm2, self.gamma = nn.Identity(), None
        self.deploy = form


class WBMMNet(nn.Module):
    """UniRepLKNet-style backbone with per-block tokens; see the module docstring.

    ``patterns`` gives each stage's blocks (its length is the stage's depth); ``windows`` one
    WBMM window for all stages or one per stage; ``small_kernel_stages`` the stages whose WBMM
    blocks get the parallel 3x3/5x5 branches (the authors use S4 of P and N only);
    ``stem_strides`` the two stem convs' strides (2, 2 at 224x224; 1, 1 for 8x8 digits).
    """

    # Over 8 parameters: the paper config's hyperparameters; the registry builds the net from
    # a config dict (builder(**config)) that checkpoints store
    def __init__(self, in_channels: int = 3, num_classes: int = 1000,
                 dims: Sequence[int] = (80, 160, 320, 640),
                 patterns: Sequence[Sequence[Token]] = (("D",) * 3, ("W", "D", "W"),
                                                        ("W", "D") * 9, ("W",) * 3),
                 windows: int | Sequence[int] = 7, small_kernel_stages: Sequence[int] = (),
                 stem_strides: Sequence[int] = (2, 2), drop_path_rate: float = 0.0,
                 layer_scale_init: float = 1e-6, head_init_scale: float = 1.0,
                 deploy: str | None = None) -> None:
        super().__init__()
        if len(dims) != len(patterns):
            raise UsageError(f"{len(dims)} stage widths but {len(patterns)} stage patterns")
        if deploy not in (None, *DEPLOY_FORMS):
            raise UsageError(f"unknown deploy form '{deploy}'",
                             hint=f"valid: {', '.join(DEPLOY_FORMS)}")
        n_stages = len(dims)
        windows = [windows] * n_stages if isinstance(windows, int) else list(windows)
        if len(windows) != n_stages:
            raise UsageError(f"{len(windows)} windows for {n_stages} stages")
        self.deploy = deploy
        depths = [len(p) for p in patterns]
        rates = [drop_path_rate * i / max(1, sum(depths) - 1) for i in range(sum(depths))]
        s0, s1 = stem_strides
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, dims[0] // 2, 3, s0, 1), LayerNorm2d(dims[0] // 2, eps=1e-6),
            nn.GELU(), nn.Conv2d(dims[0] // 2, dims[0], 3, s1, 1), LayerNorm2d(dims[0], eps=1e-6))
        self.downsample = nn.ModuleList(
            nn.Sequential(nn.Conv2d(dims[i - 1], dims[i], 3, 2, 1), LayerNorm2d(dims[i], eps=1e-6))
            for i in range(1, n_stages))
        self.stages = nn.ModuleList()
        cur = 0
        for i, pattern in enumerate(patterns):
            self.stages.append(nn.Sequential(*[
                Block(dims[i], tok, as_window(windows[i]), i in small_kernel_stages, rates[cur + j],
                      layer_scale_init, deploy=deploy) for j, tok in enumerate(pattern)]))
            cur += len(pattern)
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self.head = nn.Linear(dims[-1], num_classes)
        self.apply(self._init_weights)
        with torch.no_grad():
            self.head.weight.mul_(head_init_scale)
            self.head.bias.mul_(head_init_scale)

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:  # [B, Cin, H, W] -> [B, C]
        x = self.stages[0](self.stem(x))  # [B, C0, H/4, W/4] at stem strides (2, 2)
        for down, stage in zip(self.downsample, self.stages[1:], strict=False):
            x = stage(down(x))  # [B, Ci, H_i, W_i], halved per stage
        return self.norm(x.mean((-2, -1)))  # [B, C]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.forward_features(x))  # [B, num_classes]

    def get_num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    @torch.no_grad()
    def reparameterize(self, form: str = "compact") -> WBMMNet:
        """Switch to deploy form ``form`` in place (outputs equal the eval-mode training form)
        and record it in ``edgekit_cfg`` so a checkpoint of the result rebuilds this structure."""
        if form not in DEPLOY_FORMS:
            raise UsageError(f"unknown deploy form '{form}'",
                             hint=f"valid: {', '.join(DEPLOY_FORMS)}")
        for stage in self.stages:
            for block in stage:
                block.reparameterize(form)
        self.deploy = form
        cfg = getattr(self, "edgekit_cfg", None)
        if cfg is not None and "deploy" in cfg["config"]:
            self.edgekit_cfg = {**cfg, "config": {**cfg["config"], "deploy": form}}
        return self.eval()


# Paper configurations (authors' wbmm.py): stage patterns, widths, multi-kernel stages.
_P = (("D", "D"), ("W", "D"), ("W", "D") * 3, ("W", "W"))
_N = (("D", "D"), ("W", "D"), ("W", "D") * 4, ("W", "W"))
_T = (("D",) * 3, ("W", "D", "W"), ("W", "D") * 9, ("W",) * 3)
_S = (("D",) * 3, ("W", "D", "W"), ("W", "D", "D") * 9, ("W",) * 3)
PAPER_CONFIGS: dict[str, dict[str, Any]] = {
    "p": {"dims": (64, 128, 256, 512), "patterns": _P, "small_kernel_stages": (3,)},
    "n": {"dims": (80, 160, 320, 640), "patterns": _N, "small_kernel_stages": (3,)},
    "t": {"dims": (80, 160, 320, 640), "patterns": _T, "small_kernel_stages": ()},
    "s": {"dims": (96, 192, 384, 768), "patterns": _S, "small_kernel_stages": ()},
}
PAPER_PARAMS = {"p": 10.6e6, "n": 18.1e6, "t": 31.0e6, "s": 55.6e6}  # ImageNet-1K, 224x224
PAPER_TOP1 = {"p": 80.3, "n": 81.7, "t": 83.2, "s": 83.9}


def paper_config(name: str, **overrides: Any) -> dict[str, Any]:
    """The full WBMMNet config of WBMM-P/N/T/S at ImageNet size (1000 classes, 224x224, w=7)."""
    if name not in PAPER_CONFIGS:
        raise UsageError(f"unknown WBMM paper config '{name}'",
                         hint=f"valid: {', '.join(PAPER_CONFIGS)}")
    cfg = {"in_channels": 3, "num_classes": 1000, "windows": 7, "stem_strides": (2, 2),
           "drop_path_rate": 0.0, "layer_scale_init": 1e-6, "head_init_scale": 1.0,
           "deploy": None, **PAPER_CONFIGS[name]}
    cfg.update(overrides)
    return cfg


def build_paper_model(name: str, **overrides: Any) -> WBMMNet:
    """WBMM-P/N/T/S; build under ``torch.device("meta")`` to count parameters without memory."""
    return WBMMNet(**paper_config(name, **overrides))


def with_tokens(patterns: Sequence[Sequence[Token]], replace: Token, by: Token) -> tuple:
    """The same patterns with every ``replace`` token swapped for ``by`` (for same-size twins)."""
    return tuple(tuple(by if t == replace else t for t in p) for p in patterns)


# Digits-sized config: 8x8 input, stem at stride 1, stages at 8x8 (four 4x4 windows), 4x4 (one
# window) and 2x2 (one window after zero padding to 4x4).
DIGITS_CONFIG: dict[str, Any] = {
    "in_channels": 1, "num_classes": 10, "dims": (16, 32, 64),
    "patterns": (("D", "W"), ("W", "D"), ("W",)), "windows": 4, "small_kernel_stages": (0, 1, 2),
    "stem_strides": (1, 1), "drop_path_rate": 0.0, "layer_scale_init": 1e-6,
    "head_init_scale": 1.0, "deploy": None,
}
def _deploy(model: WBMMNet) -> WBMMNet:
    """Export and profile the reparameterised net with dense window matrices (the fast form)."""
    return model.reparameterize("cached")


DIGITS_TRAIN = TrainSettings(epochs=15, batch_size=64, lr=3e-3, weight_decay=0.05)

register_model(ModelEntry(
    name="wbmm",
    family="wbmm",
    builder=WBMMNet,
    config=DIGITS_CONFIG,
    task=DIGITS.task,
    description="UniRepLKNet-style net with WBMM blocks (window 4, digits-sized)",
    paper=PAPER,
    train=DIGITS_TRAIN,
    deploy=_deploy,
))

register_model(ModelEntry(
    name="wbmm-dw13",
    family="wbmm",
    builder=WBMMNet,
    config={**DIGITS_CONFIG, "patterns": with_tokens(DIGITS_CONFIG["patterns"], "W", 13)},
    task=DIGITS.task,
    description="the wbmm twin with a 13x13 depthwise conv in place of every WBMM",
    paper=PAPER,
    train=DIGITS_TRAIN,
    deploy=_deploy,
))


def paper_model_and_inputs() -> tuple[WBMMNet, dict[str, torch.Tensor]]:
    """WBMM-P at 224x224 (10.6 M parameters, 1000 classes), random weights: the edge suite's
    member."""
    torch.manual_seed(0)
    return build_paper_model("p").eval(), {"x": torch.rand(1, 3, 224, 224)}


# The depthwise kernel that stands in for WBMM in the twin: 13x13, the depthwise convolution a
# 7x7 WBMM window equals inside each window (kernels/wbmm.py: 7 <-> 13x13) and UniRepLKNet's own
# large kernel, the operator WBMM replaced (arXiv 2607.02097).
DW_TWIN_KERNEL = 13


def paper_dw_config(name: str, **overrides: Any) -> dict[str, Any]:
    """WBMM-P/N/T/S's depthwise twin: every WBMM mixer a ``DW_TWIN_KERNEL`` depthwise conv.

    The kernel is 13x13 because a WBMM window of 7 (the paper configs') is exactly a 13x13
    depthwise conv applied inside each window, so the twin has the same receptive field per
    mixer, sliding instead of windowed; it is also UniRepLKNet's kernel, the backbone WBMM was
    carved from and compared against. Widths, depths, stem, the 3x3 "D" blocks, head: unchanged.
    The small-kernel branches belong to the WBMM operator (they fold into its table), so the
    twin has none, as UniRepLKNet's deploy form has a plain 13x13 conv."""
    cfg = paper_config(name, **overrides)
    return {**cfg, "patterns": with_tokens(cfg["patterns"], "W", DW_TWIN_KERNEL),
            "small_kernel_stages": ()}


def paper_dw_model_and_inputs() -> tuple[WBMMNet, dict[str, torch.Tensor]]:
    """WBMM-P's depthwise twin at 224x224 (``paper_dw_config("p")``), random weights: the edge
    suite's ``wbmm-p-dw``, to set beside ``wbmm-p``."""
    torch.manual_seed(0)
    return WBMMNet(**paper_dw_config("p")).eval(), {"x": torch.rand(1, 3, 224, 224)}
