"""A program that imports secureml beside kfp and protobuf gets kfp's and protobuf's own behaviour:
the same `MessageToDict` output and the same plain kfp YAML after a secureml compile as in a
process that never imported secureml, every kfp and protobuf attribute as it was, the collector
as it was; and two compiles from two threads at once give the YAML of one at a time."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

from secureml.compile.compiler import compile_pipeline
from secureml.compile.pipeline_loader import load_pipeline
from secureml.profile.model import load_profile

ROOT = Path(__file__).resolve().parent.parent
PROFILE = ROOT / "examples" / "profiles" / "team-a-dev.yaml"

# A plain kfp program: a pipeline with kfp.kubernetes settings and a nested pipeline, compiled by
# kfp, and protobuf's MessageToDict of a message kfp-kubernetes defines. `WITH_SECUREML` compiles
# secureml pipelines (the reference pipeline through the CLI's loader, deferred) first.
PROGRAM = """
import gc, json, sys, tempfile, types
from pathlib import Path

WITH_SECUREML = sys.argv[1] == "with"
ROOT = Path(sys.argv[2])


def attributes():
    # every attribute of every kfp and protobuf module loaded, and of their classes, by identity
    seen = {}
    for name, module in list(sys.modules.items()):
        if not (name == "kfp" or name.startswith(("kfp.", "google.protobuf"))) or module is None:
            continue
        for attr, value in list(vars(module).items()):
            seen[(name, attr)] = id(value)
            if isinstance(value, type) and value.__module__ == name:
                for key, inner in list(vars(value).items()):
                    seen[(name, attr, key)] = id(inner)
    return seen


from google.protobuf import json_format
from kfp import compiler, dsl, kubernetes
from kfp.kubernetes import kubernetes_executor_config_pb2 as pb

before = attributes() if WITH_SECUREML else {}
collector = (gc.isenabled(), gc.get_threshold(), gc.get_freeze_count())
if WITH_SECUREML:
    from secureml.compile.compiler import compile_pipeline
    from secureml.compile.pipeline_loader import load_pipeline
    from secureml.profile.model import load_profile

    from secureml import secure_component

    profile = load_profile(ROOT / "examples/profiles/team-a-dev.yaml")
    for path in ("pipelines/secure_finetune.py", "tests/localrun/pipelines.py"):
        for name in (None,) if path.startswith("pipelines") else ("sweep", "numbers"):
            compile_pipeline(load_pipeline(ROOT / path, name, deferred=True), profile)

    during = []  # what the pipeline function sees while secureml traces it
    # what kfp's own trace sets while it runs (the pipeline traced, where its tasks register)
    tracing = {
        ("kfp.dsl.pipeline_context", "Pipeline", "_default_pipeline"),
        ("kfp.dsl.pipeline_task", "PipelineTask", "_register_task_handler"),
    }

    @secure_component(image="ghcr.io/acme/ml-images/train@sha256:" + "0" * 64)
    def secured(x: int) -> int:
        return x

    @dsl.pipeline(name="watched")
    def watched(x: int = 0) -> None:
        now = attributes()
        during.extend(
            repr(key)
            for key in before
            if key in now and now[key] != before[key] and key not in tracing
        )
        secured(x=secured(x=x).output)

    compile_pipeline(watched, profile)


@dsl.component(base_image="python:3.11")
def step(x: int) -> int:
    return x + 1


@dsl.pipeline(name="inner")
def inner(x: int = 1) -> int:
    task = step(x=x)
    kubernetes.add_pod_label(task, "where", "inner")
    return task.output


@dsl.pipeline(name="plain")
def plain(x: int = 0) -> None:
    first = step(x=x)
    kubernetes.add_pod_label(first, "where", "outer")
    kubernetes.add_toleration(first, key="gpu", operator="Exists", effect="NoSchedule")
    kubernetes.set_security_context(first, run_as_user=1000)
    inner(x=first.output)
    with dsl.ParallelFor([1, 2]) as item:
        step(x=item)


with tempfile.TemporaryDirectory() as tmp:
    compiler.Compiler().compile(plain, tmp + "/plain.yaml")
    yaml_text = Path(tmp, "plain.yaml").read_text()

message = pb.KubernetesExecutorConfig(active_deadline_seconds=5)
message.pod_metadata.labels["a"] = "b"
message.tolerations.add(key="k", toleration_seconds=3)
after = attributes() if WITH_SECUREML else {}
print(json.dumps({
    "yaml": yaml_text,
    "message": json_format.MessageToDict(message),
    "spec": json_format.MessageToDict(plain.pipeline_spec),
    "platform": json_format.MessageToDict(plain.platform_spec),
    "changed": sorted(repr(key) for key in before if key in after and after[key] != before[key]),
    "during": sorted(set(during)) if WITH_SECUREML else [],
    "collector": [collector[0], list(collector[1]), collector[2]],
    "collector_after": [gc.isenabled(), list(gc.get_threshold()), gc.get_freeze_count()],
}))
"""


def _run(program: Path, mode: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, str(program), mode, str(ROOT)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_kfp_and_protobuf_behave_as_without_secureml(tmp_path: Path) -> None:
    program = tmp_path / "plain_kfp.py"  # a file: kfp reads a component's source
    program.write_text(PROGRAM)
    without, beside = _run(program, "without"), _run(program, "with")
    assert beside["changed"] == []  # no kfp or protobuf attribute was replaced
    assert beside["during"] == []  # not even while secureml traced the pipeline
    assert beside["collector_after"] == beside["collector"]
    for key in ("yaml", "message", "spec", "platform"):
        assert beside[key] == without[key], key


def test_two_compiles_from_two_threads_give_the_yaml_of_one_at_a_time() -> None:
    profile = load_profile(PROFILE)
    pipelines = [
        ROOT / "pipelines" / "secure_finetune.py",
        ROOT / "tests" / "localrun" / "pipelines.py",
    ]
    names = [None, "sweep"]
    alone = [
        compile_pipeline(load_pipeline(path, name), profile).yaml_text
        for path, name in zip(pipelines, names, strict=True)
    ]
    graphs = [load_pipeline(path, name) for path, name in zip(pipelines, names, strict=True)]
    start = threading.Barrier(2)
    together: list[str | BaseException] = ["", ""]

    def compile_one(index: int) -> None:
        start.wait()
        try:
            together[index] = compile_pipeline(graphs[index], profile).yaml_text
        except BaseException as err:  # noqa: BLE001 - reported by the assertion below
            together[index] = err

    threads = [threading.Thread(target=compile_one, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert together == alone
