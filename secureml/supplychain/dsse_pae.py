"""DSSE v1's pre-authentication encoding (PAE): the bytes an envelope's signature covers."""

from __future__ import annotations


def pae(payload_type: str, payload: bytes) -> bytes:
    """`DSSEv1 <len(type)> <type> <len(payload)> <payload>`, lengths in bytes."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)
