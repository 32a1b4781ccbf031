"""`@secure_component`: `@dsl.component` plus the settings a secure step carries."""

from __future__ import annotations

import copy
import dataclasses
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from secureml.compile.decorator_errors import did_you_mean, recorded_or_raised
from secureml.core.errors import SecuremlError
from secureml.gpu.request import MIG, GPURequest, TimeSlice, WholeGPU
from secureml.supplychain.verify_inputs import ModelSignature, VerifiedInput, check_verify_inputs

_SETTINGS_ATTR = "_secureml_settings"


@dataclass(frozen=True, slots=True)
class SecureSettings:
    """Per-step settings of a secure component; the profile decides whether they are allowed."""

    gpu: GPURequest | None = None
    timeout_seconds: int | None = None  # the pod's activeDeadlineSeconds
    scratch_mounts: tuple[str, ...] = ()  # writable emptyDir paths beyond the profile's
    verify_inputs: tuple[VerifiedInput, ...] = ()  # signed inputs the launcher verifies first
    nodes: int = 1  # training nodes of a TrainJob (docs/trainer.md); 1 without trainer_runtime
    trainer_runtime: str | None = None  # the ClusterTrainingRuntime: the step becomes a TrainJob

    @property
    def trains(self) -> bool:
        """The step runs as a Kubeflow Trainer TrainJob, not as one pod."""
        return self.trainer_runtime is not None


def settings_of(component_spec: object) -> SecureSettings | None:
    """The settings `@secure_component` attached to a component spec, or None for a plain one."""
    return getattr(component_spec, _SETTINGS_ATTR, None)


def _check_settings(
    gpu: object,
    timeout: object,
    scratch: object,
    where: str,
    nodes: object = 1,
    trainer_runtime: object = None,
    problems: tuple[SecuremlError, ...] = (),
) -> SecureSettings:
    """The settings, or one error naming every problem with them (and `problems` found before)
    at once: a component with several never reports them one fix at a time (issue 34, point 19)."""
    found = [*problems, *_setting_problems(gpu, timeout, scratch, where, nodes, trainer_runtime)]
    if found:
        raise _all_at_once(found, where)
    assert isinstance(nodes, int) and (trainer_runtime is None or isinstance(trainer_runtime, str))
    assert isinstance(scratch, Iterable) and (timeout is None or isinstance(timeout, int))
    return SecureSettings(
        gpu=gpu,  # type: ignore[arg-type]  # checked above: None, MIG, TimeSlice or WholeGPU
        timeout_seconds=timeout,
        scratch_mounts=tuple(scratch),
        nodes=nodes,
        trainer_runtime=trainer_runtime,
    )


def _all_at_once(problems: list[SecuremlError], where: str) -> SecuremlError:
    """One error for several: each problem numbered with its own why and fix."""
    if len(problems) == 1:
        return problems[0]
    lines = [f"{len(problems)} problems:"]
    for number, problem in enumerate(problems, 1):
        lines.append(f"  {number}. {problem.what}")
        if problem.why:
            lines.append(f"     why: {problem.why}")
        if problem.fix:
            lines.append(f"     fix: {problem.fix}")
    return SecuremlError("\n".join(lines), fix="fix each problem above", where=where)


def _setting_problems(
    gpu: object, timeout: object, scratch: object, where: str, nodes: object, runtime: object
) -> list[SecuremlError]:
    problems: list[SecuremlError] = []
    if gpu is not None and not isinstance(gpu, (MIG, TimeSlice, WholeGPU)):
        problems.append(
            SecuremlError(
                f"gpu={gpu!r} is not a GPU request",
                fix="use gpu=MIG('1g.10gb'), gpu=TimeSlice(memory='8Gi', compute=25) or "
                "gpu=WholeGPU(1)",
                where=where,
            )
        )
    if isinstance(gpu, TimeSlice):
        try:
            gpu.check_as_written(where)
        except SecuremlError as err:
            problems.append(err)
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 1
    ):
        problems.append(
            SecuremlError(
                f"timeout={timeout!r} must be a whole number of seconds >= 1", where=where
            )
        )
    if not _absolute_paths(scratch):
        problems.append(
            SecuremlError(
                f"scratch={scratch!r} must be a list of absolute paths",
                fix="write e.g. scratch=['/workspace']",
                where=where,
            )
        )
    return problems + _trainer_problems(nodes, runtime, where)


