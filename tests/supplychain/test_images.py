"""Image references: exact normalisation, rejections with reasons, whole-segment registry matching."""

from __future__ import annotations

import pytest

from secureml.core.errors import SecuremlError
from secureml.core.image_ref import ImageRef, registry_allowed

HEX = "0123456789abcdef" * 4


@pytest.mark.parametrize(
    ("text", "registry", "repository", "tag", "digest", "normalised"),
    [
        ("ubuntu", "docker.io", "library/ubuntu", None, None, "docker.io/library/ubuntu"),
        (
            "ubuntu:22.04",
            "docker.io",
            "library/ubuntu",
            "22.04",
            None,
            "docker.io/library/ubuntu:22.04",
        ),
        ("acme/train", "docker.io", "acme/train", None, None, "docker.io/acme/train"),
        ("docker.io/ubuntu", "docker.io", "library/ubuntu", None, None, "docker.io/library/ubuntu"),
        ("index.docker.io/acme/x:1", "docker.io", "acme/x", "1", None, "docker.io/acme/x:1"),
        (
            "ghcr.io/acme/ml/train@sha256:" + HEX,
            "ghcr.io",
            "acme/ml/train",
            None,
            "sha256:" + HEX,
            "ghcr.io/acme/ml/train@sha256:" + HEX,
        ),
        (
            "ghcr.io/acme/train:v1@sha256:" + HEX,
            "ghcr.io",
            "acme/train",
            "v1",
            "sha256:" + HEX,
            "ghcr.io/acme/train:v1@sha256:" + HEX,
        ),
        ("localhost:5000/x", "localhost:5000", "x", None, None, "localhost:5000/x"),
        ("localhost:5000/x:tag", "localhost:5000", "x", "tag", None, "localhost:5000/x:tag"),
        ("localhost/x", "localhost", "x", None, None, "localhost/x"),
        ("GHCR.IO/acme/x", "ghcr.io", "acme/x", None, None, "ghcr.io/acme/x"),
        ("[::1]:5000/x", "[::1]:5000", "x", None, None, "[::1]:5000/x"),
        ("registry:5000/team/x", "registry:5000", "team/x", None, None, "registry:5000/team/x"),
        ("a.b/c__d/e-f.g_h", "a.b", "c__d/e-f.g_h", None, None, "a.b/c__d/e-f.g_h"),
        # no slash: a colon is a tag separator, never a port
        (
            "busybox:5000",
            "docker.io",
            "library/busybox",
            "5000",
            None,
            "docker.io/library/busybox:5000",
        ),
    ],
)
def test_parse_normalises(text, registry, repository, tag, digest, normalised):
    ref = ImageRef.parse(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (
        registry,
        repository,
        tag,
        digest,
    )
    assert str(ref) == normalised
    assert ref.pinned is (digest is not None)
    assert ImageRef.parse(str(ref)) == ref


def test_digest_helpers():
    ref = ImageRef.parse(f"ghcr.io/acme/train:v1@sha256:{HEX}")
    assert ref.digest_hex == HEX
    assert ref.by_digest() == f"ghcr.io/acme/train@sha256:{HEX}"
    assert ref.name == "ghcr.io/acme/train"


def test_by_digest_refuses_tag_only():
    with pytest.raises(SecuremlError) as err:
        ImageRef.parse("ghcr.io/acme/train:v1").by_digest()
    assert "not pinned by digest" in err.value.what
    assert "@sha256" in err.value.fix


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "empty image reference"),
        (" ubuntu", "whitespace"),
        ("ghcr.io/acme/x@sha256:" + HEX[:-1], "invalid digest"),
        ("ghcr.io/acme/x@sha256:" + HEX.upper(), "invalid digest"),
        ("ghcr.io/acme/x@sha512:" + HEX + HEX, "invalid digest"),
        ("ghcr.io/acme/x@" + HEX, "invalid digest"),
        ("ghcr.io/acme/X", "invalid repository part 'X'"),
        ("ghcr.io//x", "invalid repository part ''"),
        ("ghcr.io/", "invalid repository part ''"),
        ("ghcr.io/acme/x:", "invalid tag"),
        ("ghcr.io/acme/x:-bad", "invalid tag"),
        ("ghcr.io/acme/x:" + "a" * 129, "invalid tag"),
        ("-bad.io/x", "invalid registry host"),
        ("host:port/x", "invalid registry host"),
        ("ghcr.io/acme/x_", "invalid repository part"),
        ("ghcr.io/" + "a" * 250, "too long"),
        ("@sha256:" + HEX, "invalid repository part ''"),
    ],
)
def test_parse_rejects_with_reason(text, said):
    with pytest.raises(SecuremlError) as err:
        ImageRef.parse(text)
    assert said in err.value.what
    assert err.value.why and err.value.fix


