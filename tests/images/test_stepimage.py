"""secureml.images without a builder: the build context, the generated Containerfile, the
builder search, and `image check` / rule `image.no-launcher` over images written here (an OCI
layout, and the same image pushed to the session's docker-registry)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

import secureml
from secureml.cli import app
from secureml.core import contract
from secureml.core.errors import SecuremlError
from secureml.images import builders, context, userimage
from secureml.images.check import check
from secureml.images.compilecheck import RULE, chain, image_checks
from tests.support.docker_registry import push_blob

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
SITE = "/usr/local/lib/python3.11/dist-packages"
GOOD_FILES = {
    "/usr/bin/python3.11": b"\x7fELF",
    f"{SITE}/kfp/dsl/executor_main.py": b"",
    f"{SITE}/secureml/__init__.py": f'__version__ = "{secureml.__version__}"\n'.encode(),
    f"{SITE}/secureml/enforcement/launch.py": b"",
    contract.SHIM_LIBRARY_PATH: b"\x7fELF",
    "/etc/ld.so.preload": b"",
}


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _layer(files: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for path, content in files.items():
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode = len(content), 0o755
            tar.addfile(info, io.BytesIO(content))
        for path, target in (links or {}).items():
            info = tarfile.TarInfo(path.lstrip("/"))
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return gzip.compress(raw.getvalue())


def _image(layers: list[bytes], config: dict[str, object]) -> dict[str, bytes]:
    """Blobs by digest, and the manifest under the key 'manifest'."""
    blob = json.dumps({"architecture": "amd64", "os": "linux", "config": config}).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": _digest(blob),
                "size": len(blob),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": _digest(layer),
                    "size": len(layer),
                }
                for layer in layers
            ],
        }
    ).encode()
    return {_digest(b): b for b in (blob, *layers)} | {"manifest": manifest}


def _layout(root: Path, blobs: dict[str, bytes]) -> str:
    manifest = blobs["manifest"]
    (root / "blobs" / "sha256").mkdir(parents=True)
    for digest, data in {**blobs, _digest(manifest): manifest}.items():
        if digest != "manifest":
            (root / "blobs" / "sha256" / digest.split(":")[1]).write_bytes(data)
    index = {
        "schemaVersion": 2,
        "manifests": [{"mediaType": MANIFEST, "digest": _digest(manifest), "size": len(manifest)}],
    }
    (root / "index.json").write_text(json.dumps(index))
    (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    return f"oci:{root}"


GOOD = {"User": "1000:1000", "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"]}
GOOD_LAYERS = [_layer(GOOD_FILES, {"/usr/bin/python3": "python3.11"})]


def _statuses(reference: str, injected: bool | None = None) -> dict[str, str]:
    return {f.check: f.status for f in check(reference, injected=injected)[1]}


def test_a_good_step_image_passes(tmp_path):
    reference = _layout(tmp_path, _image(GOOD_LAYERS, GOOD))
    assert set(_statuses(reference).values()) == {"ok"}


def test_each_missing_piece_is_a_problem(tmp_path):
    whiteouts = _layer(
        {
            "/usr/local/lib/python3.11/dist-packages/.wh.kfp": b"",
            "/etc/ld.so.preload": b"/tmp/evil.so\n",
        }
    )
    config = {
        "User": "root",
        "Env": ["PATH=/usr/bin", "NVIDIA_VISIBLE_DEVICES=all"],
        "Entrypoint": ["/bin/sh"],
    }
    reference = _layout(tmp_path, _image([*GOOD_LAYERS, whiteouts], config))
    statuses = _statuses(reference)
    assert statuses == {
        "python": "ok",
        "kfp-executor": "problem",
        "launcher": "ok",
        "shim": "ok",
        "user": "problem",
        "ld-preload": "problem",
        "gpu-env": "problem",
        "entrypoint": "info",
    }


def test_injected_runtime_needs_no_launcher_in_the_image(tmp_path):
    files = {k: v for k, v in GOOD_FILES.items() if "secureml" not in k}
    reference = _layout(tmp_path, _image([_layer(files, {"/usr/bin/python3": "python3.11"})], GOOD))
    assert _statuses(reference)["launcher"] == "problem"
    assert _statuses(reference, injected=True)["launcher"] == "info"
    assert "shim" not in _statuses(reference, injected=True)


def test_an_old_runtime_in_the_image_is_refused(tmp_path):
    old = _layer({f"{SITE}/secureml/__init__.py": b'__version__ = "0.0.9"\n'})
    reference = _layout(tmp_path, _image([*GOOD_LAYERS, old], GOOD))
    [finding] = [f for f in check(reference)[1] if f.check == "launcher"]
    assert finding.status == "problem" and "0.0.9" in finding.message


def test_a_tampered_blob_is_refused(tmp_path):
    reference = _layout(tmp_path, _image(GOOD_LAYERS, GOOD))
    layer = next(
        p for p in (tmp_path / "blobs" / "sha256").iterdir() if p.read_bytes() == GOOD_LAYERS[0]
    )
    layer.write_bytes(_layer({"/usr/bin/python3": b"evil"}))
    with pytest.raises(SecuremlError, match="does not match its digest"):
        check(reference)


def test_the_runtime_image_is_checked_as_one(tmp_path):
    payload = {
        f"{contract.RUNTIME_PAYLOAD_DIR}/{name}": b"\x7fELF"
        for name in (
            "install",
            "bin/secureml-launch",
            "lib/libsecureml_shim.so",
            "python/bin/python3",
        )
    }
    payload[f"{contract.RUNTIME_PAYLOAD_DIR}/manifest.json"] = json.dumps(
        {"secureml": secureml.__version__}
    ).encode()
    labels = {"dev.secureml.image.kind": "runtime-injector"}
    good = {"User": "65532", "Entrypoint": list(contract.RUNTIME_INSTALL_COMMAND), "Labels": labels}
    (tmp_path / "a").mkdir()
    assert set(_statuses(_layout(tmp_path / "a", _image([_layer(payload)], good))).values()) == {
        "ok"
    }
    (tmp_path / "b").mkdir()
    bad = {"Entrypoint": ["/bin/sh"], "Labels": labels}
    statuses = _statuses(_layout(tmp_path / "b", _image([_layer(payload)], bad)))
    assert statuses["entrypoint"] == statuses["user"] == "problem"


def test_cli_check_over_the_registry_and_the_compile_rule(docker_registry):
    blobs = _image([*GOOD_LAYERS, _layer({"/etc/ld.so.preload": b"/x.so"})], GOOD)
    base = f"http://{docker_registry}/v2/acme/step"
    for digest, data in blobs.items():
        if digest != "manifest":
            push_blob(base, data)
    import requests

    manifest = blobs["manifest"]
    requests.put(
        f"{base}/manifests/v1", data=manifest, headers={"Content-Type": MANIFEST}, timeout=10
    ).raise_for_status()
    reference = f"{docker_registry}/acme/step@{_digest(manifest)}"
    result = CliRunner().invoke(app, ["image", "check", reference])
    assert result.exit_code == 1 and "ld-preload" in result.output and "fix:" in result.output

    class Profile:
        class spec:  # noqa: N801
            class runtime:  # noqa: N801
                image = None

    signature = [type("Signed", (), {"step": "train", "verified": True})()]
    verify = chain(lambda steps: signature, image_checks(Profile))
    results = verify([("train", reference), ("eval", reference)])
    assert results[0] is signature[0]
    assert [(r.step, r.rule, r.verified) for r in results[1:]] == [
        ("train", RULE, False),
        ("eval", RULE, False),
    ]
    assert "/x.so" in results[1].message
    unreadable = image_checks(Profile)([("x", f"{docker_registry}/acme/none@sha256:{'0' * 64}")])
    assert unreadable[0].rule == RULE and "could not be checked" in unreadable[0].message


def test_runtime_modules_follow_the_launchers_imports():
    names = {str(path.relative_to(context.PACKAGE_DIR)) for path in context.runtime_modules()}
    assert {"core/contract.py", "core/errors.py", "gpu/request.py", "gpu/__init__.py"} <= names
    # TYPE_CHECKING only / unused
    assert "profile/model.py" not in names and "compile/compiler.py" not in names


def test_generated_containerfile(tmp_path):
    (tmp_path / "requirements.txt").write_text("numpy==2.1.0\n")
    text = userimage.render(tmp_path, "cuda")
    assert text.startswith(userimage.MARKER)
    assert f"FROM localhost/secureml/cuda:{secureml.__version__}" in text
    assert "-r requirements.txt" in text and text.rstrip().endswith("USER 1000:1000")
    (tmp_path / "Containerfile").write_text("FROM scratch\n")
    with pytest.raises(SecuremlError, match="not written by secureml"):
        userimage.write_containerfile(tmp_path, "runtime")
    userimage.write_containerfile(tmp_path, "ghcr.io/acme/base@sha256:" + "a" * 64, overwrite=True)
    assert "FROM ghcr.io/acme/base@sha256:" in (tmp_path / "Containerfile").read_text()


def test_no_builder_says_how_to_install_one(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SecuremlError) as err:
        builders.find_builder()
    assert "apt-get install buildah" in err.value.fix
    result = CliRunner().invoke(app, ["image", "build", str(tmp_path), "--tag", "ghcr.io/acme/x:1"])
    assert result.exit_code == 2 and "no image builder found" in result.output
