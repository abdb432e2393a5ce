"""Model entries for WiFi-Mamba and its baseline, ready for the registry but not registered.

The entries carry the input contract (``(2, 270, 20)``: preprocessed amplitude and phase over 20
packets), the two outputs and the export settings, so ``export_onnx`` exports and validates them
through ONNX Runtime exactly as it does registered models (``model_source``).
"""
from __future__ import annotations

from edgekit.errors import UnknownNameError
from edgekit.models.wifi_mamba import MODELS, model_names
from edgekit.models.wifi_mamba.model import PAPER
from edgekit.registry import ExportSettings, ModelEntry, TaskSpec, TrainSettings
from edgekit.targets import ModelSource
from edgekit.wifi.csi import N_PKT, N_RX, N_ANT, N_SUB

WIFI_POSE = TaskSpec(dataset="wifi-pose-sim", metric="mpjpe_mm",
                     input_shape=(2, N_RX * N_ANT * N_SUB, N_PKT), num_classes=0,
                     output_names=("poses", "logits"))
_DESCRIPTIONS = {
    "wifi-mamba": "dual-stream selective SSM for WiFi CSI 3D multi-person pose",
    "wifi-petr": "PETR-style transformer baseline for WiFi CSI 3D pose (Person-in-WiFi 3D)",
}
_PAPERS = {"wifi-mamba": PAPER,
           "wifi-petr": "Yan et al., Person-in-WiFi 3D, CVPR 2024"}


def entry(base: str) -> ModelEntry:
    if base not in MODELS:
        raise UnknownNameError("WiFi pose model", base, model_names())
    cls, configs, default = MODELS[base]
    return ModelEntry(
        name=base, family="wifi_mamba", builder=cls, config=dict(configs[default]),
        task=WIFI_POSE, description=_DESCRIPTIONS[base],
        variants={v: c for v, c in configs.items() if v != default}, paper=_PAPERS[base],
        export=ExportSettings(opset=18, atol=1e-4, rtol=1e-3, dynamo=False),
        train=TrainSettings(epochs=10, batch_size=32, lr=2e-3, weight_decay=1e-4),
    )


def model_source(name: str) -> ModelSource:
    """A ``ModelSource`` for ``export_onnx``: ``model_source("wifi-mamba")``."""
    base, _, variant = name.partition(":")
    ent = entry(base)
    variant = variant or None
    if variant is not None and variant not in ent.variants and MODELS[base][2] == variant:
        variant = None  # the default config is the entry itself
    return ModelSource(ent.build(variant).eval(), ent, variant)