def _trainer_problems(nodes: object, runtime: object, where: str) -> list[SecuremlError]:
    """`nodes=` is a whole number >= 1 and needs `trainer_runtime=` above 1 (docs/trainer.md)."""
    problems: list[SecuremlError] = []
    whole = not isinstance(nodes, bool) and isinstance(nodes, int) and nodes >= 1
    if not whole:
        problems.append(SecuremlError(f"nodes={nodes!r} must be a whole number >= 1", where=where))
    if runtime is not None and (not isinstance(runtime, str) or not runtime):
        problems.append(
            SecuremlError(
                f"trainer_runtime={runtime!r} must name a ClusterTrainingRuntime",
                fix="write e.g. trainer_runtime='torch-distributed'",
                where=where,
            )
        )
    if whole and nodes > 1 and runtime is None:  # type: ignore[operator]  # whole: an int
        problems.append(
            SecuremlError(
                f"nodes={nodes} needs trainer_runtime=",
                why="a step on more than one node runs as a Kubeflow Trainer TrainJob, which "
                "names its runtime",
                fix="add trainer_runtime='torch-distributed' (a runtime the profile allows)",
                where=where,
            )
        )
    return problems


def _absolute_paths(value: object) -> TypeGuard[Iterable[str]]:
    """A list (not a string) of absolute paths."""
    return (
        isinstance(value, Iterable)
        and not isinstance(value, str)
        and all(isinstance(p, str) and p.startswith("/") for p in value)
    )


def _component_keywords() -> list[str]:
    """The keywords of `kfp.dsl.component` (besides the function)."""
    from kfp import dsl

    return [name for name in inspect.signature(dsl.component).parameters if name != "func"]


def _returns_container_spec(func: Callable[..., Any]) -> bool:
    from kfp import dsl

    annotation = inspect.signature(func).return_annotation
    return annotation is dsl.ContainerSpec or annotation == "dsl.ContainerSpec"


def _default_image_of(function: Callable[..., Any]) -> str:
    """kfp's default base image for `function`, with a warning at the function's own line.

    kfp warns about its default itself, from inside kfp, which a reader sees as a warning of this
    module's; given explicitly, kfp says nothing and the warning names the step as written.
    """
    import warnings

    from secureml._kfp import default_base_image

    default = default_base_image()
    code = function.__code__
    warnings.warn_explicit(
        f"@secure_component {function.__name__} sets no image, so kfp's default base image "
        f"{default} is used; a secure step names its image: image='REGISTRY/REPO@sha256:<digest>' "
        "under a registry the profile allows (compile refuses the default there)",
        UserWarning,
        code.co_filename,
        code.co_firstlineno,
    )
    return default


