"""A step image and the platform runtime image, built, pushed, signed, checked, compiled against,
and one step run the way its pod runs (issue 15 item 3; docs/images.md "How it is tested").

The `runtime` step base image and the runtime image come from `built_images` (tests/conftest.py: buildah,
the session's docker-registry); the test's private Sigstore signs both and attaches the bundles
the way cosign does; `secureml compile --fetch-bundles` reads them from the registry. The
`evaluate` step (a time-sliced share under the quota shim) then runs as its previewed pod: the
init container copies the payload, `main` runs under bubblewrap (tests/images/podrun.py) with the
fake GPU and a Workload API the step's identity is fetched from.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from secureml.cli import app
from secureml.core import contract
from secureml.core.image_ref import ImageRef
from tests.images import podrun
from tests.support.docker_registry import attach_like_cosign
from tests.support.json_schemas import check
from tests.support.private_sigstore import PrivateSigstore

REPO = Path(__file__).resolve().parents[2]
GH = "https://token.actions.githubusercontent.com"
BUILDER = "https://github.com/acme/ml-images/.github/workflows/build.yml@refs/heads/main"
STEP = "evaluate"
RUN = "minio://mlpipeline/v2/artifacts/secure-finetune/run-1"
POINTS = [[x / 10, 3 * (x / 10) + 2] for x in range(-10, 11)]


@pytest.fixture(scope="module")
def signed(built_images, tmp_path_factory) -> Path:
    """Both images signed by the test Sigstore; its trusted root."""
    pki = PrivateSigstore()
    root = pki.write_trusted_root(tmp_path_factory.mktemp("sigstore") / "trusted_root.json")
    for image in (built_images.runtime, built_images.step):
        ref = ImageRef.parse(image.reference)
        bundle = pki.sign_image(ref.name, ref.digest_hex or "", subject=BUILDER, issuer=GH)
        attach_like_cosign(built_images.registry, ref.repository, ref.digest or "", bundle)
    return root


@pytest.fixture(scope="module")
def profile(built_images, signed, tmp_path_factory) -> Path:
    """team-a-dev's rules, images from the test registry, signatures required, the runtime
    image injected."""
    spec = yaml.safe_load((REPO / "examples" / "profiles" / "team-a-dev.yaml").read_text())
    spec["metadata"]["name"] = "team-a"
    images = spec["spec"]["images"]
    images["allowedRegistries"] = [f"{built_images.registry}/"]
    images["signatures"] = {
        "required": True,
        "trustedRoot": str(signed),
        "identities": [{"issuer": GH, "subjectRegExp": r"^https://github\.com/acme/"}],
    }
    spec["spec"]["runtime"]["image"] = built_images.runtime.reference
    path = tmp_path_factory.mktemp("profile") / "team-a.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture(scope="module")
def compiled(built_images, profile, tmp_path_factory) -> dict[str, Any]:
    """The reference pipeline with its IMAGE set to the built step image, compiled with
    --fetch-bundles."""
    work = tmp_path_factory.mktemp("compile")
    source = (REPO / "pipelines" / "secure_finetune.py").read_text()
    lines = [
        f'IMAGE = "{built_images.step.reference}"' if line.startswith("IMAGE = ") else line
        for line in source.splitlines()
    ]
    (work / "pipeline.py").write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(
        app,
        [
            "compile",
            str(work / "pipeline.py"),
            "--profile",
            str(profile),
            "--fetch-bundles",
            "-o",
            str(work / "pipeline.yaml"),
            "--report",
            str(work / "report.json"),
        ],
    )
    assert result.exit_code == 0, result.output
    return {
        "yaml": list(yaml.safe_load_all((work / "pipeline.yaml").read_text())),
        "report": json.loads((work / "report.json").read_text()),
    }


@pytest.fixture(scope="module")
def pod(compiled, profile) -> dict[str, Any]:
    from secureml.pods.preview import preview_pods
    from secureml.profile.model import load_profile

    return preview_pods(compiled["yaml"], load_profile(profile))[STEP]


@pytest.fixture(scope="module")
def sandbox(built_images, pod, rootfs_cache, tmp_path_factory) -> Iterator[podrun.Sandbox]:
    """The node's side of the pod: the init container's copy, the fake GPU, the Workload API."""
    from secureml.gpu.request import TimeSlice
    from secureml.localrun.dev_identity import DevWorkloadAPI
    from secureml.localrun.runner import fake_machine_for

    work = tmp_path_factory.mktemp("pod")
    runtime_dir = work / "runtime-volume"
    podrun.install_runtime(
        pod, podrun.image_rootfs(built_images.runtime.tag, rootfs_cache), runtime_dir
    )
    step_rootfs = tmp_path_factory.mktemp("rootfs") / "root"
    source = podrun.image_rootfs(built_images.step.tag, rootfs_cache)
    subprocess.run(["cp", "-a", str(source), str(step_rootfs)], check=True)
    gpu, _ = fake_machine_for(TimeSlice(memory="8Gi", compute=25), work / "gpu")
    minio = work / "emptydir" / "minio-scratch" / RUN.removeprefix("minio://")
    for name, content in (("prep/dataset", POINTS), ("train/model", {"w": 3.0, "b": 2.0})):
        (minio / name).parent.mkdir(parents=True, exist_ok=True)
        (minio / name).write_text(json.dumps(content))
    subprocess.run(
        ["chown", "-R", "1000:1000", str(work / "emptydir"), str(work / "gpu")], check=True
    )
    spiffe_dir = Path(tempfile.mkdtemp(prefix="wl", dir="/tmp"))
    os.chmod(spiffe_dir, 0o755)
    spiffe_id = pod["metadata"]["annotations"][contract.ANNOTATION_SPIFFE_ID]
    with DevWorkloadAPI(spiffe_dir / "spire-agent.sock", spiffe_id):
        os.chmod(spiffe_dir / "spire-agent.sock", 0o777)
        yield podrun.Sandbox(
            step_rootfs=step_rootfs,
            runtime_dir=runtime_dir,
            work=work,
            fake_gpu_libs=gpu.lib_dir,
            fake_gpu_dir=gpu.directory,
            spiffe_dir=spiffe_dir,
        )


def _messages(stderr: str) -> str:
    """stderr without the (long) audit line."""
    return "\n".join(
        ln for ln in stderr.splitlines() if not ln.startswith(contract.AUDIT_LINE_PREFIX)
    )


def _fake_gpu_env(box: podrun.Sandbox) -> dict[str, str]:
    """The fake driver's own configuration (a real driver needs none)."""
    return {"SECUREML_FAKE_GPU_CONFIG": f"{podrun.FAKE_GPU_DIR}/fakegpu.conf"}


