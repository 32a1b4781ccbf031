"""Hypothesis over generated profiles and GPU requests: a compile either succeeds or names rules."""

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kfp import dsl

from secureml import MIG, TimeSlice, WholeGPU, secure_component
from secureml.compile.compiler import CompileError, compile_pipeline
from secureml.compile.rules import RULES
from secureml.core.errors import ProfileError
from secureml.nvidia import catalogue as gpu_catalogue
from secureml.profile.model import TenantProfile
from tests.support.compiled import IMAGE
from tests.support.profiles import merge, profile_data


@secure_component(image=IMAGE)
def work(x: int) -> int:
    return x


MODELS = sorted(gpu_catalogue.MIG_CATALOGUE)
MIG_NAMES = sorted(
    {name for model in gpu_catalogue.MIG_CATALOGUE.values() for name in model.profiles}
)
PRODUCTS = sorted({p for model in gpu_catalogue.MIG_CATALOGUE.values() for p in model.products})
GIB = 2**30


@st.composite
def profiles(draw: st.DrawFn) -> TenantProfile:
    tier = draw(st.sampled_from(["public", "internal", "confidential", "restricted"]))
    strict = tier in ("confidential", "restricted")
    gpu_spec: dict = {
        "backend": draw(st.sampled_from(["device-plugin", "dra"])),
        "migStrategy": draw(st.sampled_from(["mixed", "single"])),
        "models": draw(st.lists(st.sampled_from([*MODELS, "L4"]), max_size=3, unique=True)),
        "quota": None,
        "mig": None,
        "timeSlice": None,
        "wholeGpu": None,
    }
    if draw(st.booleans()):
        gpu_spec["mig"] = {
            "allowedProfiles": draw(
                st.lists(st.sampled_from(MIG_NAMES), min_size=1, max_size=3, unique=True)
            )
        }
    if draw(st.booleans()):
        gpu_spec["timeSlice"] = {
            "maxMemory": draw(st.integers(1, 80)) * GIB,
            "maxCompute": draw(st.integers(1, 100)),
        }
    if draw(st.booleans()) or tier == "restricted":
        gpu_spec["wholeGpu"] = {
            "maxPerStep": draw(st.integers(1, 8)),
            "nodeSelector": {"pool": "dedicated"},
        }
    data = profile_data()
    data["spec"] = merge(
        data["spec"],
        {
            "tier": tier,
            "gpu": gpu_spec,
            "runtime": {"shim": draw(st.sampled_from(["off", "enforce"]))},
            "images": {"signatures": {"required": strict}},
        },
    )
    try:
        return TenantProfile.from_dict(data, source="generated")
    except ProfileError:
        assume(False)
        raise


requests = st.one_of(
    st.none(),
    st.builds(MIG, st.sampled_from([*MIG_NAMES, "9g.99gb"]), st.integers(1, 8)),
    st.builds(
        TimeSlice, memory=st.integers(1, 96).map(lambda n: f"{n}Gi"), compute=st.integers(1, 100)
    ),
    st.builds(WholeGPU, st.integers(1, 9), st.one_of(st.none(), st.sampled_from(PRODUCTS))),
)


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)
@given(profile=profiles(), request=requests)
def test_compile_never_crashes_and_every_rejection_has_a_rule(
    profile: TenantProfile, request
) -> None:
    component = secure_component(gpu=request)(work)

    @dsl.pipeline(name="generated")
    def generated() -> None:
        component(x=1)

    try:
        result = compile_pipeline(generated, profile)
    except CompileError as err:
        assert err.violations
        for violation in err.violations:
            assert violation.rule in RULES or violation.rule.startswith(("pss.", "secureml.")), (
                violation
            )
            assert violation.task and violation.what and violation.fix
        return
    step = result.steps[0]
    assert step.isolation == (request.isolation(profile) if request else "none")
    assert step.isolation == "none" or profile.allows_isolation(step.isolation)
