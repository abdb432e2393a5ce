"""WiFi-Mamba (ICML 2026; docs/methods/wifi_mamba.md): the dual-stream selective-SSM model and
its PETR-style baseline, the CSI data format and physical simulator, the pose loss, Hungarian
matching, metrics and the training loop. Importing registers both entries and the simulated
dataset."""
from edgekit.methods.wifi_mamba import entries  # noqa: F401  (registers wifi-mamba, wifi-petr)
from edgekit.methods.wifi_mamba.baseline import PETRBaseline
from edgekit.methods.wifi_mamba.model import WiFiMamba

__all__ = ["PETRBaseline", "WiFiMamba"]