def test_a_text_is_parsed_once_and_a_refusal_every_time():
    text = "ghcr.io/acme/once@sha256:" + HEX
    assert ImageRef.parse(text) is ImageRef.parse(text)
    for _ in range(2):
        with pytest.raises(SecuremlError, match="whitespace"):
            ImageRef.parse("ghcr.io/acme/x y")
    for not_text in (None, ["ghcr.io/acme/x"], {"image": "x"}):  # a YAML value of another kind
        with pytest.raises(SecuremlError, match="empty image reference"):
            ImageRef.parse(not_text)  # type: ignore[arg-type]


def test_uppercase_repository_says_lowercase():
    with pytest.raises(SecuremlError) as err:
        ImageRef.parse("ghcr.io/Acme/x")
    assert "lowercase" in err.value.why


@pytest.mark.parametrize(
    ("image", "allowed", "expected"),
    [
        ("ghcr.io/acme/train", ["ghcr.io/acme/"], True),
        ("ghcr.io/acme/train", ["ghcr.io/acme"], True),
        ("ghcr.io/acme/ml/train", ["ghcr.io/acme/"], True),
        ("ghcr.io/acmecorp/train", ["ghcr.io/acme/"], False),
        ("ghcr.io/acmecorp/train", ["ghcr.io/acme"], False),
        ("ghcr.io/acme/train", ["ghcr.io"], True),
        ("ghcr.io/acme/train", ["ghcr.io/"], True),
        ("ghcr.io.evil.com/acme/train", ["ghcr.io"], False),
        ("ghcr.io:443/acme/train", ["ghcr.io"], False),
        ("GHCR.io/acme/train", ["ghcr.io/acme"], True),
        ("ubuntu", ["docker.io/library/"], True),
        ("ubuntu", ["index.docker.io/library"], True),
        ("acme/train", ["docker.io/library/"], False),
        ("acme/train", ["docker.io/acme/"], True),
        ("ghcr.io/acme/train", ["nvcr.io/nvidia/", "ghcr.io/acme/"], True),
        ("ghcr.io/acme/train", [], False),
        ("ghcr.io/acme/train", ["ghcr.io/acme/train"], True),
        ("ghcr.io/acme/train-v2", ["ghcr.io/acme/train"], False),
        ("localhost:5000/x", ["localhost:5000"], True),
        ("localhost:5001/x", ["localhost:5000"], False),
    ],
)
def test_registry_allowed_whole_segments(image, allowed, expected):
    assert registry_allowed(ImageRef.parse(image), allowed) is expected


def test_trailing_slash_is_insignificant():
    # "ghcr.io/acme/" and "ghcr.io/acme" are the same prefix; the repository "acme" itself matches.
    assert registry_allowed(ImageRef.parse("ghcr.io/acme"), ["ghcr.io/acme"]) is True
    assert registry_allowed(ImageRef.parse("ghcr.io/acme"), ["ghcr.io/acme/"]) is True


@pytest.mark.parametrize("entry", ["acme/", "", "/", "ghcr.io//acme", "-x.io/acme"])
def test_registry_allowed_rejects_ambiguous_entries(entry):
    with pytest.raises(SecuremlError) as err:
        registry_allowed(ImageRef.parse("ghcr.io/acme/x"), [entry])
    assert err.value.where == "spec.images.allowedRegistries"


def test_allowed_registry_problem_for_profile_validation():
    from secureml.core.image_ref import allowed_registry_problem

    assert allowed_registry_problem("ghcr.io/acme/") is None
    assert allowed_registry_problem("localhost:5000") is None
    assert "registry host" in allowed_registry_problem("acme/")
    assert "invalid registry host" in allowed_registry_problem("-x.io/acme")
