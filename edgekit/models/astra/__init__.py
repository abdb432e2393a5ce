"""ASTRA (methods.md §5): sequence-parallel Transformer inference with grouped-VQ token exchange.

Importing this package registers ``astra-vit``. The runtime that runs the ranks as processes
lives in ``edgekit.astra``; ``partitioned_forward`` here is its single-process oracle.
"""
from edgekit.models.astra import entries  # noqa: F401  (registers astra-vit)
from edgekit.models.astra.gpt import AstraGPT, GPTConfig
from edgekit.models.astra.paper import PAPER_CONFIGS, PAPER_PARAMS, build_paper_model, paper_config
from edgekit.models.astra.partition import (MODES, PartitionedOutput, partitioned_forward,
                                            run_partitioned, token_shards)
from edgekit.models.astra.train import finetune, pretrain, train_astra, with_config
from edgekit.models.astra.vit import AstraBlock, AstraConfig, AstraViT, Attention
from edgekit.models.astra.vq import GroupedVQ

__all__ = ["MODES", "PAPER_CONFIGS", "PAPER_PARAMS", "AstraBlock", "AstraConfig", "AstraGPT",
           "AstraViT", "Attention", "GPTConfig", "GroupedVQ", "PartitionedOutput",
           "build_paper_model", "finetune", "paper_config", "partitioned_forward", "pretrain",
           "run_partitioned", "token_shards", "train_astra", "with_config"]
