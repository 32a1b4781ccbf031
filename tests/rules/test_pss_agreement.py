"""Agreement with Kyverno's Pod Security test suite, row by row (docs/pod-security-agreement.md).

Every expected-result row of `../shared/fixtures/kyverno-pod-security` (INDEX.tsv, the flattening of
each policy's kyverno-test.yaml) is judged by `check-pod --level` restricted to the PSS check that
the Kyverno policy rule implements. Where Kyverno's policy deviates from Pod Security 1.36 the row
asserts the documented PSS verdict instead, and the deviation is listed in DEVIATIONS.
"""

from __future__ import annotations

import csv
import functools
from pathlib import Path

import pytest

from secureml.pods.workloads import PodObject, pods_in_text
from secureml.rules import evaluate, rules_for_level
from tests.support.paths import FIXTURES, fixture_dir

KYVERNO = FIXTURES / "kyverno-pod-security"

# (Kyverno policy, Kyverno rule) -> the catalogue rule implementing that PSS check.
CHECK_FOR_RULE: dict[tuple[str, str], str] = {
    ("disallow-capabilities", "adding-capabilities"): "pss.capabilities_baseline",
    ("disallow-host-namespaces", "host-namespaces"): "pss.hostNamespaces",
    ("disallow-host-path", "host-path"): "pss.hostPathVolumes",
    ("disallow-host-ports", "host-ports-none"): "pss.hostPorts",
    ("disallow-host-ports-range", "host-port-range"): "pss.hostPorts",
    ("disallow-host-process", "host-process-containers"): "pss.windowsHostProcess",
    ("disallow-privileged-containers", "privileged-containers"): "pss.privileged",
    ("disallow-proc-mount", "check-proc-mount"): "pss.procMount",
    ("disallow-selinux", "selinux-type"): "pss.seLinuxOptions",
    ("disallow-selinux", "selinux-user-role"): "pss.seLinuxOptions",
    ("restrict-apparmor-profiles", "app-armor"): "pss.appArmorProfile",
    ("restrict-seccomp", "check-seccomp"): "pss.seccompProfile_baseline",
    ("restrict-sysctls", "check-sysctls"): "pss.sysctls",
    ("disallow-capabilities-strict", "require-drop-all"): "pss.capabilities_restricted.dropAll",
    (
        "disallow-capabilities-strict",
        "adding-capabilities-strict",
    ): "pss.capabilities_restricted.add",
    ("disallow-privilege-escalation", "privilege-escalation"): "pss.allowPrivilegeEscalation",
    ("require-run-as-non-root-user", "run-as-non-root-user"): "pss.runAsUser",
    ("require-run-as-nonroot", "run-as-non-root"): "pss.runAsNonRoot",
    ("restrict-seccomp-strict", "check-seccomp-strict"): "pss.seccompProfile_restricted",
    ("restrict-volume-types", "restricted-volumes"): "pss.restrictedVolumes",
}

# Rows where Kyverno's policy deviates from Pod Security 1.36, with the verdict PSS gives instead.
# docs/pod-security-agreement.md explains each group.
_RANGE = ("disallow-host-ports-range", "host-port-range")
_RANGE_GOOD_WITH_HOST_PORT = ("02", "03", "05", "06", "08", "09", "10")
DEVIATIONS: dict[tuple[str, str, str, str], str] = {
    (*_RANGE, kind, f"good{stem}{number}"): "fail"
    for kind, stem in (("Pod", "pod"), ("Deployment", "deployment"), ("CronJob", "cronjob"))
    for number in _RANGE_GOOD_WITH_HOST_PORT
}


def _rows() -> list[dict[str, str]]:
    index = KYVERNO / "INDEX.tsv"
    if not index.is_file():
        return []
    with index.open(newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


ROWS = _rows()


@functools.cache
def _resources(path: Path) -> dict[tuple[str, str], PodObject]:
    return {(pod.kind, pod.name): pod for pod in pods_in_text(path.read_text(), source=str(path))}


def _key(row: dict[str, str]) -> tuple[str, str, str, str]:
    return (row["policy"], row["rule"], row["kind"], row["resource_name"])


def _row_id(row: dict[str, str]) -> str:
    return f"{row['policy']}/{row['rule']}/{row['kind']}/{row['resource_name']}"


def test_every_row_is_present() -> None:
    fixture_dir("kyverno-pod-security")
    assert len(ROWS) == 940
    assert {(r["policy"], r["rule"]) for r in ROWS} == set(CHECK_FOR_RULE)


# Without the fixtures there are no rows: one stand-in row, whose test skips naming them.
@pytest.mark.parametrize("row", ROWS or [None], ids=[_row_id(r) for r in ROWS] or ["no-fixtures"])
def test_row_agrees(row: dict[str, str] | None) -> None:
    if row is None:
        fixture_dir("kyverno-pod-security", "pod-security")  # skips, saying the fixtures are absent
        raise AssertionError("the fixtures are present but no row was read")
    folder = fixture_dir(
        "kyverno-pod-security", "pod-security", row["level_dir"], row["policy_dir"]
    )
    pod = _resources(folder / ".kyverno-test" / "resource.yaml")[
        (row["kind"], row["resource_name"])
    ]
    check = CHECK_FOR_RULE[(row["policy"], row["rule"])]
    rules = [rule for rule in rules_for_level(row["level_dir"]) if rule.id == check]
    assert len(rules) == 1, f"{check} is not a {row['level_dir']} check"
    violations = evaluate(pod.pod, rules)
    verdict = "fail" if violations else "pass"
    expected = row["expected_result"]
    expected = DEVIATIONS.get(_key(row), expected)
    assert verdict == expected, [v.what for v in violations]


def test_agreement_figures() -> None:
    """The figures docs/pod-security-agreement.md reports."""
    fixture_dir("kyverno-pod-security")
    differ = [r for r in ROWS if _key(r) in DEVIATIONS]
    assert len(differ) == len(DEVIATIONS) == 21
    assert all(r["expected_result"] == "pass" for r in differ)
    per_level = {
        level: (
            sum(1 for r in ROWS if r["level_dir"] == level and r not in differ),
            sum(1 for r in ROWS if r["level_dir"] == level),
        )
        for level in ("baseline", "restricted")
    }
    assert per_level == {"baseline": (516, 537), "restricted": (403, 403)}
