"""WiFi-Mamba and its PETR-style baseline (methods.md §6); importing registers both entries."""
from edgekit.models.wifi_mamba import entries  # noqa: F401  (registers wifi-mamba, wifi-petr)
from edgekit.models.wifi_mamba.baseline import PETRBaseline
from edgekit.models.wifi_mamba.model import WiFiMamba

__all__ = ["PETRBaseline", "WiFiMamba"]
