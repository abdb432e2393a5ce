"""WBMM: windowed batch matrix multiplication backbones (arXiv 2607.02097); importing registers
them."""
from edgekit.methods.wbmm import model  # noqa: F401
from edgekit.methods.wbmm.model import (
                                       PAPER_CONFIGS,
                                       PAPER_PARAMS,
                                       WBMMNet,
                                       build_paper_model,
                                       paper_config,
)

__all__ = ["PAPER_CONFIGS", "PAPER_PARAMS", "WBMMNet", "build_paper_model", "paper_config"]
