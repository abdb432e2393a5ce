"""Profile and compare on a fleet of real devices, driven by Dask distributed.

``edgekit fleet scheduler`` listens, ``edgekit fleet worker`` runs on each device, and
``edgekit compare/profile --fleet`` send the jobs; ``edgekit compare --from`` merges saved
reports. Names are imported lazily: the device agent imports this package and must stay light
(no torch), and ``distributed`` is needed only where a fleet is used (the ``fleet`` extra).
"""
from __future__ import annotations

import importlib
from typing import Any

_API = {
    "fleet_compare": "edgekit.fleet.compare",
    "fleet_profile": "edgekit.fleet.compare",
    "connect": "edgekit.fleet.engine",
    "Limits": "edgekit.fleet.jobs",
    "merge_reports": "edgekit.fleet.merge",
    "fleet_devices": "edgekit.fleet.status",
}

__all__ = list(_API)


def __getattr__(name: str) -> Any:
    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'edgekit.fleet' has no attribute '{name}'")
