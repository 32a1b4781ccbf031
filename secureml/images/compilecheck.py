"""The compiler's rule `image.no-launcher`: `secureml image check` for each step's image."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from secureml.core.errors import NetworkError, SecuremlError
from secureml.images.check import check, problems

RULE = "image.no-launcher"
Verifier = Callable[[Sequence[tuple[str, str]]], Sequence[Any]]


def image_checks(profile: Any) -> Verifier:
    """Check every step image for what a secure step needs under `profile` (injected launcher
    when it names a runtime.image)."""
    from secureml.supplychain.compile import ImageVerification

    injected = getattr(getattr(profile.spec, "runtime", None), "image", None) is not None

    def verify(steps: Sequence[tuple[str, str]]) -> list[ImageVerification]:
        verdicts: dict[str, tuple[str, str] | None] = {}
        results = []
        for step, image in steps:
            if image not in verdicts:
                verdicts[image] = _verdict(image, injected)
            verdict = verdicts[image]
            if verdict is not None:
                message, fix = verdict
                results.append(
                    ImageVerification(step, image, False, rule=RULE, message=message, fix=fix)
                )
        return results

    return verify


def _verdict(image: str, injected: bool) -> tuple[str, str] | None:
    try:
        _, findings = check(image, injected=injected)
    except NetworkError:
        raise  # the environment, not the image: one error, exit 2 (as --fetch-bundles)
    except SecuremlError as err:
        return f"image {image} could not be checked: {err.what}", err.fix or "check the reference"
    found = problems(findings)
    if not found:
        return None
    message = f"image {image} cannot run a secure step: " + "; ".join(f.message for f in found)
    return message, "; ".join(dict.fromkeys(f.fix for f in found if f.fix)) or "see docs/images.md"


def chain(first: Verifier | None, second: Verifier) -> Verifier:
    """Both verifiers' results, `first`'s (the signature check) before `second`'s."""

    def verify(steps: Sequence[tuple[str, str]]) -> list[Any]:
        return [*(first(steps) if first is not None else []), *second(steps)]

    return verify
