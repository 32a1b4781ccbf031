"""One pipeline per compile rule: exactly the expected rule ids, all at once, each documented."""

import re

import pytest
from kfp import dsl, kubernetes

from secureml import MIG, TimeSlice, WholeGPU, secure_component
from secureml.compile.compiler import CompileError, compile_pipeline
from secureml.compile.rules import RULES
from secureml.supplychain.attestations import RULES as ATTESTATION_RULES
from tests.support.compiled import DIGEST, IMAGE
from tests.support.paths import REPO
from tests.support.profiles import make_profile


@secure_component(image=IMAGE)
def step(x: int) -> int:
    return x


@dsl.component(base_image=IMAGE, packages_to_install=["numpy"], install_kfp_package=False)
def installs(x: int) -> int:
    return x


@dsl.container_component
def entrypoint_only() -> dsl.ContainerSpec:
    return dsl.ContainerSpec(image=IMAGE, args=["--serve"])


def gpu_step(request):
    return secure_component(gpu=request)(step)


def image_step(image: str):
    return secure_component(image=image)(step.python_func)


def single(component, configure=lambda task: None):
    @dsl.pipeline(name="rules")
    def pipeline() -> None:
        configure(component(x=1))

    return pipeline


def rules_of(pipeline, profile=None) -> list[str]:
    with pytest.raises(CompileError) as err:
        compile_pipeline(pipeline, profile or make_profile())
    return sorted(v.rule for v in err.value.violations)


