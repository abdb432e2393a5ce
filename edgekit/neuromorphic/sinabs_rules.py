"""sinabs's own DYNAP-CNN (Speck) layer rules, called where sinabs imports.

sinabs (SynSense's PyTorch library, 3.1.3) keeps its chip code in ``sinabs.backend.dynapcnn``,
whose ``__init__`` imports ``dynapcnn_network``, which imports samna (SynSense's closed driver)
unguarded: nothing under that package imports without samna, and PyPI's samna 0.48.6 is a stub
that installs the real one from SynSense's own index when imported. One module of sinabs's
DYNAP-CNN rules lives outside that package: ``sinabs.validate_memory_speck.ValidateMapping``
(kernel and neuron memory of a layer, and the limits of a Speck layer: kernel at most 16x16, at
most 1024 output channels, strides 1, 2, 4 or 8). edgekit's Speck check calls it where sinabs
imports and restates it (``chip_fit.dynapcnn_memory``) elsewhere; the check's source says which.
"""
from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass


@dataclass(frozen=True)
class SinabsLayer:
    """A layer as sinabs's rules see it: a conv (a linear layer is one over its whole input)."""
    c_in: int
    c_out: int
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    input_hw: tuple[int, int]


class SinabsRefusal(Exception):
    """sinabs's ``ValidateMapping`` refused the layer; the message is sinabs's."""


def sinabs_version() -> str | None:
    """The installed sinabs whose ``validate_memory_speck`` imports, else None."""
    try:
        import sinabs.validate_memory_speck  # noqa: F401
    except ImportError:
        return None
    return importlib.metadata.version("sinabs")


def sinabs_memory(layer: SinabsLayer) -> dict[str, int]:
    """Kernel and neuron memory (words) by sinabs's ``ValidateMapping``; raises
    ``SinabsRefusal`` with sinabs's message where sinabs refuses the layer."""
    from sinabs.validate_memory_speck import ValidateMapping

    try:
        rules = ValidateMapping(layer.c_in, layer.c_out, layer.kernel, layer.stride,
                                layer.padding, list(layer.input_hw))
    except (Exception, Warning) as refusal:  # sinabs raises bare Exception and Warning
        raise SinabsRefusal(str(refusal)) from refusal
    return {"kernel": int(rules.calculate_kernel_memory()),
            "neuron": int(rules.calculate_neuron_memory())}
