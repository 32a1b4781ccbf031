"""docs/architecture.md's table of KFP versions, recomputed from KFP's own golden Workflows, offline.

Each row of the table (between `<!-- kfp-versions -->` and the next blank line) is one release
whose hello_world golden is in ../shared/fixtures/kfp-golden; every cell is computed here from
that golden: where it sets a securityContext, its driver and launcher images, how the launcher
copies itself, its emptyDirs, the driver flags and env new in that release, the launcher's
memory limit, and what secureml's admission (the offline rules of the e2e tenant, the same
rules the bundle enforces) does with the pods Argo would create from its templates, with KFP's
images at the release's tag (as that release's manifests deploy them): a driver pod, and the
reference pipeline's `prep` step compiled by `secureml compile` in that release's executor
template. A verdict cell names some of the refusing rules: each must be among those found, and
"admitted" means none is.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from secureml.core import contract
from secureml.pods import preview
from secureml.pods.argo import Template, Workflow, argo_pod
from secureml.pods.mutation.apply import apply_mutations
from secureml.profile.model import TenantProfile, load_profile
from secureml.rules import rules_for_profile
from secureml.rules.engine import evaluate
from tests.e2e.steps import compile_reference
from tests.support.paths import FIXTURES, fixture_dir

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"
MARKER = "<!-- kfp-versions -->"
PROFILE_BASE = REPO / "examples" / "profiles" / "team-a-dev.yaml"
REGISTRY = "registry.test.example/"
IMAGE = f"{REGISTRY}acme/train@sha256:" + "ab" * 32
COLUMNS = (
    "KFP",
    "securityContext",
    "driver, launcher images",
    "launcher copy",
    "executor emptyDirs",
    "driver flags new",
    "driver env",
    "launcher memory",
    "driver pod",
    "secureml step pod",
)


def _table() -> dict[str, dict[str, str]]:
    lines = DOC.read_text().split(MARKER, 1)[1].strip().split("\n\n", 1)[0].splitlines()
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert tuple(header) == COLUMNS, header
    rows = {}
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0]] = dict(zip(COLUMNS, cells, strict=True))
    return rows


def _golden(version: str) -> dict[str, Any]:
    path = fixture_dir("kfp-golden") / f"workflow-golden-{version}-hello_world.yaml"
    return dict(yaml.safe_load(path.read_text()))


def _versions() -> list[str]:
    """The goldens' versions, read at collection (where a skip would skip the module unexplained);
    without ../shared one case, which `_golden` skips naming the absent folder."""
    folder = FIXTURES / "kfp-golden"
    if not folder.is_dir():
        return ["absent"]
    found = [p.name.split("-")[2] for p in folder.glob("*-hello_world.yaml")]
    return sorted(found, key=lambda v: tuple(int(x) for x in v.split(".")))


def _templates(golden: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in golden["spec"]["templates"]}


def _code(items: list[str]) -> str:
    return ", ".join(f"`{item}`" for item in items) or "—"


def _security(golden: dict[str, Any]) -> str:
    templates = _templates(golden)
    impl = templates["system-container-impl"]
    places = [
        ("workflow", golden["spec"].get("securityContext")),
        ("drivers", templates["system-container-driver"].get("securityContext")),
        ("executor pod", impl.get("securityContext")),
        ("`kfp-launcher`", impl["initContainers"][0].get("securityContext")),
        ("`main`", impl["container"].get("securityContext")),
    ]
    return ", ".join(name for name, value in places if value) or "none"


def _container_flags(golden: dict[str, Any]) -> list[str]:
    args = _templates(golden)["system-container-driver"]["container"]["args"]
    return [a for a in args if a.startswith("--")]


def _launcher(golden: dict[str, Any]) -> dict[str, Any]:
    return dict(_templates(golden)["system-container-impl"]["initContainers"][0])


def _at_release(image: str, version: str) -> str:
    return f"{image.split(':')[0]}:{version}"


@pytest.fixture(scope="module")
def tenant_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The e2e tenant (tests/e2e/environment.py) with a registry of its own."""
    spec = yaml.safe_load(PROFILE_BASE.read_text())
    spec["metadata"]["name"] = "team-a"
    spec["spec"]["images"]["allowedRegistries"] = [REGISTRY]
    spec["spec"]["images"]["signatures"]["required"] = False
    spec["spec"]["runtime"]["image"] = f"{REGISTRY}platform/runtime@sha256:" + "cd" * 32
    path = tmp_path_factory.mktemp("tenant") / "team-a.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def tenant(tenant_path: Path) -> TenantProfile:
    return load_profile(tenant_path)


