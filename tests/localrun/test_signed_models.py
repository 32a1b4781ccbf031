"""`secureml run --local` of a pipeline whose steps verify a signed model: the compiler's
variables reach the real launcher, which verifies the artifact kfp.local hands the step."""

from __future__ import annotations

import json
from pathlib import Path

from secureml.localrun.runner import RunLayout, run_pipeline
from tests.support.model_signing import new_key
from tests.support.profiles import make_profile

from .signed_models import signed_models


def test_steps_verify_the_model_signed_upstream(tmp_path: Path) -> None:
    private, public = new_key(tmp_path)
    profile = make_profile(models={"keys": [public.decode()]})
    layout = RunLayout(tmp_path / "run")
    result = run_pipeline(
        signed_models,
        profile,
        layout,
        arguments={"signing_key": private.read_text()},
        dev_identity=True,
    )

    assert result.succeeded, result.failure
    by_step = {record["step"]: record for record in result.records}
    assert "inputs" not in by_step["publish"]
    digests = set()
    for step in ("verify-model", "load"):
        (entry,) = by_step[step]["inputs"]
        assert entry["verified"] is True and entry["method"] == "key"
        stages = {s["name"]: s["status"] for s in by_step[step]["stages"]}
        assert stages["verify-inputs"] == "ok"
        digests.add(entry["digest"])
    assert len(digests) == 1  # both steps verified the one model publish signed
    (verification,) = (tmp_path / "run").rglob("verification")
    assert json.loads(verification.read_text())["digest"] in digests