def _executor_input() -> str:
    def artifact(name: str, kind: str, uri: str) -> dict[str, Any]:
        return {
            "artifacts": [{"name": name, "type": {"schemaTitle": kind}, "uri": uri, "metadata": {}}]
        }

    return json.dumps(
        {
            "inputs": {
                "artifacts": {
                    "dataset": artifact("dataset", "system.Dataset", f"{RUN}/prep/dataset"),
                    "model": artifact("model", "system.Model", f"{RUN}/train/model"),
                }
            },
            "outputs": {
                "artifacts": {
                    "metrics": artifact("metrics", "system.Metrics", f"{RUN}/evaluate/metrics")
                },
                "parameters": {"Output": {"outputFile": "/tmp/kfp_outputs/Output"}},
                "outputFile": "/tmp/kfp_outputs/output_metadata.json",
            },
        }
    )


def test_images_pass_secureml_image_check(built_images, profile):
    for image in (built_images.runtime, built_images.step):
        result = CliRunner().invoke(
            app, ["image", "check", image.reference, "--profile", str(profile)]
        )
        assert result.exit_code == 0, result.output
        assert "problem" not in result.output
    runtime = CliRunner().invoke(app, ["image", "check", built_images.runtime.reference])
    assert "payload at /secureml-runtime" in runtime.output


def test_a_bare_debian_image_is_refused(built_images):
    from secureml.images import builders, debian

    target = ImageRef.parse(f"{built_images.registry}/acme/bare:test")
    digest = builders.find_builder("buildah").push(debian.base_tag(), target)
    result = CliRunner().invoke(
        app, ["image", "check", f"{target.name}@{digest}", "--format", "json"]
    )
    assert result.exit_code == 1, result.output
    document = json.loads(result.output)
    check("image-check", document)
    findings = {f["check"]: f["status"] for f in document["findings"]}
    assert findings["python"] == findings["kfp-executor"] == findings["user"] == "problem"
    assert findings["launcher"] == findings["shim"] == "problem"


