"""Reference pipeline: secure fine-tuning on shared GPUs.

prep (CPU) -> train (a MIG slice) -> evaluate (a time-sliced share, limited by the shim).

The steps are small and pure Python (a linear model fitted by gradient descent on synthetic data),
so the pipeline also runs as written under `kfp.local`:

    python pipelines/secure_finetune.py            # runs it with kfp.local.SubprocessRunner

and compiles for a tenant with `secureml compile pipelines/secure_finetune.py --profile ...`.
"""

from kfp import dsl

from secureml import MIG, TimeSlice, secure_component

# The team's prebuilt image (python, kfp and secureml installed), pinned by digest: built FROM
# secureml's runtime base image with `secureml image build DIR --from runtime --tag
# ghcr.io/acme/ml-images/train:v1 --push`, which prints this reference (docs/images.md). The digest
# here stands for the team's; tests/images builds the image so and compiles against its real one.
IMAGE = "ghcr.io/acme/ml-images/train@sha256:4c6d8b0e5a3f2917c1e0b7a6d5f4e3c2b1a09f8e7d6c5b4a3928171605f4e3d2"


@secure_component(image=IMAGE)
def prep(rows: int, dataset: dsl.Output[dsl.Dataset]) -> None:
    """Synthetic regression data: y = 3x + 2 plus a little deterministic noise."""
    import json
    import random

    rng = random.Random(7)
    points = []
    for _ in range(rows):
        x = rng.uniform(-1.0, 1.0)
        points.append([x, 3.0 * x + 2.0 + rng.gauss(0.0, 0.05)])
    with open(dataset.path, "w", encoding="utf-8") as out:
        json.dump(points, out)
    dataset.metadata["rows"] = rows


@secure_component(image=IMAGE, gpu=MIG("1g.10gb"), timeout=3600)
def train(epochs: int, dataset: dsl.Input[dsl.Dataset], model: dsl.Output[dsl.Model]) -> None:
    """Fit y = w*x + b by gradient descent (stands in for fine-tuning on the MIG slice)."""
    import json

    with open(dataset.path, encoding="utf-8") as src:
        points = json.load(src)
    w, b, rate = 0.0, 0.0, 0.5
    for _ in range(epochs):
        grad_w = sum(2 * (w * x + b - y) * x for x, y in points) / len(points)
        grad_b = sum(2 * (w * x + b - y) for x, y in points) / len(points)
        w, b = w - rate * grad_w, b - rate * grad_b
    with open(model.path, "w", encoding="utf-8") as out:
        json.dump({"w": w, "b": b}, out)
    model.metadata["epochs"] = epochs


@secure_component(image=IMAGE, gpu=TimeSlice(memory="8Gi", compute=25))
def evaluate(
    dataset: dsl.Input[dsl.Dataset], model: dsl.Input[dsl.Model], metrics: dsl.Output[dsl.Metrics]
) -> float:
    """Mean squared error of the model on the data."""
    import json

    with open(dataset.path, encoding="utf-8") as src:
        points = json.load(src)
    with open(model.path, encoding="utf-8") as src:
        params = json.load(src)
    mse = sum((params["w"] * x + params["b"] - y) ** 2 for x, y in points) / len(points)
    metrics.log_metric("mse", mse)
    return mse


@dsl.pipeline(
    name="secure-finetune",
    description="prep on CPU, train on a MIG slice, evaluate on a time-sliced share",
)
def secure_finetune(rows: int = 200, epochs: int = 60) -> float:
    data = prep(rows=rows)
    trained = train(epochs=epochs, dataset=data.outputs["dataset"])
    scored = evaluate(dataset=data.outputs["dataset"], model=trained.outputs["model"])
    return scored.outputs["Output"]


if __name__ == "__main__":
    import tempfile

    from kfp import local

    with tempfile.TemporaryDirectory() as root:
        local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=root)
        result = secure_finetune(rows=200, epochs=60)
        print(f"mse = {result.output:.5f}")