def secure_component(
    func: Callable[..., Any] | Any | None = None,
    *,
    image: str | None = None,
    gpu: GPURequest | None = None,
    timeout: int | None = None,
    scratch: list[str] | tuple[str, ...] = (),
    nodes: int = 1,
    trainer_runtime: str | None = None,
    verify_inputs: Sequence[str] | Mapping[str, ModelSignature] | None = None,
    **component_kwargs: Any,
) -> Any:
    """Make a KFP component that `secureml compile` turns into a secure step.

    `image` is the digest-pinned image the step runs in (`base_image` of `@dsl.component`); `gpu`
    one of `MIG`, `TimeSlice`, `WholeGPU`; `timeout` seconds before the pod is stopped; `scratch`
    extra writable paths; `nodes` and `trainer_runtime` run the step as a Kubeflow Trainer TrainJob
    on that many nodes, `gpu` being each node's (docs/trainer.md). Every other keyword goes to `kfp.dsl.component` unchanged, except that
    `install_kfp_package` defaults to False: secure images are prebuilt and install nothing.
    `verify_inputs` names input artifacts (`["model"]`, or `{"model": ModelSignature("model.sig")}`)
    whose OpenSSF model-signing signature the launcher verifies, against the profile's
    `spec.models` signers, before the step's code runs (docs/supply-chain.md "Signed models").

    Works on a Python function (lightweight or `target_image` component), on a function returning
    `dsl.ContainerSpec` (container component; its image comes from the ContainerSpec), and on an
    existing component object (e.g. from `kfp.components.load_component_from_file`), which is
    copied so the original stays as it was.
    """

    def wrap(target: Any) -> Any:
        try:
            return build(target)
        except SecuremlError as err:  # while a pipeline file is loaded: every bad component
            return recorded_or_raised(err, target)

    def build(target: Any) -> Any:
        from kfp import dsl
        from kfp.dsl import base_component

        where = f"@secure_component on {getattr(target, '__name__', None) or getattr(target, 'name', target)!r}"
        known = [
            "image",
            "gpu",
            "timeout",
            "scratch",
            "nodes",
            "trainer_runtime",
            "verify_inputs",
            *_component_keywords(),
        ]
        unknown = sorted(set(component_kwargs) - set(known))
        problems = (
            (
                SecuremlError(
                    "unknown keyword(s) "
                    + ", ".join(f"{name}={did_you_mean(name, known)}" for name in unknown),
                    why="@secure_component takes image=, gpu=, timeout=, scratch=, nodes=, "
                    "trainer_runtime=, verify_inputs= and the keywords of kfp.dsl.component",
                    fix="use image=, gpu=, timeout=, scratch=, nodes=, trainer_runtime=, "
                    "verify_inputs= or a keyword of kfp.dsl.component",
                    where=where,
                ),
            )
            if unknown
            else ()
        )
        settings = _check_settings(
            gpu, timeout, scratch, where, nodes, trainer_runtime, problems=problems
        )
        if isinstance(target, base_component.BaseComponent):
            if image is not None or component_kwargs:
                raise SecuremlError(
                    "image= and @dsl.component keywords do not apply to an existing component",
                    why="the component was already built with its own image and command",
                    fix="pass only gpu=, timeout= and scratch=, or set the image with "
                    "task.set_container_image(...) in the pipeline",
                    where=where,
                )
            component = copy.deepcopy(target)
        elif callable(target) and _returns_container_spec(target):
            if image is not None or component_kwargs:
                raise SecuremlError(
                    "image= and @dsl.component keywords do not apply to a container component",
                    why="a container component names its image in the dsl.ContainerSpec it returns",
                    fix="put the digest-pinned image in dsl.ContainerSpec(image=...)",
                    where=where,
                )
            component = dsl.container_component(target)
        elif callable(target):
            if image is not None and component_kwargs.get("base_image") not in (None, image):
                raise SecuremlError("give either image= or base_image=, not both", where=where)
            kwargs = {"install_kfp_package": False, **component_kwargs}
            if image is not None:
                kwargs["base_image"] = image
            elif "base_image" not in kwargs:
                kwargs["base_image"] = _default_image_of(target)
            try:
                component = dsl.component(target, **kwargs)
            except (TypeError, ValueError) as err:
                if any(isinstance(a, str) for a in getattr(target, "__annotations__", {}).values()):
                    raise SecuremlError(
                        "the component's type annotations are strings",
                        why="kfp reads the parameter types when the component is made; "
                        "`from __future__ import annotations` turns them into strings",
                        fix="remove `from __future__ import annotations` from the file that defines "
                        "the component",
                        where=where,
                    ) from None
                raise SecuremlError(
                    str(err), fix="check the keywords against kfp.dsl.component", where=where
                ) from None
        else:
            raise SecuremlError(
                f"cannot make a component from {target!r}",
                fix="decorate a function or pass a KFP component",
                where=where,
            )
        checked = check_verify_inputs(verify_inputs, component.component_spec, where)
        settings = dataclasses.replace(settings, verify_inputs=checked)
        setattr(component.component_spec, _SETTINGS_ATTR, settings)
        return component

    return wrap if func is None else wrap(func)
