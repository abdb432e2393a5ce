"""ASTRA (arXiv 2505.19342, ICML 2026): sequence-parallel Transformer inference with grouped-VQ
token exchange.

Importing this package registers ``astra-vit``. The runtime that runs the ranks as processes
lives in ``edgekit.methods.astra.runtime``; ``partitioned_forward`` here is its single-process
oracle.
"""
from edgekit.methods.astra import entries  # noqa: F401  (registers astra-vit)
from edgekit.methods.astra.gpt import AstraGPT, GPTConfig
from edgekit.methods.astra.paper import PAPER_CONFIGS, PAPER_PARAMS, build_paper_model, paper_config
from edgekit.methods.astra.partition import token_shards
from edgekit.methods.astra.train import finetune, pretrain, train_astra, with_config
from edgekit.methods.astra.vit import (
    MODES,
    AstraBlock,
    AstraConfig,
    AstraViT,
    Attention,
    PartitionedOutput,
    partitioned_forward,
    run_partitioned,
)
from edgekit.methods.astra.vq import GroupedVQ

__all__ = ["MODES", "PAPER_CONFIGS", "PAPER_PARAMS", "AstraBlock", "AstraConfig", "AstraGPT",
           "AstraViT", "Attention", "GPTConfig", "GroupedVQ", "PartitionedOutput",
           "build_paper_model", "finetune", "paper_config", "partitioned_forward", "pretrain",
           "run_partitioned", "token_shards", "train_astra", "with_config"]