CASES = {
    "isolation.below-tier": (
        lambda: single(gpu_step(MIG("1g.10gb"))),
        lambda: make_profile(
            "team-restricted",
            images={"allowedRegistries": ["ghcr.io/acme/"], "signatures": {"required": True}},
        ),
        ["gpu.mig-forbidden", "isolation.below-tier"],
    ),
    "gpu.mig-forbidden": (
        lambda: single(gpu_step(MIG("1g.10gb"))),
        lambda: make_profile(gpu={"mig": None, "quota": None}),
        ["gpu.mig-forbidden"],
    ),
    "gpu.mig-profile-not-allowed": (
        lambda: single(gpu_step(MIG("4g.40gb"))),
        None,
        ["gpu.mig-profile-not-allowed"],
    ),
    # Profiles may only allow MIG profiles of their models, so an unknown one is also not allowed.
    "gpu.mig-profile-unknown": (
        lambda: single(gpu_step(MIG("1g.5gb"))),
        None,
        ["gpu.mig-profile-not-allowed", "gpu.mig-profile-unknown"],
    ),
    "gpu.mig-count": (lambda: single(gpu_step(MIG("3g.40gb", count=3))), None, ["gpu.mig-count"]),
    "gpu.timeslice-forbidden": (
        lambda: single(gpu_step(TimeSlice(memory="1Gi", compute=10))),
        lambda: make_profile(gpu={"timeSlice": None, "quota": None}),
        ["gpu.timeslice-forbidden"],
    ),
    "gpu.timeslice-memory": (
        lambda: single(gpu_step(TimeSlice(memory="32Gi", compute=10))),
        None,
        ["gpu.timeslice-memory"],
    ),
    "gpu.timeslice-compute": (
        lambda: single(gpu_step(TimeSlice(memory="1Gi", compute=60))),
        None,
        ["gpu.timeslice-compute"],
    ),
    "gpu.whole-forbidden": (
        lambda: single(gpu_step(WholeGPU(1))),
        lambda: make_profile(gpu={"wholeGpu": None, "quota": None}),
        ["gpu.whole-forbidden"],
    ),
    "gpu.whole-count": (
        lambda: single(gpu_step(WholeGPU(3))),
        lambda: make_profile(gpu={"quota": None}),
        ["gpu.whole-count"],
    ),
    "gpu.whole-product": (
        lambda: single(gpu_step(WholeGPU(1, product="NVIDIA-B200"))),
        None,
        ["gpu.whole-product"],
    ),
    "gpu.quota": (
        lambda: single(gpu_step(WholeGPU(2))),
        lambda: make_profile(gpu={"quota": {"nvidia.com/gpu": 1}}),
        ["gpu.quota"],
    ),
    "accelerator.not-allowed": (
        lambda: single(step, lambda t: t.set_accelerator_type("amd.com/gpu")),
        None,
        ["accelerator.not-allowed"],
    ),
    "accelerator.without-request": (
        lambda: single(
            gpu_step(MIG("1g.10gb")), lambda t: t.set_accelerator_type("nvidia.com/gpu")
        ),
        None,
        ["accelerator.without-request"],
    ),
    "accelerator.without-type": (
        lambda: single(step, lambda t: t.set_accelerator_limit("2")),
        None,
        ["accelerator.without-type"],
    ),
    "image.invalid": (
        lambda: single(image_step(f"ghcr.io/acme/Train@{DIGEST}")),
        None,
        ["image.invalid"],
    ),
    "image.dynamic": (lambda: _dynamic_image(), None, ["image.dynamic"]),
    "image.registry": (
        lambda: single(image_step(f"docker.io/library/python@{DIGEST}")),
        None,
        ["image.registry"],
    ),
    "image.digest": (
        lambda: single(image_step("ghcr.io/acme/ml-images/train:1.0")),
        None,
        ["image.digest"],
    ),
    "runtime.install": (lambda: single(installs), None, ["runtime.install"]),
    "runtime.debug-pause": (
        lambda: single(step, lambda t: t.set_debug_pause()),
        None,
        ["runtime.debug-pause"],
    ),
    "env.forbidden": (
        lambda: single(
            step,
            lambda t: (
                t.set_env_variable("LD_PRELOAD", "/x.so"),
                kubernetes.use_secret_as_env(t, "s", {"k": "CUDA_DISABLE_CONTROL"}),
            ),
        ),
        None,
        ["env.forbidden", "env.forbidden"],
    ),
    "env.reserved": (
        lambda: single(step, lambda t: t.set_env_variable("SECUREML_SHIM", "off")),
        None,
        ["env.reserved"],
    ),
    "metadata.reserved": (
        lambda: single(
            step, lambda t: kubernetes.add_pod_label(t, "secureml.dev/isolation", "dedicated")
        ),
        None,
        ["metadata.reserved"],
    ),
    "launcher.no-command": (lambda: _no_command(), None, ["launcher.no-command"]),
    "scheduling.from-parameter": (
        lambda: _scheduling_from_parameters(),
        None,
        ["scheduling.from-parameter", "scheduling.from-parameter"],
    ),
    "pipeline.nested-unresolved": (
        lambda: _unreachable_nested(),
        None,
        ["pipeline.nested-unresolved"],
    ),
    "model.no-trusted-signers": (lambda: _verifies_a_model(), None, ["model.no-trusted-signers"]),
    "model.oci-sidecar": (lambda: _imports_a_modelcar(), None, ["model.oci-sidecar"]),
}


def _imports_a_modelcar():
    @secure_component(image=IMAGE)
    def load(model: dsl.Input[dsl.Model]) -> None:
        pass

    @dsl.pipeline(name="modelcar")
    def pipeline() -> None:
        uri = "oci://ghcr.io/acme/models/m@sha256:" + "a" * 64
        load(model=dsl.importer(artifact_uri=uri, artifact_class=dsl.Model).output)

    return pipeline


def _verifies_a_model():
    @secure_component(image=IMAGE)
    def publish(model: dsl.Output[dsl.Model]) -> None:
        pass

    @secure_component(image=IMAGE, verify_inputs=["model"])
    def load(model: dsl.Input[dsl.Model]) -> None:
        pass

    @dsl.pipeline(name="rules")
    def pipeline() -> None:
        load(model=publish().outputs["model"])

    return pipeline


