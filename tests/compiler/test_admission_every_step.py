"""The compiler's admission check judges every previewed pod on its own: steps alike but for one
rule-relevant field each get their violations (nothing is judged once for several pods)."""

import sys
from pathlib import Path

from kfp import dsl

from secureml.compile.compiler import _check_admission, _Context, _documents, compile_pipeline
from secureml.profile.model import load_profile

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

from chain import chained  # noqa: E402


def test_steps_differing_in_one_field_each_get_their_violation() -> None:
    profile = load_profile(REPO / "profiles" / "team-a.yaml")
    pipeline = dsl.pipeline(name="chain")(chained(8))
    compiled = compile_pipeline(pipeline, profile, check_admission=False)
    assert compiled.component is not None
    documents = _documents(compiled.component)
    executors = documents[0]["deploymentSpec"]["executors"]
    assert len(executors) == 8  # one executor (one pod) per step
    changed = sorted(executors)[2:4]  # two steps, same component as others, one env entry more
    for label in changed:
        executors[label]["container"].setdefault("env", []).append(
            {"name": "LD_PRELOAD", "value": "/tmp/hook.so"}
        )
    ctx = _Context(profile=profile, pipeline=pipeline.name)
    _check_admission(documents, profile, ctx)
    tasks = {v.task for v in ctx.violations if v.rule == "secureml.forbiddenEnv"}
    assert tasks == {label.removeprefix("exec-") for label in changed}, ctx.violations
    untouched = _Context(profile=profile, pipeline=pipeline.name)
    _check_admission(_documents(compiled.component), profile, untouched)
    assert untouched.violations == []


def test_each_step_gets_its_own_message() -> None:
    """Two steps of one component, each with its own wrong isolation label: each violation names
    its own step's value (a message is the pod's, never another pod's)."""
    profile = load_profile(REPO / "profiles" / "team-a.yaml")
    pipeline = dsl.pipeline(name="chain")(chained(6))
    compiled = compile_pipeline(pipeline, profile, check_admission=False)
    assert compiled.component is not None
    documents = _documents(compiled.component)
    k8s = documents[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    wrong = {"exec-prepare-2": "weak-two", "exec-prepare-3": "weak-three"}
    for label, value in wrong.items():
        k8s[label]["podMetadata"]["labels"]["secureml.dev/isolation"] = value
    ctx = _Context(profile=profile, pipeline=pipeline.name)
    _check_admission(documents, profile, ctx)
    found = {v.task: v.what for v in ctx.violations if v.rule == "secureml.isolationLevel"}
    assert set(found) == {"prepare-2", "prepare-3"}, ctx.violations
    assert "weak-two" in found["prepare-2"] and "weak-three" not in found["prepare-2"]
    assert "weak-three" in found["prepare-3"] and "weak-two" not in found["prepare-3"]
