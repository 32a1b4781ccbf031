"""`check-pod` judges the pod the cluster's validating admission sees (issue 12 item 16): the Pod
API's defaults, the tenant's mutating policy on CREATE, the Pod API's refusal of what that makes
invalid, and UPDATEs with the pod before them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from secureml.admission.check_pod import OfflinePolicy, check_offline
from secureml.pods.admitted import api_defaults, as_created, invalid_after_mutation
from tests.support.paths import ATTACKS_DIR, PROFILES_DIR
from tests.support.profiles import example_profile

ALLOWED = ATTACKS_DIR.parent / "allowed"
TEAM_A = PROFILES_DIR / "team-a.yaml"


def _write(tmp_path: Path, pod: dict[str, Any], name: str = "pod.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(pod))
    return str(path)


def _allowed(name: str) -> dict[str, Any]:
    return yaml.safe_load((ALLOWED / f"{name}.yaml").read_text())


def test_a_volume_without_a_source_is_an_empty_dir(tmp_path: Path) -> None:
    """Like Kubernetes' `restrictedvolumes0` fixture: allowed by Pod Security restricted."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "restrictedvolumes0"},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "c",
                    "image": "registry.k8s.io/pause",
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
            "volumes": [{"name": "volume0"}],
        },
    }
    assert api_defaults(pod)["spec"]["volumes"] == [{"name": "volume0", "emptyDir": {}}]
    report = check_offline([_write(tmp_path, pod)], OfflinePolicy(level="restricted"))
    assert report.summary()["denied"] == 0, report.to_json()


def test_scheduler_name_and_host_network_ports_are_defaulted() -> None:
    pod = {
        "spec": {
            "hostNetwork": True,
            "containers": [{"name": "c", "ports": [{"containerPort": 8080}]}],
        }
    }
    defaulted = api_defaults(pod)
    assert defaulted["spec"]["schedulerName"] == "default-scheduler"
    assert defaulted["spec"]["containers"][0]["ports"] == [
        {"containerPort": 8080, "hostPort": 8080}
    ]
    assert "schedulerName" not in pod["spec"]  # a copy


def test_create_applies_the_tenant_mutations(tmp_path: Path) -> None:
    """A shim step without the read-only root the mutating policy sets is admitted by the cluster,
    so by check-pod; judged as already mutated, it is denied."""
    pod = _allowed("team-a-timeslice")
    for container in [*pod["spec"]["containers"], *pod["spec"]["initContainers"]]:
        container["securityContext"].pop("readOnlyRootFilesystem")
    files = [_write(tmp_path, pod)]
    assert check_offline(files, OfflinePolicy(profile=TEAM_A)).summary()["denied"] == 0
    mutated = check_offline(files, OfflinePolicy(profile=TEAM_A, mutated=True))
    (verdict,) = mutated.verdicts
    assert "secureml.readOnlyRootFilesystem" in verdict.rule_ids
    assert mutated.to_json()["policy"]["request"] == "CREATE (mutated)"


def test_a_pod_that_pre_empts_a_platform_volume_is_invalid_after_mutation(tmp_path: Path) -> None:
    pod = _allowed("team-a-timeslice")
    pod["spec"]["volumes"].append({"name": "secureml-podinfo", "emptyDir": {}})
    profile = example_profile("team-a")
    assert "secureml-podinfo" in (invalid_after_mutation(as_created(pod, profile)) or "")
    report = check_offline([_write(tmp_path, pod)], OfflinePolicy(profile=TEAM_A))
    assert report.verdicts[0].rule_ids == ["k8s.validation"]


def test_update_is_judged_with_the_pod_before_it(tmp_path: Path) -> None:
    """An UPDATE compares stored pods: both as the mutating policy left them on CREATE (the
    runtime injected), the second with the attack's rewritten annotation."""
    attack = ATTACKS_DIR / "t22-update-limits-annotation.yaml"
    profile = example_profile("team-a")
    before = _write(tmp_path, as_created(_allowed("team-a-timeslice"), profile), "before.yaml")
    stored = as_created(yaml.safe_load(attack.read_text()), profile)
    after = _write(tmp_path, stored, "after.yaml")
    as_update = check_offline([after], OfflinePolicy(profile=TEAM_A, before=(before,)))
    assert as_update.verdicts[0].rule_ids == ["secureml.platformMetadataImmutable"]
    assert as_update.to_json()["policy"]["request"] == "UPDATE"
    # the same pod as a CREATE passes that rule (oldObject is null)
    as_create = check_offline([str(attack)], OfflinePolicy(profile=TEAM_A))
    assert "secureml.platformMetadataImmutable" not in as_create.verdicts[0].rule_ids


def test_cli_flags(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from secureml.cli import app

    attack = str(ATTACKS_DIR / "t22-update-limits-annotation.yaml")
    before = str(ALLOWED / "team-a-timeslice.yaml")
    runner = CliRunner()
    update = runner.invoke(app, ["check-pod", attack, "--profile", str(TEAM_A), "--before", before])
    assert update.exit_code == 1 and "secureml.platformMetadataImmutable" in update.output
    missing = runner.invoke(
        app,
        [
            "check-pod",
            attack,
            "--profile",
            str(TEAM_A),
            "--before",
            str(ALLOWED / "team-a-cpu.yaml"),
        ],
    )
    assert missing.exit_code == 2 and "before the update" in missing.output
    server = runner.invoke(app, ["check-pod", attack, "--server", "--mutated"])
    assert server.exit_code == 2 and "--mutated" in server.output


def test_the_deprecated_service_account_alias_follows_the_name() -> None:
    """As the API stores it (tests/cluster: t23-deprecated-service-account-alias is admitted)."""
    both = api_defaults({"spec": {"serviceAccountName": "runner", "serviceAccount": "editor"}})
    assert (both["spec"]["serviceAccountName"], both["spec"]["serviceAccount"]) == ("runner",) * 2
    alias = api_defaults({"spec": {"serviceAccount": "editor"}})
    assert alias["spec"]["serviceAccountName"] == "editor"
