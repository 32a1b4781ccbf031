"""Egress a profile opens to every address: refused for tiers confidential and restricted, warned
about for the others.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Protocol

STRICT_TIERS = ("confidential", "restricted")


class _Egress(Protocol):
    @property
    def cidr(self) -> str: ...

    @property
    def ports(self) -> Sequence[int]: ...


def _open(rule: _Egress) -> bool:
    try:
        return ipaddress.ip_network(rule.cidr, strict=False).prefixlen == 0
    except ValueError:  # reported by the field's own validation
        return False


def egress_problems(egress: Sequence[_Egress], tier: str) -> list[tuple[str, str]]:
    """`(yaml path, message)` for each rule a tier confidential/restricted profile may not have."""
    if tier not in STRICT_TIERS:
        return []
    return [
        (
            f"spec.network.egress[{index}]",
            f"tier {tier} forbids egress to every address on every port ({rule.cidr}, no ports): "
            "name the networks the steps need, or list the ports",
        )
        for index, rule in enumerate(egress)
        if _open(rule) and not rule.ports
    ]


def egress_warnings(egress: Sequence[_Egress], tier: str) -> list[str]:
    """One line for each open rule the tier allows."""
    found = []
    for index, rule in enumerate(egress):
        if not _open(rule) or (tier in STRICT_TIERS and not rule.ports):
            continue
        ports = "ports " + ", ".join(str(p) for p in rule.ports) if rule.ports else "every port"
        found.append(
            f"spec.network.egress[{index}]: {rule.cidr} lets every step reach any address on "
            f"{ports}; name the networks the steps need"
        )
    return found
