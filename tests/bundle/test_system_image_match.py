"""KFP's and Argo's own images: the validating rules and the image policy admit the same references.

`rules.scope.system_image` (CEL, evaluated by the rules engine) and the policy-controller globs of
`bundle.imagepolicy.system_image_globs` must both take every tag and digest of a system repository
and nothing else: `kfp-driver-evil` or `kfp-driverX` is another repository, and passing it as KFP's
would admit an unsigned tenant image.
"""

from __future__ import annotations

import re

import pytest

from secureml.bundle.imagepolicy import system_image_globs
from secureml.core import contract
from secureml.rules import in_scope
from secureml.rules.scope import system_image

DIGEST = "sha256:" + "0123456789abcdef" * 4
DRIVER = contract.KFP_DRIVER_REPOSITORY


def _policy_controller_matches(glob: str, image: str) -> bool:
    """policy-controller's match (pkg/apis/glob): `**` is any text, `*` any text without `/`,
    the whole string, tried on the reference's full name (go-containerregistry `Name()`: `:latest`
    for an untagged image, `REPO@digest` for a digest) and then on the reference as written."""
    pattern = re.escape(glob).replace(r"\*\*", "\0").replace(r"\*", "[^/]*").replace("\0", ".*")
    repository, _, digest = image.partition("@")
    head, colon, tag = repository.rpartition(":")
    if colon and "/" not in tag:
        repository = head
    else:
        tag = "latest"
    name = f"{repository}@{digest}" if digest else f"{repository}:{tag}"
    return any(re.fullmatch(pattern, text) is not None for text in (name, image))


def _image_policy_passes(image: str) -> bool:
    return any(_policy_controller_matches(glob, image) for glob in system_image_globs())


def _rules_take(image: str) -> bool:
    pod = {"spec": {"containers": [{"name": "main", "image": image}]}}
    return in_scope(pod, f"object.spec.containers.all(c, {system_image()})")


SYSTEM = [
    form
    for repository in contract.KFP_SYSTEM_IMAGES
    for form in (
        repository,
        f"{repository}:2.17.0",
        f"{repository}@{DIGEST}",
        f"{repository}:2.17.0@{DIGEST}",
    )
]
OTHERS = [
    f"{DRIVER}-evil",
    f"{DRIVER}-evil:2.17.0",
    f"{DRIVER}-evil@{DIGEST}",
    f"{DRIVER}X",
    f"{DRIVER}X:2.17.0",
    f"{DRIVER}/shell:2.17.0",
    f"{contract.KFP_LAUNCHER_REPOSITORY}-debug:2.17.0",
    f"{contract.ARGOEXEC_REPOSITORY}x:v4.0.5",
    "ghcr.io/kubeflow/kfp-apiserver:2.17.0",
    f"evil.io/{DRIVER}:2.17.0",
]


@pytest.mark.parametrize("image", SYSTEM)
def test_every_tag_and_digest_of_a_system_repository_is_kfps(image: str) -> None:
    assert _rules_take(image) is True
    assert _image_policy_passes(image) is True


@pytest.mark.parametrize("image", OTHERS)
def test_a_repository_that_only_starts_like_kfps_is_not_kfps(image: str) -> None:
    assert _rules_take(image) is False
    assert _image_policy_passes(image) is False


def test_the_model_of_policy_controller_tells_the_globs_apart() -> None:
    """The glob the image policy used to render (`REPO*`) passes the impostor; the model sees it."""
    assert _policy_controller_matches(f"{DRIVER}*", f"{DRIVER}-evil:2.17.0")
    assert not _policy_controller_matches(f"{DRIVER}:*", f"{DRIVER}-evil:2.17.0")
    assert _policy_controller_matches(f"{DRIVER}:*", DRIVER)  # read as :latest