@pytest.fixture(scope="module")
def prep(
    tenant: TenantProfile, tenant_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The reference pipeline's prep step compiled for the tenant: the driver's patch, and its
    previewed pod (2.17.0, before the tenant's MAP)."""
    docs = compile_reference(IMAGE, tenant_path, tmp_path_factory.mktemp("compile"))
    pod = preview.preview_pods(docs, tenant, mutate=False)["prep"]
    return preview.driver_pod_spec_patches(docs)["prep"], pod


def _workflow(pod: dict[str, Any]) -> Workflow:
    labels = pod["metadata"]["labels"]
    return Workflow(
        name=labels["workflows.argoproj.io/workflow"],
        namespace=pod["metadata"]["namespace"],
        uid=labels["pipeline/runid"],
        service_account=contract.RUNNER_NAME,
        pod_labels={
            "pipelines.kubeflow.org/v2_component": "true",
            "pipeline/runid": labels["pipeline/runid"],
        },
        pod_annotations={"pipelines.kubeflow.org/v2_component": "true"},
    )


def _rules(pod: dict[str, Any], profile: TenantProfile) -> set[str]:
    return {v.rule for v in evaluate(apply_mutations(pod, profile), rules_for_profile(profile))}


def _driver_verdict(golden: dict[str, Any], version: str, prep: Any, profile: Any) -> set[str]:
    template = _templates(golden)["system-container-driver"]
    main = {**template["container"], "image": _at_release(template["container"]["image"], version)}
    workflow = _workflow(prep[1])
    node = f"{workflow.name}.root.prep-driver"
    annotations = {**(template.get("metadata") or {}).get("annotations", {})}
    annotations["sidecar.istio.io/inject"] = "false"
    pod = argo_pod(
        workflow,
        node,
        Template(
            name=template["name"],
            main=main,
            security_context=template.get("securityContext")
            or golden["spec"].get("securityContext"),
            annotations=annotations,
        ),
    )
    return _rules(pod, profile)


def _step_verdict(golden: dict[str, Any], version: str, prep: Any, profile: Any) -> set[str]:
    patch, previewed = prep
    template = _templates(golden)["system-container-impl"]
    launcher = _launcher(golden)
    launcher["image"] = _at_release(launcher["image"], version)
    secureml = {  # the compiler's labels and annotations, which KFP puts on the template
        kind: {k: v for k, v in previewed["metadata"][kind].items() if k.startswith("secureml.")}
        for kind in ("labels", "annotations")
    }
    annotations = {**(template.get("metadata") or {}).get("annotations", {})}
    annotations["sidecar.istio.io/inject"] = "false"
    pod = argo_pod(
        _workflow(previewed),
        previewed["metadata"]["annotations"]["workflows.argoproj.io/node-name"],
        Template(
            name=template["name"],
            main=template["container"],
            init_containers=(launcher,),
            volumes=tuple(template.get("volumes", [])),
            security_context=template.get("securityContext")
            or golden["spec"].get("securityContext"),
            labels=secureml["labels"],
            annotations={**annotations, **secureml["annotations"]},
            patch=patch,
        ),
    )
    return _rules(pod, profile)


def test_the_table_has_a_row_per_golden_release() -> None:
    fixture_dir("kfp-golden")  # skips, naming the folder, in a checkout without ../shared
    assert list(_table()) == _versions()


def _check_verdict(cell: str, found: set[str], where: str) -> None:
    if cell == "admitted":
        assert found == set(), (where, sorted(found))
        return
    named = re.findall(r"`([a-zA-Z_.]+)`", cell)
    assert cell.startswith("refused") and named, (where, cell)
    assert set(named) <= found, (where, sorted(set(named) - found), sorted(found))


@pytest.mark.parametrize("version", _versions())
def test_each_row_is_what_the_golden_holds(
    version: str, prep: tuple[dict[str, Any], dict[str, Any]], tenant: TenantProfile
) -> None:
    golden = _golden(version)
    row = _table()[version]
    templates = _templates(golden)
    driver = templates["system-container-driver"]["container"]
    launcher = _launcher(golden)
    versions = _versions()
    earlier = _golden(versions[versions.index(version) - 1]) if version != versions[0] else None
    new_flags = [
        f for f in _container_flags(golden) if earlier and f not in _container_flags(earlier)
    ]
    scratch = [v["name"] for v in templates["system-container-impl"]["volumes"]]
    computed = {
        "securityContext": _security(golden),
        "driver, launcher images": _code([driver["image"], launcher["image"]]),
        "launcher copy": "`command` + `args`" if launcher.get("args") else "`command` only",
        "executor emptyDirs": _code(scratch[:1]) + (f" + {len(scratch) - 1} scratch" if scratch[1:] else ""),
        "driver flags new": _code(new_flags),
        "driver env": _code([e["name"] for e in driver.get("env", [])]),
        "launcher memory": launcher["resources"]["limits"]["memory"],
    }  # fmt: skip
    assert {key: row[key] for key in computed} == computed
    _check_verdict(row["driver pod"], _driver_verdict(golden, version, prep, tenant), version)
    _check_verdict(row["secureml step pod"], _step_verdict(golden, version, prep, tenant), version)