def test_compiled_against_the_signed_digest(built_images, compiled, pod):
    steps = {step["task"]: step for step in compiled["report"]["steps"]}
    assert set(steps) == {"prep", "train", "evaluate"}
    for step in steps.values():
        assert step["image"] == built_images.step.reference
        assert step["signature"]["signer"] == BUILDER
    init = next(
        c for c in pod["spec"]["initContainers"] if c["name"] == contract.RUNTIME_INIT_CONTAINER
    )
    assert init["image"] == built_images.runtime.reference
    assert podrun.step_argv(pod)[:2] == list(contract.RUNTIME_LAUNCHER_PREFIX)


def test_the_step_runs_as_its_pod(sandbox, pod):
    argv = [_executor_input() if arg == "{{$}}" else arg for arg in podrun.step_argv(pod)]
    result = podrun.run_main(pod, sandbox, argv, extra_env=_fake_gpu_env(sandbox))
    record = podrun.audit_record(result.stderr)
    assert result.returncode == 0, _messages(result.stderr)
    stages = {stage["name"]: stage["status"] for stage in record["stages"]}
    assert stages == {
        "config": "ok",
        "shim-claim": "ok",
        "identity": "ok",
        "verify-inputs": "skipped",
        "preflight": "ok",
        "scrub-before": "ok",
        "shim": "ok",
        "run": "ok",
        "scrub-after": "ok",
    }, record["stages"]
    assert (
        record["expected_spiffe_id"]
        == pod["metadata"]["annotations"][contract.ANNOTATION_SPIFFE_ID]
    )
    assert (
        record["image_digest"] == pod["metadata"]["annotations"][contract.ANNOTATION_IMAGE_DIGEST]
    )
    output = sandbox.work / "emptydir" / "scratch-tmp" / "kfp_outputs" / "output_metadata.json"
    assert json.loads(output.read_text())["parameterValues"]["Output"] == pytest.approx(
        0.0, abs=1e-9
    )


PROBE = r"""
import json, os
def attempt(path):
    try:
        with open(path, "w") as handle:
            handle.write("x")
        return "written"
    except OSError as err:
        return err.strerror
def attempt_readlink(path):
    try:
        return os.readlink(path)
    except OSError as err:
        return err.strerror
status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
print(json.dumps({
    "writes": {p: attempt(p) for p in ("/probe", "/etc/probe", "/usr/lib/probe", "/opt/secureml/probe", "/etc/ld.so.preload", "/tmp/probe")},
    "uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(),
    "caps": {k: status[k].strip() for k in ("CapEff", "CapPrm", "CapBnd", "NoNewPrivs")},
    "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "launcher": open(f"/proc/{os.getppid()}/cmdline").read().split("\0")[:4],
    "launcher_exe": attempt_readlink(f"/proc/{os.getppid()}/exe"),
    "shim_mapped": any("libsecureml_shim.so" in line for line in open("/proc/self/maps")),
    "ld_preload_env": os.environ.get("LD_PRELOAD"),
    "preload_file": open("/etc/ld.so.preload").read(),
}))
"""


def test_the_runtime_verifies_a_signed_model(sandbox, pod):
    """The payload carries what the launcher's verify-inputs stage imports (secureml.supplychain,
    sigstore, model-signing): its own interpreter, inside the pod, verifies a model folder signed
    with model-signing's key signer and refuses it once a file changed."""
    from tests.support.model_signing import make_model, new_key, sign_with_key

    scratch = sandbox.work / "emptydir" / "minio-scratch" / "signed"
    model = make_model(scratch / "model")
    private, public = new_key(scratch)
    sign_with_key(model, private)
    (scratch / "public.pem").write_bytes(public)
    subprocess.run(["chown", "-R", "1000:1000", str(scratch)], check=True)
    code = (
        "import sys; from pathlib import Path; "
        "from secureml.supplychain.models import ModelTrust, verify_model; "
        "v = verify_model(Path(sys.argv[1]), ModelTrust(keys=(Path(sys.argv[2]).read_bytes(),))); "
        "print(v.method, v.files, v.digest)"
    )
    python = f"{contract.RUNTIME_DIR}/python/bin/python3"
    argv = [python, "-I", "-c", code, "/minio/signed/model", "/minio/signed/public.pem"]
    result = podrun.run_main(pod, sandbox, argv)
    assert result.returncode == 0, result.stderr
    method, files, digest = result.stdout.split()
    assert (method, files) == ("key", "3") and digest.startswith("sha256:")

    (model / "weights.bin").write_bytes(b"changed")
    refused = podrun.run_main(pod, sandbox, argv)
    assert refused.returncode != 0 and "modified: weights.bin" in refused.stderr


