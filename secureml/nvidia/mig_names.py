"""MIG profile names as NVIDIA writes them (`1g.10gb`, `1g.10gb+me`), and the memory each promises.

Apart from the catalogue so that the launcher reads a GPU request without building it.
"""

from __future__ import annotations

import re

MIG_PROFILE_NAME = re.compile(r"(?P<compute>[1-9])g\.(?P<memory>[0-9]+)gb(\+me)?")


def mig_memory_gb(profile_name: str) -> int:
    """The memory a MIG profile name promises, in GB: `1g.10gb` -> 10 (ValueError if no name)."""
    match = MIG_PROFILE_NAME.fullmatch(profile_name)
    if match is None:
        raise ValueError(f"{profile_name!r} is not a MIG profile name")
    return int(match.group("memory"))
