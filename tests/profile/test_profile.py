"""TenantProfile loading: examples, unknown fields, contradictions, YAML paths, schema sync."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from secureml.cli import app
from secureml.core.errors import InputError, ProfileError
from secureml.profile.model import TenantProfile, load_profile, profile_json_schema

ROOT = Path(__file__).resolve().parents[2]
PROFILES = sorted((ROOT / "profiles").glob("*.yaml"))
runner = CliRunner()


def team_a() -> dict:
    return yaml.safe_load((ROOT / "profiles/team-a.yaml").read_text())


def problems_of(data: dict) -> list[tuple[str, str]]:
    with pytest.raises(ProfileError) as caught:
        TenantProfile.from_dict(data, source="p.yaml")
    return caught.value.problems


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.name)
def test_example_profiles_load(path: Path) -> None:
    profile = load_profile(path)
    assert profile.spec.namespace == profile.metadata.name


def test_example_tiers_cover_the_four_kinds() -> None:
    loaded = {p.stem: load_profile(p) for p in PROFILES}
    assert loaded["team-a"].spec.gpu.time_slice is not None
    assert loaded["team-a"].min_isolation() == "timeslice-shim"
    assert loaded["team-conf"].min_isolation() == "mig"
    assert loaded["team-restricted"].min_isolation() == "dedicated"
    assert loaded["team-dra"].spec.gpu.backend == "dra"


def test_fields_parse_into_python_values() -> None:
    profile = load_profile(ROOT / "profiles/team-a.yaml")
    assert profile.spec.gpu.time_slice.max_memory == 16 * 2**30
    assert profile.spec.gpu.quota["nvidia.com/mig-1g.10gb"] == 8
    assert (
        profile.spec.images.signatures.identities[0].subject_reg_exp
        == r"^https://github\.com/acme/"
    )
    assert profile.spec.gpu.whole_gpu.tolerations[0].value == "team-a"


def test_unknown_field_is_rejected_with_its_path() -> None:
    data = team_a()
    data["spec"]["gpu"]["timeSlice"]["maxMemroy"] = "8Gi"
    assert (
        "spec.gpu.timeSlice.maxMemroy",
        "unknown field maxMemroy (Extra inputs are not permitted); did you mean maxMemory?",
    ) in problems_of(data)


def test_bad_values_report_paths_with_list_indices() -> None:
    data = team_a()
    data["spec"]["gpu"]["timeSlice"]["maxCompute"] = 150
    data["spec"]["network"]["egress"][0]["cidr"] = "10.0.0.1/8"
    paths = [path for path, _ in problems_of(data)]
    assert "spec.gpu.timeSlice.maxCompute" in paths
    assert "spec.network.egress[0]" in paths


def test_confidential_with_time_slice_is_a_contradiction() -> None:
    data = team_a()
    data["spec"]["tier"] = "confidential"
    problems = dict(problems_of(data))
    assert "spec.gpu.timeSlice" in problems
    assert "mig" in problems["spec.gpu.timeSlice"]


def test_internal_time_slice_without_shim_is_refused() -> None:
    data = team_a()
    data["spec"]["runtime"]["shim"] = "off"
    problems = dict(problems_of(data))
    assert "runtime.shim" in problems["spec.gpu.timeSlice"]


def test_public_time_slice_without_shim_is_allowed() -> None:
    data = team_a()
    data["spec"]["tier"] = "public"
    data["spec"]["runtime"]["shim"] = "off"
    assert TenantProfile.from_dict(data).min_isolation() == "timeslice"


def test_quota_on_a_mig_profile_that_is_not_allowed() -> None:
    data = team_a()
    data["spec"]["gpu"]["quota"]["nvidia.com/mig-7g.80gb"] = 1
    problems = dict(problems_of(data))
    assert "7g.80gb" in problems["spec.gpu.quota['nvidia.com/mig-7g.80gb']"]


def test_restricted_needs_whole_gpus_and_no_mig() -> None:
    data = team_a()
    data["spec"]["tier"] = "restricted"
    del data["spec"]["gpu"]["wholeGpu"]
    data["spec"]["gpu"]["quota"] = {}
    paths = [p for p, _ in problems_of(data)]
    assert {"spec.gpu.wholeGpu", "spec.gpu.mig", "spec.gpu.timeSlice"} <= set(paths)


def test_required_signatures_need_an_identity() -> None:
    data = team_a()
    data["spec"]["images"]["signatures"]["identities"] = []
    assert "spec.images.signatures.identities" in dict(problems_of(data))


def test_signer_needs_exactly_one_subject_form() -> None:
    data = team_a()
    data["spec"]["images"]["signatures"]["identities"][0]["subject"] = "x"
    ((path, message),) = problems_of(data)
    assert path == "spec.images.signatures.identities[0]"
    assert "exactly one" in message


def test_spiffe_template_must_name_pipeline_and_step() -> None:
    data = team_a()
    data["spec"]["identity"]["spiffeIdTemplate"] = "spiffe://{trustDomain}/ns/{namespace}"
    assert "{pipeline}" in dict(problems_of(data))["spec.identity"]


def test_root_user_is_refused() -> None:
    data = team_a()
    data["spec"]["hardening"]["runAsUser"] = 0
    assert "spec.hardening.runAsUser" in dict(problems_of(data))


def test_spiffe_id_uses_label_spelling() -> None:
    profile = load_profile(ROOT / "profiles/team-a.yaml")
    assert (
        profile.spiffe_id("Fine Tune!", "train-model")
        == "spiffe://acme.example/ns/team-a/pipeline/Fine-Tune/step/train-model"
    )


def test_yaml_syntax_error_names_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: x\nspec: [unclosed\n")
    with pytest.raises(InputError) as caught:
        load_profile(bad)
    assert f"{bad}:" in caught.value.diagnostics()


def test_committed_schema_is_in_sync() -> None:
    committed = json.loads((ROOT / "profiles/tenantprofile.schema.json").read_text())
    assert committed == profile_json_schema(), (
        "run: secureml profile schema > profiles/tenantprofile.schema.json"
    )


def test_validate_cli_prints_one_line_per_problem(tmp_path: Path) -> None:
    data = team_a()
    broken = copy.deepcopy(data)
    broken["spec"]["tier"] = "confidential"
    broken["spec"]["extra"] = 1
    broken["spec"]["runtime"]["image"] = "registry.acme.example/rt@sha256:" + "0" * 64
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(broken))
    plain = copy.deepcopy(data)
    del plain["spec"]["runtime"]["image"]
    plain_path = tmp_path / "team-a.yaml"
    plain_path.write_text(yaml.safe_dump(plain))
    result = runner.invoke(app, ["profile", "validate", str(plain_path), str(path)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    # a team-a without runtime.image (tier internal): a warning, not a problem
    assert "warning: spec.runtime.image is not set" in lines.pop(1)
    assert lines[0].endswith("ok (tenant team-a, tier internal)")
    assert lines[1].startswith(f"{path}:")
    assert ": spec.extra: unknown field extra (Extra inputs are not permitted)" in lines[1]
    # the contradiction comes in the same run as the field error
    assert ": spec.gpu.timeSlice: tier confidential needs isolation mig" in lines[2]
    assert len(lines) == 3


def test_validate_cli_missing_file() -> None:
    result = runner.invoke(app, ["profile", "validate", "/nonexistent.yaml"])
    assert result.exit_code == 2
    assert "cannot read profile /nonexistent.yaml" in result.output
    assert "Traceback" not in result.output


def test_allowed_registry_without_a_host_is_refused() -> None:
    data = team_a()
    data["spec"]["images"]["allowedRegistries"] = ["ghcr.io/acme/", "acme/"]
    problems = dict(problems_of(data))
    assert "registry host" in problems["spec.images.allowedRegistries[1]"]


def test_allowed_mig_profile_must_exist_on_a_listed_model() -> None:
    data = team_a()
    data["spec"]["gpu"]["mig"]["allowedProfiles"].append("1g.18gb")
    data["spec"]["gpu"]["models"] = ["A100-80GB"]
    problems = dict(problems_of(data))
    assert problems["spec.gpu.mig.allowedProfiles[3]"] == (
        "MIG profile 1g.18gb is not offered by A100-80GB; it exists on H200-141GB"
    )


def test_mig_needs_models_listed() -> None:
    data = team_a()
    data["spec"]["gpu"]["models"] = []
    assert "spec.gpu.models" in dict(problems_of(data))


def test_cuda_firewall_defaults_to_enforce_and_off_is_refused_for_strict_tiers() -> None:
    assert load_profile(ROOT / "profiles/team-a.yaml").cuda_firewall() is True
    data = team_a()
    data["spec"]["runtime"] = {**data["spec"].get("runtime", {}), "cudaFirewall": "off"}
    assert TenantProfile.from_dict(data, source="off").cuda_firewall() is False
    conf = yaml.safe_load((ROOT / "profiles/team-conf.yaml").read_text())
    conf["spec"].setdefault("runtime", {})["cudaFirewall"] = "off"
    with pytest.raises(ProfileError) as caught:
        TenantProfile.from_dict(conf, source="team-conf")
    assert "spec.runtime.cudaFirewall" in caught.value.diagnostics()
    assert "requires the CUDA firewall" in caught.value.diagnostics()


def test_gpu_memory_without_a_unit_is_refused_with_a_fix_that_passes() -> None:
    data = team_a()
    data["spec"]["gpu"]["timeSlice"]["maxMemory"] = 16
    ((path, message),) = [p for p in problems_of(data) if p[0].endswith("maxMemory")]
    assert path == "spec.gpu.timeSlice.maxMemory"
    assert "16 has no unit, so it means 16 bytes" in message and "16Gi" in message
    data["spec"]["gpu"]["timeSlice"]["maxMemory"] = "16Gi"  # the fix the message gives
    fixed = TenantProfile.from_dict(data, source="p.yaml").spec.gpu.time_slice
    assert fixed is not None and fixed.max_memory == 16 * 2**30


def test_gpu_memory_below_256mi_is_refused_and_a_byte_count_is_read_as_bytes() -> None:
    data = team_a()
    data["spec"]["gpu"]["timeSlice"]["maxMemory"] = "100Mi"
    assert any("less than 256Mi" in message for _, message in problems_of(data))
    data["spec"]["gpu"]["timeSlice"]["maxMemory"] = 8 * 2**30  # a whole byte count, as dumped
    read = TenantProfile.from_dict(data, source="p.yaml").spec.gpu.time_slice
    assert read is not None and read.max_memory == 8 * 2**30


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        (r"^https://(github", "missing ), unterminated subpattern at character 10"),
        (r"^https://github\.com/acme/(?=x)", "RE2 engine cannot match"),
    ],
)
def test_a_bad_subject_regexp_says_where_and_what_to_do(pattern: str, expected: str) -> None:
    data = team_a()
    data["spec"]["images"]["signatures"]["identities"][0]["subjectRegExp"] = pattern
    messages = [message for _, message in problems_of(data) if "subjectRegExp" in message]
    assert len(messages) == 1 and expected in messages[0]
    assert "re.error" not in messages[0] and "position" not in messages[0]


def test_a_pod_given_as_a_profile_is_named_with_the_command_that_reads_it() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}}
    ((path, message),) = problems_of(pod)
    assert path == "kind"
    assert "this is a Pod (v1), not a TenantProfile" in message and "secureml check-pod" in message
    ((_, message),) = problems_of({"pipelineInfo": {"name": "p"}, "root": {}})
    assert "compiled KFP pipeline" in message and "secureml compile" in message


def test_time_sliced_shares_without_a_quota_entry_are_warned_about() -> None:
    from secureml.profile.quota import quota_warnings

    data = team_a()
    assert quota_warnings(TenantProfile.from_dict(data, source="p.yaml")) == []
    resource = data["spec"]["gpu"]["timeSlice"].get("resourceName", "nvidia.com/gpu.shared")
    del data["spec"]["gpu"]["quota"][resource]
    (warning,) = quota_warnings(TenantProfile.from_dict(data, source="p.yaml"))
    assert f"no entry for the time-sliced resource {resource}" in warning
    assert f"`{resource}: N`" in warning
