"""Spiking nets for neuromorphic chips: whether a net fits a chip's published limits and what
the chip's fixed point does to it (``chip_fit``, ``fixed_point``, behind ``edgekit simulate
--target``; docs/chips.md), and Loihi 2's formats, integer rules and bit-accurate simulation
behind ``edgekit export --to loihi2`` (``lowering``, ``loihi2_*``; docs/neuromorphic.md)."""
