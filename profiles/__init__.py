"""Device profiles: what edgekit knows about each device, every figure with its source.

One TOML file per device in this folder or in ``$EDGEKIT_HOME/profiles``; ``load_profile`` reads
and validates one, ``detect_profile`` finds this machine's, ``calibrate`` measures the generic
ones.
"""
from edgekit.profiles.calibrate import calibrate, generic_profile_for
from edgekit.profiles.detect import detect_profile
from edgekit.profiles.device_profile import DeviceProfile, PowerMode, PowerSensor
from edgekit.profiles.loader import (
                                     list_profiles,
                                     load_profile,
                                     profile_names,
                                     profile_source,
                                     profile_to_dict,
                                     user_profile_dir,
)

__all__ = [
    "DeviceProfile",
    "PowerMode",
    "PowerSensor",
    "calibrate",
    "detect_profile",
    "generic_profile_for",
    "list_profiles",
    "load_profile",
    "profile_names",
    "profile_source",
    "profile_to_dict",
    "user_profile_dir",
]
