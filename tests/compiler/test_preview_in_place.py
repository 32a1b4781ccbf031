"""The preview mutates each pod it builds in place: it must own every dict of it (nothing shared
with KFP's templates or another pod), so the pods are the same as mutating copies."""

from __future__ import annotations

from secureml.pods.mutation.apply import apply_mutations
from secureml.pods.preview import preview_pods
from tests.support.profiles import EXAMPLE_PROFILES, example_profile, reference_documents


def test_pods_mutated_in_place_are_the_pods_mutated_as_copies() -> None:
    checked = 0
    for name in EXAMPLE_PROFILES:
        profile = example_profile(name)
        for documents in reference_documents(profile):  # those this profile compiles
            plain = preview_pods(documents, profile, mutate=False)
            expected = {task: apply_mutations(pod, profile) for task, pod in plain.items()}
            assert preview_pods(documents, profile) == expected
            assert preview_pods(documents, profile) == expected  # no template was changed
            assert preview_pods(documents, profile, mutate=False) == plain
            checked += len(expected)
    assert checked >= 6
