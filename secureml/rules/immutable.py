"""The platform's labels and annotations cannot change after creation."""

from __future__ import annotations

from secureml.core import contract
from secureml.profile.model import TenantProfile
from secureml.rules._tenant_rule import tenant_rule
from secureml.rules.cel.text import quote
from secureml.rules.model import Rule
from secureml.rules.scope import EVERY_POD


def _same_platform_keys(field: str) -> str:
    """CEL: `oldObject` and `object` agree on every secureml.dev/ key of metadata `field`."""
    prefix = quote(contract.LABEL_PREFIX)
    old = f"(has(oldObject.metadata.{field}) ? oldObject.metadata.{field} : {{}})"
    new = f"(has(object.metadata.{field}) ? object.metadata.{field} : {{}})"
    return (
        f"[{old}].all(o, [{new}].all(n, "
        f"o.all(k, !k.startsWith({prefix}) || (k in n && n[k] == o[k])) && "
        f"n.all(k, !k.startsWith({prefix}) || k in o)))"
    )


def _changed_keys(field: str) -> str:
    """CEL: the secureml.dev/ keys of metadata `field` that an update adds, removes or changes."""
    prefix = quote(contract.LABEL_PREFIX)
    old = f"(has(oldObject.metadata.{field}) ? oldObject.metadata.{field} : {{}})"
    new = f"(has(object.metadata.{field}) ? object.metadata.{field} : {{}})"
    return (
        f"[{old}].map(o, [{new}].map(n, "
        f"o.filter(k, k.startsWith({prefix}) && !(k in n && n[k] == o[k])) + "
        f"n.filter(k, k.startsWith({prefix}) && !(k in o)))[0])[0]"
    )


def immutable_rules(profile: TenantProfile) -> list[Rule]:
    """The class 7 rule of `profile` (every pod, on UPDATE)."""
    changed = f"({_changed_keys('labels')} + {_changed_keys('annotations')})"
    return [
        tenant_rule(
            profile,
            "secureml.platformMetadataImmutable",
            f"{contract.LABEL_PREFIX}* labels and annotations cannot be added, removed or changed "
            "after the pod is created",
            f"oldObject == null || ({_same_platform_keys('labels')} && "
            f"{_same_platform_keys('annotations')})",
            f"oldObject == null ? '' : ('an update must not change the platform key ' + "
            f"{changed}[0] + ' (secureml.dev/* labels and annotations are fixed at creation)')",
            EVERY_POD,
        )
    ]
