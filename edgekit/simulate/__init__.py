"""Neuromorphic simulation of spiking nets: activity, op counts, communication, energy."""
from edgekit.simulate.run import SimulateSettings, load_spiking_source, simulate, spiking_names

__all__ = ["SimulateSettings", "load_spiking_source", "simulate", "spiking_names"]
