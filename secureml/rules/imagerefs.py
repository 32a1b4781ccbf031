"""CEL tests on an image reference, shared by the container image rules and the image volumes."""

from __future__ import annotations

from secureml.profile.model import TenantProfile
from secureml.rules.cel.text import quote

DIGEST_PATTERN = "@sha256:[0-9a-f]{64}$"


def registry_prefixes(profile: TenantProfile) -> list[str]:
    """The profile's registry prefixes, each ending in `/`."""
    return [p if p.endswith("/") else p + "/" for p in profile.spec.images.allowed_registries]


def tenant_registry(ref: str, profile: TenantProfile) -> str:
    """CEL: the reference `ref` (a string expression) is under one of the tenant's registries."""
    tests = [f"{ref}.startsWith({quote(p)})" for p in registry_prefixes(profile)]
    return "(" + (" || ".join(tests) or "false") + ")"


def pinned(ref: str) -> str:
    """CEL: the reference `ref` is pinned by a sha256 digest."""
    return f"{ref}.matches({quote(DIGEST_PATTERN)})"