TRACE = """
import atexit, os, sys
def _dump():
    with open("/tmp/import-trace-" + os.urandom(6).hex(), "w") as out:
        out.write("\\n".join("%s %s" % (n, getattr(m, "__file__", None)) for n, m in sys.modules.items()))
atexit.register(_dump)
"""
KEYLESS = """
import sys
from pathlib import Path
from secureml.supplychain.identity import TrustedIdentity
from secureml.supplychain.trust import verifier_for
from secureml.supplychain.verifier import KeylessAdvice, verify_keyless_dsse
case = Path(sys.argv[1])
signer = TrustedIdentity(issuer="https://token.actions.githubusercontent.com", subject_regexp=".+")
kind, _, subject, _ = verify_keyless_dsse((case / "bundle.sigstore.json").read_bytes(), [signer],
    verifier_for(case / "trusted_root.json"), subject="model", whose="", where="bundle",
    advice=KeylessAdvice(unusable="-", untrusted="-", invalid="-"))
print(kind)
"""


def test_every_stage_imports_only_the_payload(sandbox, pod, tmp_path):
    """An import trace of the launcher's stages (config, identity, preflight, scrubs, shim, run,
    audit) and of verify-inputs' key and keyless paths, in the payload's interpreter: each runs,
    and every module each loads comes from the runtime volume (the standard library from
    python311.zip, the pure-Python packages from site.zip), none from the step's image."""
    import dataclasses
    import shutil

    traced = tmp_path / "runtime-volume"
    subprocess.run(["cp", "-a", str(sandbox.runtime_dir), str(traced)], check=True)
    site = traced / "python" / "lib" / "python3" / "dist-packages"
    (site / "sitecustomize.py").write_text(TRACE)
    box = dataclasses.replace(sandbox, runtime_dir=traced)
    scratch = sandbox.work / "emptydir" / "minio-scratch" / "keyless"
    case = Path(__file__).parents[1] / "supplychain" / "conformance_upstream"
    shutil.copytree(case / "intoto-with-custom-trust-root", scratch, dirs_exist_ok=True)
    python = f"{contract.RUNTIME_DIR}/python/bin/python3"
    argv = [_executor_input() if arg == "{{$}}" else arg for arg in podrun.step_argv(pod)]
    launched = podrun.run_main(pod, box, argv, extra_env=_fake_gpu_env(box))
    assert launched.returncode == 0, _messages(launched.stderr)
    keyless = podrun.run_main(pod, box, [python, "-I", "-c", KEYLESS, "/minio/keyless"])
    assert keyless.returncode == 0, keyless.stderr
    assert keyless.stdout.strip() == "application/vnd.in-toto+json"
    tmp = sandbox.work / "emptydir" / "scratch-tmp"
    loaded = {}
    for trace in tmp.glob("import-trace-*"):
        loaded.update(line.split(" ", 1) for line in trace.read_text().splitlines())
        trace.unlink()
    files = {name: path for name, path in loaded.items() if path != "None"}
    assert {"secureml.enforcement.identity", "spiffe", "pynvml", "sigstore.verify"} <= set(files)
    outside = {n: p for n, p in files.items() if not p.startswith(f"{contract.RUNTIME_DIR}/")}
    assert not outside, outside
    zipped = f"{contract.RUNTIME_DIR}/python/lib/python311.zip/"
    assert files["json"].startswith(zipped) and ".zip/sigstore/" in files["sigstore.verify"]


