"""Profiles: sampled operator timings per device (built-in from aiconfigurator-core, or a user's)."""

from costmodel.profiles.aiconfigurator_adapter import ProfileDataError
from costmodel.profiles.profile import (
    COLLECTIVE_OPS,
    DEFAULT_FIT_SAMPLING,
    FAMILY_COLUMNS,
    PHYSICS_KEYS,
    Profile,
    builtin_profile,
    device_mismatch,
    load_profile,
    make_profile,
    save_profile,
    write_profile_files,
)

__all__ = [
    "COLLECTIVE_OPS",
    "DEFAULT_FIT_SAMPLING",
    "FAMILY_COLUMNS",
    "PHYSICS_KEYS",
    "Profile",
    "ProfileDataError",
    "builtin_profile",
    "device_mismatch",
    "load_profile",
    "make_profile",
    "save_profile",
    "write_profile_files",
]
