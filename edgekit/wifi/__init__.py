"""WiFi CSI sensing for WiFi-Mamba (methods.md §6): data format, simulator, metrics, matching."""