def _dynamic_image():
    @dsl.pipeline(name="rules")
    def pipeline(image: str = IMAGE) -> None:
        step(x=1).set_container_image(image)

    return pipeline


def _scheduling_from_parameters():
    """Tolerations and node affinity chosen at run time: a parameter and another task's output."""

    @dsl.pipeline(name="rules")
    def pipeline(toleration: dict = {}) -> None:  # noqa: B006 - KFP pipeline parameters take literals
        first = step(x=1)
        kubernetes.add_toleration_json(first, toleration)
        second = step(x=2)
        kubernetes.add_node_affinity_json(second, first.output)

    return pipeline


def _no_command():
    @dsl.pipeline(name="rules")
    def pipeline() -> None:
        entrypoint_only()

    return pipeline


def _unreachable_nested():
    @dsl.pipeline(name="inner")
    def inner() -> None:
        step(x=1)

    holder = [inner]  # reached through a list: not a name the outer function uses

    @dsl.pipeline(name="rules")
    def pipeline() -> None:
        holder[0]()

    return pipeline


@pytest.mark.parametrize("rule", sorted(CASES))
def test_each_rule_fires_exactly(rule: str) -> None:
    build, profile, expected = CASES[rule]
    assert rules_of(build(), profile() if profile else None) == expected
    assert rule in expected


def test_every_rule_has_a_case() -> None:
    assert set(CASES) == set(RULES)


def test_all_violations_of_all_tasks_are_reported_at_once() -> None:
    @dsl.pipeline(name="many")
    def many() -> None:
        gpu_step(MIG("4g.40gb"))(x=1).set_env_variable("LD_PRELOAD", "x")
        image_step("ghcr.io/acme/ml-images/train:1.0")(x=2)
        installs(x=3).set_debug_pause()

    with pytest.raises(CompileError) as err:
        compile_pipeline(many, make_profile())
    found = sorted((v.task, v.rule) for v in err.value.violations)
    assert found == [
        ("installs", "runtime.debug-pause"),
        ("installs", "runtime.install"),
        ("step", "env.forbidden"),
        ("step", "gpu.mig-profile-not-allowed"),
        ("step-2", "image.digest"),
    ]
    assert all(v.fix and v.what for v in err.value.violations)
    text = err.value.diagnostics()
    assert "[gpu.mig-profile-not-allowed]" in text and "fix:" in text


def test_runtime_installs_pass_when_the_profile_allows_them() -> None:
    profile = make_profile(tier="public", runtime={"allowRuntimeInstalls": True})
    assert compile_pipeline(single(installs), profile).steps[0].task == "installs"


def test_missing_signatures_come_from_the_supply_chain_verifier(tmp_path) -> None:
    from secureml.supplychain.compile import verify_images_for_compile

    profile = make_profile(images={"signatures": {"required": True}})

    def verifier(steps):
        return verify_images_for_compile(steps, profile, tmp_path, False)

    with pytest.raises(CompileError) as err:
        compile_pipeline(single(step), profile, image_verifier=verifier)
    assert [(v.task, v.rule) for v in err.value.violations] == [("step", "image.signature-missing")]


def test_docs_list_every_rule_id() -> None:
    from secureml.compile.trainer_rules import RULES as TRAINER_RULES

    text = (REPO / "docs" / "rules.md").read_text()
    documented = set(re.findall(r"^\| `([a-z]+\.[a-z-]+)` \|", text, flags=re.M))
    assert documented == set(RULES) | {
        "image.signature-missing",
        "image.signature-invalid",
        "image.signer-untrusted",
        "image.no-launcher",  # compile --check-images (secureml.images.compilecheck)
        *ATTESTATION_RULES.values(),  # images.attestations (secureml.supplychain.attestations)
        *TRAINER_RULES,  # multi-node steps (secureml.compile.trainer_rules, tests/trainer)
    }
