"""Every pod the compiler previews for the reference pipelines (KFP 2.17's executor pods with Argo's
containers, and its driver pods) is admitted by the tenant's rules, and by Pod Security restricted;
the compiler's own admission check uses the same catalogue."""

from __future__ import annotations

import pytest
import yaml

from secureml.compile.compiler import CompileError, compile_pipeline
from secureml.compile.pipeline_loader import load_pipeline
from secureml.pods.preview import preview_driver_pods, preview_pods
from secureml.rules import evaluate, rules_for_level, rules_for_profile
from tests.support.paths import REFERENCE_PIPELINES
from tests.support.profiles import EXAMPLE_PROFILES, example_profile

CATALOGUE_PREFIXES = ("pss.", "secureml.")


@pytest.mark.parametrize(
    "pipeline_path", REFERENCE_PIPELINES, ids=[p.stem for p in REFERENCE_PIPELINES]
)
def test_previewed_pods_are_allowed(pipeline_path) -> None:
    compiled_for = []
    for name in EXAMPLE_PROFILES:
        profile = example_profile(name)
        try:
            compiled = compile_pipeline(load_pipeline(pipeline_path), profile)
        except CompileError as err:
            # The profile forbids what the pipeline asks for (registry, GPU kind): a compile rule,
            # never one of the admission catalogue's.
            assert not [v for v in err.violations if v.rule.startswith(CATALOGUE_PREFIXES)], name
            continue
        assert compiled.admission_checked
        compiled_for.append(name)
        documents = list(yaml.safe_load_all(compiled.yaml_text))
        pods = preview_pods(documents, profile)
        assert pods
        for task, pod in pods.items():
            names = [c["name"] for c in pod["spec"]["initContainers"] + pod["spec"]["containers"]]
            runtime = ["secureml-runtime"] if profile.spec.runtime.image else []  # injected first
            assert names == [*runtime, "init", "kfp-launcher", "wait", "main"], (name, task)
        drivers = preview_driver_pods(documents, profile)
        assert len(drivers) == len(pods) + 1  # the root DAG's driver and one per task
        for task, pod in {**pods, **drivers}.items():
            assert evaluate(pod, rules_for_profile(profile)) == [], (name, task)
            assert evaluate(pod, rules_for_level("restricted")) == [], (name, task)
    assert compiled_for, "the reference pipeline compiles for no example profile"
