"""What a profile change does to the bundle: a unified diff of the two renders, file by file."""

from __future__ import annotations

import difflib

from secureml.bundle.common import BundleOptions
from secureml.bundle.render import render_bundle
from secureml.profile.model import TenantProfile


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
