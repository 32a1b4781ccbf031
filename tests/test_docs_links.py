"""The docs point inside the repository: no file cites the design note that lives outside it, and
every `docs/*.md` page README.md names exists."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Spelled in two pieces so that this file does not match itself.
OUTSIDE_DESIGN_NOTE = "DESIGN" + ".md"


def _repo_files() -> list[Path]:
    """Tracked and untracked files that git does not ignore (so not .venv, build/, out/)."""
    listing = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [ROOT / name for name in listing.split("\0") if name and (ROOT / name).is_file()]


def test_no_file_cites_the_design_note_outside_the_repository() -> None:
    citing = []
    for path in _repo_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binaries (the built shim, images) hold no citations
        if OUTSIDE_DESIGN_NOTE in text:
            citing.append(str(path.relative_to(ROOT)))
    assert citing == [], f"cite docs/architecture.md instead of {OUTSIDE_DESIGN_NOTE}: {citing}"


def test_every_docs_page_named_in_the_readme_exists() -> None:
    named = set(re.findall(r"docs/[A-Za-z0-9_.-]+\.md", (ROOT / "README.md").read_text()))
    assert "docs/architecture.md" in named
    missing = sorted(page for page in named if not (ROOT / page).is_file())
    assert missing == [], f"README.md names pages that do not exist: {missing}"
