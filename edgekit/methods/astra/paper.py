"""The paper-sized configs (arXiv 2505.19342): ViT-S and ViT-B encoders and GPT-2 (124M).

They are not registry variants: the registry's contract is the 8x8 digits classifier. Build
them under ``torch.device("meta")`` to count parameters without allocating memory.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from edgekit.errors import UnknownNameError
from edgekit.methods.astra.gpt import AstraGPT
from edgekit.methods.astra.vit import AstraViT

_IMAGENET = {"in_chans": 3, "num_classes": 1000, "patch_size": 16, "mlp_ratio": 4.0,
             "groups": 32, "codes": 1024, "partitions": 4}
PAPER_CONFIGS: dict[str, dict[str, Any]] = {
    # 512x512 / patch 16 = 1024 tokens: the paper's latency workload
    "vit-s": {**_IMAGENET, "image_size": 512, "dim": 384, "depth": 12, "heads": 6},
    # 224x224 / patch 16 = 196 tokens: the paper's ImageNet accuracy model
    "vit-b": {**_IMAGENET, "image_size": 224, "dim": 768, "depth": 12, "heads": 12},
    "gpt2": {"vocab_size": 50257, "context": 1024, "dim": 768, "depth": 12, "heads": 12,
             "groups": 32, "codes": 1024},
}
# Reference parameter counts: timm vit_base_patch16_224 has 86,567,656 with a position slot for
# the class token, which AstraViT folds into cls_token (768 fewer); GPT-2 small 124,439,808.
PAPER_PARAMS = {"vit-b": 86_566_888, "gpt2": 124_439_808}


def paper_config(name: str, **overrides: Any) -> dict[str, Any]:
    if name not in PAPER_CONFIGS:
        raise UnknownNameError("ASTRA paper config", name, PAPER_CONFIGS)
    return {**PAPER_CONFIGS[name], **overrides}


def build_paper_model(name: str, **overrides: Any) -> nn.Module:
    """``"vit-s"``/``"vit-b"`` -> AstraViT, ``"gpt2"`` -> AstraGPT; overrides win."""
    cls = AstraGPT if name == "gpt2" else AstraViT
    return cls(**paper_config(name, **overrides))



# The edge suite's size: the 512 px latency workload takes 2.5 s a torch forward on a 2-core CPU,
# too slow for the suite's hundreds of agreement inputs; 224 px is ViT-S's ImageNet size.
SUITE_IMAGE_SIZE = 224


def vit_s_model_and_inputs() -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """ASTRA's ViT-S (4 partitions, 1024-code exchange) at 224 px with random weights and one
    example image: the edge suite's ``astra-vit-s`` (``edgekit.suites``)."""
    torch.manual_seed(0)
    size = SUITE_IMAGE_SIZE
    return (build_paper_model("vit-s", image_size=size).eval(),
            {"images": torch.rand(1, 3, size, size)})
