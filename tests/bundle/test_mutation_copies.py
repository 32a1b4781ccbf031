"""`apply_mutations` writes new copies: no dict or list shared between two mutated pods or with the
profile's mutations, also where a value is copied from its marshalled form."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from secureml.pods.mutation import apply
from secureml.pods.mutation.apply import apply_mutations
from secureml.pods.mutation.model import FromLabel
from secureml.profile.model import load_profile
from tests.support.paths import ATTACKS_DIR, PROFILES_DIR

ALLOWED = ATTACKS_DIR.parent / "allowed"
CASES = [
    ("team-a.yaml", "team-a-mig.yaml"),
    ("team-a.yaml", "team-a-timeslice.yaml"),
    ("team-conf.yaml", "team-conf-mig.yaml"),
    ("team-dra.yaml", "team-dra-timeslice.yaml"),
    ("team-restricted.yaml", "team-restricted-whole.yaml"),
]


def _containers(node: Any) -> Iterator[int]:
    """The ids of every dict and list in `node`."""
    if isinstance(node, dict | list):
        yield id(node)
        for item in node.values() if isinstance(node, dict) else node:
            yield from _containers(item)


@pytest.mark.parametrize(("profile_file", "pod_file"), CASES)
def test_two_mutated_pods_share_nothing(profile_file: str, pod_file: str) -> None:
    profile = load_profile(PROFILES_DIR / profile_file)
    pod = yaml.safe_load((ALLOWED / pod_file).read_text())
    first, second = apply_mutations(pod, profile), apply_mutations(pod, profile)
    assert first == second and first != pod  # the mutations applied
    mine = list(_containers(first))
    assert len(mine) == len(set(mine))  # nothing shared within one pod either
    profile_values = {
        i for _, parts in apply._groups(profile) for p in parts for i in _containers(p.value)
    }
    assert not set(mine) & set(_containers(second))
    assert not set(mine) & profile_values


def test_only_plain_json_values_are_marshalled() -> None:
    assert apply._part(None, {"a": [1, 2.5, True, None, "x"]}).marshalled is not None
    for value in ({"a": FromLabel("k")}, [FromLabel("k")], {"a": (1, 2)}, {1: "x"}):
        assert apply._part(None, value).marshalled is None
    part = apply._part(None, {"v": [{"n": 1}]})
    first, second = part.copy({}), part.copy({})
    assert first == second == part.value
    assert first["v"] is not second["v"] and first["v"] is not part.value["v"]
