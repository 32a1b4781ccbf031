"""Build the images of `images/`: the platform runtime image and the step base images."""

from __future__ import annotations

import datetime as dt
import json
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from secureml.core.errors import InputError
from secureml.core.image_ref import ImageRef
from secureml.images import context
from secureml.images.builders import Builder
from secureml.images.context import SECUREML_VERSION

DEFAULT_BASE = "docker.io/library/debian:bookworm-slim"
NAMES = ("runtime-injector", "runtime", "cuda")


@dataclass(frozen=True, slots=True)
class BuiltImage:
    name: str
    tag: str  # in the builder's local storage
    reference: str | None  # REGISTRY/REPOSITORY@sha256:..., once pushed
    builder: str
    secureml: str
    base: str
    seconds: float

    def record(self, path: Path) -> None:
        data = asdict(self) | {"built_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2) + "\n")


def local_tag(name: str) -> str:
    """Where a platform image lands in the builder's storage."""
    return f"localhost/secureml/{name}:{SECUREML_VERSION}"


def requirements(name: str) -> list[str]:
    if name == "runtime-injector":
        return context.pinned(context.RUNTIME_REQUIREMENTS)
    if name == "runtime":
        return context.pinned((*context.RUNTIME_REQUIREMENTS, *context.EXECUTOR_REQUIREMENTS))
    if name == "cuda":
        return context.pinned(context.CUDA_REQUIREMENTS)
    raise InputError(f"no platform image {name!r}", why=f"images/ holds {', '.join(NAMES)}", fix="")


def build(
    name: str,
    builder: Builder,
    *,
    base: str = DEFAULT_BASE,
    push_to: ImageRef | None = None,
    runtime: str | None = None,
    compress: bool = True,
) -> BuiltImage:
    """Build `images/<name>` FROM `base` (the `cuda` image also FROM `runtime`, default the local
    runtime image) and push it to `push_to` when given."""
    import time

    started = time.monotonic()
    tag = local_tag(name)
    build_args = {"BASE": base, "SECUREML_VERSION": SECUREML_VERSION}
    if name == "cuda":
        build_args["RUNTIME"] = runtime or local_tag("runtime")
    with tempfile.TemporaryDirectory(prefix=f"secureml-{name}-") as work:
        ctx = context.stage(Path(work) / "ctx", requirements(name))
        builder.build(ctx, ctx / "images" / name / "Containerfile", tag, build_args)
    reference = None
    if push_to is not None:
        digest = builder.push(tag, push_to, compress=compress)
        reference = f"{push_to.name}@{digest}"
    return BuiltImage(
        name=name,
        tag=tag,
        reference=reference,
        builder=builder.name,
        secureml=SECUREML_VERSION,
        base=base,
        seconds=round(time.monotonic() - started, 1),
    )
