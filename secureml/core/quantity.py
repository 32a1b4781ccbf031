"""Memory sizes as Kubernetes quantities (`16Gi`, `500M`, bytes), both ways; stdlib only."""

from __future__ import annotations

import re

QUANTITY_PATTERN = r"^(\d+)(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$"
_QUANTITY = re.compile(QUANTITY_PATTERN)
_UNITS = {
    None: 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
}
_BINARY_UNITS = (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


def parse_bytes(value: object) -> int:
    """A Kubernetes memory quantity (`16Gi`, `500M`, or a plain integer) in bytes.

    Raises ValueError (pydantic reports it as the field's error) for anything else or for zero.
    """
    if isinstance(value, bool):
        raise ValueError("expected a memory quantity such as 16Gi, not a boolean")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError("must be a positive number of bytes")
        return value
    match = _QUANTITY.match(str(value).strip())
    if not match:
        raise ValueError(f"{value!r} is not a memory quantity; write e.g. 16Gi, 512Mi or 8G")
    amount = int(match.group(1)) * _UNITS[match.group(2)]
    if amount <= 0:
        raise ValueError("must be a positive amount of memory")
    return amount


def format_bytes(amount: int) -> str:
    """Bytes as a quantity when a binary unit divides them exactly (`16Gi`), else the number."""
    for unit, factor in _BINARY_UNITS:
        if amount % factor == 0:
            return f"{amount // factor}{unit}"
    return str(amount)
