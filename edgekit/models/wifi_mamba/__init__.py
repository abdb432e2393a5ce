"""WiFi-Mamba and its PETR-style baseline (methods.md §6).

Not in the registry yet: the generated registry/export tests assume image-classifier contracts
(input (1, 8, 8), output (B, num_classes)); ``build_model(name)`` is the factory meanwhile.
"""
from __future__ import annotations

from torch import nn

from edgekit.errors import UnknownNameError
from edgekit.models.wifi_mamba import baseline, model
from edgekit.models.wifi_mamba.baseline import PETRBaseline
from edgekit.models.wifi_mamba.model import WiFiMamba

MODELS = {
    "wifi-mamba": (WiFiMamba, model.CONFIGS, "cpu"),
    "wifi-petr": (PETRBaseline, baseline.CONFIGS, "cpu"),
}


def model_names() -> list[str]:
    return [f"{n}:{v}" for n, (_, cfgs, _) in MODELS.items() for v in cfgs]


def build_model(name: str, **overrides) -> nn.Module:
    """``"wifi-mamba"``, ``"wifi-mamba:full"``, ``"wifi-petr:paper"``, ...; overrides win."""
    base, _, variant = name.partition(":")
    if base not in MODELS:
        raise UnknownNameError("WiFi pose model", name, model_names())
    cls, configs, default = MODELS[base]
    variant = variant or default
    if variant not in configs:
        raise UnknownNameError("WiFi pose model", name, model_names())
    return cls(**{**configs[variant], **overrides})


__all__ = ["MODELS", "PETRBaseline", "WiFiMamba", "build_model", "model_names"]
