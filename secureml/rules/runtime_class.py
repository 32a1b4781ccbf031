"""Which container runtime handler a pod may ask for (issue 10).

`runtimeClassName` picks the RuntimeClass, and with it the node's container runtime handler. A
handler that runs the NVIDIA container runtime in legacy mode (or any handler the platform did not
vet) would read `NVIDIA_VISIBLE_DEVICES` from the image and hand out GPUs past the device plugin,
which the node requirement of docs/bundle.md rules out only for the default handler.
`secureml.runtimeClass` (every pod) allows none, or one of the profile's
`scheduling.runtimeClassNames`. The RuntimeClass admission plugin may add its own node selector,
tolerations and overhead to the pod: the placement rules judge the result.
"""

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
