"""Estimates for devices the user does not have: per-layer FLOPs and bytes, a roofline
latency from a device profile's peaks, peak activation memory, weight size and whether the
model fits, at each precision. Every figure is an estimate and says its formula."""
from edgekit.estimate.layers import Analysis, Footprint, Layer
from edgekit.estimate.roofline import FORMULAS, roofline
from edgekit.estimate.run import PRECISIONS, analyse, device_profiles, estimate, measure_beside

__all__ = ["FORMULAS", "PRECISIONS", "Analysis", "Footprint", "Layer", "analyse",
           "device_profiles", "estimate", "measure_beside", "roofline"]
