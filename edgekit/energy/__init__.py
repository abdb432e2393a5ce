"""Energy meters: one measurement window (zeus-style begin/end) over RAPL, NVML, Jetson INA3221,
or an estimate from the device profile. Every result says how it was obtained (``source``).

Every module of this package is imported here, so a meter's file registers itself just by being
in the folder (``edgekit.energy.registry``); ``select`` comes last, as it lists what registered."""
import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "select":
        importlib.import_module(f"{__name__}.{_module.name}")

from edgekit.energy.base import EnergyMeasurement, EnergyMeter, Window  # noqa: E402
from edgekit.energy.estimate import EstimatedMeter, NullMeter  # noqa: E402
from edgekit.energy.jetson import Ina3221Meter  # noqa: E402
from edgekit.energy.nvml import NvmlDevice, NvmlMeter, PynvmlDevice  # noqa: E402
from edgekit.energy.rapl import RaplMeter  # noqa: E402
from edgekit.energy.select import meter_names, open_meter  # noqa: E402

__all__ = [
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
    "meter_names",
    "open_meter",
]