def test_the_payload_fits_the_runtime_volume(sandbox):
    """The copy `install` made fits the memory-backed runtime volume's sizeLimit (tmpfs rounds
    each file up to a page), and is what the payload's manifest says."""
    manifest = json.loads((sandbox.runtime_dir / "manifest.json").read_text())
    files = [p for p in sandbox.runtime_dir.rglob("*") if p.is_file() and p.name != "manifest.json"]
    assert (len(files), sum(p.stat().st_size for p in files)) == (
        manifest["files"],
        manifest["bytes"],
    )
    pages = sum(-(-p.stat().st_size // 4096) * 4096 for p in sandbox.runtime_dir.rglob("*"))
    limit = contract.RUNTIME_VOLUME_SIZE_LIMIT
    assert limit.endswith("Mi") and pages < int(limit[:-2]) * 2**20, (pages, limit)


def test_the_pod_confines_the_step(sandbox, pod):
    argv = [*contract.RUNTIME_LAUNCHER_PREFIX, "python3", "-c", PROBE]
    result = podrun.run_main(pod, sandbox, argv, extra_env=_fake_gpu_env(sandbox))
    assert result.returncode == 0, _messages(result.stderr)
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["writes"].pop("/tmp/probe") == "written"
    assert set(seen["writes"].values()) == {"Read-only file system"}, seen["writes"]
    assert (seen["uid"], seen["gid"], seen["groups"]) == (1000, 1000, [])
    assert seen["caps"] == {
        "CapEff": "0" * 16,
        "CapPrm": "0" * 16,
        "CapBnd": "0" * 16,
        "NoNewPrivs": "1",
    }
    assert max(seen["pids"]) < 50, seen["pids"]  # a PID namespace of its own: bwrap, launcher, step
    launcher = [f"{contract.RUNTIME_DIR}/python/bin/python3", "-I", "-m", contract.LAUNCHER_MODULE]
    assert seen["launcher"] == launcher  # the payload's interpreter, not the image's python3
    assert seen["launcher_exe"] == "Permission denied"  # the launcher made itself non-dumpable
    assert seen["shim_mapped"] and seen["ld_preload_env"] is None
    assert seen["preload_file"].strip() == contract.RUNTIME_SHIM
    record = podrun.audit_record(result.stderr)
    assert {s["name"]: s["status"] for s in record["stages"]}["shim-claim"] == "ok"


def test_the_cuda_image(built_images, rootfs_cache):
    """`cuda` FROM the runtime image: it passes the check, sets no GPU selection, and the CUDA
    runtime library resolves through the loader's cache for any process (not only PyTorch)."""
    from secureml.images import builders, debian, platform

    builder = builders.find_builder("buildah")
    target = ImageRef.parse(f"{built_images.registry}/acme/ml-images/cuda:test")
    cuda = platform.build(
        "cuda",
        builder,
        base=debian.base_tag(),
        push_to=target,
        runtime=built_images.step.tag,
        compress=False,
    )
    result = CliRunner().invoke(app, ["image", "check", cuda.reference or "", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert {f["check"]: f["status"] for f in json.loads(result.output)["findings"]}[
        "gpu-env"
    ] == "ok"
    root = podrun.image_rootfs(cuda.tag, rootfs_cache)
    probe = "import ctypes; ctypes.CDLL('libcudart.so.12'); print('loaded')"
    loaded = subprocess.run(
        ["bwrap", "--ro-bind", str(root), "/", "--proc", "/proc", "--dev", "/dev",
         "--unshare-all", "--", "python3", "-c", probe],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert loaded.stdout.strip() == "loaded", loaded.stderr


def test_secureml_image_build_a_step_image(built_images, tmp_path):
    """`secureml image build` FROM the runtime image: the Containerfile written, buildah found,
    the digest reference printed; the image it made passes the check."""
    (tmp_path / "train.py").write_text("print('training')\n")
    tag = f"{built_images.registry}/acme/ml-images/step:v1"
    result = CliRunner().invoke(
        app, ["image", "build", str(tmp_path), "--from", "runtime", "--tag", tag, "--push"]
    )
    assert result.exit_code == 0, result.output
    assert "with buildah" in result.output
    reference = result.output.strip().splitlines()[-1]
    assert reference.startswith(f"{built_images.registry}/acme/ml-images/step@sha256:")
    assert (tmp_path / "Containerfile").read_text().startswith("# Generated by")
    check = CliRunner().invoke(app, ["image", "check", reference])
    subprocess.run(["buildah", "rmi", tag], capture_output=True)  # the next run's port differs
    assert check.exit_code == 0, check.output
