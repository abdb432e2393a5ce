"""Energy meters: one measurement window (zeus-style begin/end) over RAPL, NVML, Jetson INA3221,
or an estimate from the device profile. Every result says how it was obtained (``source``)."""
from edgekit.energy.base import EnergyMeasurement, EnergyMeter, Window
from edgekit.energy.estimate import EstimatedMeter, NullMeter
from edgekit.energy.jetson import Ina3221Meter
from edgekit.energy.nvml import NvmlDevice, NvmlMeter, PynvmlDevice
from edgekit.energy.rapl import RaplMeter
from edgekit.energy.select import METER_NAMES, open_meter

__all__ = [
    "METER_NAMES",
    "EnergyMeasurement",
    "EnergyMeter",
    "EstimatedMeter",
    "Ina3221Meter",
    "NullMeter",
    "NvmlDevice",
    "NvmlMeter",
    "PynvmlDevice",
    "RaplMeter",
    "Window",
    "open_meter",
]
