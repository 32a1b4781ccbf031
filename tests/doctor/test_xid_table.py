"""The Xid table (secureml.nvidia.xid): the classes the issue names, sources on every row."""

from __future__ import annotations

from secureml.nvidia.xid import ROWS, SOURCES, TABLE, UNTRUSTED_CLASSES, classify


def test_the_classes_and_their_xids() -> None:
    by_class: dict[str, set[int]] = {}
    for row in ROWS:
        by_class.setdefault(row.xid_class, set()).add(row.xid)
    assert {13, 31, 43, 45} <= by_class["application"]
    assert {48, 63, 64, 92, 94, 95} <= by_class["memory"]
    assert {79, 62, 119, 120} <= by_class["device"]
    assert {74, *range(144, 151)} <= by_class["nvlink"]
    assert len(TABLE) == len(ROWS)  # no Xid twice


def test_every_row_names_its_sources_and_nvidias_action() -> None:
    for row in ROWS:
        assert row.sources and set(row.sources) <= set(SOURCES), row
        assert row.mnemonic and row.nvidia_action and row.summary, row


def test_only_memory_and_device_faults_mean_memory_is_untrusted() -> None:
    assert UNTRUSTED_CLASSES == {"memory", "device"}
    assert classify(48).memory_untrusted and classify(79).memory_untrusted
    assert not classify(13).memory_untrusted and not classify(74).memory_untrusted
    unknown = classify(9999)
    assert unknown.xid_class == "unclassified" and not unknown.memory_untrusted
