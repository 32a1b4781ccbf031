"""The ClusterSPIFFEID gives each step exactly the SPIFFE ID the compiler expects."""

from __future__ import annotations

import re

import pytest

from secureml.bundle import BundleOptions
from secureml.bundle.spiffe import render
from secureml.core import contract
from secureml.core.errors import SecuremlError
from secureml.profile.model import TenantProfile
from secureml.profile.spiffe import spiffe_id_template
from tests.bundle.conftest import load

# The only Go-template action the bundle writes: {{ index .PodMeta.Labels "<key>" }}.
_INDEX_LABEL = re.compile(r'\{\{ index \.PodMeta\.Labels "([^"]+)" \}\}')


def expand(template: str, labels: dict[str, str]) -> str:
    """text/template semantics for that one action: the label's value, or "" when it is absent."""
    expanded = _INDEX_LABEL.sub(lambda match: labels.get(match.group(1), ""), template)
    assert "{{" not in expanded and "}}" not in expanded, (
        f"unexpected template action in {template}"
    )
    return expanded


@pytest.mark.parametrize(
    ("pipeline", "step"), [("fine-tune", "train"), ("Fine Tune v2", "eval_step"), ("p" * 80, "s")]
)
def test_template_expands_to_the_compilers_id(
    profile: TenantProfile, pipeline: str, step: str
) -> None:
    labels = {
        contract.LABEL_TENANT: profile.metadata.name,
        contract.LABEL_PIPELINE: contract.label_value(pipeline),
        contract.LABEL_STEP: contract.label_value(step),
    }
    assert expand(spiffe_id_template(profile), labels) == profile.spiffe_id(pipeline, step)


def test_selectors_pick_the_tenants_labelled_steps() -> None:
    profile = load("team-a")
    (entry,) = render(profile, BundleOptions())
    spec = entry["spec"]
    assert spec["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "team-a"}}
    assert spec["podSelector"]["matchLabels"] == {contract.LABEL_TENANT: "team-a"}
    assert {e["key"] for e in spec["podSelector"]["matchExpressions"]} == {
        contract.LABEL_PIPELINE,
        contract.LABEL_STEP,
    }


def test_custom_template_with_tenant_field() -> None:
    data = load("team-a").model_dump(by_alias=True)
    data["spec"]["identity"]["spiffeIdTemplate"] = (
        "spiffe://{trustDomain}/t/{tenant}/{pipeline}/{step}"
    )
    profile = TenantProfile.from_dict(data)
    labels = {contract.LABEL_PIPELINE: "p", contract.LABEL_STEP: "s"}
    assert expand(spiffe_id_template(profile), labels) == "spiffe://acme.example/t/team-a/p/s"


def test_go_template_braces_in_the_literal_are_refused() -> None:
    data = load("team-a").model_dump(by_alias=True)
    data["spec"]["identity"]["spiffeIdTemplate"] = (
        "spiffe://{trustDomain}/{{{{x}}}}/{pipeline}/{step}"
    )
    profile = TenantProfile.from_dict(data)
    with pytest.raises(SecuremlError, match="Go template"):
        spiffe_id_template(profile)
