"""The second tenant of the e2e session, team-restricted (profiles/team-restricted.yaml), on the e2e node.

`restricted_tenant(e2e, folder)` installs it beside team-a and compiles the reference pipeline
for it. What the harness changes in the profile, and why: its allowed registry and
`runtime.image` are the session's (as for team-a); its signatures stay required, but the signer is
a private Sigstore of the test (tests/support/private_sigstore.py: `trustedRoot` its trusted root,
`identities` its builder) because nothing here can get a certificate from the public-good Fulcio;
the step image is signed by it and compile verifies that signature (`--bundles`).

What the pipeline changes: team-restricted allows whole GPUs only (MIG and time-sliced shares are
below its tier's isolation), so train and evaluate ask for `WholeGPU(1)` instead of `MIG(...)` and
`TimeSlice(...)`; everything else is pipelines/secure_finetune.py.

What the node gets for it: a fake H100 (`NVIDIA H100 80GB HBM3`, a profile model) in
confidential-computing mode (on, ready, a CC-capable CPU), advertised as `nvidia.com/gpu` by a
fake device plugin of its own, its state writable by the tenant's `runAsUser` 3000; the pool
labels its steps select (`RESTRICTED_POOLS`) are put on the node while each step waits.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from secureml.core.image_ref import ImageRef
from secureml.gpu.request import WholeGPU
from secureml.profile.model import TenantProfile, load_profile
from tests.e2e import steps
from tests.e2e.environment import E2E, REPO, STORE_PORT
from tests.harness import kfp_images
from tests.harness.controlplane import HarnessError
from tests.harness.fake_gpu_plugin import FakeGpuPlugins
from tests.support.admission import install_tenant
from tests.support.private_sigstore import PrivateSigstore

PROFILE = REPO / "profiles" / "team-restricted.yaml"
BUILDER = "https://github.com/acme/ml-images/.github/workflows/build.yml@refs/heads/main"
GITHUB = "https://token.actions.githubusercontent.com"
GPU = "nvidia.com/gpu"
PRODUCT = "NVIDIA-H100-80GB-HBM3"
RUN_AS_USER = 3000  # profiles/team-restricted.yaml hardening.runAsUser
POOL = {"secureml.dev/pool": "restricted-h100", "nvidia.com/cc.ready.state": "true"}
RESTRICTED_POOLS: dict[str, dict[str, str]] = {"prep": {}, "train": POOL, "evaluate": POOL}
PIPELINE_CHANGES = {  # whole GPUs, the only kind team-restricted's tier allows
    "from secureml import MIG, TimeSlice,": "from secureml import WholeGPU,",
    'gpu=MIG("1g.10gb")': "gpu=WholeGPU(1)",
    'gpu=TimeSlice(memory="8Gi", compute=25)': "gpu=WholeGPU(1)",
}


@dataclass
class Restricted:
    profile: TenantProfile
    docs: list[dict[str, Any]]  # the reference pipeline compiled for it


def _profile(e2e: E2E, folder: Path, trusted_root: Path) -> Path:
    spec = yaml.safe_load(PROFILE.read_text())
    spec["spec"]["images"]["allowedRegistries"] = [f"{e2e.registry}/"]
    spec["spec"]["images"]["signatures"].update(
        trustedRoot=str(trusted_root),
        identities=[{"issuer": GITHUB, "subjectRegExp": r"^https://github\.com/acme/"}],
    )
    spec["spec"]["runtime"]["image"] = e2e.runtime_image
    path = folder / "team-restricted.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@contextlib.contextmanager
def restricted_tenant(e2e: E2E, folder: Path) -> Iterator[Restricted]:
    """team-restricted installed on the e2e cluster, its GPU on the node (module docstring)."""
    pki = PrivateSigstore()
    trusted_root = pki.write_trusted_root(folder / "trusted_root.json")
    image = ImageRef.parse(e2e.step_image)
    bundles = folder / "bundles"
    bundles.mkdir()
    (bundles / f"sha256-{image.digest_hex}.sigstore.json").write_bytes(
        pki.sign_image(image.name, image.digest_hex or "", subject=BUILDER, issuer=GITHUB)
    )
    path = _profile(e2e, folder, trusted_root)
    profile = load_profile(path)
    docs = steps.compile_reference(
        e2e.step_image, path, folder, replace=PIPELINE_CHANGES, options=("--bundles", str(bundles))
    )
    install_tenant(e2e.cluster, profile)
    status, answer = e2e.cluster.request(
        "POST",
        f"/api/v1/namespaces/{profile.spec.namespace}/configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "kfp-launcher"},
            "data": {"standinStore": f"http://{e2e.network.address}:{STORE_PORT}"},
        },
    )
    if status not in (201, 409):
        raise HarnessError(f"creating team-restricted's kfp-launcher ConfigMap: {answer}")
    with FakeGpuPlugins(
        e2e.node, folder / "gpu", kfp_images.binaries() / "fake-device-plugin"
    ) as plugins:
        plugins.add(GPU, WholeGPU(1, PRODUCT))
        machine: Any = plugins.machines[GPU]
        machine.confidential.mode, machine.confidential.ready = "on", True
        machine.confidential.capable, machine.confidential.cpu = True, 3  # SEV-SNP
        machine.write()
        state = folder / "gpu" / GPU.replace("/", "_")
        subprocess.run(["chown", "-R", f"{RUN_AS_USER}:{RUN_AS_USER}", str(state)], check=True)
        yield Restricted(profile, docs)
