"""KFP's own patterns: kubernetes.CreatePVC / DeletePVC (platform operations KFP's driver runs, no
container) and container components that rely on the image's ENTRYPOINT, read from the registry
for a digest-pinned image (`--resolve-entrypoints`) and put behind the launcher."""

import json

import pytest
import requests
from kfp import dsl, kubernetes

from secureml.compile.compiler import CompileError, compile_pipeline
from secureml.core import contract
from secureml.supplychain.entrypoint import image_process
from tests.support.compiled import docs
from tests.support.docker_registry import INDEX, MANIFEST, digest_of, push_blob
from tests.support.profiles import make_profile

IMAGE = "ghcr.io/acme/ml-images/prep@sha256:" + "1" * 64


@dsl.container_component
def producer() -> dsl.ContainerSpec:
    return dsl.ContainerSpec(image=IMAGE, command=["sh", "-c"], args=["echo hi > /data/file"])


@dsl.pipeline(name="with-pvc")
def with_pvc() -> None:
    pvc = kubernetes.CreatePVC(
        pvc_name_suffix="-my-pvc", access_modes=["ReadWriteOnce"], size="5Gi"
    )
    task = producer()
    kubernetes.mount_pvc(task, pvc_name=pvc.outputs["name"], mount_path="/data")
    kubernetes.DeletePVC(pvc_name=pvc.outputs["name"]).after(task)


def test_create_and_delete_pvc_are_platform_operations() -> None:
    compiled = compile_pipeline(with_pvc, make_profile("team-a"))
    kinds = {step.task: step.kind for step in compiled.steps}
    assert kinds == {"createpvc": "platform", "deletepvc": "platform", "producer": "plain"}
    executors = docs(compiled.yaml_text)[0]["deploymentSpec"]["executors"]
    pvc_ops = [e["container"] for e in executors.values() if "argostub" in e["container"]["image"]]
    assert len(pvc_ops) == 2
    assert all("command" not in c for c in pvc_ops), "nothing of secureml's is written into them"


def _push_image(host: str, repository: str, config: dict) -> tuple[str, str]:
    """An image with `config` pushed to the registry; (manifest digest, index digest)."""
    base = f"http://{host}/v2/{repository}"
    config_blob = json.dumps({"architecture": "amd64", "os": "linux", "config": config}).encode()
    layer = b"not really a layer"
    push_blob(base, config_blob)
    push_blob(base, layer)
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": digest_of(config_blob),
                "size": len(config_blob),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": digest_of(layer),
                    "size": len(layer),
                }
            ],
        }
    ).encode()
    index = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": INDEX,
            "manifests": [
                {
                    "mediaType": MANIFEST,
                    "digest": digest_of(manifest),
                    "size": len(manifest),
                    "platform": {"os": "linux", "architecture": "arm64"},
                },
                {
                    "mediaType": MANIFEST,
                    "digest": digest_of(manifest),
                    "size": len(manifest),
                    "platform": {"os": "linux", "architecture": "amd64"},
                },
            ],
        }
    ).encode()
    for document, kind in ((manifest, MANIFEST), (index, INDEX)):
        requests.put(
            f"{base}/manifests/{digest_of(document)}",
            data=document,
            headers={"Content-Type": kind},
            timeout=10,
        ).raise_for_status()
    return digest_of(manifest), digest_of(index)


def test_an_entrypoint_is_read_from_the_registry_and_put_behind_the_launcher(
    docker_registry: str,
) -> None:
    _, index = _push_image(
        docker_registry, "acme/server", {"Entrypoint": ["/bin/serve"], "Cmd": ["--port", "80"]}
    )
    image = f"{docker_registry}/acme/server@{index}"
    assert image_process(image).entrypoint == ("/bin/serve",)

    @dsl.container_component
    def serve() -> dsl.ContainerSpec:
        return dsl.ContainerSpec(image=image)

    @dsl.container_component
    def serve_with_args() -> dsl.ContainerSpec:
        return dsl.ContainerSpec(image=image, args=["--port", "8080"])

    @dsl.pipeline(name="entrypoints")
    def entrypoints() -> None:
        serve()
        serve_with_args()

    profile = make_profile(
        "team-a", images={"allowedRegistries": [f"{docker_registry}/acme/"], "requireDigest": True}
    )
    with pytest.raises(CompileError) as err:
        compile_pipeline(entrypoints, profile)
    refused = [v for v in err.value.violations if v.rule == "launcher.no-command"]
    assert len(refused) == 2 and "--resolve-entrypoints" in refused[0].fix

    compiled = compile_pipeline(entrypoints, profile, entrypoint_resolver=image_process)
    executors = docs(compiled.yaml_text)[0]["deploymentSpec"]["executors"]
    argv = {
        label: (e["container"]["command"], e["container"].get("args", []))
        for label, e in executors.items()
    }
    prefix = list(contract.RUNTIME_LAUNCHER_PREFIX)  # team-a names runtime.image
    assert argv["exec-serve"] == ([*prefix, "/bin/serve"], ["--port", "80"])
    assert argv["exec-serve-with-args"] == ([*prefix, "/bin/serve"], ["--port", "8080"])


def test_an_entrypoint_is_not_read_for_an_image_without_a_digest(docker_registry: str) -> None:
    @dsl.container_component
    def tagged() -> dsl.ContainerSpec:
        return dsl.ContainerSpec(image=f"{docker_registry}/acme/server:latest")

    @dsl.pipeline(name="tagged")
    def tagged_pipeline() -> None:
        tagged()

    profile = make_profile(
        "team-a", images={"allowedRegistries": [f"{docker_registry}/acme/"], "requireDigest": False}
    )
    with pytest.raises(CompileError) as err:
        compile_pipeline(tagged_pipeline, profile, entrypoint_resolver=image_process)
    (refused,) = [v for v in err.value.violations if v.rule == "launcher.no-command"]
    assert "is not pinned by digest, so its ENTRYPOINT can change" in refused.what
