"""The ASTRA runtime (arXiv 2505.19342): the model's ranks as processes over torch.distributed.

``launch`` spawns local workers (or torchrun starts ``edgekit.methods.astra.runtime.worker``);
``modes`` and its subclasses hold single device, sequence parallel, tensor parallel, block
parallel and ASTRA, ``all_modes`` names them all (``MODE_CLASSES``) and builds one (``make_mode``);
``link`` emulates bandwidth-capped, lossy links on the bytes each rank really sends;
``latency_model`` predicts and projects latency from measured compute and the modes' exchange
patterns. The model itself lives in ``edgekit.methods.astra``.
"""
