"""Registry entry ``astra-vit``: the digits-sized ASTRA ViT and its VQ / NAVQ / plain variants."""
from __future__ import annotations

from edgekit.data import DIGITS
from edgekit.methods.astra.train import train_astra
from edgekit.methods.astra.vit import AstraViT
from edgekit.registry import ExportSettings, ModelEntry, TrainSettings, register_model

PAPER = "ASTRA: sequence-parallel inference with VQ token exchange, arXiv 2505.19342 (ICML 2026)"

DIGITS_CONFIG = {
    "image_size": 8, "patch_size": 2, "in_chans": 1, "num_classes": 10, "dim": 64, "depth": 4,
    "heads": 4, "mlp_ratio": 4.0, "groups": 16, "codes": 1024, "decay": 0.99, "partitions": 2,
    "noise_scale": 1.0, "beta": 2e-4, "finetune_epochs": 12,
}

# The sweep of issue 7 (G in {1, 4, 16, 32}, NAVQ lambda in {0, 1}), ASTRA at 4 ranks, and the
# unpartitioned baseline. Other combinations are config overrides (groups, noise_scale, partitions).
VARIANTS = {
    "g1": {"groups": 1},
    "g4": {"groups": 4},
    "g32": {"groups": 32},
    "g16-navq0": {"noise_scale": 0.0},
    "p4": {"partitions": 4},
    "plain": {"groups": 0, "partitions": 1},
}

register_model(ModelEntry(
    name="astra-vit",
    family="astra",
    builder=AstraViT,
    config=DIGITS_CONFIG,
    task=DIGITS.task,
    description=("ViT whose forward is ASTRA at 2 ranks: 16-group VQ token exchange (160 bits/"
                 "token), NAVQ lambda=1, distributed class token; paper sizes: "
                 "edgekit.methods.astra.build_paper_model('vit-s'|'vit-b'|'gpt2')"),
    variants=VARIANTS,
    paper=PAPER,
    export=ExportSettings(dynamo=False),  # the TorchScript exporter is 3x faster here
    train=TrainSettings(epochs=30, batch_size=64, lr=3e-3, weight_decay=0.05),
    trainer=train_astra,
))
