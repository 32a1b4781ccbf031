"""The admission rule catalogue: each rule defined once, enforced in the cluster and offline.

Importing it imports the CEL engine: import it inside CLI commands (docs/admission-rules.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from secureml.core.k8s_versions import DEFAULT_K8S_VERSION
from secureml.core.violation import Violation
from secureml.rules.engine import evaluate, in_scope
from secureml.rules.model import LEVELS, Rule
from secureml.rules.pss import rules_for_level

if TYPE_CHECKING:
    from secureml.profile.model import TenantProfile

__all__ = [
    "LEVELS",
    "Rule",
    "Violation",
    "evaluate",
    "in_scope",
    "profile_rules",
    "rules_for_level",
    "rules_for_profile",
]


def profile_rules(profile: TenantProfile) -> list[Rule]:
    """secureml's own rules for `profile` (ids `secureml.*`).

    Built once per distinct profile in a process (a compile of many pipelines, the compiler's
    preview, check-pod): the rules are a function of the profile's values alone, and the key is
    all of them (the profile's JSON).
    """
    from secureml.rules.tenant import profile_rules as build

    key = profile.model_dump_json()
    if key not in _BUILT:
        _BUILT[key] = tuple(build(profile))
    return list(_BUILT[key])


_BUILT: dict[str, tuple[Rule, ...]] = {}  # profile_rules by the profile's JSON


def rules_for_profile(profile: TenantProfile, kubernetes: str = DEFAULT_K8S_VERSION) -> list[Rule]:
    """Everything a pod of this tenant must pass on Kubernetes `kubernetes`: Pod Security
    restricted, then secureml's rules."""
    return [*rules_for_level("restricted", kubernetes), *profile_rules(profile)]
