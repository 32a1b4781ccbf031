"""The watchdog counts the GPU memory of the step's whole process tree, found through /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from secureml.enforcement.watchdog import process_tree


def test_tree_holds_descendants_and_not_strangers() -> None:
    grandchild = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", grandchild], start_new_session=True)
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        deadline = time.monotonic() + 20
        while len(tree := process_tree(child.pid)) < 2:
            assert time.monotonic() < deadline, "the grandchild never appeared"
            time.sleep(0.05)
        assert child.pid in tree and len(tree) == 2
        assert stranger.pid not in tree and os.getpid() not in tree
    finally:
        os.killpg(child.pid, 9)
        stranger.kill()
        child.wait()
        stranger.wait()
