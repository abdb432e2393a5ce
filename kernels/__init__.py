"""Performance-critical operators, each with a plain-PyTorch reference and optional accelerated
versions (Triton/CUDA on GPUs). The method families add theirs here (WBMM, the ZipMoE codec)."""
