"""Small pipelines for the local-run tests (CPU only; GPU steps are covered with the fake driver)."""

from kfp import dsl

from secureml import MIG, WholeGPU, secure_component
from secureml.components import gpu_preflight_op, gpu_scrub_op

IMAGE = "ghcr.io/acme/ml-images/prep@sha256:" + "1" * 64


@secure_component(image=IMAGE)
def make_numbers(count: int, numbers: dsl.Output[dsl.Dataset]) -> None:
    import os

    with open(numbers.path, "w") as handle:
        handle.write("\n".join(str(i) for i in range(count)))
    # the launcher exported the SVID it checked; the step can read its own certificate
    with open(os.environ["SECUREML_SVID_CERT"]) as cert:
        assert cert.read().startswith("-----BEGIN CERTIFICATE-----")


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def total(numbers: dsl.Input[dsl.Dataset]) -> int:
    with open(numbers.path) as handle:
        return sum(int(line) for line in handle)


@secure_component(image=IMAGE)
def fail_on_purpose(value: int) -> None:
    raise SystemExit(value)


@secure_component(image=IMAGE, gpu=MIG("1g.10gb"))
def on_mig(value: int) -> int:
    return value


@dsl.pipeline(name="numbers")
def numbers(count: int = 5) -> int:
    made = make_numbers(count=count)
    return total(numbers=made.outputs["numbers"]).output


@dsl.pipeline(name="breaks")
def breaks(code: int = 3) -> None:
    fail_on_purpose(value=code)


@dsl.pipeline(name="needs-gpu")
def needs_gpu() -> None:
    on_mig(value=1)


@secure_component(image=IMAGE, gpu=WholeGPU(1))
def on_whole_gpu(value: int) -> int:
    return value + 1


@dsl.pipeline(name="whole-gpu")
def whole_gpu(value: int = 1) -> int:
    """A GPU step, then the library's preflight and scrub steps on the same kind of GPU."""
    stepped = on_whole_gpu(value=value)
    checked = gpu_preflight_op(image=IMAGE, gpu=WholeGPU(1))().after(stepped)
    gpu_scrub_op(image=IMAGE, gpu=WholeGPU(1))(verify="full").after(checked)
    return stepped.output


@secure_component(image="docker.io/library/python@sha256:" + "2" * 64)
def from_elsewhere() -> None:
    pass


@dsl.pipeline(name="foreign-image")
def foreign_image() -> None:
    from_elsewhere()


@dsl.container_component
def echo_container() -> dsl.ContainerSpec:
    return dsl.ContainerSpec(image=IMAGE, command=["echo"], args=["hello"])


@dsl.pipeline(name="with-container")
def with_container() -> None:
    """A Python step, then a container component (kfp.local's SubprocessRunner cannot run it)."""
    made = make_numbers(count=2)
    echo_container().after(made)


@secure_component(image=IMAGE)
def scaled(lr: float, epochs: int, tags: list, verbose: bool) -> float:
    return lr * epochs * len(tags) * (2 if verbose else 1)


@dsl.pipeline(name="typed-args")
def typed_args(lr: float, tags: list, epochs: int = 2, verbose: bool = False) -> float:
    return scaled(lr=lr, epochs=epochs, tags=tags, verbose=verbose).output


@dsl.pipeline(name="sweep")
def sweep() -> None:
    """Three iterations of a MIG step; kfp.local runs two of them at a time."""
    with dsl.ParallelFor([1, 2, 3]) as value:
        on_mig(value=value)


@dsl.pipeline(name="branches")
def branches(value: int = 1) -> None:
    """A dsl.If whose branch is taken and a dsl.Else whose branch is not."""
    made = make_numbers(count=value)
    with dsl.If(value > 0):
        on_mig(value=value).set_display_name("taken").after(made)
    with dsl.Else():
        scaled(lr=0.1, epochs=1, tags=[], verbose=False).after(made)


@dsl.pipeline(name="inner-breaks")
def inner_breaks(code: int = 4) -> None:
    fail_on_purpose(value=code)


@dsl.pipeline(name="nested-breaks")
def nested_breaks() -> None:
    """The same component at the top (exits 0) and in a nested pipeline (exits 4)."""
    top = fail_on_purpose(value=0)
    inner_breaks(code=4).after(top)


@dsl.pipeline(name="reads-a-secret")
def reads_a_secret() -> None:
    """A step that mounts a Secret and one that mounts a PVC (kfp.kubernetes)."""
    from kfp import kubernetes

    made = make_numbers(count=1)
    kubernetes.use_secret_as_volume(made, secret_name="creds", mount_path="/data/creds")
    kubernetes.mount_pvc(on_mig(value=1).after(made), pvc_name="shared", mount_path="/data/shared")
