"""Neuromorphic chips: whether a spiking net fits one, and what it computes there
(docs/neuromorphic.md)."""
