"""Spiking nets for neuromorphic chips: a net lowered to the chip's synapse layers
(``lowering``), and Loihi 2's fixed-point formats, integer rules and bit-accurate simulation
behind ``edgekit export --to loihi2`` (docs/neuromorphic.md)."""
