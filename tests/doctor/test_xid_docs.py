"""docs/xid.md prints the Xid table the code holds: every row, with its class and action."""

from __future__ import annotations

import re
from pathlib import Path

from secureml.nvidia.xid import ROWS, SOURCES

DOC = Path(__file__).resolve().parents[2] / "docs" / "xid.md"


def test_the_page_lists_every_row_with_its_class_action_and_sources() -> None:
    text = DOC.read_text()
    for row in ROWS:
        pattern = rf"^\| {row.xid} \| {row.xid_class} \| `{row.action}` \| `{re.escape(row.mnemonic)}` \| `{row.nvidia_action}` \|"
        assert re.search(pattern, text, re.M), f"docs/xid.md lacks the row for Xid {row.xid}"
    assert SOURCES["catalog"] in text
    path, commit = SOURCES["nvsentinel"].split(" ", 1)[1].split("@")
    assert path in text and commit in text
