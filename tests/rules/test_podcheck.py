"""`secureml.admission.check_pod`, the library behind `check-pod`: rule selection, verdicts, the report."""

from __future__ import annotations

from pathlib import Path

import pytest

from secureml.admission.check_pod import OfflinePolicy, check_offline, offline_rules
from secureml.core.errors import InputError, ProfileError
from tests.support.paths import ATTACKS_DIR, PROFILES_DIR

ALLOWED = ATTACKS_DIR.parent / "allowed"


def test_report_counts_and_exit_code() -> None:
    files = [str(ALLOWED / "team-a-cpu.yaml"), str(ATTACKS_DIR / "t05-env-ld-preload.yaml")]
    report = check_offline(files, OfflinePolicy(profile=PROFILES_DIR / "team-a.yaml"))
    assert report.summary() == {"objects": 2, "allowed": 1, "denied": 1}
    assert report.exit_code == 1
    document = report.to_json()
    assert document["schema"] == "secureml.dev/check-pod/v1"
    assert document["policy"] == {"profile": "team-a", "source": str(PROFILES_DIR / "team-a.yaml")}
    assert "secureml.forbiddenEnv" in document["rules"]
    assert [o["verdict"] for o in document["objects"]] == ["allowed", "denied"]


def test_only_narrows_the_rules_and_unknown_ids_are_refused() -> None:
    rules, policy = offline_rules(OfflinePolicy(level="baseline", only=("pss.hostPorts",)))
    assert [rule.id for rule in rules] == ["pss.hostPorts"]
    assert policy == {"level": "baseline", "kubernetes": "1.36"}
    with pytest.raises(InputError, match="unknown rule id"):
        offline_rules(OfflinePolicy(level="baseline", only=("pss.nope",)))


@pytest.mark.parametrize(
    "policy", [OfflinePolicy(), OfflinePolicy(profile=Path("p"), level="baseline")]
)
def test_exactly_one_policy_source(policy: OfflinePolicy) -> None:
    with pytest.raises(InputError, match="exactly one of --profile or --level") as caught:
        offline_rules(policy)
    assert caught.value.exit_code == 2


def test_an_invalid_profile_is_unusable_input(tmp_path: Path) -> None:
    bad = tmp_path / "p.yaml"
    bad.write_text(
        "apiVersion: secureml.dev/v1alpha1\nkind: TenantProfile\nmetadata: {name: x}\nspec: {}\n"
    )
    with pytest.raises(ProfileError) as caught:
        offline_rules(OfflinePolicy(profile=bad))
    assert caught.value.exit_code == 2
