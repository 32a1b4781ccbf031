"""`secureml.admission.gcpause`: the cycle collector paused for check-pod's judging, then as it was."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

import secureml.admission.check_pod
from secureml.admission.check_pod import OfflinePolicy, check_offline
from secureml.admission.gcpause import cycle_collection_paused
from tests.rules.conftest import ATTACKS_DIR


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


@pytest.mark.usefixtures("collector_on")
def test_paused_inside_and_enabled_again_after_a_raise() -> None:
    with pytest.raises(ValueError), cycle_collection_paused():
        assert not gc.isenabled()
        raise ValueError
    assert gc.isenabled()


@pytest.mark.usefixtures("collector_on")
def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    with cycle_collection_paused():
        pass
    assert not gc.isenabled()


@pytest.mark.usefixtures("collector_on")
def test_check_offline_reads_and_judges_with_the_collector_paused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[bool] = []
    read = secureml.admission.check_pod.read_pods

    def recording(files: list[str]) -> object:
        seen.append(gc.isenabled())
        return read(files)

    monkeypatch.setattr(secureml.admission.check_pod, "read_pods", recording)
    report = check_offline(
        [str(ATTACKS_DIR / "t05-env-ld-preload.yaml")], OfflinePolicy(level="restricted")
    )
    assert seen == [False]
    assert gc.isenabled()
    assert report.summary()["objects"] == 1


@pytest.mark.usefixtures("collector_on")
def test_what_the_block_kept_is_handed_to_the_oldest_generation() -> None:
    frozen = gc.get_freeze_count()
    gc.unfreeze()  # (`compile`'s CLI freezes its heap: a test of it may have run in this process)
    try:
        with cycle_collection_paused():
            kept = [[] for _ in range(1000)]
        young = {id(obj) for obj in gc.get_objects(generation=0)}
        oldest = {id(obj) for obj in gc.get_objects(generation=2)}
        assert id(kept) in oldest and id(kept[0]) in oldest and id(kept) not in young
    finally:
        if frozen:
            gc.freeze()


@pytest.mark.usefixtures("collector_on")
def test_objects_a_caller_froze_stay_frozen() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with cycle_collection_paused():
            pass
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
