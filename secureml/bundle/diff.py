"""What a profile change does to the bundle: fields, rules and objects changed, or the diff."""

from __future__ import annotations

import difflib
import json
from typing import Any

from secureml.bundle.common import BundleOptions
from secureml.bundle.render import render_bundle, render_objects
from secureml.profile.model import TenantProfile

_POLICY = "ValidatingAdmissionPolicy"
_MAX_VALUE = 160


def bundle_diff(old: TenantProfile, new: TenantProfile, options: BundleOptions) -> str:
    """Unified diff (`a/<tenant>/<file>` against `b/<tenant>/<file>`); empty when nothing changes."""
    before = render_bundle(old, options)
    after = render_bundle(new, options)
    chunks: list[str] = []
    for name in sorted(set(before) | set(after)):
        old_text = before.get(name, "")
        new_text = after.get(name, "")
        if old_text == new_text:
            continue
        chunks.extend(
            difflib.unified_diff(
                old_text.splitlines(keepends=True),
                new_text.splitlines(keepends=True),
                fromfile=f"a/{old.metadata.name}/{name}" if name in before else "/dev/null",
                tofile=f"b/{new.metadata.name}/{name}" if name in after else "/dev/null",
            )
        )
    return "".join(chunks)


def _shown(value: Any) -> str:
    text = (
        json.dumps(value, sort_keys=True, separators=(",", ":")) if value is not None else "unset"
    )
    return text if len(text) <= _MAX_VALUE else text[: _MAX_VALUE - 3] + "..."


def field_changes(old: Any, new: Any, path: str = "") -> list[dict[str, str]]:
    """Each changed leaf as {field, old, new} (dotted path, `[i]` for list items; a list whose
    length changed is one change)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[dict[str, str]] = []
        for key in sorted(set(old) | set(new)):
            out += field_changes(old.get(key), new.get(key), f"{path}.{key}" if path else key)
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        out = []
        for index, (before, after) in enumerate(zip(old, new, strict=True)):
            out += field_changes(before, after, f"{path}[{index}]")
        return out
    if old == new:
        return []
    return [{"field": path, "old": _shown(old), "new": _shown(new)}]


def _rule_changes(
    old: TenantProfile, new: TenantProfile, options: BundleOptions
) -> list[dict[str, str]]:
    from secureml.rules import rules_for_profile

    before = {rule.id: rule for rule in rules_for_profile(old, options.k8s_version)}
    after = {rule.id: rule for rule in rules_for_profile(new, options.k8s_version)}
    out: list[dict[str, str]] = []
    for rule_id in [*before, *(r for r in after if r not in before)]:
        was, now = before.get(rule_id), after.get(rule_id)
        if now is None:
            out.append(
                {"rule": rule_id, "change": "removed", "old": was.message if was else "", "new": ""}
            )
        elif was is None:
            out.append({"rule": rule_id, "change": "added", "old": "", "new": now.message})
        elif was.message != now.message:
            out.append(
                {"rule": rule_id, "change": "allows", "old": was.message, "new": now.message}
            )
        elif (was.expression, was.scope) != (now.expression, now.scope):
            out.append({"rule": rule_id, "change": "expression", "old": "", "new": ""})
    return out


def _key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata", {})
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj['kind']}/{where}{meta['name']}"


def _object_changes(
    old: TenantProfile, new: TenantProfile, options: BundleOptions
) -> list[dict[str, Any]]:
    before = {_key(obj): obj for obj in render_objects(old, options)}
    after = {_key(obj): obj for obj in render_objects(new, options)}
    out: list[dict[str, Any]] = []
    for key in sorted(set(before) | set(after)):
        was, now = before.get(key), after.get(key)
        if was == now:
            continue
        entry: dict[str, Any] = {"object": key}
        if was is None or now is None:
            entry["change"] = "added" if was is None else "removed"
            entry["fields"] = []
        else:
            entry["change"] = "changed"
            if key.startswith(_POLICY + "/"):  # its validations are the rules, listed above
                was = {**was, "spec": {k: v for k, v in was["spec"].items() if k != "validations"}}
                now = {**now, "spec": {k: v for k, v in now["spec"].items() if k != "validations"}}
            entry["fields"] = field_changes(was, now)
            if not entry["fields"]:
                entry["fields"] = [
                    {"field": "spec.validations", "old": "", "new": "the rules above"}
                ]
        out.append(entry)
    return out


def bundle_changes(
    old: TenantProfile, new: TenantProfile, options: BundleOptions
) -> dict[str, Any]:
    """{fields, rules, objects}: the profile fields that changed, the rules, the other objects."""
    return {
        "fields": field_changes(
            old.model_dump(by_alias=True, exclude_none=True, mode="json"),
            new.model_dump(by_alias=True, exclude_none=True, mode="json"),
        ),
        "rules": _rule_changes(old, new, options),
        "objects": _object_changes(old, new, options),
    }


def changes_text(changes: dict[str, Any]) -> str:
    lines: list[str] = []
    if changes["fields"]:
        lines.append("profile fields:")
        lines += [f"  {c['field']}: {c['old']} -> {c['new']}" for c in changes["fields"]]
    if changes["rules"]:
        lines.append("admission rules:")
        for change in changes["rules"]:
            if change["change"] == "allows":
                lines += [
                    f"  {change['rule']}: now allows something else",
                    f"    was: {change['old']}",
                    f"    now: {change['new']}",
                ]
            elif change["change"] == "expression":
                lines.append(
                    f"  {change['rule']}: same message, its CEL changed (--unified shows it)"
                )
            else:
                text = change["new"] or change["old"]
                lines.append(f"  {change['rule']}: {change['change']} ({text})")
    if changes["objects"]:
        lines.append("bundle objects:")
        for entry in changes["objects"]:
            lines.append(f"  {entry['change']} {entry['object']}")
            lines += [f"    {c['field']}: {c['old']} -> {c['new']}" for c in entry["fields"]]
    return "\n".join(lines) + "\n" if lines else ""
