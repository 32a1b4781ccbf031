"""Which container runtime handler a pod may ask for (`secureml.runtimeClass`)."""

from __future__ import annotations

from secureml.profile.model import TenantProfile
from secureml.rules._tenant_rule import tenant_rule
from secureml.rules.cel.reference import SPEC
from secureml.rules.cel.text import quote, string_list
from secureml.rules.model import Rule
from secureml.rules.scope import EVERY_POD


def runtime_class_rules(profile: TenantProfile) -> list[Rule]:
    names = profile.spec.scheduling.runtime_class_names
    allowed = f"{SPEC}.runtimeClassName in {string_list(names)}" if names else "false"
    listed = ", ".join(names) or "none"
    return [
        tenant_rule(
            profile,
            "secureml.runtimeClass",
            f"runtimeClassName unset or one of scheduling.runtimeClassNames ({listed})",
            f"!has({SPEC}.runtimeClassName) || {allowed}",
            f"'pod must not use runtimeClassName ' + {SPEC}.runtimeClassName + "
            f"{quote(f' (allowed: {listed})')}",
            scope=EVERY_POD,
        )
    ]
